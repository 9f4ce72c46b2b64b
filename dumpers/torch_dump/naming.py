"""The dump name of each API call of a step: one naming, for the dumper and for whoever must line up with it.

A call is named ``{prefix}.{api}.{n}``: ``(prefix, api)`` from the registry (:mod:`.registry`), ``n`` the
number of earlier calls of that API in the step. :class:`NamedCallMode` is the
:class:`~torch.overrides.TorchFunctionMode` that decides which calls are named and how, once: the dumper's
capture mode and the attribution's correcting mode are both subclasses and only say what to do with a call.

The mode's handler must run in this package: the registry tells ``a * b`` from ``a.mul(b)`` by reading the
instruction of the first calling frame outside it, so a subclass elsewhere overrides the hooks below, never
``__torch_function__``.
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Callable

from torch.overrides import TorchFunctionMode

from dumpers.torch_dump.registry import get_registry

# torch's own autograd machinery (``Function.apply`` returns inputs as ``Tensor.view_as`` views, e.g.
# for full backward hooks): calls made there are bookkeeping, not the model's API calls.
INTERNAL_CALLERS = (os.path.join("torch", "utils", "hooks.py"), os.path.join("torch", "autograd", "function.py"))


def call_name(prefix: str, api: str, index: int) -> str:
    """``Functional.linear`` and 0 -> ``Functional.linear.0``: the API name of the checker's and compare's CSVs."""
    return f"{prefix}.{api}.{index}"


class CallCounter:
    """The per-API call numbers of one step (``step()`` of the dumper starts them again)."""

    def __init__(self) -> None:
        self.counts: dict = {}

    def next(self, prefix: str, api: str) -> str:
        """The name of the next call of ``prefix.api`` in the step."""
        base = f"{prefix}.{api}"
        idx = self.counts.get(base, 0)
        self.counts[base] = idx + 1
        return call_name(prefix, api, idx)

    def reset(self) -> None:
        self.counts.clear()


class NamedCallMode(TorchFunctionMode):
    """Names every recorded API call; subclasses say what to do with named and unnamed calls.

    Inside ``__torch_function__`` PyTorch pops the mode, so what a named API calls internally is not seen
    again. The dunders msprobe records by their body (``__rtruediv__``...) run with the mode on.
    """

    #: True for a mode used without the dumper's reflected-slot wrappers: ``0.5 * x`` is then told from
    #: ``x * 0.5`` by the calling code (:func:`dumpers.torch_dump.registry.reflected_operand`)
    infer_reflected = False

    def __init__(self) -> None:
        super().__init__()
        registry = get_registry()
        self.lookup = registry.lookup
        self.transparent = registry.transparent

    # --- what subclasses override ----------------------------------------------------------------
    def passthrough(self) -> bool:
        """True: the call runs untouched, neither named nor counted (the dumper's own work in progress)."""
        return False

    def unnamed(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        """A call that is not recorded."""
        return func(*args, **kwargs)

    def named(self, prefix: str, api: str, func: Callable, args: tuple, kwargs: dict) -> Any:
        """A recorded call of ``prefix.api`` (the subclass counts it)."""
        return func(*args, **kwargs)

    # --- the one decision ------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if self.passthrough():
            return func(*args, **kwargs)
        try:
            transparent = func in self.transparent
        except TypeError:
            transparent = False
        if transparent:               # msprobe records what its body calls: run the body with the mode on
            with self:
                return func.__wrapped__(*args, **kwargs)
        name = self.lookup(func, args, self.infer_reflected)
        if name is None or inspect.currentframe().f_back.f_code.co_filename.endswith(INTERNAL_CALLERS):
            return self.unnamed(func, args, kwargs)
        return self.named(name[0], name[1], func, args, kwargs)
