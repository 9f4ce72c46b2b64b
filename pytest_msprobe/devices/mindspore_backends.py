"""MindSpore device backends.

A MindSpore backend has the device-backend interface of :mod:`.base` (``name``, ``is_available()``,
``device_count()``, ``to_device(obj, index)``, ``call(func, args, kwargs)``, ``synchronize(index)``) plus
``framework = "mindspore"`` and ``vjp(fn, tensors, sens)``; ``to_device`` receives MindSpore tensors. Built in:
``ms-cpu`` (the call on the CPU in the dumped dtype), used for every MindSpore case unless
``--msprobe-device-type`` names another MindSpore backend registered through
``pytest_msprobe_register_devices``. MindSpore is imported on first use only.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from .base import DeviceBackend

FRAMEWORK = "mindspore"
_READY: list = []


def mindspore() -> Any:
    """The mindspore module, set up once for replay: PyNative mode, kernels launched synchronously (so an
    unsupported kernel fails in its own call and not in a later one)."""
    import mindspore as ms
    if not _READY:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        blocking = getattr(getattr(ms, "runtime", None), "launch_blocking", None)
        if blocking is not None:
            blocking()
        else:                                   # older MindSpore
            ms.set_context(pynative_synchronize=True)
        _READY.append(True)
    return ms


def vjp(fn: Callable, tensors: Sequence[Any], sens: Any) -> tuple:
    """Gradients of ``fn(*tensors)`` w.r.t. every tensor, for the output gradient ``sens`` (on the CPU: the
    bench's, and the default of every MindSpore backend)."""
    _, vjp_fn = mindspore().vjp(fn, *tensors)
    grads = vjp_fn(sens)
    return tuple(grads) if isinstance(grads, (list, tuple)) else (grads,)


def is_ms_backend(backend: Any) -> bool:
    return getattr(backend, "framework", "pytorch") == FRAMEWORK


class MindSporeBackend(DeviceBackend):
    """Base class of a MindSpore backend: override ``to_device`` (and ``call``/``vjp`` where the device needs
    its own context) for an accelerator."""

    name = "ms-base"
    framework = FRAMEWORK
    torch_device = "cpu"

    def to_device(self, obj: Any, index: int) -> Any:
        return obj

    def vjp(self, fn: Callable, tensors: Sequence[Any], sens: Any) -> tuple:
        """Gradients of ``fn(*tensors)`` w.r.t. every tensor, for the output gradient ``sens``."""
        return vjp(fn, tensors, sens)

    def synchronize(self, index: int) -> None:
        sync = getattr(getattr(mindspore(), "runtime", None), "synchronize", None)
        if sync is not None:
            sync()


class MsCpuBackend(MindSporeBackend):
    """MindSpore on the CPU, in the dumped dtype (no precision raise)."""

    name = "ms-cpu"
    accelerator = False

    def is_available(self) -> bool:
        import importlib.util
        return importlib.util.find_spec("mindspore") is not None

    def device_count(self) -> int:
        return 1

    def synchronize(self, index: int) -> None:
        return None                 # kernels are launched blocking (see mindspore())
