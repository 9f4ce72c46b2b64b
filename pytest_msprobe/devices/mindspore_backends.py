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
        ms = mindspore()
        _, vjp_fn = ms.vjp(fn, *tensors)
        grads = vjp_fn(sens)
        return tuple(grads) if isinstance(grads, (list, tuple)) else (grads,)

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


# --- conversions ----------------------------------------------------------------------------------------
def ms_dtype(name: str) -> Any:
    """MindSpore dtype of a canonical or MindSpore dtype name (``float32``, ``Float32``)."""
    from dumpers import format as fmt
    canonical = fmt.canonical_dtype(name) or name
    return getattr(mindspore(), canonical)


def to_ms(obj: Any, depth: int = 0) -> Any:
    """torch tensors -> MindSpore tensors of the same dtype (bf16 through float32, as numpy has none); recorded
    MindSpore dtypes -> the dtype; lists, tuples and dicts walked; anything else as is."""
    import torch

    from generators.values import MindSporeDtype
    ms = mindspore()
    if depth > 16:
        return obj
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu()
        if t.dtype == torch.bfloat16:
            return ms.Tensor(t.float().numpy().copy()).astype(ms.bfloat16)
        return ms.Tensor(t.numpy().copy())
    if isinstance(obj, MindSporeDtype):
        return ms_dtype(str(obj))
    if isinstance(obj, list):
        return [to_ms(x, depth + 1) for x in obj]
    if isinstance(obj, tuple):
        return tuple(to_ms(x, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return {k: to_ms(v, depth + 1) for k, v in obj.items()}
    return obj


def to_torch(obj: Any, depth: int = 0) -> Any:
    """MindSpore tensors -> CPU torch tensors of the same dtype (bf16 through float32); containers walked."""
    import torch
    ms = mindspore()
    if depth > 16:
        return obj
    if isinstance(obj, ms.Tensor):
        if obj.dtype == ms.bfloat16:
            return torch.from_numpy(obj.float().asnumpy().copy()).to(torch.bfloat16)
        return torch.from_numpy(obj.asnumpy().copy())
    if isinstance(obj, list):
        return [to_torch(x, depth + 1) for x in obj]
    if isinstance(obj, tuple):
        return tuple(to_torch(x, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return {k: to_torch(v, depth + 1) for k, v in obj.items()}
    return obj
