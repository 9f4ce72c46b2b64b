"""The expected error of a call: how far a correct kernel of this API, in this dtype, on these inputs, may be
from the exact result, so that an observed error can be read as a multiple of it.

Pure numpy, no I/O. The arithmetic (docs/expected-error.md has it at length):

* **Unit roundoff** ``u`` of a dtype: half the distance from 1 to the next float, ``2**-p`` with ``p`` the
  significand bits: float64 2^-53, float32 2^-24, HF32 2^-12 (11 stored bits), TF32 and float16 2^-11,
  bfloat16 2^-8. A correctly rounded result ``fl(x)`` satisfies ``|fl(x) - x| <= u |x|``.
* **Final rounding.** Low-precision results (bf16/fp16) are computed in float32 and rounded once: that rounding
  alone is up to ``u_out |y|`` per element (half an ulp), ``u_out |y| / 2`` on average.
* **Sums and dot products** of ``n`` terms ``t_k`` in precision ``u``: the worst case is ``gamma_n sum|t_k|``
  with ``gamma_n = n u / (1 - n u)``; it is reached only by adversarial data. Rounding errors behave as
  independent, zero-mean, at most ``u`` relative (Higham & Mary 2019), so the error of a sum is a sum of
  ``delta_k s_k`` over the partial sums ``s_k``, with variance ``u^2/3 sum E s_k^2``. With the terms' total
  square ``Q = sum t_k^2`` and the result ``S``:

  with per-term variance ``v = Q/n - (S/n)^2`` and squared mean ``m = (S/n)^2``, a sequential run of ``n``
  terms gives ``sum E s_k^2 = n^2 v / 2 + n^3 m / 3`` (zero-mean terms: ``u sqrt(n Q / 6)``; same-sign terms:
  ``u sqrt(n) |S| / 3``, the ``sqrt(n) u`` rule). Library kernels do not run that long:

  - GEMM and convolution (the inner dimension in blocks of ``L = GEMM_BLOCK``, block sums accumulated in
    order): ``n v L/2 + n m L^2/3 + (n^2 v/2 + n^3 m/3) / L``;
  - reductions (sequential blocks of ``L = REDUCTION_BLOCK``, then a tree):
    ``n v (L/2 + log2(n/L)) + n m (L^2/3 + 2n)``.

  The largest of ``N`` output elements is taken ``lambda(N) = sqrt(2 ln 2N) + LAMBDA_MARGIN`` standard
  deviations out (the tail of the maximum of ``N`` normal errors).
* **Inputs already in error**: inputs rounded to HF32 (``input_dtype="hf32"``) or differing by a relative
  ``input_rel_error`` propagate as ``eps sqrt(2 Q / 3)`` through products (each operand's error independent),
  as ``kappa eps |y|`` through element-wise functions (``kappa`` the condition number: 1, ``|x|`` for exp).
* **Element-wise ops** are exact then rounded (add, mul, ...: up to ``ELEMENTWISE_ULPS`` ulp of the compute
  dtype before the final rounding); **transcendental functions** (exp, tanh, gelu, ...) are faithful to
  ``TRANSCENDENTAL_ULPS`` ulp; **softmax and norms** chain a reduction, a transcendental and a division
  (``SOFTMAX_ULPS`` / ``NORM_ULPS`` ulp of the compute dtype relative to the output, plus the cancellation of
  ``x - mean`` for norms); **attention** rounds its probabilities to the dtype before the second product.

Two figures come out, both against the exact result: ``max_abs`` (bounds the tensor's max-abs error for at
least 99% of correct kernels) and ``mean_abs`` (the typical mean-abs error). :meth:`Expected.pair` turns them
into the figures for the difference of two correct runs in the same dtype (a replay against a recording, two
dumps): the final rounding cancels on average there, only the computation's own error remains.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .expected_error_facts import (ATTENTION, EXP_LIKE, GEMM, LANE_REDUCTIONS, MEANS, NORM, OPERANDS_FROM_1,
                                   REDUCTION, SOFTMAX, TRANSCENDENTAL, LazyProfile, Observed, Profile, TensorStat,
                                   base_name, from_pass, observe, op_family, profile_array, profile_stat,
                                   reduction_length)

_length = reduction_length          # the functions below take a parameter of that name

__all__ = ["BEYOND_ROUNDING", "ELEMENTWISE_ULPS", "EXACT", "GEMM_BLOCK", "LAMBDA_MARGIN", "NORM_ULPS",
           "REDUCTION_BLOCK", "SOFTMAX_ULPS", "TRANSCENDENTAL_ULPS", "VECTOR_LANES", "WITHIN", "WITHIN_ROUNDING",
           "Expected", "Observed", "Profile", "TensorStat", "classify", "expected_error",
           "expected_error_from_stats", "from_pass", "multiple", "observe", "op_family", "reduction_length",
           "unit_roundoff", "with_measurement"]

# --- classification ----------------------------------------------------------------------------------------
WITHIN = 2.0                 # a multiple up to this is within the rounding of a correct kernel
EXACT = "exact"
WITHIN_ROUNDING = "within rounding"
BEYOND_ROUNDING = "beyond rounding"

# --- model constants -----------------------------------------------------------------------------------------
LAMBDA_MARGIN = 1.0          # standard deviations beyond the expected maximum of N normal errors
REDUCTION_BLOCK = 32         # longest sequential run of additions inside a library reduction (then a tree)
VECTOR_LANES = 8             # accumulators of a one-pass vectorised reduction (norms, softmax denominators)
GEMM_BLOCK = 256             # inner-dimension block of a library GEMM/conv (block sums accumulated in order)
ELEMENTWISE_ULPS = 1.0       # compute-dtype ulps of an element-wise op before its final rounding
TRANSCENDENTAL_ULPS = 4.0    # exp, log, tanh, erf, ... of vectorised math libraries
SOFTMAX_ULPS = 5.0           # max, exp, a positive sum, a division
NORM_ULPS = 5.0              # mean, variance, rsqrt, scale and shift

_U = {
    "float64": 2.0 ** -53, "float32": 2.0 ** -24, "hf32": 2.0 ** -12, "tf32": 2.0 ** -11,
    "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float8_e4m3fn": 2.0 ** -4, "float8_e5m2": 2.0 ** -3,
    "hifloat8": 2.0 ** -4,
}
# smallest positive (subnormal) number: below the normal range rounding is absolute, half of it at most
_TINY = {"float64": 2.0 ** -1074, "float32": 2.0 ** -149, "hf32": 2.0 ** -149, "tf32": 2.0 ** -149,
         "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float8_e4m3fn": 2.0 ** -9, "float8_e5m2": 2.0 ** -16}
_ALIASES = {
    "fp64": "float64", "double": "float64", "f8": "float64", "fp32": "float32", "float": "float32",
    "f4": "float32", "single": "float32", "fp16": "float16", "half": "float16", "f2": "float16",
    "bf16": "bfloat16", "float8_e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
}
_INTEGER = ("int", "uint", "bool", "long", "short", "byte", "char")

def _canonical(dtype: Any) -> str:
    name = str(getattr(dtype, "name", dtype) if not isinstance(dtype, str) else dtype).strip()
    if name.startswith("<class"):                    # "<class 'numpy.float32'>"
        name = name.split("'")[1].split(".")[-1]
    name = name.replace("torch.", "").replace("numpy.", "").replace("mindspore.", "").lower()
    return _ALIASES.get(name, name)


def unit_roundoff(dtype: Any) -> float:
    """``u`` of a dtype: ``torch.bfloat16``, ``"bfloat16"``, ``"BF16"``, a numpy dtype, ``"hf32"``, ``"tf32"``.

    0.0 for integer and boolean dtypes (exact arithmetic).

    Raises:
        ValueError: the name is no dtype this module knows (the message lists the known ones).
    """
    name = _canonical(dtype)
    if name in _U:
        return _U[name]
    if name.startswith(_INTEGER):
        return 0.0
    if name.startswith("complex"):
        return _U["float64" if name.endswith("128") else "float32"]
    raise ValueError(f"unit_roundoff: unknown dtype {dtype!r}; pass one of {', '.join(sorted(_U))} "
                     "(torch./numpy spellings and bf16/fp16/fp32 accepted) or an integer dtype")


def _compute_u(dtype: Any) -> float:
    """u of the arithmetic a correct kernel uses for this output dtype (float32 for anything narrower)."""
    u = unit_roundoff(dtype)
    return u if u == 0.0 or u <= _U["float32"] else _U["float32"]


# --- data ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Expected:
    """The error a correct kernel makes on one output, against the exact result.

    Attributes:
        max_abs: bound on the tensor's max-abs error (at least 99% of correct kernels stay under it).
        mean_abs: the typical mean-abs error over the tensor's elements.
        compute_mean_abs: the part of ``mean_abs`` from the computation itself (all but the final rounding).
        scale: the output's largest magnitude the figures refer to (``max_abs / scale`` is relative).
        reduction_length: the ``n`` used (1 for element-wise).
        unit_roundoff: ``u`` of the output dtype.
        family: the model used (:func:`op_family`).
        basis: how the figures were obtained, one short line.
        measured: True when a measurement (another correct path) raised the analytic figures.
    """

    max_abs: float
    mean_abs: float
    compute_mean_abs: float
    scale: float
    reduction_length: int
    unit_roundoff: float
    family: str
    basis: str
    measured: bool = False

    @property
    def relative(self) -> float:
        """``max_abs`` relative to the output's largest magnitude (0 for an all-zero output)."""
        return self.max_abs / self.scale if self.scale else 0.0

    def pair(self) -> Expected:
        """The figures for the difference of two correct runs of the call in the same dtype.

        Max: both errors at their bounds, opposite signs (``2 max_abs``, one ulp where the final rounding
        dominates). Mean: the final rounding cancels on average (two values a distance ``d`` apart before
        rounding land ``d`` apart on average after it), so ``sqrt(2)`` times the computation's own error.
        """
        return replace(self, max_abs=2.0 * self.max_abs, mean_abs=math.sqrt(2.0) * self.compute_mean_abs,
                       compute_mean_abs=math.sqrt(2.0) * self.compute_mean_abs,
                       basis=self.basis + "; two correct runs")


