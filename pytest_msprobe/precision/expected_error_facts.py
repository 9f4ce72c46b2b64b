"""What the expected-error model reads of a call: which error model its API gets and how many terms each
output sums (:func:`op_family`, :func:`reduction_length`), and its tensors' figures: their magnitudes
(:class:`Profile`, of an array or a tensor or of dump statistics) and the observed difference of two
(:class:`Observed`).

Part of :mod:`.expected_error` (which re-exports the names its callers use); pure, no I/O. Two sources of the
tensor figures: :func:`profile_array` and :func:`observe` read arrays and sum in numpy's order, bit for bit (the
compiled reads of :mod:`dumpers.metrics_sums`): the reference, and what a row the metric pass did not measure
takes; :func:`from_pass` takes the figures the metric pass measured while it read a device output and its bench
(:class:`dumpers.metrics_engine.Figures`: the same terms summed in the pass's order, held to the reference by
tests/test_expected_error_figures.py), so the Error / Expected column needs no read of its own.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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


@dataclass(frozen=True)
class TensorStat:
    """What a statistics dump records of a tensor (dump.json's dtype, shape, Max, Min, Mean, Norm)."""

    dtype: str
    shape: tuple
    max: float
    min: float
    mean: float
    norm: float

    @classmethod
    def from_dump(cls, entry: Mapping) -> TensorStat:
        """From a dump.json tensor entry; missing or non-numeric statistics become NaN."""
        def num(key: str) -> float:
            try:
                return float(entry.get(key))
            except (TypeError, ValueError):
                return math.nan
        return cls(str(entry.get("dtype", "")), tuple(int(s) for s in entry.get("shape") or ()), num("Max"),
                   num("Min"), num("Mean"), num("Norm"))

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass(frozen=True)
class Profile:
    """The magnitudes of one tensor the model needs."""

    numel: int
    shape: tuple
    rms: float
    max_abs: float
    mean_abs: float
    mean: float


# dtypes the compiled sums take (as float64 values, summed in numpy's order: its bits)
_FUSED = (np.dtype(np.float32), np.dtype(np.float64))
# ... and the bits they widen themselves: float16 as uint16, bfloat16 as int16
_BITS = {"torch.bfloat16": "int16", "torch.float16": "uint16"}


def _flat_for_sums(x: Any) -> np.ndarray:
    """A flat numpy array :func:`dumpers.metrics_sums.magnitude_sums` reads: float32/float64 values, or the
    bits of float16 (uint16) and bfloat16 (int16) values, no converted copy; other dtypes as float64."""
    if hasattr(x, "detach"):
        t = x.detach().cpu().reshape(-1)
        bits = _BITS.get(str(t.dtype))
        if bits is not None:
            import torch
            return t.view(getattr(torch, bits)).numpy()
        x = t.numpy()
    a = np.asarray(x).reshape(-1)
    if a.dtype == np.float16:
        return a.view(np.uint16)
    return a if a.dtype in _FUSED else a.astype(np.float64)


def _values(bits: np.ndarray) -> np.ndarray:
    """The float values of an array :func:`_flat_for_sums` made (bits widened to float32)."""
    if bits.dtype == np.int16:
        return (bits.astype(np.int32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32) if bits.dtype == np.uint16 else bits


def profile_array(x: Any) -> Profile:
    """The magnitudes of a numpy array or a torch tensor (float16 and bfloat16 read as their bits): numpy's
    float64 sums of the squares, magnitudes and values of the finite elements, and their largest magnitude."""
    shape = tuple(np.shape(x))
    flat = _flat_for_sums(x)
    n = int(flat.size)
    if n == 0:
        return Profile(0, shape, 0.0, 0.0, 0.0, 0.0)
    from dumpers import metrics_sums as K
    sq = absum = total = peak = 0.0
    run = np.getbufsize()
    for start in range(0, n, 1 << 20):
        c = flat[start:start + (1 << 20)]
        part = K.magnitude_sums(c, run)
        if not all(math.isfinite(v) for v in part):        # rare: leave the non-finite elements out
            c = _values(c)
            c = c[np.isfinite(c)].astype(np.float64)
            mag = np.abs(c)
            with np.errstate(over="ignore"):                  # squares beyond float64's range: inf, as the pass
                part = (float(np.square(c).sum()), float(mag.sum()), float(c.sum()),
                        float(mag.max()) if c.size else 0.0)
        sq, absum, total, peak = sq + part[0], absum + part[1], total + part[2], max(peak, part[3])
    return Profile(n, shape, math.sqrt(sq / n), peak, absum / n, total / n)


class LazyProfile:
    """The :class:`Profile` of an array or tensor, measured when the model first asks for a magnitude (most
    calls need their output's alone), kept in ``memo`` under the array's identity."""

    __slots__ = ("array", "memo", "shape")

    def __init__(self, array: Any, memo: dict) -> None:
        self.array, self.memo, self.shape = array, memo, tuple(np.shape(array))

    def profile(self) -> Profile:
        key = id(self.array)
        if key not in self.memo:
            self.memo[key] = profile_array(self.array)
        return self.memo[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.profile(), name)


def profile_stat(s: TensorStat | Mapping) -> Profile:
    if not isinstance(s, TensorStat):
        s = TensorStat.from_dump(s)
    n = s.numel
    finite = [v for v in (s.max, s.min) if math.isfinite(v)]
    peak = max((abs(v) for v in finite), default=0.0)
    rms = s.norm / math.sqrt(n) if n and math.isfinite(s.norm) else peak
    mean = s.mean if math.isfinite(s.mean) else 0.0
    return Profile(n, tuple(s.shape), rms, peak, max(abs(mean), 0.8 * rms), mean)


@dataclass(frozen=True)
class Observed:
    """An observed difference of two tensors: its max-abs and mean-abs over the elements."""

    max_abs: float
    mean_abs: float
    mismatched_nonfinite: int = 0      # NaN against a number, or infinities that differ


def observe(a: Any, b: Any) -> Observed:
    """Max-abs and mean-abs of ``a - b`` (arrays of one shape, any float dtype; computed in float64).

    Positions where both are NaN, or both the same infinity, count as equal; any other non-finite mismatch
    makes the figures infinite and is counted.
    """
    fa, fb = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if fa.shape != fb.shape:
        raise ValueError(f"observe: sizes differ ({fa.size} and {fb.size} elements)")
    n = int(fa.size)
    from dumpers import metrics_sums as K
    peak = total = 0.0
    bad = 0
    run = np.getbufsize()
    fused = fa.dtype in _FUSED and fb.dtype in _FUSED
    for start in range(0, n, 1 << 20):
        x, y = fa[start:start + (1 << 20)], fb[start:start + (1 << 20)]
        top = K.abs_diff_max(x, y) if fused else math.nan
        if math.isfinite(top):                             # the common case: one fused pass, no temporary
            peak, total = max(peak, top), total + K.float64_sum(x, y, K.T_ABS_DIFF, run)
            continue
        with np.errstate(invalid="ignore", over="ignore"):     # inf - inf: judged below
            d = np.abs(np.subtract(x, y, dtype=np.float64))
        if not np.isfinite(d).all():                       # rare: judge the non-finite positions
            x, y = x.astype(np.float64), y.astype(np.float64)
            finite = np.isfinite(x) & np.isfinite(y)
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            bad += int(np.count_nonzero(~finite & ~same))
            d = d[finite]
        if d.size:
            peak = max(peak, float(d.max()))
            total += float(d.sum())
    if bad:
        return Observed(math.inf, math.inf, bad)
    return Observed(peak, total / n if n else 0.0, 0)


def from_pass(figures: Any, shape: tuple) -> tuple:
    """``(Profile, Observed)`` of a device output against its bench from what the metric pass measured while it
    read them (:class:`dumpers.metrics_engine.Figures`): what :func:`profile_array` of the output and
    :func:`observe` of the two give, the same terms summed in the pass's order (within the bound of
    ``dumpers.metrics_kernel._figures``, about 1e-11 relative, where the reference sums in numpy's order)."""
    n = int(figures.n)
    if n == 0:
        return Profile(0, tuple(shape), 0.0, 0.0, 0.0, 0.0), Observed(0.0, 0.0, 0)
    profile = Profile(n, tuple(shape), math.sqrt(figures.sq_sum / n), figures.max_abs, figures.abs_sum / n,
                      figures.value_sum / n)
    bad = int(figures.err_mismatched)
    observed = Observed(math.inf, math.inf, bad) if bad else Observed(figures.err_max, figures.err_sum / n, 0)
    return profile, observed
