"""Replay one captured MindSpore API call: bench (CPU, raised precision) and device, judged like PyTorch calls.

The inputs are the same as for PyTorch cases (:func:`generators.inputs.build_inputs`: the dump's ``.npy`` files
or tensors generated from the statistics, as torch tensors) and become MindSpore tensors here. The device side
runs the MindSpore callable in the dumped dtype through a MindSpore backend (``ms-cpu`` unless another one is
selected, see :mod:`.devices`). The bench runs the same callable on the CPU with the inputs raised by spec
precision-standard.md 1.2; where MindSpore's CPU kernel has no float64 the bench falls back to float32 and every
row says so. Backward: ``mindspore.vjp`` w.r.t. the floating-point top-level positional tensors, fed the
dumped output gradient. Outputs go back to torch tensors (bf16 through float32) and are judged by the same
:func:`pytest_msprobe.precision.compare.compare_outputs`, so rows and CSVs have the PyTorch cases' form.
"""
from __future__ import annotations

from typing import Any, Callable

from .runner import (
    MULTI_BACKWARD_MESSAGE,
    _copy_tensor,
    _map,
    backward_messages,
    case_name,
    item_seed,
    judge,
    raise_target,
)

FP32_FALLBACK_NOTE = ("bench ran in float32, not float64: MindSpore's CPU kernel failed in float64 "
                      "({error})")


def ms_error_text(exc: BaseException) -> str:
    """The first line of a MindSpore error (its C++ call stack left out)."""
    for line in str(exc).splitlines():
        line = line.strip()
        if line and not line.startswith("-"):
            return line
    return type(exc).__name__


def _drain(ms: Any) -> None:
    """After a failed call: run two tiny ops so that an error MindSpore still holds for the failed call
    surfaces (and is dropped) here, not in the next case."""
    import numpy as np
    for _ in range(2):
        try:
            (ms.Tensor(np.zeros((1,), np.float32)) + 0).asnumpy()
        except Exception:  # noqa: BLE001, S112 - the stale error of the failed call
            continue


def _grad_positions(args: list, torch: Any) -> tuple:
    """(positions of floating-point top-level positional tensors, positions of all top-level tensors)."""
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    floats = [i for i in tensors if args[i].is_floating_point() or args[i].is_complex()]
    return floats, tensors


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


def _bench_vjp(fn: Callable, tensors: list, sens: Any) -> tuple:
    from .devices.mindspore_backends import mindspore
    _, vjp_fn = mindspore().vjp(fn, *tensors)
    grads = vjp_fn(sens)
    return tuple(grads) if isinstance(grads, (list, tuple)) else (grads,)


def _backward_target(out: Any, grad_index: int | None, ms: Any) -> tuple:
    """(output that receives the gradient, message): message set when backward cannot run."""
    target = _selected(out, grad_index)
    if not isinstance(target, ms.Tensor):
        return None, MULTI_BACKWARD_MESSAGE
    if not (ms.ops.is_floating_point(target) or ms.ops.is_complex(target)):
        return None, ""
    return target, ""


def _sens(grad: Any, like: Any, raise_to: Any, api: str, torch: Any) -> Any:
    """The output gradient as a MindSpore tensor in ``like``'s dtype (bench: raised first, spec 1.4)."""
    from .devices.mindspore_backends import to_ms
    if isinstance(grad, (list, tuple)):
        grad = grad[0] if grad else None
    if not isinstance(grad, torch.Tensor):
        return None
    g = _copy_tensor(grad, raise_to, api, torch)
    sens = to_ms(g)
    return sens.astype(like.dtype) if sens.dtype != like.dtype else sens


def _side(func: Callable, args: list, kwargs: dict, call: Callable, vjp: Callable, seed: int, backward: dict | None,
          ms: Any) -> tuple:
    """Forward (and backward) of one side, as torch tensors: (outputs, input gradients or [], backward message).
    The conversion reads every result back, so a kernel that fails asynchronously fails here."""
    from .devices.mindspore_backends import to_torch
    ms.set_seed(seed)
    out = call(func, args, kwargs)
    if backward is None:
        return to_torch(out), [], ""
    target, message = _backward_target(out, backward["grad_index"], ms)
    if target is None:
        return to_torch(out), [], message
    sens = backward["sens"](target)
    if sens is None:
        return to_torch(out), [], ""
    floats = backward["floats"]
    ms.set_seed(seed)
    grads = vjp(_closure(func, args, kwargs, floats, backward["grad_index"]), [args[p] for p in floats], sens)
    by_pos = dict(zip(floats, grads))
    return to_torch(out), to_torch([by_pos.get(p) for p in backward["tensors"]]), ""