def _sum_variance(u: float, n: int, q: float, s: float, order: str) -> float:
    """Variance of the rounding error of a sum of ``n`` terms with total square ``q`` and result ``s``.

    ``order``: ``"sequential"`` (one accumulator from the first term to the last), ``"tree"``
    (blocks of :data:`REDUCTION_BLOCK`, then a tree: torch's sum and mean),
    ``"lanes"`` (:data:`VECTOR_LANES` accumulators running over the whole length: the one-pass reductions of
    norms and softmax denominators), ``"blocks"`` (the inner dimension of a GEMM in blocks of
    :data:`GEMM_BLOCK`, block sums accumulated in order)."""
    if n <= 1:
        return 0.0
    v = max(q / n - (s / n) ** 2, 0.0)          # the terms' variance and squared mean, per term
    m2 = (s / n) ** 2
    if order == "sequential":
        partial = n * n * v / 2.0 + m2 * n ** 3 / 3.0
    elif order == "lanes":
        run = max(1.0, n / VECTOR_LANES)
        partial = n * run * v / 2.0 + n * run * run * m2 / 3.0
    elif n <= (REDUCTION_BLOCK if order == "tree" else GEMM_BLOCK):
        partial = n * n * v / 2.0 + m2 * n ** 3 / 3.0
    elif order == "tree":
        block = REDUCTION_BLOCK
        partial = n * v * (block / 2.0 + math.log2(n / block)) + m2 * n * (block * block / 3.0 + 2.0 * n)
    else:
        block = GEMM_BLOCK
        partial = n * v * block / 2.0 + m2 * n * block * block / 3.0 + (v * n * n / 2.0 + m2 * n ** 3 / 3.0) / block
    return u * u / 3.0 * (partial + q)


