"""The built-in PyTorch backends: ``cpu``, ``cuda`` and ``npu`` (torch_npu)."""
from __future__ import annotations

from typing import Any

from .base import DeviceBackend


class CpuBackend(DeviceBackend):
    """Runs the call on the CPU in the dumped dtype (no precision raise)."""

    name = "cpu"
    torch_device = "cpu"
    accelerator = False

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def device(self, index: int) -> Any:
        import torch
        return torch.device("cpu")

    def to_device(self, obj: Any, index: int) -> Any:
        return obj


class CudaBackend(DeviceBackend):
    name = "cuda"
    torch_device = "cuda"

    def is_available(self) -> bool:
        import torch
        return bool(torch.cuda.is_available())

    def device_count(self) -> int:
        import torch
        return int(torch.cuda.device_count()) if self.is_available() else 0

    def synchronize(self, index: int) -> None:
        import torch
        torch.cuda.synchronize(index)


class NpuBackend(DeviceBackend):
    """Ascend NPU through torch_npu (imported on first use)."""

    name = "npu"
    torch_device = "npu"

    def _torch_npu(self) -> Any:
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            return None
        import torch
        return getattr(torch, "npu", None)

    def is_available(self) -> bool:
        npu = self._torch_npu()
        return bool(npu is not None and npu.is_available())

    def device_count(self) -> int:
        npu = self._torch_npu()
        return int(npu.device_count()) if npu is not None and npu.is_available() else 0

    def synchronize(self, index: int) -> None:
        npu = self._torch_npu()
        if npu is not None:
            npu.synchronize(index)
