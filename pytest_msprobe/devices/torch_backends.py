"""The built-in PyTorch backends: ``cpu``, ``cuda`` and ``npu`` (torch_npu)."""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from typing import Any

from .base import DeviceBackend


def _build_has_gpu() -> bool:
    """Whether the installed torch is a CUDA or ROCm build, read from its ``version.py`` without importing torch
    (a CPU build answers here, so a controller that runs no calls never pays ``import torch`` to learn it).

    True whenever the file cannot tell: then ``torch.cuda`` decides."""
    if "torch" in sys.modules:
        return True
    try:
        spec = importlib.util.find_spec("torch")
        folders = list(spec.submodule_search_locations or ()) if spec is not None else []
        with open(os.path.join(folders[0], "version.py"), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (ImportError, IndexError, OSError, SyntaxError, ValueError):
        return True
    builds = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and node.value is not None:
            try:
                builds[target.id] = ast.literal_eval(node.value)
            except ValueError:
                return True
    return set(builds) != {"cuda", "hip"} or any(v is not None for v in builds.values())


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
    copies_inputs = True

    def is_available(self) -> bool:
        if not _build_has_gpu():
            return False
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
    copies_inputs = True

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