def _positive_sum_rel(u: float, n: int) -> float:
    """Relative standard deviation of the error of a one-pass sum of ``n`` same-sign terms (lanes order)."""
    return math.sqrt(_sum_variance(u, n, 2.0 * n, float(n), "lanes")) / n


def _lam(numel: int) -> float:
    return math.sqrt(2.0 * math.log(2.0 * max(1, numel))) + LAMBDA_MARGIN


def _operands(api: str, fam: str, profiles: list, direction: str, index: int, grad: Profile | None) -> tuple:
    """The two factors of each summed term (a profile each; None: the term is the input itself)."""
    if not profiles:
        return None, None
    if direction == "backward" and grad is not None:
        if fam == GEMM and len(profiles) > 1:
            ops = profiles[1:3] if api in OPERANDS_FROM_1 and len(profiles) > 2 else profiles[:2]
            k = index - (1 if api in OPERANDS_FROM_1 else 0)
            other = ops[1] if k == 0 else ops[0]
            return grad, other
        return grad, None
    if fam == GEMM and len(profiles) > 1:
        ops = profiles[1:3] if api in OPERANDS_FROM_1 and len(profiles) > 2 else profiles[:2]
        return ops[0], ops[1]
    return profiles[0], None


def _norm_backward(api: str, u_out: float, index: int, profiles: list, grad: Profile, out: Profile,
                   n: int) -> tuple:
    """(sigma max, sigma typical, extra max, extra mean) a norm's backward adds in the output dtype.

    Input gradient: ``w/sigma (g - mean g - xhat mean(g xhat))``, terms the size of ``g w / sigma`` that
    cancel, each rounded in the dtype: ``NORM_ULPS u_out max|g| max|w| / sigma``. Weight and bias gradients:
    sums over the rows that CPU kernels accumulate in the dtype itself, one row after the other (torch's
    bf16 layer_norm backward: a mean error of 0.2 sqrt(n) u sqrt(Q)), so a sequential sum in ``u_out``."""
    x = profiles[0]
    spread = x.rms if api in ("rms_norm", "npu_rms_norm") else math.sqrt(max(x.rms ** 2 - x.mean ** 2, 0.0))
    if index == 0:
        weight = profiles[1].max_abs if len(profiles) > 1 else 1.0
        scale = weight / spread if spread else 0.0
        return 0.0, 0.0, NORM_ULPS * u_out * grad.max_abs * scale, NORM_ULPS * u_out * grad.mean_abs * scale / 2.0
    q = n * grad.rms ** 2
    return (math.sqrt(_sum_variance(u_out, n, q, out.max_abs, "sequential")),
            math.sqrt(_sum_variance(u_out, n, q, out.rms, "sequential")), 0.0, 0.0)


