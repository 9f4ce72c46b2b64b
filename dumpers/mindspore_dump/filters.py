"""scope / list / data_mode: which entries, and which parts of them, are written.

``list``: an entry is kept when any list string is a substring of its key. ``scope``: one or two full entry
keys; two Cell keys open a range at the first cell's forward start and close it at the second cell's forward end;
two API keys open and close an inclusive range of forward API calls. Backward entries follow their forward call.
``data_mode`` (MindSpore rule, one element): all, input or output.
"""
from __future__ import annotations

from dumpers import format as fmt


class EntryFilter:
    def __init__(self, scope: list, names: list, data_mode: list) -> None:
        self.names = list(names)
        self.scope = list(scope)
        if len(self.scope) == 1:
            self.scope = [self.scope[0], self.scope[0]]
        self.cell_scope = bool(self.scope) and self.scope[0].startswith("Cell.")
        self.mode = data_mode[0] if data_mode else "all"
        self._in_scope = False
        self._done = False
        self._forward_in_scope: set = set()

    def reset(self) -> None:
        """A new step: the scope range may open again."""
        self._in_scope = False
        self._done = False
        self._forward_in_scope.clear()

    # --- scope ---------------------------------------------------------------------------------
    def cell_started(self, key: str) -> None:
        if self.cell_scope and not self._done and key == self.scope[0]:
            self._in_scope = True

    def cell_ended(self, key: str) -> None:
        if self.cell_scope and self._in_scope and key == self.scope[1]:
            self._in_scope = False
            self._done = True

    def _scope_allows(self, key: str, api_call: str, direction: str) -> bool:
        if not self.scope:
            return True
        if direction == fmt.BACKWARD:
            return api_call in self._forward_in_scope
        if self.cell_scope:
            ok = self._in_scope or key == self.scope[1]
        else:
            if not self._done and key == self.scope[0]:
                self._in_scope = True
            ok = self._in_scope
            if self._in_scope and key == self.scope[1]:
                self._in_scope = False
                self._done = True
        if ok:
            self._forward_in_scope.add(api_call)
        return ok

    def wants(self, key: str, api_call: str, direction: str) -> bool:
        """Is this entry dumped at all? (Call once per entry, in call order: the API scope is stateful.)"""
        in_scope = self._scope_allows(key, api_call, direction)
        return in_scope and (not self.names or any(n in key for n in self.names))

    # --- data_mode -----------------------------------------------------------------------------
    def wants_inputs(self) -> bool:
        return self.mode in ("all", "input")

    def wants_outputs(self) -> bool:
        return self.mode in ("all", "output")

    @staticmethod
    def parent_of(stack: list) -> str | None:
        return stack[-1] if stack else None
