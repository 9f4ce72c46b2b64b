"""The PyNative dump service: counters, the on/off switch, and recording of API, primitive and cell calls.

One service per debugger. Everything the service itself does (statistics, file writes) runs under the nesting
guard, so the dumper's own MindSpore calls are never captured; an API called inside another captured API is
neither counted nor dumped.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from dumpers import format as fmt
from dumpers.dumpoff import DumpOff
from dumpers.mindspore_dump.cells import CellHooks
from dumpers.mindspore_dump.config import MsDumpConfig
from dumpers.mindspore_dump.filters import EntryFilter
from dumpers.mindspore_dump.hooks import (
    ApiPatcher,
    JitPatcher,
    PendingBackward,
    PrimitivePatcher,
    identity,
    is_inplace,
    recording_grad,
    takes_part_in_grad,
)
from dumpers.mindspore_dump.stack import call_stack
from dumpers.mindspore_dump.summary import Summariser
from dumpers.mindspore_dump.writer import StepWriter

log = logging.getLogger("pytest_msprobe.mindspore")

_DUMPING: DumpService | None = None        # the service whose wrappers are installed, if any

def current_rank() -> int | None:
    """The communication rank when MindSpore's collective communication is initialised, else None."""
    try:
        from mindspore.communication import management
        if getattr(management.GlobalComm, "INITED", False):
            return int(management.get_rank())
    except (ImportError, RuntimeError, AttributeError, ValueError):
        pass
    return None


