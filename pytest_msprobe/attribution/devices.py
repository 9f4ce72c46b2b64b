"""The device backend a step runs on: the checker's registry (cpu, cuda, npu and registered ones)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..devices import builtin_registry


def resolve_backend(device: Any = None, register: Optional[Callable] = None) -> tuple:
    """(backend, device index) for ``device``: None (the first available accelerator, else cpu), a name with
    an optional index (``cuda:1``), or a backend object. ``register(registry)`` adds backends first (the
    ``pytest_msprobe_register_devices`` hook of a conftest or plugin).

    Raises:
        ValueError: the name is not registered or not available here (the message lists the choices).
    """
    if isinstance(device, tuple):
        backend, index = device
    elif device is not None and not isinstance(device, str):
        backend, index = device, 0
    else:
        registry = builtin_registry()
        if register is not None:
            register(registry)
        name, _, number = (device or registry.default_name()).partition(":")
        if number and not number.isdigit():
            raise ValueError(f"device {device!r}: the index after ':' must be a number (cuda:0)")
        backend, index = registry.usable(name), int(number or 0)
    if getattr(backend, "framework", "pytorch") != "pytorch":
        raise ValueError(f"device {backend.name!r} runs MindSpore calls; attribution corrects PyTorch steps "
                         "(docs/attribute.md says why MindSpore is not covered)")
    return backend, index
