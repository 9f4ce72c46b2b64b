"""Per-output metrics of the precision standard (spec precision-standard.md section 2), numpy only.

Every metric is a pure function of the prepared bench array ``B`` and device array ``D`` (section 1.7).
The work is done by :func:`float_metrics`, which walks both arrays in chunks of ``CHUNK`` elements and
accumulates counts, sums and maxima, so a 1e8-element output never needs a full-size float64 copy.
Cosine similarity needs the maxima first, so it takes a second pass. Each metric is computed in the
numeric type the spec prescribes and returns the same scalar type msprobe writes (section 6.3): float32
results stay ``np.float32``, float64 results are ``np.float64`` or Python ``float``, "no data" results
are the integer ``0``.

Inputs may be numpy arrays (any shape; they are flattened) or any object with ``dtype`` (a numpy
dtype), ``size`` and ``read(start, stop) -> np.ndarray`` returning a 1-D slice in that dtype (the
compare layer uses this to convert bfloat16 torch tensors chunk by chunk).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .standards import (
    BF16,
    BF16_MAX,
    COSINE_PASS,
    COSINE_ZERO_EPS,
    FP16,
    FP32,
    HUNDRED_T,
    TEN_THOUSAND_T,
    THOUSAND_T,
    AbsoluteThreshold,
    SmallValue,
    UlpParams,
)

CHUNK = 1 << 20

RATIO_THRESHOLDS = {"hundred_ratio": HUNDRED_T, "thousand_ratio": THOUSAND_T, "ten_thousand_ratio": TEN_THOUSAND_T}

# finite range of the device array type used by the inf/nan error rate (2.6)
_FINITE_MAX = {FP16: 65504.0, FP32: float(np.finfo(np.float32).max), BF16: BF16_MAX}

MSG_SCALAR = "All the data in device dump data is scalar. Please refer to other compare algorithms."
MSG_BOTH_ZERO = "All the data in device and bench outputs are zero."
MSG_DEVICE_ZERO = "All the data is zero in device dump data."
MSG_BENCH_ZERO = "All the data is zero in bench dump data."
MSG_COS_NAN = "Dump data has NaN when comparing with Cosine Similarity."
MSG_EMPTY_MAX = "zero-size array to reduction operation maximum which has no identity"


# --------------------------------------------------------------------------------------------------
# sources
class ArraySource:
    """A numpy array seen as a flat chunk source (a view when the array is contiguous)."""

    def __init__(self, array: Any) -> None:
        self.array = np.asarray(array).reshape(-1)
        self.dtype = self.array.dtype
        self.size = int(self.array.size)

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.array[start:stop]


def as_source(x: Any) -> Any:
    """Wrap a numpy array (or anything array-like) as a chunk source; pass sources through."""
    if hasattr(x, "read") and hasattr(x, "size") and hasattr(x, "dtype"):
        return x
    return ArraySource(x)


def relative_eps(bench_dtype: Any, device_dtype: str) -> float:
    """The epsilon of the relative errors (1.7): 2^-8 for a bf16 device output, else the bench's eps."""
    if device_dtype == BF16:
        return 2.0 ** -8
    return float(np.finfo(np.dtype(bench_dtype)).eps)


# --------------------------------------------------------------------------------------------------
class CosineResult(NamedTuple):
    """Cosine cell value (None = blank), whether the cosine step passed, and its message fragment."""
    value: Any
    passed: bool
    message: str


@dataclass
class MetricSet:
    """Result of :func:`float_metrics`: cell values keyed by DETAIL_METRIC_FIELDS names, plus side facts."""
    n: int
    values: dict = field(default_factory=dict)
    cosine: CosineResult | None = None
    nonfinite_mismatch: int = 0       # non-finite positions where bench and device disagree
    nonfinite_agreed: int = 0         # non-finite positions where they agree (counted as equal)


@dataclass
class _Acc:
    max_d: float = 0.0
    max_b: float = 0.0
    max_ae: Any = None
    below: dict = field(default_factory=lambda: dict.fromkeys(RATIO_THRESHOLDS, 0))
    binary_diff: int = 0
    sv_count: int = 0
    sv_err: int = 0
    sq_sum: float = 0.0
    masked: int = 0
    eb_pos: int = 0
    eb_neg: int = 0
    re_max: Any = None
    re_sum: float = 0.0
    re_count: int = 0
    inf_count: int = 0
    inf_bad: int = 0
    abs_sv_count: int = 0
    abs_sv_err: int = 0
    normal_count: int = 0
    normal_err: int = 0
    ulp_max: Any = None
    ulp_sum: float = 0.0
    ulp_above: int = 0
    mismatch: int = 0
    agreed: int = 0


