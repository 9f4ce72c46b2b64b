"""The MindSpore side of the replay: MindSpore callables and tensors, ``mindspore.vjp``, MindSpore backends.

The inputs are the same as for PyTorch cases (:func:`generators.inputs.build_inputs`: the dump's ``.npy`` files
or tensors generated from the statistics, as torch tensors) and become MindSpore tensors just before the call;
the outputs become torch tensors again (bf16 through float32), so the precision standard, the rows and the CSVs
are the PyTorch cases'. The device side runs on a MindSpore backend: ``ms-cpu`` unless ``--msprobe-device-type``
names another MindSpore one (naming a PyTorch backend is a SKIP with the reason). Where MindSpore's CPU kernel
has no float64 the bench falls back to float32 and every row says so. Backward: ``mindspore.vjp`` w.r.t. the
floating-point top-level positional tensors, fed the dumped output gradient.
"""
from __future__ import annotations

from typing import Any, Callable

from ..devices.mindspore_backends import MsCpuBackend, is_ms_backend, mindspore, vjp
from .result import BENCH, MULTI_BACKWARD_MESSAGE, Side, copy_tensor, exc_text, first_grad, map_leaves, raise_target

FRAMEWORK = "mindspore"
FP32_FALLBACK_NOTE = ("bench ran in float32, not float64: MindSpore's CPU kernel failed in float64 "
                      "({error})")
NOT_INSTALLED = ("MindSpore is not installed here; pip install 'pytest-msprobe[mindspore]' to check MindSpore "
                 "dumps")


# --- conversions ------------------------------------------------------------------------------------------
def ms_dtype(name: str) -> Any:
    """MindSpore dtype of a canonical or MindSpore dtype name (``float32``, ``Float32``)."""
    from dumpers import format as fmt
    canonical = fmt.canonical_dtype(name) or name
    return getattr(mindspore(), canonical)


def to_ms(obj: Any) -> Any:
    """torch tensors -> MindSpore tensors of the same dtype (bf16 through float32, as numpy has none); recorded
    MindSpore dtypes -> the dtype; containers walked; anything else as is."""
    import torch

    from generators.dumpjson import MindSporeDtype
    ms = mindspore()

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu()
            if t.dtype == torch.bfloat16:
                return ms.Tensor(t.float().numpy().copy()).astype(ms.bfloat16)
            return ms.Tensor(t.numpy().copy())
        if isinstance(x, MindSporeDtype):
            return ms_dtype(str(x))
        return x
    return map_leaves(leaf, obj)


def to_torch(obj: Any) -> Any:
    """MindSpore tensors -> CPU torch tensors of the same dtype (bf16 through float32); containers walked."""
    import torch
    ms = mindspore()

    def leaf(x: Any) -> Any:
        if isinstance(x, ms.Tensor):
            if x.dtype == ms.bfloat16:
                return torch.from_numpy(x.float().asnumpy().copy()).to(torch.bfloat16)
            return torch.from_numpy(x.asnumpy().copy())
        return x
    return map_leaves(leaf, obj)


def ms_error_text(exc: BaseException) -> str:
    """The first line of a MindSpore error (its C++ call stack left out)."""
    for line in str(exc).splitlines():
        line = line.strip()
        if line and not line.startswith("-"):
            return line
    return type(exc).__name__


def _drain(ms: Any) -> None:
    """After a failed call: wait for MindSpore's queued work (``mindspore.runtime.synchronize``) and run two tiny
    ops, so that an error it still holds for the failed call surfaces (and is dropped) here, not in the next
    case: without the wait a busy machine let a failed bfloat16 kernel's error reach the next case's bench."""
    import numpy as np
    runtime = getattr(ms, "runtime", None)
    if runtime is not None and hasattr(runtime, "synchronize"):
        try:
            runtime.synchronize()
        except Exception:  # noqa: BLE001, S112 - the stale error of the failed call
            pass
    for _ in range(2):
        try:
            (ms.Tensor(np.zeros((1,), np.float32)) + 0).asnumpy()
        except Exception:  # noqa: BLE001, S112 - the stale error of the failed call
            continue


def _selected(out: Any, grad_index: int | None) -> Any:
    if grad_index is not None and isinstance(out, (list, tuple)):
        return out[grad_index]
    return out


def _closure(func: Callable, args: list, kwargs: dict, positions: list, grad_index: int | None) -> Callable:
    """``fn(*tensors)``: the call with the tensors at ``positions`` replaced, the graded output selected."""
    def fn(*tensors: Any) -> Any:
        full = list(args)
        for p, t in zip(positions, tensors):
            full[p] = t
        return _selected(func(*full, **kwargs), grad_index)
    return fn