def _model(api_name: str, dtype: Any, profiles: list, out: Profile, n: int, *, direction: str, index: int,
           grad: Profile | None, input_dtype: Any, input_rel_error: float, source: str) -> Expected:
    api = base_name(api_name)
    fam = op_family(api)
    u_out = unit_roundoff(dtype)
    u_acc = _compute_u(dtype)
    family = fam if direction == "forward" else (fam if fam in (GEMM, REDUCTION) else f"{fam} backward")
    if u_out == 0.0:
        return Expected(0.0, 0.0, 0.0, out.max_abs, n, 0.0, family, f"{_canonical(dtype)}: exact arithmetic")
    eps_in = max(float(input_rel_error or 0.0), unit_roundoff(input_dtype) if input_dtype is not None else 0.0)
    first, second = _operands(api, fam, profiles, direction, index, grad)
    summed = fam in (GEMM, REDUCTION) or (direction == "backward" and n > 1)
    order = ""
    lam = _lam(out.numel)
    ulps, rel_in = ELEMENTWISE_ULPS, 1.0
    sigma_max = sigma_typ = in_max = in_typ = 0.0
    extra_max = extra_mean = 0.0
    eps_in_done = False
    relative_sigma = False
    same_in_both = 0.0
    if summed:
        term_ms = (first.rms ** 2 if first is not None else out.rms ** 2 / max(1, n)) * (
            second.rms ** 2 if second is not None else 1.0)
        q = n * term_ms
        s_max, s_typ = out.max_abs, out.rms
        is_mean = api in MEANS and direction == "forward"
        if is_mean:
            s_max, s_typ = s_max * n, s_typ * n                    # the sum before the division by n
        order = "blocks" if fam == GEMM else ("lanes" if api in LANE_REDUCTIONS else "tree")
        sigma_max = math.sqrt(_sum_variance(u_acc, n, q, s_max, order))
        sigma_typ = math.sqrt(_sum_variance(u_acc, n, q, s_typ, order))
        if is_mean:
            sigma_max, sigma_typ = sigma_max / n, sigma_typ / n
        if api in ("norm", "vector_norm", "frobenius_norm", "std") and direction == "forward":
            # sqrt of a sum of squares: half the relative error of a same-sign sum (x^4 ~ 3 ms^2 per term)
            rel = math.sqrt(_sum_variance(u_acc, n, 3.0 * n, float(n), "lanes")) / n / 2.0
            sigma_max, sigma_typ = rel * out.max_abs, rel * out.rms
            ulps = 2.0
        if eps_in:
            in_sigma = eps_in * math.sqrt((2.0 if second is not None else 1.0) * q / 3.0) / (n if is_mean else 1)
            in_max, in_typ = in_sigma, in_sigma
        if fam == GEMM and api.startswith(("baddbmm", "addmm", "addbmm", "addmv")):
            ulps = 2.0
    else:
        if fam == TRANSCENDENTAL:
            ulps = TRANSCENDENTAL_ULPS
            if api in EXP_LIKE and profiles:
                rel_in = max(1.0, profiles[0].max_abs)
        elif fam == SOFTMAX:
            ulps = SOFTMAX_ULPS
            sigma_max = sigma_typ = _positive_sum_rel(u_acc, n)      # the denominator, relative; scaled below
            relative_sigma = True
            x_max = profiles[0].max_abs if profiles else 1.0
            rel_in = max(1.0, x_max)                                # dy = y (dx - sum y dx)
            if api in ("log_softmax", "_log_softmax", "cross_entropy") and profiles:
                extra_max = ulps * u_acc * x_max                     # y = x - max - log(sum): absolute
                extra_mean = extra_max / 2.0
                rel_in = 2.0 * max(1.0, x_max / max(out.max_abs, 1e-30))
        elif fam == NORM:
            ulps = NORM_ULPS
            if profiles and profiles[0].rms:
                x = profiles[0]
                spread = x.rms if api in ("rms_norm", "npu_rms_norm") else math.sqrt(max(x.rms ** 2 - x.mean ** 2,
                                                                                          0.0))
                cancel = abs(x.mean) / spread if spread and api not in ("rms_norm", "npu_rms_norm") else 0.0
                ulps += 2.0 * cancel
                # dy = w (dx - mean dx - xhat mean(xhat dx)) / sigma: up to 3 eps max|x| / sigma times max|w|
                weight = profiles[1].max_abs if len(profiles) > 1 else 1.0
                if eps_in and spread:
                    extra_max += 3.0 * eps_in * x.max_abs / spread * weight
                    extra_mean += eps_in * x.mean_abs / spread * weight
                    eps_in_done = True
        elif fam == ATTENTION:
            ulps = NORM_ULPS
            # probabilities rounded to the dtype before the second product: part of one run's error, but
            # two runs of one attention kernel round the same probabilities, so not of their difference
            extra_max = 2.0 * u_out * out.max_abs
            same_in_both = u_out * out.mean_abs
        if eps_in and not eps_in_done:
            extra_max += rel_in * eps_in * out.max_abs
            extra_mean += rel_in * eps_in * out.mean_abs / 2.0
    if relative_sigma:
        sigma_max, sigma_typ = sigma_max * out.max_abs, sigma_typ * out.rms
    if fam == NORM and direction == "backward" and grad is not None and profiles:
        more = _norm_backward(api, u_out, index, profiles, grad, out, n)
        sigma_max, sigma_typ = math.hypot(sigma_max, more[0]), math.hypot(sigma_typ, more[1])
        extra_max, extra_mean = extra_max + more[2], extra_mean + more[3]
    tiny = _TINY.get(_canonical(dtype), 0.0)
    rounding_max = u_out * out.max_abs + tiny / 2.0
    rounding_mean = u_out * out.mean_abs / 2.0 + tiny / 4.0
    compute_max = ulps * u_acc * out.max_abs + extra_max + lam * math.hypot(sigma_max, in_max)
    compute_mean = (ulps * u_acc * out.mean_abs / 2.0 + extra_mean
                    + math.sqrt(2.0 / math.pi) * math.hypot(sigma_typ, in_typ))
    order = {"blocks": f"blocks of {GEMM_BLOCK} in order", "lanes": f"{VECTOR_LANES} accumulators",
             "tree": f"blocks of {REDUCTION_BLOCK}, tree"}.get(order, "")
    basis = (f"analytic: {family}, {_canonical(dtype)} (u={u_out:.3g}), n={n}"
             + (f", {order} sum" if summed and n > 1 else "")
             + (f", inputs off by {eps_in:.3g}" if eps_in else "") + f", from {source}")
    return Expected(rounding_max + compute_max, rounding_mean + same_in_both + compute_mean, compute_mean,
                    out.max_abs, n, u_out, family, basis)