def run_ms(case: Any, inputs: Any, backend: Any, device_index: int, options: Any, mode: str, seed: int) -> tuple:
    """Bench and device runs of a MindSpore case and the comparison: (CaseResult, saved tensors)."""
    import torch

    from generators.ms_apis import resolve_ms_api
    from pytest_msprobe.precision.standards import GRAD_INDEX, get_standard

    from .devices.mindspore_backends import MsCpuBackend, is_ms_backend, mindspore, to_ms
    ms = mindspore()
    if not is_ms_backend(backend):
        backend, device_index = MsCpuBackend(), 0
    std = get_standard(options.standard)
    name = case_name(case)
    api = case.api
    func = resolve_ms_api(case.prefix, api)

    args = list(inputs.args or ())
    kwargs = dict(inputs.kwargs or {})
    kwargs.pop("device", None)
    messages = backward_messages(api, kwargs)
    floats, tensors = _grad_positions(args, torch)
    want_backward = (getattr(case, "backward", None) is not None and not messages and bool(floats)
                     and getattr(inputs, "grad_output", None) is not None)
    grad_index = GRAD_INDEX.get(api)
    call_seed = item_seed(name, seed)

    def plan(raise_to: Any) -> dict | None:
        if not want_backward:
            return None
        return {"grad_index": grad_index, "floats": floats, "tensors": tensors,
                "sens": lambda like: _sens(inputs.grad_output, like, raise_to, api, torch)}

    def bench(target: Any) -> tuple:
        b_args = to_ms([_map(lambda x: _copy_tensor(x, target, api, torch), a) for a in args])
        b_kwargs = to_ms({k: _map(lambda x: _copy_tensor(x, target, api, torch), v) for k, v in kwargs.items()})
        g_target = raise_target([inputs.grad_output], {}, api) if want_backward else None
        return _side(func, b_args, b_kwargs, lambda f, a, k: f(*a, **k), _bench_vjp, call_seed, plan(g_target), ms)

    # bench: CPU, raised precision (float64 where MindSpore's CPU kernel has it), never through a backend
    target = raise_target(args, kwargs, api)
    note = ""
    try:
        bench_out, bench_grads, b_msg = bench(target)
    except Exception as exc:  # noqa: BLE001 - a missing float64 kernel: retry in float32, say so
        _drain(ms)
        if target is not torch.float64:
            raise RuntimeError(f"bench run failed: {ms_error_text(exc)}") from None
        note = FP32_FALLBACK_NOTE.format(error=ms_error_text(exc))
        try:
            bench_out, bench_grads, b_msg = bench(torch.float32)
        except Exception as exc2:  # noqa: BLE001 - reported as the API's SKIP reason
            _drain(ms)
            raise RuntimeError(f"bench run failed: {ms_error_text(exc2)}") from None
    # device: same values in the dumped dtype, through the MindSpore backend
    d_args = list(backend.to_device(to_ms([_map(lambda x: _copy_tensor(x, None, api, torch), a) for a in args]),
                                    device_index))
    d_kwargs = dict(backend.to_device(to_ms(
        {k: _map(lambda x: _copy_tensor(x, None, api, torch), v) for k, v in kwargs.items()}), device_index))
    try:
        dev_out, dev_grads, d_msg = _side(func, d_args, d_kwargs, backend.call, backend.vjp, call_seed, plan(None), ms)
        backend.synchronize(device_index)
    except Exception as exc:  # noqa: BLE001 - reported as the API's SKIP reason
        _drain(ms)
        raise RuntimeError(f"device run ({backend.name}) failed: {ms_error_text(exc)}") from None
    if b_msg or d_msg:
        messages.append(b_msg or d_msg)
        bench_grads, dev_grads = [], []

    b_cmp, d_cmp, bg_cmp, dg_cmp = bench_out, dev_out, list(bench_grads), list(dev_grads)
    result = judge(name, api, std, (b_cmp, d_cmp, bg_cmp, dg_cmp), messages, mode, seed, note)
    saved = {
        "forward.input": [*args, *kwargs.values()],
        "forward.output.bench": b_cmp, "forward.output.device": d_cmp,
        "backward.input": inputs.grad_output,
        "backward.output.bench": bg_cmp, "backward.output.device": dg_cmp,
    }
    return result, saved
