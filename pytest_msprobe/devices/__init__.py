"""Device backends: where the API under test runs (the bench always runs on the CPU, never here).

Public for conftest files and plugins: :class:`DeviceBackend` (subclass it), the built-in backends and the
registry that ``pytest_msprobe_register_devices(registry)`` receives. Built in: ``cpu``, ``cuda``, ``npu``
(:mod:`.base`) and ``ms-cpu`` (:mod:`.mindspore_backends`). Importing this package imports neither
torch nor MindSpore.
"""
from __future__ import annotations

from ..settings import DEFAULT_MAX_WORKERS_PER_DEVICE, parse_device_ids
from .base import (CpuBackend, CudaBackend, DeviceBackend, NpuBackend, check_worker_limit, device_for_slot,
                   device_for_worker, worker_index)
from .mindspore_backends import MindSporeBackend, MsCpuBackend, is_ms_backend
from .registry import DeviceRegistry, builtin_registry

__all__ = ["DEFAULT_MAX_WORKERS_PER_DEVICE", "CpuBackend", "CudaBackend", "DeviceBackend", "DeviceRegistry",
           "MindSporeBackend", "MsCpuBackend", "NpuBackend", "builtin_registry", "check_worker_limit",
           "device_for_slot", "device_for_worker", "is_ms_backend", "parse_device_ids", "worker_index"]