def expected_error(api_name: str, dtype: Any, inputs: Sequence, output: Any, *,
                   kwargs: Mapping | None = None, reduction_length: int | None = None,
                   direction: str = "forward", index: int = 0, grad_output: Any = None,
                   input_dtype: Any = None, input_rel_error: float = 0.0, cache: dict | None = None) -> Expected:
    """The expected error of one output of a call, from full tensors (numpy arrays, bf16 as float32, or torch
    tensors, bfloat16 and float16 read as their bits: an input is measured only where the model needs its
    magnitudes).

    Args:
        api_name: base or dump name of the API (``linear``, ``Functional.conv2d.0``).
        dtype: the output's dtype as the kernel produced it (``torch.bfloat16``, ``"float32"``, ...).
        inputs: the call's tensor arguments in order (positional then keyword); non-arrays are skipped.
        output: this output (for ``direction="backward"``: the gradient of input ``index``), or its magnitudes
            measured already (a :class:`Profile`, e.g. from the metric pass: :func:`from_pass`).
        kwargs: non-tensor arguments by name (``dim``, ``normalized_shape``...), for the reduction length.
        reduction_length: overrides :func:`reduction_length`.
        direction, index, grad_output: a gradient row: which input's gradient, and the output gradient fed.
        input_dtype: the inputs were rounded to this dtype on one side only (``"hf32"``).
        input_rel_error: the inputs already differ by this relative error (e.g. between two runs).
        cache: one dict passed for every output of the same call: the magnitudes of its inputs (and output
            gradient) are measured once (keyed by the arrays' identity; keep the arrays alive meanwhile).
    """
    memo = cache if cache is not None else {}
    arrays = [a for a in inputs if isinstance(a, np.ndarray) or (hasattr(a, "shape") and hasattr(a, "dtype")
                                                                    and not isinstance(a, (str, bytes)))]
    out = output if isinstance(output, Profile) else profile_array(output)
    grad = LazyProfile(grad_output, memo) if grad_output is not None else None
    n = reduction_length if reduction_length is not None else _length(
        api_name, [a.shape for a in arrays], kwargs, output_shape=out.shape, direction=direction, index=index,
        grad_shape=grad.shape if grad is not None else None)
    return _model(api_name, dtype, [LazyProfile(a, memo) for a in arrays], out, int(n), direction=direction,
                  index=index, grad=grad, input_dtype=input_dtype, input_rel_error=input_rel_error,
                  source="tensors")


