"""The device-backend interface, the built-in PyTorch backends (``cpu``, ``cuda``, ``npu`` through torch_npu) that
are its plain subclasses, and how xdist workers share devices.

A backend is a small object with ``name``, ``is_available()``, ``device_count()``,
``to_device(obj, index)``, ``call(func, args, kwargs)`` and ``synchronize(index)``. torch is imported only
when a backend is used.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, Callable

FRAMEWORK = "pytorch"        # the framework whose calls a backend runs (MindSpore backends: "mindspore")


class DeviceBackend:
    """Base class of a backend; subclasses set ``name`` and ``torch_device`` and may override anything."""

    name = "base"
    torch_device = "cpu"     # torch device type string used by to_device
    accelerator = True       # False: no per-device worker limit
    framework = FRAMEWORK    # the framework of the calls it runs
    copies_inputs = False    # True: to_device always gives new tensors (another device), so the device side
                             # needs no copy of its own to keep the call from changing the shared inputs

    def is_available(self) -> bool:
        return False

    def device_count(self) -> int:
        return 0

    def device(self, index: int) -> Any:
        import torch
        return torch.device(self.torch_device, index)

    def to_device(self, obj: Any, index: int) -> Any:
        """Move every tensor in the nested ``obj`` (lists, tuples, dicts) to device ``index``."""
        import torch
        from torch.utils._pytree import tree_map
        dev = self.device(index)
        return tree_map(lambda x: x.to(dev) if isinstance(x, torch.Tensor) else x, obj)

    def call(self, func: Callable, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """Run one API call; ``args``/``kwargs`` are already on the device."""
        return func(*args, **kwargs)

    def synchronize(self, index: int) -> None:
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# --- the built-in PyTorch backends -------------------------------------------------------------
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


# --- workers and devices -----------------------------------------------------------------------
def is_recorded(backend: Any) -> bool:
    """Whether ``backend`` is the recorded device type (:mod:`.recorded`: the dump's outputs are the device's)."""
    from ..settings import RECORDED_DEVICE
    return getattr(backend, "name", None) == RECORDED_DEVICE


def worker_index(worker_id: str | None) -> int:
    """xdist worker id ``gw3`` -> 3; no worker (a plain run) -> 0."""
    if not worker_id:
        return 0
    m = re.search(r"(\d+)$", worker_id)
    return int(m.group(1)) if m else 0


def device_for_slot(slot: int, device_ids: Sequence[int]) -> int:
    """The worker of slot k (on its host) runs on ``device_ids[k mod len(device_ids)]``."""
    if not device_ids:
        return 0
    return device_ids[slot % len(device_ids)]


def device_for_worker(worker_id: str | None, device_ids: Sequence[int]) -> int:
    """Worker k runs on ``device_ids[k mod len(device_ids)]``."""
    return device_for_slot(worker_index(worker_id), device_ids)


def check_worker_limit(backend: Any, workers: int, device_ids: Sequence[int], max_per_device: int) -> None:
    """Refuse more than ``max_per_device`` workers per accelerator device (no limit on the CPU backend).

    Raises:
        ValueError: with the numbers and the option that raises the limit.
    """
    if not getattr(backend, "accelerator", True) or workers <= 0 or max_per_device <= 0:
        return
    ndev = max(1, len(device_ids))
    if workers > max_per_device * ndev:
        raise ValueError(
            f"{workers} workers on {ndev} {backend.name} device(s) is more than {max_per_device} per device; "
            f"list more devices with --msprobe-devices, use fewer workers (-n), or raise the limit with "
            f"--msprobe-max-workers-per-device")