def _nanmax_merge(old: Any, new: Any) -> Any:
    """Running maximum that propagates NaN, as numpy's max does."""
    if old is None:
        return new
    if np.isnan(old) or np.isnan(new):
        return old if np.isnan(old) else new
    return max(old, new)


def _agreement(dc: np.ndarray, bc: np.ndarray, ae: np.ndarray, device_type: np.dtype):
    """Indices of non-finite positions where bench (cast to the device type) and device agree / disagree."""
    bad = np.flatnonzero(~np.isfinite(ae))
    if bad.size == 0:
        return bad, bad
    d_i = dc[bad]
    with np.errstate(over="ignore", invalid="ignore"):
        b_i = bc[bad].astype(device_type)
    agree = (np.isnan(d_i) & np.isnan(b_i)) | (d_i == b_i)
    return bad[agree], bad[~agree]


def float_metrics(bench: Any, device: Any, *, device_dtype: str, eps: float | None = None,
                  legacy: bool = True, binary: bool = False, small_value: SmallValue | None = None,
                  absolute: AbsoluteThreshold | None = None, ulp: UlpParams | None = None,
                  agree_nonfinite: bool = True, absolute_class_match: bool = True,
                  chunk: int | None = None) -> MetricSet:
    """Compute the requested metric groups of two prepared float arrays in one chunked pass.

    Args:
        bench, device: prepared arrays (1.7) or chunk sources, same element count.
        device_dtype: the device output's torch dtype string (keys the tables, picks bf16 eps).
        eps: relative-error epsilon; default :func:`relative_eps`.
        legacy: cosine, max abs error and the double-hundred/thousand/ten-thousand ratios (2.1-2.3).
        binary: binary consistency error rate (2.4).
        small_value: benchmark metrics (2.5) with these thresholds.
        absolute: absolute-threshold metrics (2.6) with these thresholds.
        ulp: ULP metrics (2.7) with these parameters.
        agree_nonfinite: non-finite positions where both sides agree count as equal in the legacy
            metrics and the binary rate (fix of msprobe defect 9 #6); False gives msprobe 1.0.4.
        absolute_class_match: a bench +-inf needs the same device inf in the inf/nan error rate
            (fix of 9 #19); False gives msprobe's clip rule.
        chunk: elements per chunk (default: the module's ``CHUNK``).

    Returns:
        MetricSet whose ``values`` hold the computed cells by DETAIL_METRIC_FIELDS name.
    """
    chunk = chunk or CHUNK
    bs, ds = as_source(bench), as_source(device)
    if bs.size != ds.size:
        raise ValueError(f"bench has {bs.size} elements but device has {ds.size}; compare shapes first")
    n = bs.size
    tb, td = np.dtype(bs.dtype), np.dtype(ds.dtype)
    tae = np.result_type(tb, td)
    if eps is None:
        eps = relative_eps(tb, device_dtype)
    eps_b = tb.type(eps)
    acc = _Acc()
    ratio_t = {k: tae.type(t) for k, t in RATIO_THRESHOLDS.items()}
    need_bp = small_value is not None or absolute is not None
    if small_value is not None:
        sv_b, sv_atol = tb.type(small_value.sv), tae.type(small_value.atol)
    if absolute is not None:
        a_sv, a_atol, a_rtol = tb.type(absolute.sv), tae.type(absolute.atol), tae.type(absolute.rtol)
        hi = _FINITE_MAX.get(device_dtype, float(np.finfo(td).max))
    if ulp is not None:
        tc = np.dtype(ulp.compute)
        ulp_thr = tc.type(ulp.threshold)
    agreed_chunks: dict = {}

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            bc, dc = bs.read(start, stop), ds.read(start, stop)
            ae = np.abs(dc - bc)
            agreed = mismatch = None
            if agree_nonfinite and (legacy or binary):
                agreed, mismatch = _agreement(dc, bc, ae, td)
                acc.agreed += agreed.size
                acc.mismatch += mismatch.size
                if agreed.size:
                    agreed_chunks[start] = agreed
            ab = np.abs(bc)
            abe = ab + eps_b
            re0 = ae / abe
            if legacy:
                dl, bl, ael, rel = dc, bc, ae, re0
                if agreed is not None and agreed.size:
                    dl, bl, ael, rel = dc.copy(), bc.copy(), ae.copy(), re0.copy()
                    dl[agreed] = 0
                    bl[agreed] = 0
                    ael[agreed] = 0
                    rel[agreed] = 0
                if dl.size:
                    acc.max_d = _nanmax_merge(acc.max_d, float(np.max(np.abs(dl))))
                    acc.max_b = _nanmax_merge(acc.max_b, float(np.max(np.abs(bl))))
                    acc.max_ae = _nanmax_merge(acc.max_ae, np.max(ael))
                for k, t in ratio_t.items():
                    acc.below[k] += int(np.count_nonzero(rel < t))
            if binary:
                acc.binary_diff += int(np.count_nonzero(bc != dc))
                if agreed is not None and agreed.size:
                    acc.binary_diff -= int(np.count_nonzero(np.isnan(dc[agreed]) & np.isnan(bc[agreed])))
            if need_bp:
                bp = bc if tb == td else bc.astype(td)
                fin = np.isfinite(dc) & np.isfinite(bp)
            if small_value is not None:
                s = (ab <= sv_b) & fin
                m = ~fin | s
                acc.sv_count += int(np.count_nonzero(s))
                acc.sv_err += int(np.count_nonzero(s & (ae > sv_atol)))
                nm = int(np.count_nonzero(m))
                acc.masked += nm
                z = np.where(m, tae.type(0), ae)
                acc.sq_sum += float(np.sum(z * z))
                delta = dc - bp
                acc.eb_pos += int(np.count_nonzero(delta > 0))
                acc.eb_neg += int(np.count_nonzero(delta < 0))
                if nm < m.size:
                    keep = re0[~m]
                    acc.re_max = _nanmax_merge(acc.re_max, np.max(keep))
                    acc.re_sum += float(np.sum(keep))
                    acc.re_count += keep.size
            if absolute is not None:
                s = (ab <= a_sv) & fin
                normal = fin & ~s
                acc.abs_sv_count += int(np.count_nonzero(s))
                acc.abs_sv_err += int(np.count_nonzero(s & (ae > a_atol)))
                acc.normal_count += int(np.count_nonzero(normal))
                acc.normal_err += int(np.count_nonzero(normal & (re0 > a_rtol)))
                inf_idx = np.flatnonzero(~fin)
                if inf_idx.size:
                    d_i, g_i = dc[inf_idx], bp[inf_idx]
                    gcl = np.clip(g_i, td.type(-hi), td.type(hi))
                    dcl = np.clip(d_i, td.type(-hi), td.type(hi))
                    ok = (np.abs(dcl - gcl) / abe[inf_idx] <= a_rtol) | (np.isnan(d_i) & np.isnan(gcl))
                    if absolute_class_match:
                        ok = np.where(np.isinf(g_i), d_i == g_i, ok)
                    acc.inf_count += inf_idx.size
                    acc.inf_bad += int(np.count_nonzero(~ok))
            if ulp is not None:
                bcc = bc.astype(tc, copy=False)
                ab_c = np.abs(bcc)
                eb = np.where(bcc != 0, np.floor(np.log2(ab_c)), tc.type(0))
                eb = np.maximum(eb, tc.type(ulp.min_eb))
                u = np.abs((dc.astype(tc) - bcc) * _pow2(tc.type(ulp.exponent_num) - eb))
                if u.size:
                    acc.ulp_max = _nanmax_merge(acc.ulp_max, np.max(u))
                acc.ulp_sum += float(np.sum(u))
                acc.ulp_above += int(np.count_nonzero(u > ulp_thr))

    out = MetricSet(n=n, nonfinite_mismatch=acc.mismatch, nonfinite_agreed=acc.agreed)
    v = out.values
    if legacy:
        out.cosine = _cosine_from_pass(bs, ds, n, acc, agreed_chunks, chunk)
        v["cosine"] = out.cosine.value
        v["max_abs_err"] = acc.max_ae if acc.max_ae is not None else None
        for k in RATIO_THRESHOLDS:
            v[k] = acc.below[k] / n if n else 1
    if binary:
        v["binary_error_rate"] = acc.binary_diff / n if n else "Nan"
    if small_value is not None:
        v["small_value_err_ratio"] = acc.sv_err / acc.sv_count if acc.sv_count else 0
        if n:
            mean_sq = acc.sq_sum / n
            v["rmse"] = math.sqrt(mean_sq * (n / (n - acc.masked + 0.0001) + 0.0001))
        else:
            v["rmse"] = float("nan")
        v["error_balance"] = abs(acc.eb_pos - acc.eb_neg) / n if n else 0
        if acc.re_count and not (acc.re_max < 0):
            v["max_rel_err"] = acc.re_max
            v["mean_rel_err"] = tae.type(acc.re_sum / acc.re_count)
        else:
            v["max_rel_err"] = 0
            v["mean_rel_err"] = 0
    if absolute is not None:
        v["inf_nan_error_rate"] = acc.inf_bad / acc.inf_count if acc.inf_count else 0
        v["rel_err_error_rate"] = acc.normal_err / acc.normal_count if acc.normal_count else 0
        v["abs_err_error_rate"] = acc.abs_sv_err / acc.abs_sv_count if acc.abs_sv_count else 0
    if ulp is not None:
        if n:
            v["ulp_max"] = acc.ulp_max
            v["ulp_mean"] = tc.type(acc.ulp_sum / n)
            v["ulp_above_threshold_ratio"] = acc.ulp_above / n
        else:
            v["ulp_max"] = v["ulp_mean"] = v["ulp_above_threshold_ratio"] = 0
    return out


