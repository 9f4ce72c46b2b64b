"""Hooks that pytest-msprobe offers to conftest files and other plugins."""
from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_msprobe_register_devices(registry) -> None:  # pragma: no cover - specification only
    """Register extra device backends for the accuracy check.

    Called once per process, when the checker first needs a device. Call
    ``registry.register(backend)`` with an object that has ``name``, ``is_available()``,
    ``device_count()``, ``to_device(obj, index)``, ``call(func, args, kwargs)`` and
    ``synchronize(index)`` (see :class:`pytest_msprobe.devices.DeviceBackend`); then select it with
    ``--msprobe-device-type NAME``. Registering a name that exists replaces that backend.
    """
