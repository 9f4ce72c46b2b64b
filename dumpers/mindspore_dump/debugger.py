"""``PrecisionDebugger`` for MindSpore and the ``MsprobeStep`` training callback.

Importing this module does not import MindSpore; building a debugger does.
"""
from __future__ import annotations

import atexit
import logging
from typing import Any

from dumpers.mindspore_dump import kernel_dump
from dumpers.mindspore_dump.config import DUMP_TASKS, MsDumpConfig, load_config

log = logging.getLogger("pytest_msprobe.mindspore")


class PrecisionDebugger:
    """Dump MindSpore API, primitive and cell calls of chosen training steps in msprobe's layout.

    Args:
        config_path: path of a config.json (keys as msprobe's); None uses the defaults (task statistics,
            level L1, dump_path ./dump_path).

    Typical PyNative loop: ``start(model)``, forward and ``ms.grad``, ``stop()``, ``step()``. With
    ``mindspore.train.Model.train`` pass ``callbacks=[MsprobeStep(debugger)]`` (and call ``start(model)`` once
    before for L0 or primitives). In graph mode or at level L2, call ``start()`` once before building the model.
    """

    def __init__(self, config_path: str | None = None) -> None:
        self.config: MsDumpConfig = load_config(config_path)
        self.task = self.config.task
        self.monitor_impl: Any = None
        self.service: Any = None
        self.kernel_config: str | None = None
        self._started_in_scope = False
        self._warned_empty = False
        if self.task == "grad_probe":
            from dumpers.grad_probe import GradientMonitor
            self.monitor_impl = GradientMonitor(self.config.raw, framework="mindspore")
            return
        if self.task not in DUMP_TASKS:
            return          # a documented msprobe task this dumper does not run: warned about by the config
        import mindspore  # noqa: F401  (fail here, with MindSpore's own message, when it is not installed)

        from dumpers.mindspore_dump.service import DumpService
        self.service = DumpService(self.config)
        atexit.register(self._at_exit)

    # --- dump control --------------------------------------------------------------------------
    def start(self, model: Any = None) -> None:
        """Switch the dump on (PyNative L0/L1/mix), or set up MindSpore's kernel dump (L2, graph mode)."""
        if self.service is None:
            return
        mode = kernel_dump.execution_mode()
        if mode != kernel_dump.PYNATIVE or self.config.level == "L2":
            self._start_kernel_dump(mode)
            return
        if model is not None:
            from mindspore import nn
            if not isinstance(model, nn.Cell):
                raise TypeError(f"model must be a mindspore.nn.Cell, got {type(model).__name__}")
        elif self.config.level in ("L0", "mix") and not self.service._hooked_cells:
            raise ValueError(f"level {self.config.level} dumps cells: call start(model) with the network "
                             "(a mindspore.nn.Cell) at least once")
        self._started_in_scope = True
        self.service.start(model)

    def _start_kernel_dump(self, mode: str) -> None:
        error = kernel_dump.mode_error(mode, self.config.level)
        if error:
            raise ValueError(error)
        if self.kernel_config is None:
            import mindspore as ms
            self.kernel_config = kernel_dump.configure(self.config, mode, ms.get_context("device_target"))
            log.info("MindSpore kernel dump configured: %s", self.kernel_config)

    def stop(self) -> None:
        """Switch the dump off and write dump.json, stack.json and construct.json of the step."""
        if self.monitor_impl is not None:
            if hasattr(self.monitor_impl, "stop"):
                self.monitor_impl.stop()
            return
        if self.kernel_config is not None:
            self.check_kernel_dump()
            return
        if self.service is None:
            return
        if not self._started_in_scope:
            raise RuntimeError("debugger.start() is not set in the current scope.")
        self._started_in_scope = False
        self.service.stop()

    def step(self) -> None:
        """End a training step: finish its files, advance the step counter, reset the call counters."""
        if self.kernel_config is not None:
            self.check_kernel_dump()
            return
        if self.service is None:
            return
        self._started_in_scope = False
        self.service.next_step()

    def check_kernel_dump(self) -> int:
        """L2 / graph mode: count MindSpore's kernel dump files so far; warn once when there are none.

        In PyNative mode MindSpore dumps kernels of ``mindspore.jit`` functions only, so an L2 dump of plain
        PyNative code stays empty; that is said, not left silent.
        """
        if self.kernel_config is None:
            return 0
        n = len(kernel_dump.native_dump_files(self.config.dump_path))
        if n == 0 and not self._warned_empty:
            self._warned_empty = True
            log.warning("msprobe: the L2 kernel dump in %s is empty so far. MindSpore writes kernel dumps for "
                        "graph-compiled code only: in PyNative mode only mindspore.jit functions are dumped. Use "
                        "level L1 for PyNative code, or GRAPH_MODE.", self.config.dump_path)
        return n

    def close(self) -> None:
        """Finish the dump for good: final files written, APIs restored, cell hooks removed."""
        if self.service is not None:
            self.service.end()
            self.service.remove_cell_hooks()

    def __enter__(self) -> PrecisionDebugger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _at_exit(self) -> None:
        self.check_kernel_dump()
        try:
            if self.service is not None and not self.service.ended:
                self.service.end()
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit; the journal keeps the data
            log.warning("msprobe: final dump write at exit failed (%s); run repair() on the step directory", exc)

    # --- grad_probe ----------------------------------------------------------------------------
    def monitor(self, optimizer: Any) -> None:
        """Task grad_probe: monitor the gradients the optimizer applies."""
        if self.monitor_impl is None:
            raise RuntimeError("monitor() needs a config with \"task\": \"grad_probe\"")
        self.monitor_impl.monitor(optimizer)


class MsprobeStep:
    """A ``mindspore.train.Callback``: start() at each step begin, stop() and step() at each step end.

    The class becomes a real MindSpore callback the first time it is instantiated, so importing it does not
    import MindSpore.
    """

    _real: type | None = None

    def __new__(cls, debugger: PrecisionDebugger) -> MsprobeStep:
        return object.__new__(_callback_class() if cls is MsprobeStep else cls)

    def __init__(self, debugger: PrecisionDebugger) -> None:
        self.debugger = debugger

    def on_train_step_begin(self, run_context: Any) -> None:
        self.debugger.start()

    def on_train_step_end(self, run_context: Any) -> None:
        self.debugger.stop()
        self.debugger.step()


def _callback_class() -> type:
    if MsprobeStep._real is None:
        from mindspore.train import Callback
        MsprobeStep._real = type("MsprobeStep", (MsprobeStep, Callback), {"__module__": __name__})
    return MsprobeStep._real