def _cosine_from_pass(bs: Any, ds: Any, n: int, acc: _Acc, agreed_chunks: dict, chunk: int) -> CosineResult:
    """Cosine similarity (2.1) given pass-1 maxima; runs the second pass in the general case."""
    if n == 0:
        raise ValueError(MSG_EMPTY_MAX)
    if n == 1:
        return CosineResult(None, True, MSG_SCALAR)
    d_zero = acc.max_d <= COSINE_ZERO_EPS
    b_zero = acc.max_b <= COSINE_ZERO_EPS
    if d_zero and b_zero:
        return CosineResult(None, True, MSG_BOTH_ZERO)
    if d_zero:
        return CosineResult(None, False, MSG_DEVICE_ZERO)
    if b_zero:
        return CosineResult(None, False, MSG_BENCH_ZERO)
    md, mb = np.float64(acc.max_d), np.float64(acc.max_b)
    dot = sdd = sbb = 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            d64 = ds.read(start, stop).astype(np.float64) / md
            b64 = bs.read(start, stop).astype(np.float64) / mb
            agreed = agreed_chunks.get(start)
            if agreed is not None:
                d64[agreed] = 0.0
                b64[agreed] = 0.0
            dot += float(np.dot(d64, b64))
            sdd += float(np.dot(d64, d64))
            sbb += float(np.dot(b64, b64))
        cos = np.float64(dot) / (np.sqrt(np.float64(sdd)) * np.sqrt(np.float64(sbb)))
    if np.isnan(cos):
        return CosineResult(float("nan"), False, MSG_COS_NAN)
    cos = float(min(1.0, max(-1.0, cos)))
    return CosineResult(cos, cos > COSINE_PASS, "")


