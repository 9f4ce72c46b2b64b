"""The PyTorch side of the replay: torch callables, autograd backward, any PyTorch device backend, and calls that
training ran under ``torch.autocast``.

Autocast (:func:`for_case`): which autocast a call ran under, and what its inputs became.

A dump records a call's inputs before autocast casts them (a linear's float32 input and weight) and the output
autocast produced (bfloat16). The device side runs the call under the same autocast, so it computes in the dtype
training used; the bench computes at raised precision from the inputs as the device saw them after the cast
(rounded to bfloat16, then raised to float32), so both sides start from the same numbers.

The state comes from the entry's own key (``dumpers.format.AUTOCAST``, written by our dumper). For a dump without
it (msprobe's, older ones of ours) it is inferred where the dtypes prove autocast: an API autocast lowers whose
recorded output is float16/bfloat16 while an input is float32, or an API autocast runs in float32 whose output is
float32 while an input is float16/bfloat16. The row's message then says it was inferred.

Which APIs autocast casts is not exposed by torch; :data:`CAST_POLICY` is our one table of the lists torch's
documentation gives (https://pytorch.org/docs/stable/amp.html, "Autocast Op Reference": CUDA ops that can
autocast to float16, CUDA ops that autocast to float32, CUDA ops that promote to the widest input type, CPU ops
that can autocast to bfloat16, CPU ops that autocast to float32, CPU ops that promote). The device side never
depends on it (real autocast casts there); the bench's casts and the inference do, and
tests/test_replay_autocast.py checks every lowered entry against torch's own autocast.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dumpers import format as fmt

from .result import (BENCH, MULTI_BACKWARD_MESSAGE, Side, cast_leaves, copy_tensor, cpu_leaves, first_grad, leaves,
                     raise_target)

FRAMEWORK = "pytorch"


def _with_grad(x: Any) -> Any:
    """Spec 1.2.6: leaf with requires_grad, times 1 and cast back (a non-leaf), gradient retained."""
    leaf = x.detach().requires_grad_(True)
    y = (leaf * 1).to(x.dtype)
    y.retain_grad()
    return y


def run_backward(target: Any, grad: Any) -> None:
    """``target.backward(grad)``, straight into autograd's engine when the gradient plainly fits the output.

    The Python front end of ``Tensor.backward`` checks the gradient's shape through torch.fx's symbolic
    shapes, whose first import (sympy with it) costs about half a second per process. For plain tensors
    (no ``__torch_function__`` override or mode) of the same shape, both real or both complex, that check
    cannot fail, and the engine gets exactly the arguments the front end would give it; anything else goes
    through ``Tensor.backward``.
    """
    import torch

    engine = getattr(torch.autograd.graph, "_engine_run_backward", None)
    plain = (type(target) is torch.Tensor and type(grad) is torch.Tensor and not target.is_nested
             and not torch.overrides.has_torch_function((target, grad)))
    if (engine is None or not plain or grad.shape != target.shape
            or grad.dtype.is_complex != target.dtype.is_complex):
        target.backward(grad)
        return
    engine((target,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)


def _cast_like(grad: Any, like: Any) -> Any:
    return grad.to(like.dtype) if grad.is_floating_point() and grad.dtype != like.dtype else grad


class TorchAdapter:
    """How a PyTorch case is called, converted and differentiated."""

    framework = FRAMEWORK

    def setup(self) -> str | None:
        return None

    def choose_backend(self, backend: Any, index: int, named: str | None) -> tuple:
        """(backend, index, problem): a MindSpore backend cannot run a PyTorch call."""
        if getattr(backend, "framework", FRAMEWORK) != FRAMEWORK:
            return backend, index, (f"device type {backend.name!r} runs MindSpore calls; check a PyTorch dump "
                                    "with a PyTorch backend (cpu, cuda, npu)")
        return backend, index, None

    def resolve(self, case: Any) -> Any:
        from generators.inputs import resolve_api
        return resolve_api(case.prefix, case.api)

    def to_framework(self, obj: Any) -> Any:
        return obj

    def to_torch(self, obj: Any) -> Any:
        return cpu_leaves(obj)

    def seed(self, backend: Any, seed: int) -> None:
        """Seed the CPU generator (and CUDA's when that is the device); torch.manual_seed would also queue
        lazy seeding of every accelerator type, which costs milliseconds per call."""
        import torch
        torch.default_generator.manual_seed(seed)
        if getattr(backend, "torch_device", "cpu") == "cuda":
            torch.cuda.manual_seed_all(seed)

    def backward_plan(self, case: Any, args: list, kwargs: dict) -> Any:
        """Which top-level positional args / kwargs need a gradient (the dump's requires_grad or the tensor's);
        None when none does."""
        import torch
        fwd = case.forward if isinstance(case.forward, dict) else {}
        dump_args = fwd.get(fmt.INPUT_ARGS) or []
        dump_kwargs = fwd.get(fmt.INPUT_KWARGS) or {}

        def wants(t: Any, info: Any) -> bool:
            if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
                return False
            return bool(t.requires_grad or (isinstance(info, dict) and info.get("requires_grad") is True))

        arg_flags = [wants(a, dump_args[i] if i < len(dump_args) else None) for i, a in enumerate(args)]
        kw_flags = {k: wants(v, dump_kwargs.get(k) if isinstance(dump_kwargs, dict) else None)
                    for k, v in kwargs.items()}
        return (arg_flags, kw_flags) if any(arg_flags) or any(kw_flags.values()) else None

    def with_grad(self, args: list, kwargs: dict, plan: Any) -> tuple:
        arg_flags, kw_flags = plan
        args = [_with_grad(a) if i < len(arg_flags) and arg_flags[i] else a for i, a in enumerate(args)]
        kwargs = {k: _with_grad(v) if kw_flags.get(k) else v for k, v in kwargs.items()}
        return args, kwargs

    def backward(self, call: Any, role: str, args: list, kwargs: dict, out: Any, raise_to: Any, backend: Any,
                 index: int) -> Side:
        """Backward from the graded output, fed the dumped output gradient (raised on the bench).

        The bench decides whether backward runs (a tensor output that requires grad); the device follows it."""
        import torch

        from ..precision.standards import GRAD_INDEX
        grad_index = GRAD_INDEX.get(call.api)
        target = out[grad_index] if grad_index is not None and isinstance(out, (list, tuple)) else out
        if role == BENCH:
            if not isinstance(target, torch.Tensor):
                return Side(out, [], message=MULTI_BACKWARD_MESSAGE)
            grad = first_grad(call.grad_output)
            if not target.requires_grad or not isinstance(grad, torch.Tensor):
                return Side(out, [])
            grad_in = _cast_like(copy_tensor(grad, raise_target([grad], {}, call.api), call.api), target)
        else:
            grad = first_grad(call.grad_output)
            grad_in = _cast_like(backend.to_device(grad.detach().clone(), index), target)
        node: list = []                 # what the dumper records: the input gradients of the output's node
        hook = target.grad_fn.register_hook(lambda grad_inputs, _: node.extend(grad_inputs)) if target.grad_fn else None
        run_backward(target, grad_in)
        if hook is not None:
            hook.remove()
        grads = [a.grad for a in args if isinstance(a, torch.Tensor)]
        return Side(out, grads, grad_in=grad_in if role == BENCH else None, backward_ran=True, node_grads=node,
                    node_name=type(target.grad_fn).__name__ if target.grad_fn is not None else "")

    def gradient_mapping(self, side: Side, call: Any) -> list:
        """Which recorded node gradient is which argument's: found on this side by value (see
        :func:`generators.recorded.match_gradients`)."""
        from generators.recorded import match_gradients
        return match_gradients(list(side.grads), list(side.node_grads))

    def bench_retry(self, exc: BaseException, target: Any) -> tuple:
        raise exc

    def failure(self, role: str, exc: BaseException, backend: Any) -> BaseException:
        return exc


ADAPTER = TorchAdapter()


# --- autocast -------------------------------------------------------------------------------------
LOWER, FP32, PROMOTE = "lower", "fp32", "promote"

_CPU_LOWER = ("conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm", "linear",
              "matmul", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
              "scaled_dot_product_attention", "__matmul__", "__rmatmul__")
_CPU_FP32 = ("avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "quantile", "nanquantile",
             "stft", "cdist", "trace", "view_as_complex", "cholesky", "cholesky_inverse", "cholesky_solve",
             "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d",
             "adaptive_avg_pool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
             "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss", "nll_loss",
             "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "cross_entropy",
             "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
             "multi_margin_loss", "ctc_loss", "kl_div", "multilabel_margin_loss",
             "binary_cross_entropy_with_logits")
_CUDA_LOWER = ("__matmul__", "__rmatmul__", "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "chain_matmul",
               "multi_dot", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
               "conv_transpose3d", "linear", "matmul", "mm", "mv", "prelu", "scaled_dot_product_attention")
_CUDA_FP32 = ("__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "binary_cross_entropy_with_logits",
              "cosh", "cosine_embedding_loss", "cdist", "cosine_similarity", "cross_entropy", "cumprod", "cumsum",
              "dist", "erfinv", "exp", "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss",
              "layer_norm", "log", "log_softmax", "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss",
              "multilabel_margin_loss", "multi_margin_loss", "nll_loss", "norm", "normalize", "pdist",
              "poisson_nll_loss", "pow", "prod", "reciprocal", "rsqrt", "sinh", "smooth_l1_loss",
              "soft_margin_loss", "softmax", "softmin", "softplus", "sum", "renorm", "tan", "triplet_margin_loss")
_PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put", "scatter_add",
            "tensordot", "stack", "cat", "index_copy")

# device type -> API base name -> LOWER / FP32 / PROMOTE (NPU autocast follows CUDA's lists)
CAST_POLICY: dict = {
    "cpu": {**{a: PROMOTE for a in _PROMOTE}, **{a: FP32 for a in _CPU_FP32}, **{a: LOWER for a in _CPU_LOWER}},
    "cuda": {**{a: PROMOTE for a in _PROMOTE}, **{a: FP32 for a in _CUDA_FP32}, **{a: LOWER for a in _CUDA_LOWER}},
}
CAST_POLICY["npu"] = CAST_POLICY["cuda"]
LOW_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class AutocastState:
    """How a call ran: under ``torch.autocast(device_type, dtype)``; ``inferred`` when the dump did not say."""

    device_type: str | None      # None: not known (inferred): the device's own autocast
    dtype: str                   # canonical name: bfloat16, float16
    inferred: bool = False

    @property
    def note(self) -> str:
        if not self.inferred:
            return ""
        return (f"autocast {self.dtype} inferred from the recorded dtypes (the dump does not record autocast); "
                f"replayed under autocast")


def base_api(api: str) -> str:
    """``add.Tensor`` -> ``add``; ``linalg.vector_norm`` -> ``vector_norm``."""
    parts = api.split(".")
    if len(parts) > 1 and parts[-1][:1].isupper():          # an aten overload name
        parts = parts[:-1]
    return parts[-1]


def policy(api: str, device_type: str | None) -> str | None:
    table = CAST_POLICY.get(device_type or "cpu", CAST_POLICY["cpu"])
    return table.get(base_api(api))


def from_entry(forward: Any) -> AutocastState | None:
    """The state our dumper recorded in a forward entry (None: the key is absent, malformed, or disabled)."""
    amp = forward.get(fmt.AUTOCAST) if isinstance(forward, dict) else None
    if not isinstance(amp, dict) or amp.get(fmt.AUTOCAST_ENABLED) is not True:
        return None
    dtype = fmt.canonical_dtype(amp.get(fmt.AUTOCAST_DTYPE))
    device = amp.get(fmt.AUTOCAST_DEVICE)
    if dtype not in LOW_DTYPES or not isinstance(device, str):
        return None
    return AutocastState(device, dtype)


def _dtype_names(values: Any) -> list:
    import torch

    return [str(x.dtype).replace("torch.", "") for x in leaves(values)
            if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _output_dtypes(forward: dict) -> list:
    out = forward.get(fmt.OUTPUT)
    items = out if isinstance(out, list) else [out]
    names = []
    for item in items:
        if isinstance(item, dict) and item.get("type") in fmt.TENSOR_TYPES:
            names.append(fmt.canonical_dtype(item.get("dtype")))
    return [n for n in names if n]


def infer(api: str, forward: Any, args: list, kwargs: dict) -> AutocastState | None:
    """Autocast where the recorded dtypes prove it (see the module's docstring); None otherwise."""
    if not isinstance(forward, dict):
        return None
    outs = _output_dtypes(forward)
    ins = _dtype_names([args, kwargs])
    if not outs or not ins:
        return None
    kinds = {policy(api, "cpu"), policy(api, "cuda")}
    if LOWER in kinds and outs[0] in LOW_DTYPES and "float32" in ins:
        return AutocastState(None, outs[0], inferred=True)
    low = [d for d in ins if d in LOW_DTYPES]
    if FP32 in kinds and outs[0] == "float32" and low and "float32" not in ins:
        return AutocastState(None, low[0], inferred=True)
    return None


def for_case(case: Any, args: list, kwargs: dict) -> AutocastState | None:
    """The autocast a case's call ran under: recorded, else inferred, else None."""
    forward = getattr(case, "forward", None)
    return from_entry(forward) or infer(case.api, forward, args, kwargs)


def device_context(state: AutocastState | None, backend: Any) -> Any:
    """``torch.autocast`` for the device side (the backend's device type), or a null context."""
    import contextlib

    import torch
    if state is None:
        return contextlib.nullcontext()
    device = getattr(backend, "torch_device", None) or "cpu"
    if not torch.amp.is_autocast_available(device):
        device = "cpu"
    return torch.autocast(device_type=device, dtype=getattr(torch, state.dtype))


def cast_target(state: AutocastState, api: str, args: list, kwargs: dict) -> Any:
    """The dtype autocast casts this call's floating inputs to (None: it leaves them)."""
    import torch
    kind = policy(api, state.device_type)
    if kind == LOWER:
        return getattr(torch, state.dtype)
    if kind == FP32:
        return torch.float32
    if kind == PROMOTE:
        found = [getattr(torch, d) for d in _dtype_names([args, kwargs]) if d in (*LOW_DTYPES, "float32")]
        return max(found, key=lambda d: torch.finfo(d).bits) if found else None
    return None


def after_cast(state: AutocastState, api: str, args: list, kwargs: dict) -> tuple:
    """(args, kwargs) as the device saw them after autocast's cast: float16/bfloat16/float32 tensors in the
    target dtype (float64 ones and everything else as they are); the caller's tensors are not changed."""
    target = cast_target(state, api, args, kwargs)
    if target is None:
        return args, kwargs
    return cast_leaves(list(args), target), cast_leaves(dict(kwargs), target)


def lowered_grads(state: AutocastState, api: str, args: list, kwargs: dict, grads: list) -> list:
    """Input gradients of a lowered call in the dtype they were computed in: autocast's cast back to the input's
    float32 is exact, so the comparison is held to the precision the device computed with."""
    import torch
    if policy(api, state.device_type) != LOWER:
        return grads
    low = getattr(torch, state.dtype)
    return [g.to(low) if isinstance(g, torch.Tensor) and g.dtype == torch.float32 else g for g in grads]
