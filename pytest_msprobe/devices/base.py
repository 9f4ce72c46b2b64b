"""The device-backend interface and how xdist workers share devices.

A backend is a small object with ``name``, ``is_available()``, ``device_count()``,
``to_device(obj, index)``, ``call(func, args, kwargs)`` and ``synchronize(index)``. torch is imported only
when a backend is used.
"""
from __future__ import annotations

import re
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