# --------------------------------------------------------------------------------------------------
# one function per metric (thin wrappers over float_metrics, for callers that want one number)
def _eps_for(bench: Any, device_dtype: str, eps: float | None) -> float:
    return eps if eps is not None else relative_eps(as_source(bench).dtype, device_dtype)


def _dtype_str(device: Any, device_dtype: str | None) -> str:
    if device_dtype is not None:
        return device_dtype
    name = np.dtype(as_source(device).dtype).name
    return {"float16": FP16, "float32": FP32, "float64": "torch.float64"}.get(name, name)


def cosine_similarity(bench: Any, device: Any, *, agree_nonfinite: bool = False) -> CosineResult:
    """Cosine similarity with msprobe's special cases (2.1). Lengths differ -> value -1, fails."""
    bs, ds = as_source(bench), as_source(device)
    if bs.size != ds.size:
        return CosineResult(-1, False, "Shape of device and bench outputs don't match. "
                            f"device: {np.shape(device)}, bench: {np.shape(bench)}.")
    return float_metrics(bs, ds, device_dtype=_dtype_str(ds, None),
                         agree_nonfinite=agree_nonfinite).cosine


def cosine(bench: Any, device: Any) -> float:
    """Plain cosine similarity as a Python float (1.0 for two all-zero or one-element outputs,
    NaN when an all-zero side or inf/nan makes it undefined)."""
    res = cosine_similarity(bench, device)
    if res.value is None:
        return 1.0 if res.passed else float("nan")
    return float(res.value)


