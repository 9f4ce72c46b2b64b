"""Capture mechanisms for API calls: a TorchFunctionMode, plus torch.distributed's Python functions.

``torch.*``, ``Tensor`` methods and operators, ``torch.nn.functional`` and ``torch_npu`` all reach a
:class:`~torch.overrides.TorchFunctionMode`. Inside ``__torch_function__`` PyTorch pops the mode, so
everything a captured API calls internally is invisible to it: nested calls are not recorded twice
without any bookkeeping. The handler stays as small as PyTorch's own logging modes.

``torch.distributed`` collectives are plain Python functions that end in c10d ops and never consult
``__torch_function__``. They are captured by replacing the 17 listed functions on the
``torch.distributed`` module object while the dump is on (restored by ``stop()``). Likewise the reflected
operator slots of ``torch.Tensor`` (``__rmul__``...) are wrapped while the dump is on, only to note that
Python chose the reflected operator (``0.5 * x`` and ``x * 0.5`` reach the mode as the same call). That is the least
invasive choice: a dispatch-level mode would see every aten op of the step (a cost on each of them)
and only c10d's internal op names and argument packing, not the Python API users call.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from dumpers.torch_dump import statcache, wrap_lists
from dumpers.torch_dump.naming import NamedCallMode
from dumpers.torch_dump.registry import mark_reflected, restore_reflected
from dumpers.torch_dump.session import DumpSession

log = logging.getLogger("pytest_msprobe.dump")

class ApiCaptureMode(NamedCallMode):
    """Records every call of a listed API; everything else passes straight through."""

    def __init__(self, session: DumpSession) -> None:
        super().__init__()
        self.session = session
        self.reflected = ReflectedSlots()

    def passthrough(self) -> bool:
        if torch.compiler.is_compiling():
            self.session.compiled = True
            return True
        return self.session.busy

    def unnamed(self, func, args, kwargs):
        session = self.session
        if session.cache is not None:
            _note_writes(session, func, args, kwargs)
        return func(*args, **kwargs)

    def named(self, prefix, api, func, args, kwargs):
        session = self.session
        if session.compiled or session.saw_compiled:
            session.forget_reuse()    # compiled kernels write tensors without a version bump: nothing is reused
        return session.run_api(prefix, api, func, args, kwargs)

    # --- installation ----------------------------------------------------------------------------
    def push(self) -> None:
        self.__enter__()
        self.reflected.install()

    def pop(self) -> bool:
        """Leave the mode stack; False (mode left in place, inert) if another mode was pushed above it."""
        self.reflected.remove()
        stack = torch.overrides._get_current_function_mode_stack()
        if stack and stack[-1] is self:
            self.__exit__(None, None, None)
            return True
        if self in stack:
            log.warning("msprobe dump: another TorchFunctionMode was entered after start() and is still "
                        "active; the dumper's mode stays on the stack, inert, until that one exits.")
        return False


def _note_writes(session: DumpSession, func: Any, args: tuple, kwargs: dict) -> None:
    """An unrecorded call that writes a tensor (``copy_``, ``zero_``, ``out=``) still ends reuse of what it writes."""
    fname = getattr(func, "__name__", None)
    if type(fname) is not str or not (statcache.writes_of(fname) or "out" in kwargs or "inplace" in kwargs):
        return
    try:
        session.cache.wrote(statcache.written_tensors(fname, args, kwargs))
    except Exception:  # noqa: BLE001 - forget everything rather than risk a stale entry
        session.forget_reuse()


class ReflectedSlots:
    """Wraps ``torch.Tensor``'s reflected operator slots while the dump is on, to mark reflected calls."""

    def __init__(self) -> None:
        self.saved: dict = {}          # dunder -> the class attribute it replaced (None: inherited)

    def install(self) -> None:
        if self.saved:
            return
        cls = torch.Tensor
        for dunder in wrap_lists.REFLECTED_SLOTS:
            target = getattr(cls, dunder, None)
            if target is None or getattr(target, "__msprobe_original__", None) is not None:
                continue
            self.saved[dunder] = cls.__dict__.get(dunder)
            setattr(cls, dunder, _reflected_wrapper(dunder, target))

    def remove(self) -> None:
        cls = torch.Tensor
        for dunder, original in self.saved.items():
            if getattr(cls.__dict__.get(dunder), "__msprobe_original__", None) is None:
                continue               # someone replaced it after us: leave theirs in place
            if original is None:
                delattr(cls, dunder)
            else:
                setattr(cls, dunder, original)
        self.saved.clear()


def _reflected_wrapper(dunder: str, original: Any) -> Any:
    def reflected(self, other):
        previous = mark_reflected(self, dunder)
        try:
            return original(self, other)
        finally:
            restore_reflected(previous)

    reflected.__name__ = reflected.__qualname__ = dunder
    reflected.__msprobe_original__ = original
    return reflected


class DistributedWrappers:
    """Replaces the listed ``torch.distributed`` functions while the dump is on."""

    def __init__(self, session: DumpSession) -> None:
        self.session = session
        self.originals: dict = {}

    def install(self) -> None:
        if self.originals or not torch.distributed.is_available():
            return
        dist = torch.distributed
        for name in wrap_lists.DISTRIBUTED:
            orig = getattr(dist, name, None)
            if orig is None or not callable(orig):
                continue
            self.originals[name] = orig
            setattr(dist, name, self._wrap(name, orig))

    def _wrap(self, name: str, orig: Any) -> Any:
        session = self.session

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            if session.busy or not session.on:
                return orig(*args, **kwargs)
            return session.run_api("Distributed", name, orig, args, kwargs, collective=True)

        wrapper.__msprobe_original__ = orig
        return wrapper

    def remove(self) -> None:
        dist = torch.distributed
        for name, orig in self.originals.items():
            current = getattr(dist, name, None)
            if getattr(current, "__msprobe_original__", None) is orig:
                setattr(dist, name, orig)
        self.originals.clear()
