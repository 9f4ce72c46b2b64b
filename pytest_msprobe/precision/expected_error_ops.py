"""Which error model an API gets (its op family) and how many terms each of its outputs sums.

Part of :mod:`.expected_error` (which re-exports :func:`op_family` and :func:`reduction_length`); pure, no I/O.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# --- op families ---------------------------------------------------------------------------------------------
GEMM = "gemm"
REDUCTION = "reduction"
SOFTMAX = "softmax"
NORM = "norm"
ATTENTION = "attention"
TRANSCENDENTAL = "transcendental"
ELEMENTWISE = "elementwise"

_FAMILIES = {
    GEMM: ("linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "addmm_", "baddbmm",
           "baddbmm_", "addbmm", "addbmm_", "addmv", "addmv_", "mv", "dot", "vdot", "inner", "bilinear",
           "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "convolution", "_convolution", "chain_matmul", "tensordot", "einsum"),
    REDUCTION: ("sum", "mean", "nansum", "nanmean", "norm", "vector_norm", "frobenius_norm", "var", "std",
                "var_mean", "std_mean", "cumsum", "cumsum_", "logsumexp", "prod", "cumprod", "mse_loss",
                "l1_loss", "smooth_l1_loss", "huber_loss", "nll_loss", "kl_div", "avg_pool1d", "avg_pool2d",
                "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"),
    SOFTMAX: ("softmax", "log_softmax", "_softmax", "_log_softmax", "softmin", "cross_entropy",
              "binary_cross_entropy", "binary_cross_entropy_with_logits", "gumbel_softmax"),
    NORM: ("layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "normalize",
           "local_response_norm", "npu_rms_norm", "native_layer_norm"),
    ATTENTION: ("scaled_dot_product_attention", "npu_fusion_attention", "multi_head_attention_forward",
                "flash_attention"),
    TRANSCENDENTAL: ("exp", "exp_", "exp2", "expm1", "log", "log_", "log2", "log10", "log1p", "sqrt", "rsqrt",
                     "sqrt_", "rsqrt_", "pow", "pow_", "__pow__", "__rpow__", "tanh", "tanh_", "sigmoid",
                     "sigmoid_", "gelu", "silu", "silu_", "mish", "softplus", "elu", "elu_", "selu", "celu",
                     "erf", "erfc", "erfinv", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh",
                     "cosh", "logsigmoid", "hardswish", "tanhshrink", "reciprocal", "reciprocal_", "fast_gelu",
                     "swiglu", "npu_swiglu", "glu", "logit", "lgamma", "digamma", "rotary_emb",
                     "npu_rotary_mul"),
}
_FAMILY_OF = {api: fam for fam, apis in _FAMILIES.items() for api in apis}
OPERANDS_FROM_1 = frozenset({"addmm", "addmm_", "baddbmm", "baddbmm_", "addbmm", "addbmm_", "addmv", "addmv_"})
# reductions whose kernels run vector accumulators over the whole length in one pass (torch's sum and mean
# use a cascade instead)
LANE_REDUCTIONS = frozenset({"norm", "vector_norm", "frobenius_norm", "var", "std", "var_mean", "std_mean",
                             "logsumexp", "cumsum", "cumsum_", "prod", "cumprod", "mse_loss", "l1_loss",
                             "smooth_l1_loss", "huber_loss", "kl_div"})
MEANS = frozenset({"mean", "nanmean", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
                    "adaptive_avg_pool2d", "adaptive_avg_pool3d", "mse_loss", "l1_loss", "smooth_l1_loss",
                    "huber_loss", "nll_loss"})
EXP_LIKE = frozenset({"exp", "exp_", "exp2", "expm1", "pow", "pow_", "__pow__", "__rpow__", "sinh", "cosh"})


def base_name(api_name: str) -> str:
    """``Functional.linear.0.forward`` / ``torch.nn.functional.linear`` / ``linear`` -> ``linear``."""
    parts = [p for p in str(api_name).split(".") if p]
    if len(parts) >= 3 and parts[0] in ("Functional", "Tensor", "Torch", "Aten", "NPU", "Mint",
                                        "MintFunctional", "Primitive", "VF"):
        return parts[1]
    return parts[-1] if parts else ""


def op_family(api_name: str) -> str:
    """The error model an API gets: gemm, reduction, softmax, norm, attention, transcendental or elementwise."""
    return _FAMILY_OF.get(base_name(api_name), ELEMENTWISE)


# --- reduction length ------------------------------------------------------------------------------------------
def _numel(shape: Sequence[int] | None) -> int:
    return math.prod(int(s) for s in shape) if shape else 1


def _dims(kwargs: Mapping, ndim: int) -> list | None:
    dim = kwargs.get("dim", kwargs.get("axis"))
    if dim is None:
        return None
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    try:
        return [int(d) % ndim for d in dims] if ndim else []
    except (TypeError, ValueError):
        return None


def reduction_length(api_name: str, input_shapes: Sequence, kwargs: Mapping | None = None, *,
                     output_shape: Sequence[int] | None = None, direction: str = "forward",
                     index: int = 0, grad_shape: Sequence[int] | None = None) -> int:
    """How many terms each output element sums: the GEMM/conv inner dimension, a reduction's size, ...

    Args:
        api_name: base or dump name (``linear``, ``Functional.linear.0``).
        input_shapes: the shapes of the call's tensor arguments, in order (positional then keyword).
        kwargs: the call's non-tensor arguments by name (``dim``, ``normalized_shape``, ``groups``, ...).
        output_shape: the output's shape (reductions: ``numel(input) / numel(output)``).
        direction, index: ``"backward"`` and which input's gradient (linear: 0 input, 1 weight, 2 bias).
        grad_shape: the output gradient's shape (backward of convolutions).

    Returns 1 for element-wise calls and whatever cannot be told from the shapes.
    """
    kwargs = kwargs or {}
    api = base_name(api_name)
    fam = op_family(api)
    shapes = [tuple(int(d) for d in s) for s in input_shapes if s is not None]
    if not shapes:
        return 1
    first = shapes[0]
    if direction == "backward":
        return max(1, _backward_length(api, fam, shapes, kwargs, index, grad_shape, output_shape))
    if fam == GEMM:
        return max(1, _gemm_length(api, shapes, kwargs))
    if fam == REDUCTION:
        if output_shape is not None and api not in ("cumsum", "cumsum_", "cumprod"):
            return max(1, _numel(first) // max(1, _numel(output_shape)))
        dims = _dims(kwargs, len(first))
        if dims is None:
            return max(1, max(first) if api in ("cumsum", "cumsum_", "cumprod") and first else _numel(first))
        return max(1, _numel([first[d] for d in dims]))
    if fam in (SOFTMAX, NORM):
        return max(1, _norm_length(api, fam, shapes, kwargs))
    if fam == ATTENTION:
        return max(1, shapes[1][-2] if len(shapes) > 1 and len(shapes[1]) >= 2 else first[-1])
    return 1


def _gemm_length(api: str, shapes: list, kwargs: Mapping) -> int:
    a = shapes[1] if api in OPERANDS_FROM_1 and len(shapes) > 1 else shapes[0]
    if api.startswith("conv_transpose") and len(shapes) > 1:
        w = shapes[1]
        return max(1, w[0] // max(1, int(kwargs.get("groups", 1) or 1))) * _numel(w[2:])
    if api.startswith("conv") and len(shapes) > 1:
        return _numel(shapes[1][1:])
    if api == "bilinear" and len(shapes) > 1:
        return shapes[0][-1] * shapes[1][-1]
    return a[-1] if a else 1


def _norm_length(api: str, fam: str, shapes: list, kwargs: Mapping) -> int:
    x = shapes[0]
    if not x:
        return 1
    if fam == SOFTMAX:
        if api in ("cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits"):
            return x[1] if len(x) > 1 and api == "cross_entropy" else 1
        dims = _dims(kwargs, len(x))
        return x[dims[0]] if dims else x[-1]
    if api in ("layer_norm", "rms_norm", "npu_rms_norm", "native_layer_norm"):
        ns = kwargs.get("normalized_shape")
        if ns is not None:
            return _numel(list(ns) if isinstance(ns, (list, tuple)) else [ns])
        return _numel(shapes[1]) if len(shapes) > 1 else x[-1]
    if api == "group_norm":
        groups = int(kwargs.get("num_groups", kwargs.get("groups", 1)) or 1)
        return _numel(x) // max(1, x[0] * groups)
    if api == "batch_norm":
        return _numel(x) // max(1, x[1] if len(x) > 1 else 1)
    if api == "instance_norm":
        return _numel(x[2:])
    return x[-1]


def _backward_length(api: str, fam: str, shapes: list, kwargs: Mapping, index: int,
                     grad_shape: Sequence[int] | None, output_shape: Sequence[int] | None) -> int:
    x = shapes[0]
    if fam == GEMM and len(shapes) > 1:
        if api.startswith("conv"):
            g = _numel(grad_shape) if grad_shape is not None else 0
            w = shapes[1]
            if index == 0:
                return max(1, w[0] // max(1, int(kwargs.get("groups", 1) or 1))) * _numel(w[2:])
            return g // max(1, w[0]) if g else _numel(x) // max(1, x[1] if len(x) > 1 else 1)
        if api == "linear":
            w = shapes[1]
            return w[0] if index == 0 else _numel(x) // max(1, x[-1])
        a, b = (shapes[1], shapes[2]) if api in OPERANDS_FROM_1 and len(shapes) > 2 else (shapes[0], shapes[1])
        if index == (1 if api in OPERANDS_FROM_1 else 0):
            return b[-1] if len(b) > 1 else 1
        return _numel(a) // max(1, a[-1]) if len(a) > 1 else 1
    if fam in (NORM, SOFTMAX):
        n = _norm_length(api, fam, shapes, kwargs)
        return n if index == 0 else _numel(x) // max(1, n)
    if fam == REDUCTION:
        return 1
    if grad_shape is not None and index < len(shapes):
        return _numel(grad_shape) // max(1, _numel(shapes[index]))
    return 1