def max_abs_error(bench: Any, device: Any) -> float:
    """max |D - B| as a Python float (NaN propagates; 0.0 for empty arrays)."""
    bs, ds = as_source(bench), as_source(device)
    best: Any = None
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, bs.size, CHUNK):
            stop = min(start + CHUNK, bs.size)
            ae = np.abs(ds.read(start, stop) - bs.read(start, stop))
            best = _nanmax_merge(best, np.max(ae))
    return 0.0 if best is None else float(best)


def max_abs(bench: Any, device: Any) -> Any:
    """Max abs error cell (2.2) in the error's own type (np.float32 / np.float64)."""
    ds = as_source(device)
    return float_metrics(bench, ds, device_dtype=_dtype_str(ds, None), agree_nonfinite=False).values[
        "max_abs_err"]


def error_ratios(bench: Any, device: Any, *, device_dtype: str | None = None,
                 eps: float | None = None) -> dict:
    """Double-hundred / double-thousand / double-ten-thousand ratios (2.3), keyed by field name."""
    dt = _dtype_str(device, device_dtype)
    ms = float_metrics(bench, device, device_dtype=dt, eps=_eps_for(bench, dt, eps), agree_nonfinite=False)
    return {k: ms.values[k] for k in RATIO_THRESHOLDS}


def binary_error_rate(bench: Any, device: Any, *, agree_nonfinite: bool = False) -> Any:
    """count(B != D) / N (2.4); the string "Nan" for empty outputs. Works for every dtype."""
    bs, ds = as_source(bench), as_source(device)
    n = bs.size
    if n == 0:
        return "Nan"
    diff = 0
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        bc, dc = bs.read(start, stop), ds.read(start, stop)
        ne = bc != dc
        if agree_nonfinite and bc.dtype.kind == "f" and dc.dtype.kind == "f":
            ne &= ~(np.isnan(bc) & np.isnan(dc))
        diff += int(np.count_nonzero(ne))
    return diff / n


def benchmark_metrics(bench: Any, device: Any, *, small_value: SmallValue, device_dtype: str | None = None,
                      eps: float | None = None) -> dict:
    """Benchmark-standard cells (2.5): small_value_err_ratio, rmse, error_balance, max/mean_rel_err."""
    dt = _dtype_str(device, device_dtype)
    return float_metrics(bench, device, device_dtype=dt, eps=_eps_for(bench, dt, eps), legacy=False,
                         small_value=small_value).values


def absolute_metrics(bench: Any, device: Any, *, threshold: AbsoluteThreshold,
                     device_dtype: str | None = None, eps: float | None = None,
                     class_match: bool = True) -> dict:
    """Absolute-threshold cells (2.6): inf_nan_error_rate, rel_err_error_rate, abs_err_error_rate."""
    dt = _dtype_str(device, device_dtype)
    return float_metrics(bench, device, device_dtype=dt, eps=_eps_for(bench, dt, eps), legacy=False,
                         absolute=threshold, absolute_class_match=class_match).values


def ulp_metrics(bench: Any, device: Any, *, params: UlpParams, device_dtype: str | None = None) -> dict:
    """ULP cells (2.7): ulp_max, ulp_mean, ulp_above_threshold_ratio."""
    dt = _dtype_str(device, device_dtype)
    return float_metrics(bench, device, device_dtype=dt, legacy=False, ulp=params).values


def ulp_errors(bench: np.ndarray, device: np.ndarray, params: UlpParams) -> np.ndarray:
    """Element-wise ULP error (2.7) of small arrays: |(D - B) * 2^(exponent_num - eb)| in the compute type."""
    tc = np.dtype(params.compute)
    b = np.asarray(bench).astype(tc)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eb = np.where(b != 0, np.floor(np.log2(np.abs(b))), tc.type(0))
        eb = np.maximum(eb, tc.type(params.min_eb))
        return np.abs((np.asarray(device).astype(tc) - b) * _pow2(tc.type(params.exponent_num) - eb))


def _pow2(k: np.ndarray) -> np.ndarray:
    """Exact 2**k for integral k (numpy's vectorised exp2 may be off in the last bit); inf/nan pass through."""
    one = k.dtype.type(1)
    fin = np.isfinite(k)
    if fin.all():
        return np.ldexp(one, k.astype(np.int32))
    out = np.exp2(k)
    out[fin] = np.ldexp(one, k[fin].astype(np.int32))
    return out
