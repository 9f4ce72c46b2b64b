"""GradientMonitor: the object a PrecisionDebugger builds for ``task: grad_probe``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import GradProbeConfig, parse_config

FRAMEWORKS = ("pytorch", "mindspore")
_ALIASES = {"pytorch": "pytorch", "torch": "pytorch", "pt": "pytorch", "mindspore": "mindspore", "ms": "mindspore"}


class GradientMonitor:
    """Exports per-step gradient statistics and directions for one framework.

    Args:
        config: the parsed config.json dict (top-level ``task``, ``dump_path``, ``rank``, ``step`` and the
            ``grad_probe`` section), a path to it, or a :class:`GradProbeConfig`.
        framework: ``"pytorch"`` or ``"mindspore"``.
    """

    def __init__(self, config: Mapping[str, Any] | str | GradProbeConfig, framework: str = "pytorch") -> None:
        fw = _ALIASES.get(str(framework).lower())
        if fw is None:
            raise ValueError(f"grad_probe framework must be one of {list(FRAMEWORKS)}, got {framework!r}")
        self.config = config if isinstance(config, GradProbeConfig) else parse_config(config)
        self.framework = fw
        self._impl: Any = None

    @property
    def step(self) -> int:
        """Optimizer steps seen so far."""
        if self._impl is None:
            return 0
        return self._impl.step + 1 if self.framework == "pytorch" else self._impl.step

    def monitor(self, target: Any) -> None:
        """Start monitoring: PyTorch takes the model, MindSpore the optimizer."""
        if self._impl is None:
            if self.framework == "pytorch":
                from .torch_monitor import TorchGradMonitor
                self._impl = TorchGradMonitor(self.config)
            else:
                from .ms_monitor import MindSporeGradMonitor
                self._impl = MindSporeGradMonitor(self.config)
        self._impl.monitor(target)

    def flush(self) -> None:
        """Block until every exported step is written."""
        if self._impl is not None:
            self._impl.flush()

    def stop(self) -> None:
        """Write out everything pending. Monitoring goes on (PrecisionDebugger.stop() is per step)."""
        self.flush()

    def remove(self) -> None:
        """Stop monitoring for good: uninstall the hook and flush."""
        if self._impl is not None:
            self._impl.remove()

    # PrecisionDebugger may forward these; with grad_probe they do nothing but keep the files current.
    def start(self, *args: Any, **kwargs: Any) -> None:
        return None

    def step_end(self) -> None:
        return None