def expected_error_from_stats(api_name: str, dtype: Any, input_stats: Sequence, output_stat: Any, *,
                              kwargs: Mapping | None = None, reduction_length: int | None = None,
                              direction: str = "forward", index: int = 0, grad_output_stat: Any = None,
                              input_dtype: Any = None, input_rel_error: float = 0.0) -> Expected:
    """The expected error of one output from dump statistics (:class:`TensorStat` or dump.json entries).

    The magnitudes come from Norm (root mean square), Max and Min; the reduction length from the shapes.
    Arguments as :func:`expected_error`.
    """
    stats = [s if isinstance(s, TensorStat) else TensorStat.from_dump(s) for s in input_stats
             if isinstance(s, (TensorStat, Mapping))]
    out_stat = output_stat if isinstance(output_stat, TensorStat) else TensorStat.from_dump(output_stat)
    grad_stat = None
    if grad_output_stat is not None:
        grad_stat = (grad_output_stat if isinstance(grad_output_stat, TensorStat)
                     else TensorStat.from_dump(grad_output_stat))
    n = reduction_length if reduction_length is not None else _length(
        api_name, [s.shape for s in stats], kwargs, output_shape=out_stat.shape, direction=direction,
        index=index, grad_shape=grad_stat.shape if grad_stat is not None else None)
    return _model(api_name, dtype, [profile_stat(s) for s in stats], profile_stat(out_stat), int(n),
                  direction=direction, index=index, grad=profile_stat(grad_stat) if grad_stat else None,
                  input_dtype=input_dtype, input_rel_error=input_rel_error, source="statistics")


