"""The ``recorded`` device type: the device side of every item is the output the training run recorded.

Nothing runs on a device: the replay takes the dump's ``*.forward.output.N`` files and the input gradients of
the backward entry as the device's outputs (see docs/recorded.md). The object only stands in the registry so
that ``--msprobe-device-type recorded`` is chosen, shown and shared over xdist workers like any device type.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from ..settings import RECORDED_DEVICE as RECORDED
from .base import DeviceBackend


class RecordedBackend(DeviceBackend):
    """The recorded outputs of the dump as the device side; it runs no call itself."""

    name = RECORDED
    accelerator = False       # no device, no per-device worker limit
    framework = None          # judges PyTorch and MindSpore dumps alike

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def to_device(self, obj: Any, index: int) -> Any:
        return obj

    def call(self, func: Callable, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        raise RuntimeError("the recorded device type runs no call: its outputs are the dump's recorded ones")