class MindSporeAdapter:
    """How a MindSpore case is called, converted and differentiated."""

    framework = FRAMEWORK

    def setup(self) -> str | None:
        """None when MindSpore is ready for replay, else the SKIP reason."""
        try:
            mindspore()
        except ImportError:
            return NOT_INSTALLED
        except Exception as exc:  # noqa: BLE001 - spec 3.4: whatever stops the set-up is the SKIP reason
            return f"MindSpore could not be set up: {exc_text(exc)}"
        return None

    def choose_backend(self, backend: Any, index: int, named: str | None) -> tuple:
        """(backend, index, problem): a MindSpore backend; with no device type named, ``ms-cpu``."""
        if is_ms_backend(backend):
            return backend, index, None
        if named:
            return backend, index, (f"device type {backend.name!r} runs PyTorch calls; check a MindSpore dump "
                                    "with a MindSpore backend (ms-cpu or one registered through "
                                    "pytest_msprobe_register_devices), or leave out --msprobe-device-type")
        return MsCpuBackend(), 0, None

    def resolve(self, case: Any) -> Any:
        from generators.ms_apis import resolve_ms_api
        return resolve_ms_api(case.prefix, case.api)

    def to_framework(self, obj: Any) -> Any:
        return to_ms(obj)

    def to_torch(self, obj: Any) -> Any:
        return to_torch(obj)

    def seed(self, backend: Any, seed: int) -> None:
        mindspore().set_seed(seed)

    def backward_plan(self, case: Any, args: list, kwargs: dict) -> Any:
        """(positions of floating-point top-level positional tensors, positions of all top-level tensors)."""
        import torch

        from ..precision.standards import GRAD_INDEX
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        floats = [i for i in tensors if args[i].is_floating_point() or args[i].is_complex()]
        return {"floats": floats, "tensors": tensors, "grad_index": GRAD_INDEX.get(case.api)} if floats else None

    def with_grad(self, args: list, kwargs: dict, plan: Any) -> tuple:
        return args, kwargs                 # vjp differentiates a closure: nothing to mark

    def backward(self, call: Any, role: str, args: list, kwargs: dict, out: Any, raise_to: Any, backend: Any,
                 index: int) -> Side:
        """``vjp`` of the graded output w.r.t. the floating-point positional tensors, fed the output gradient
        (raised on the bench) in the output's dtype."""
        ms = mindspore()
        plan = call.plan
        target = _selected(out, plan["grad_index"])
        if not isinstance(target, ms.Tensor):
            return Side(out, [], message=MULTI_BACKWARD_MESSAGE)
        if not (ms.ops.is_floating_point(target) or ms.ops.is_complex(target)):
            return Side(out, [])
        import torch
        grad = first_grad(call.grad_output)
        if not isinstance(grad, torch.Tensor):
            return Side(out, [])
        sens = to_ms(copy_tensor(grad, raise_target([call.grad_output], {}, call.api) if role == BENCH else None,
                                 call.api))
        sens = sens.astype(target.dtype) if sens.dtype != target.dtype else sens
        floats = plan["floats"]
        ms.set_seed(call.seed)
        take = vjp if role == BENCH else backend.vjp
        grads = take(_closure(call.func, args, kwargs, floats, plan["grad_index"]), [args[p] for p in floats], sens)
        by_pos = dict(zip(floats, grads))
        # the dumper records one gradient per positional argument
        node = [by_pos.get(p) for p in range(max(plan["tensors"]) + 1)]
        return Side(out, [by_pos.get(p) for p in plan["tensors"]], grad_in=call.grad_output, backward_ran=True,
                    node_grads=node)

    def gradient_mapping(self, side: Side, call: Any) -> list:
        """The dumper records one gradient per positional argument: tensor argument j is at its position."""
        return [(p, False) for p in call.plan["tensors"]] if call.plan else []

    def bench_retry(self, exc: BaseException, target: Any) -> tuple:
        """A bench that failed in float64 runs again in float32 (and every row says so); else it failed."""
        import torch
        _drain(mindspore())
        if target is not torch.float64:
            raise RuntimeError(f"bench run failed: {ms_error_text(exc)}") from None
        return torch.float32, FP32_FALLBACK_NOTE.format(error=ms_error_text(exc))

    def failure(self, role: str, exc: BaseException, backend: Any) -> BaseException:
        _drain(mindspore())
        where = "bench run" if role == BENCH else f"device run ({backend.name})"
        return RuntimeError(f"{where} failed: {ms_error_text(exc)}")


ADAPTER = MindSporeAdapter()
