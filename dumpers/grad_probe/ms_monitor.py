"""MindSpore (PyNative) gradient monitor: a forward pre-hook on the optimizer cell sees each step's gradients.

The gradients passed to the optimizer are concatenated as float32 on the device and moved to the host in one
transfer; statistics, CSV rows and direction files are computed and written by a background thread.
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import Any

from .config import GradProbeConfig
from .summary import rank_dir, summarise_flat, write_step
from .writer import BackgroundWriter

log = logging.getLogger("pytest_msprobe.grad_probe")


def current_rank() -> int:
    """The MindSpore communication rank, or 0 when communication is not initialised."""
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:  # noqa: BLE001 - not initialised raises a framework-specific error
        return 0


def _prime_tensor_ops() -> None:
    """Run one tiny reshape so a one-time failure of MindSpore's lazy NumPy bridge start-up (seen with a
    MindSpore built against NumPy 1.x running on NumPy 2: "Numpy init failed", then a SystemError from the next
    op) happens here, where it is harmless, and not inside the optimizer hook."""
    import mindspore as ms
    import numpy as np
    try:
        ms.Tensor(np.zeros(1, np.float32)).reshape(-1)
    except SystemError as exc:
        log.debug("grad_probe: MindSpore NumPy bridge start-up: %s", exc)


class MindSporeGradMonitor:
    """Exports grad_summary CSVs (and direction files) for the parameters of a ``mindspore.nn.Optimizer``."""

    def __init__(self, config: GradProbeConfig) -> None:
        self.config = config
        self.step = 0                        # the next step's index
        self.writer = BackgroundWriter()
        self._names: list[str] = []
        self._index: list[int] = []
        self._handle = None

    def monitor(self, optimizer: Any) -> None:
        """Hook ``optimizer`` (after it is built); deletes an earlier export's ``rank{R}`` directory."""
        import mindspore as ms
        if not isinstance(optimizer, ms.nn.Cell) or not hasattr(optimizer, "parameters"):
            raise TypeError(f"grad_probe monitor() needs the optimizer (a mindspore.nn.Optimizer), got "
                            f"{type(optimizer).__name__}; call debugger.monitor(optimizer) after building it")
        names = [p.name for p in optimizer.parameters]
        wanted = self.config.param_list
        self._index = [i for i, n in enumerate(names) if not wanted or n in wanted]
        self._names = [names[i] for i in self._index]
        if wanted:
            missing = sorted(set(wanted) - set(names))
            if missing:
                log.warning("grad_probe: param_list names not found among the optimizer's parameters: %s", missing)
        out_dir = rank_dir(self.config.dump_path, current_rank())
        if os.path.isdir(out_dir):
            log.warning("grad_probe: the output path %s exists, the data will be covered", out_dir)
            shutil.rmtree(out_dir)
        if self._handle is None:
            _prime_tensor_ops()
            self._handle = optimizer.register_forward_pre_hook(self._on_step)

    def remove(self) -> None:
        """Uninstall the hook, write out everything pending and stop the writer thread."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self.writer.close()

    def flush(self) -> None:
        self.writer.flush()

    def _on_step(self, cell: Any, inputs: tuple) -> None:
        step = self.step
        self.step += 1
        rank = current_rank()
        if not self.config.wants_rank(rank) or not self.config.wants_step(step):
            return
        grads = inputs[0] if inputs else ()
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        self.export(step, rank, grads)

    def export(self, step: int, rank: int, grads: tuple) -> None:
        """Queue this step's statistics and files from the gradients given to the optimizer."""
        import mindspore as ms
        from mindspore import ops
        chosen = [grads[i] for i in self._index if i < len(grads)]
        names = self._names[:len(chosen)]
        shapes = [tuple(int(d) for d in g.shape) for g in chosen]
        if chosen:
            flat = ops.cat([g.reshape(-1).astype(ms.float32) for g in chosen]).asnumpy()
        else:
            import numpy as np
            flat = np.zeros(0, np.float32)
        level, bounds = self.config.grad_level, self.config.bounds
        out_dir = rank_dir(self.config.dump_path, rank)

        def job() -> None:
            write_step(out_dir, summarise_flat(flat, shapes, names, step, level, bounds), level, bounds)

        self.writer.submit(job)