class DumpService(CellHooks):
    """State of one PyNative dump: which step, which hooks, and the writer of the current step."""

    def __init__(self, config: MsDumpConfig) -> None:
        self.config = config
        self.level = config.level
        self.apis = config.level in ("L1", "mix")
        self.cells = config.level in ("L0", "mix")
        self.step = 0
        self.rank: int | None = None
        self.pid = os.getpid()
        self.model: Any = None
        self.on = False
        self.ended = False
        self.busy = False                  # process-global nesting guard
        self.counters: dict = {}
        self.filter = EntryFilter(config.scope, config.api_list, config.data_mode)
        self.writer: StepWriter | None = None
        self.summariser: Summariser | None = None
        self.dump_off = DumpOff(log, config.dump_path)
        self.api_patcher = ApiPatcher(self.call_api)
        self.prim_patcher = PrimitivePatcher(self.call_api)
        self.jit_patcher = JitPatcher(self.call_api)
        self._hooked_cells: set = set()
        self._handles: list = []
        self.fwd_stack: list = []          # keys of cells whose forward is running
        self.bwd_stack: list = []          # keys of cells whose backward is running
        self._pending: dict = {}           # cell forward key -> partial entry (inputs)
        self._pending_backward: dict = {}  # id -> PendingBackward of API calls awaiting gradients
        self._param_grads: dict = {}       # cell key base -> {parameter name: gradient} being gathered

    # --- lifecycle -----------------------------------------------------------------------------
    def selected(self) -> bool:
        """Is the current step, and this rank, to be dumped?"""
        steps, ranks = self.config.step, self.config.rank
        if steps and self.step not in steps:
            return False
        return not ranks or (self.rank is not None and self.rank in ranks)

    def start(self, model: Any = None) -> bool:
        """Switch on for the current step; returns False when this step or rank is not dumped."""
        if self.ended or os.getpid() != self.pid or self.dump_off.off:
            return False
        if self.config.step and self.step > max(self.config.step):
            self.end()
            log.info("msprobe: the last selected step (%d) is dumped; the dump is off from now on",
                     max(self.config.step))
            return False
        if model is None:
            model = self.model
        self.model = model
        self.rank = current_rank()
        if not self.selected():
            return False
        global _DUMPING
        if _DUMPING is not None and _DUMPING is not self and _DUMPING.on:
            raise RuntimeError("another MindSpore PrecisionDebugger is dumping in this process: call its stop() "
                               "before start() of this one (or use one debugger)")
        _DUMPING = self
        self.busy = True
        try:
            _warm_up()
            if model is not None and self.cells:
                self._hook_cells(model)
            if self.apis:
                self.api_patcher.install()
                self.jit_patcher.install()
                if model is not None:
                    self.prim_patcher.install(model)
            if self.writer is None:
                self.writer = StepWriter(self.config.dump_path, self.step, self.rank, self.config.task,
                                         self.level, on_error=self._io_error)
                self.summariser = Summariser(self.config.summary_mode, self.writer.tensor_dir,
                                             on_error=self._io_error)
        finally:
            self.busy = False
        if self.dump_off.off:
            self._restore()
            return False
        self.on = True
        log.info("Dump switch is turned on at step %d.", self.step)
        return True

    def stop(self) -> None:
        """Switch off, put the original APIs back and write the JSON files of the step."""
        if self.dump_off.off:
            self._restore()
            return
        self.flush_backward()
        self.on = False
        if self.summariser is not None:
            self.summariser.forget()
        self._restore()
        if self.writer is not None:
            self.writer.flush()

    def _restore(self) -> None:
        """Put the original APIs back (no file is touched)."""
        self.on = False
        self.api_patcher.uninstall()
        self.jit_patcher.uninstall()
        self.prim_patcher.uninstall()

    def _io_error(self, exc: OSError, path: str) -> None:
        """The first I/O error of the dump: reported once, the dump off for the rest of the run."""
        self.dump_off.trip(exc, path, self.step, self.writer.dir if self.writer is not None else
                           fmt.step_rank_dir(self.config.dump_path, self.step, self.rank))
        self.on = False
        if self.writer is not None and not self.writer.failed:
            self.writer.fail(exc, path)    # the journal is closed as it stands, nothing more is written

    def next_step(self) -> None:
        if self.dump_off.off:
            return
        if self.on:
            self.stop()
        if self.writer is not None:
            self.writer.close()
        self.writer = None
        self.summariser = None
        self.step += 1
        self.counters.clear()
        self.filter.reset()
        self.fwd_stack.clear()
        self.bwd_stack.clear()
        self._pending.clear()
        self._pending_backward.clear()
        self._param_grads.clear()

    def end(self) -> None:
        """Stop for good (after the last selected step, or at interpreter exit)."""
        if self.dump_off.off:
            self._restore()
            self.writer = None
            self.ended = True
            return
        if self.on:
            self.stop()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.ended = True

    def _add(self, key: str, entry: dict, stack: list | None = None) -> None:
        if self.dump_off.off:
            return
        self.writer.add(key, entry, stack)
        self.writer.commit()

    def _next_index(self, counter: str) -> int:
        n = self.counters.get(counter, 0)
        self.counters[counter] = n + 1
        return n

    def _active(self) -> bool:
        return self.on and not self.busy and os.getpid() == self.pid

    # --- APIs and primitives -------------------------------------------------------------------
    def call_api(self, prefix: str, name: str, original: Callable, args: tuple, kwargs: dict) -> Any:
        """Run one wrapped API call, recording its forward entry and (under grad) its backward entry."""
        if not self._active():
            return original(*args, **kwargs)
        self.busy = True
        try:
            index = self._next_index(f"{prefix}.{name}") + (1 if prefix == "Jit" else 0)   # Jit counts from 1
            api_call = fmt.api_call_name(prefix, name, index)
            key = f"{api_call}.{fmt.FORWARD}"
            if self.cells:
                self.writer.set_parent(key, self._parent())
            want = self.filter.wants(key, api_call, fmt.FORWARD)
            entry: dict = {}
            if want and self.filter.wants_inputs():
                entry[fmt.INPUT_ARGS] = self.summariser.encode_list(args, key, fmt.CAT_INPUT)
                entry[fmt.INPUT_KWARGS] = self.summariser.encode_kwargs(kwargs, key)
            inplace = is_inplace(prefix, name)
            if recording_grad() and not inplace and _has_tensor(args):
                out = self._run_with_grad_hooks(original, args, kwargs, api_call)
            else:
                out = original(*args, **kwargs)
            if inplace or prefix == "Jit":
                self.summariser.forget()       # tensors may have changed in place (jit: optimizers do)
            if want:
                if self.filter.wants_outputs():
                    entry[fmt.OUTPUT] = self.summariser.encode_list(out, key, fmt.CAT_OUTPUT)
                if entry:
                    self._add(key, entry, call_stack())
            return out
        finally:
            self.busy = False

    def _run_with_grad_hooks(self, original: Callable, args: tuple, kwargs: dict, api_call: str) -> Any:
        """Run the call on views of the inputs gradients can reach; hook those views and the outputs."""
        pending = PendingBackward(api_call, len(args), self._finish_backward)
        call_args = list(args)
        try:
            for i, arg in enumerate(args):
                if takes_part_in_grad(arg):
                    copy = identity(arg)
                    copy.register_hook(pending.expect(True, i))
                    call_args[i] = copy
                elif isinstance(arg, (list, tuple)) and any(takes_part_in_grad(a) for a in arg):
                    items = list(arg)          # e.g. the tensors of cat/stack: one view and hook each
                    for j, item in enumerate(arg):
                        if takes_part_in_grad(item):
                            items[j] = identity(item)
                            items[j].register_hook(pending.expect(True, i, j))
                    call_args[i] = type(arg)(items)
        except Exception as exc:  # noqa: BLE001 - no backward entry rather than a failed training step
            log.warning("msprobe: no backward entry for %s: %s", api_call, exc)
            pending.finished = True
            call_args = list(args)
        out = original(*call_args, **kwargs)
        if pending.finished:
            return out
        outs = out if isinstance(out, (tuple, list)) else (out,)
        try:
            flowing = [takes_part_in_grad(o) for o in outs]
            if not any(flowing):
                pending.finished = True    # no gradient flows out of this call: no backward entry
                return out
            pending.set_outputs(len(outs))
            for j, o in enumerate(outs):
                if flowing[j]:
                    o.register_hook(pending.expect(False, j))
        except Exception as exc:  # noqa: BLE001 - keep the forward result whatever the hooks did
            log.warning("msprobe: backward entry of %s may be incomplete: %s", api_call, exc)
        if pending.waiting:
            self._pending_backward[id(pending)] = pending
        return out

    def _finish_backward(self, pending: PendingBackward) -> None:
        self._pending_backward.pop(id(pending), None)
        self._record_backward(pending.api_call, pending.grads_of_outputs, pending.grads_of_inputs)

    def flush_backward(self) -> None:
        """Write the backward entries still waiting for a gradient (their missing grads stay null)."""
        for pending in list(self._pending_backward.values()):
            pending.finish()
        for base in list(self._param_grads):
            self._record_param_grads(base)

    def _record_backward(self, api_call: str, grads_of_outputs: Any, grads_of_inputs: Any) -> None:
        if not self.on or os.getpid() != self.pid or self.writer is None:
            return
        was_busy, self.busy = self.busy, True
        try:
            key = f"{api_call}.{fmt.BACKWARD}"
            if self.cells:
                self.writer.set_parent(key, self._parent())
            if not self.filter.wants(key, api_call, fmt.BACKWARD):
                return
            entry = {}
            if self.filter.wants_inputs():
                entry[fmt.INPUT] = self.summariser.encode_list(grads_of_outputs, key, fmt.CAT_INPUT)
            if self.filter.wants_outputs():
                entry[fmt.OUTPUT] = self.summariser.encode_list(grads_of_inputs, key, fmt.CAT_OUTPUT)
            if entry:
                self._add(key, entry)
        finally:
            self.busy = was_busy

    def _parent(self) -> str | None:
        if self.bwd_stack:
            return self.bwd_stack[-1]
        return self.fwd_stack[-1] if self.fwd_stack else None


_WARM = False


def _warm_up() -> None:
    """Run MindSpore's lazy scalar-argument set-up once, outside any capture.

    With some numpy builds the first tensor-scalar operation leaves a Python error pending inside MindSpore;
    inside a grad cell that would surface as a SystemError, so it is provoked here, once, where it is harmless.
    """
    global _WARM
    if _WARM:
        return
    _WARM = True
    import mindspore
    import numpy as np
    try:
        t = mindspore.Tensor(np.ones((1,), np.float32))
        _ = (t * 2.0 + 1) - t
    except Exception as exc:  # noqa: BLE001 - only a warm-up
        log.debug("MindSpore warm-up raised %r", exc)


def _has_tensor(args: tuple) -> bool:
    import mindspore
    for a in args:
        if isinstance(a, mindspore.Tensor):
            return True
        if isinstance(a, (list, tuple)) and any(isinstance(b, mindspore.Tensor) for b in a):
            return True
    return False
