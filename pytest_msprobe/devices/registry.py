"""The registry of device backends (name -> backend) and the table of built-in ones."""
from __future__ import annotations

from typing import Any

from .mindspore_backends import MsCpuBackend
from .recorded import RecordedBackend
from .base import CpuBackend, CudaBackend, NpuBackend

# the built-in backends, registered in this order
BUILTIN = (CpuBackend, CudaBackend, NpuBackend, MsCpuBackend, RecordedBackend)
ACCELERATORS = ("cuda", "npu")            # the default is the first of these available, else cpu
REQUIRED = ("name", "is_available", "device_count", "to_device", "call", "synchronize")


class DeviceRegistry:
    """Name -> backend. The default is the first available accelerator, else ``cpu``."""

    def __init__(self) -> None:
        self._backends: dict[str, Any] = {}

    def register(self, backend: Any) -> None:
        missing = [a for a in REQUIRED if not hasattr(backend, a)]
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
            if name in ACCELERATORS and backend.is_available():
                return name
        return "cpu"


def builtin_registry() -> DeviceRegistry:
    """A registry holding the built-in backends of :data:`BUILTIN`."""
    reg = DeviceRegistry()
    for cls in BUILTIN:
        reg.register(cls())
    return reg
