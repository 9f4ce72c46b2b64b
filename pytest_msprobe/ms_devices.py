"""Former home of the MindSpore backends, kept for conftest plugins: use :mod:`pytest_msprobe.devices`."""
from __future__ import annotations

from .devices.mindspore_backends import MindSporeBackend, MsCpuBackend

__all__ = ["MindSporeBackend", "MsCpuBackend"]
