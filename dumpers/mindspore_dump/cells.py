"""Cell-level (L0 / mix) recording: forward and backward hooks on every sub-cell, parameter gradients.

A mixin of :class:`dumpers.mindspore_dump.service.DumpService`; it uses the service's switch, counters, filter,
summariser and writer. Cell forward entries are written when the cell returns (after the calls inside it),
backward entries from MindSpore's ``register_backward_hook``, and ``parameters_grad`` entries from hooks on the
cell's own trainable parameters.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from dumpers import format as fmt
from dumpers.mindspore_dump.stack import call_stack


class CellHooks:
    """The L0 half of the dump service (see the module docstring)."""

    def _hook_cells(self, model: Any) -> None:
        for path, cell in model.cells_and_names():
            if not path or id(cell) in self._hooked_cells:
                continue                       # the root model itself is never hooked
            self._hooked_cells.add(id(cell))
            base = f"Cell.{path}.{type(cell).__name__}"
            self._handles += [
                cell.register_forward_pre_hook(self._cell_pre_hook(base)),
                cell.register_forward_hook(self._cell_post_hook(base)),
                cell.register_backward_pre_hook(self._cell_backward_pre_hook(base)),
                cell.register_backward_hook(self._cell_backward_hook(base)),
            ]
            trainable = [(name, p) for name, p in getattr(cell, "_params", {}).items()
                         if getattr(p, "requires_grad", False)]
            for name, param in trainable:
                self._handles.append(param.register_hook(self._param_grad_hook(base, name, len(trainable))))

    def remove_cell_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._hooked_cells.clear()

    def _cell_pre_hook(self, base: str) -> Callable:
        def hook(cell: Any, inputs: Any) -> None:
            if not self._active():
                return
            self.busy = True
            try:
                index = self._next_index(f"{base}.{fmt.FORWARD}")
                key = f"{base}.{fmt.FORWARD}.{index}"
                self.writer.set_parent(key, self._parent())
                self.filter.cell_started(key)
                self.fwd_stack.append(key)
                want = self.filter.wants(key, key, fmt.FORWARD)
                entry = None
                if want:
                    entry = {}
                    if self.filter.wants_inputs():
                        entry[fmt.INPUT_ARGS] = self.summariser.encode_list(inputs, key, fmt.CAT_INPUT)
                        entry[fmt.INPUT_KWARGS] = {}
                self._pending[key] = (entry, call_stack() if want else None)
            finally:
                self.busy = False
        return hook

    def _cell_post_hook(self, base: str) -> Callable:
        def hook(cell: Any, inputs: Any, outputs: Any) -> None:
            if not self.fwd_stack or not self.fwd_stack[-1].startswith(base + "."):
                return
            key = self.fwd_stack.pop()
            entry, stack = self._pending.pop(key, (None, None))
            if self.on and self.writer is not None:
                self.busy = True
                try:
                    if entry is not None:
                        if self.filter.wants_outputs():
                            entry[fmt.OUTPUT] = self.summariser.encode_list(outputs, key, fmt.CAT_OUTPUT)
                        entry["parameters"] = {
                            name: self.summariser.encode(p, key, "parameters", (name,), 1)
                            for name, p in getattr(cell, "_params", {}).items()}
                        self._add(key, entry, stack)
                    self.filter.cell_ended(key)
                finally:
                    self.busy = False
        return hook

    def _param_grad_hook(self, base: str, name: str, count: int) -> Callable:
        """Gathers a cell's parameter gradients into one ``{base}.parameters_grad.{n}`` entry."""
        def hook(grad: Any) -> None:
            if not self.on or os.getpid() != self.pid or self.writer is None:
                return
            grads = self._param_grads.setdefault(base, {})
            grads[name] = grad
            if len(grads) == count:
                self._record_param_grads(base)
        return hook

    def _record_param_grads(self, base: str) -> None:
        grads = self._param_grads.pop(base, None)
        if not grads:
            return
        was_busy, self.busy = self.busy, True
        try:
            key = f"{base}.{fmt.PARAMETERS_GRAD}.{self._next_index(f'{base}.{fmt.PARAMETERS_GRAD}')}"
            self.writer.set_parent(key, None)
            if self.filter.names and not any(n in key for n in self.filter.names):
                return
            self._add(key, {name: [self.summariser.encode(g, key, name, (0,), 1)] for name, g in grads.items()})
        finally:
            self.busy = was_busy

    def _cell_backward_pre_hook(self, base: str) -> Callable:
        def hook(cell: Any, grad_output: Any) -> None:
            if not self.on or os.getpid() != self.pid or self.writer is None:
                return
            index = self._next_index(f"{base}.{fmt.BACKWARD}")
            key = f"{base}.{fmt.BACKWARD}.{index}"
            self.bwd_stack.append(key)
        return hook

    def _cell_backward_hook(self, base: str) -> Callable:
        def hook(cell: Any, grad_input: Any, grad_output: Any) -> None:
            if not self.bwd_stack or not self.bwd_stack[-1].startswith(base + "."):
                return
            key = self.bwd_stack.pop()
            parent = self._parent()
            was_busy, self.busy = self.busy, True
            try:
                self.writer.set_parent(key, parent)
                forward_key = key.replace(f".{fmt.BACKWARD}.", f".{fmt.FORWARD}.")
                if not self.filter.wants(key, forward_key, fmt.BACKWARD):
                    return
                entry = {}
                if self.filter.wants_inputs():
                    entry[fmt.INPUT] = self.summariser.encode_list(grad_output, key, fmt.CAT_INPUT)
                if self.filter.wants_outputs():
                    entry[fmt.OUTPUT] = self.summariser.encode_list(grad_input, key, fmt.CAT_OUTPUT)
                if entry:
                    self._add(key, entry)
            finally:
                self.busy = was_busy
        return hook
