"""Device backends: where the API under test runs (the bench always runs on the CPU, never here).

A backend is a small object with ``name``, ``is_available()``, ``device_count()``,
``to_device(obj, index)``, ``call(func, args, kwargs)`` and ``synchronize(index)``. Built in: ``cpu``,
``cuda``, ``npu`` and ``ms-cpu`` (MindSpore cases, :mod:`.ms_devices`). Others are added through the
``pytest_msprobe_register_devices`` hook.
torch is imported only when a backend is used.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Callable

# msprobe's multi_run_ut documents at most 8 parallel runs per accelerator device.
DEFAULT_MAX_WORKERS_PER_DEVICE = 8


class DeviceBackend:
    """Base class of a backend; subclasses set ``name`` and ``torch_device`` and may override anything."""

    name = "base"
    torch_device = "cpu"     # torch device type string used by to_device
    accelerator = True       # False: no per-device worker limit

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


class DeviceRegistry:
    """Name -> backend. The default is the first available accelerator, else ``cpu``."""

    def __init__(self) -> None:
        self._backends: dict[str, Any] = {}

    def register(self, backend: Any) -> None:
        missing = [a for a in ("name", "is_available", "device_count", "to_device", "call", "synchronize")
                   if not hasattr(backend, a)]
        if missing:
            raise TypeError(f"device backend {backend!r} lacks {', '.join(missing)}; "
                            "see pytest_msprobe.devices.DeviceBackend for the interface")
        self._backends[str(backend.name)] = backend

    def get(self, name: str) -> Any:
        try:
            return self._backends[name]
        except KeyError:
            raise KeyError(f"unknown device type {name!r}; registered: {', '.join(self.names())}. "
                           "Register a backend with the pytest_msprobe_register_devices hook") from None

    def usable(self, name: str) -> Any:
        """The backend ``name``, registered and available here; ValueError saying what to choose instead."""
        try:
            backend = self.get(name)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        if not backend.is_available():
            raise ValueError(f"device type {name!r} is not available on this machine; choose another "
                             f"with --msprobe-device-type (registered: {', '.join(self.names())})")
        return backend

    def names(self) -> list[str]:
        return list(self._backends)

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def default_name(self) -> str:
        for name, backend in self._backends.items():
            if name in ("cuda", "npu") and backend.is_available():
                return name
        return "cpu"


def builtin_registry() -> DeviceRegistry:
    reg = DeviceRegistry()
    from .ms_devices import MsCpuBackend
    for backend in (CpuBackend(), CudaBackend(), NpuBackend(), MsCpuBackend()):
        reg.register(backend)
    return reg


def parse_device_ids(text: str) -> list[int]:
    """``"0,1,3"`` -> [0, 1, 3]. Raises ValueError with what to write instead."""
    ids: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):
            raise ValueError(f"device ids must be non-negative integers separated by commas, like 0,1,2; "
                             f"got {text!r}")
        if int(part) in ids:
            raise ValueError(f"device id {part} is listed twice in {text!r}")
        ids.append(int(part))
    return ids


def worker_index(worker_id: str | None) -> int:
    """xdist worker id ``gw3`` -> 3; no worker (a plain run) -> 0."""
    if not worker_id:
        return 0
    m = re.search(r"(\d+)$", worker_id)
    return int(m.group(1)) if m else 0


def device_for_worker(worker_id: str | None, device_ids: Sequence[int]) -> int:
    """Worker k runs on ``device_ids[k mod len(device_ids)]``."""
    if not device_ids:
        return 0
    return device_ids[worker_index(worker_id) % len(device_ids)]


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