def with_measurement(expected: Expected, observed: Observed, what: str) -> Expected:
    """``expected`` raised to what another correct path was measured to differ by (``what`` names the path)."""
    if observed.max_abs <= expected.max_abs and observed.mean_abs <= expected.mean_abs:
        return expected
    rounding_mean = expected.mean_abs - expected.compute_mean_abs
    extra = max(0.0, observed.mean_abs - rounding_mean)
    return replace(expected, max_abs=max(expected.max_abs, observed.max_abs),
                   mean_abs=max(expected.mean_abs, observed.mean_abs),
                   compute_mean_abs=max(expected.compute_mean_abs, extra),
                   basis=f"{expected.basis}; measured: {what}", measured=True)


def multiple(observed_abs_error: float | Observed, expected: Expected, *,
             observed_mean_abs: float | None = None) -> float:
    """An observed error as a multiple of the expected one: the larger of max-abs / ``expected.max_abs`` and
    (when given) mean-abs / ``expected.mean_abs``. 0 for no error; inf for an error where none is expected
    (exact arithmetic) or a non-finite one."""
    if isinstance(observed_abs_error, Observed):
        observed_mean_abs = observed_abs_error.mean_abs
        observed_abs_error = observed_abs_error.max_abs
    ratios = [_ratio(float(observed_abs_error), expected.max_abs)]
    if observed_mean_abs is not None:
        ratios.append(_ratio(float(observed_mean_abs), expected.mean_abs))
    return max(ratios)


def _ratio(observed: float, expected: float) -> float:
    if observed != observed or observed == math.inf:
        return math.inf
    if observed <= 0.0:
        return 0.0
    return observed / expected if expected > 0.0 else math.inf


def classify(value: float) -> str:
    """``exact`` (0), ``within rounding`` (up to :data:`WITHIN`) or ``beyond rounding``."""
    if value == 0.0:
        return EXACT
    return WITHIN_ROUNDING if value <= WITHIN else BEYOND_ROUNDING
