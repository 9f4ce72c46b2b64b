"""The one metric pass of the precision standard (spec precision-standard.md section 2), shared by the checker
(``pytest_msprobe.precision``) and online dispatch.

:func:`run` walks the prepared bench and device arrays in chunks of at most ``chunk`` elements; each chunk is
read by the compiled kernel (:func:`dumpers.metrics_kernel.chunk_pass`), which returns the counts and maxima
and the chunk's sums (of the masked squares, the kept relative errors, the ULP errors, the cosine's dot
products) as numpy makes them of the chunk's arrays (``np.sum``, ``np.einsum``: :mod:`dumpers.metrics_sums`),
bit for bit; the chunks' sums are added in order. Every sum is numpy's of the same arrays, in numpy's order
(but for the :class:`Figures` of the Error / Expected column, which the kernel sums within a stated bound). Results
keep the scalar types msprobe writes: float32 results stay ``np.float32``, float64 ones ``np.float64`` or
Python ``float``, "no data" results the integer ``0``.

Inputs are numpy arrays or chunk sources: objects with ``dtype`` (a numpy dtype), ``size`` and
``read(start, stop)`` returning a 1-D array, or ``read_bits(start, stop)`` returning the chunk of a float32
source held as bfloat16 as its int16 bits (the kernel widens them itself: no converted copy). The checker
hands the engine's own sources (:class:`ArraySource` over a tensor's numpy view, :class:`Bf16BitsSource`
over a bfloat16 tensor's bits), so the pass never calls back into its caller.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import numpy as np

from dumpers import metrics_kernel as K

CHUNK = 1 << 16
COSINE_ZERO_EPS = float(np.finfo(np.float64).eps)

MSG_SCALAR = "All the data in device dump data is scalar. Please refer to other compare algorithms."
MSG_BOTH_ZERO = "All the data in device and bench outputs are zero."
MSG_DEVICE_ZERO = "All the data is zero in device dump data."
MSG_BENCH_ZERO = "All the data is zero in bench dump data."
MSG_COS_NAN = "Dump data has NaN when comparing with Cosine Similarity."
MSG_EMPTY_MAX = "zero-size array to reduction operation maximum which has no identity"

_FLOATS = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
_ULP_TYPES = (np.dtype(np.float64), np.dtype(np.float32))
# unscaled float64 sums of squares are safe for maxima in this range (n <= 2^63 elements)
_SAFE_LO, _SAFE_HI = 1e-130, 1e130


class ArraySource:
    """A numpy array seen as a flat chunk source (a view when the array is contiguous), read as ``dtype`` (its
    own by default): a wider type is converted chunk by chunk as the pass reads it, never as a whole copy."""

    def __init__(self, array: Any, dtype: Any = None) -> None:
        self.array = np.asarray(array).reshape(-1)
        self.dtype = self.array.dtype if dtype is None else np.dtype(dtype)
        self.size = int(self.array.size)

    def read(self, start: int, stop: int) -> np.ndarray:
        chunk = self.array[start:stop]
        return chunk if chunk.dtype == self.dtype else chunk.astype(self.dtype)


class Bf16BitsSource:
    """float32 values that are bfloat16 values, held as their int16 bits (a bfloat16 tensor's
    ``view(torch.int16)``, zero-copy, or the high halves of a float32 array): the kernel reads the bits
    (``read_bits``) and widens them itself, so no float32 copy is made."""

    def __init__(self, array: Any = None, *, bits: Any = None) -> None:
        if bits is None:
            values = np.asarray(array, np.float32).reshape(-1)
            bits = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
        self.bits = np.asarray(bits).reshape(-1)
        if self.bits.dtype != np.int16:
            raise TypeError(f"bfloat16 bits are int16, not {self.bits.dtype.name}")
        self.dtype = np.dtype(np.float32)
        self.size = int(self.bits.size)

    def read_bits(self, start: int, stop: int) -> np.ndarray:
        return self.bits[start:stop]

    def read(self, start: int, stop: int) -> np.ndarray:
        return (self.bits[start:stop].astype(np.int32) << 16).view(np.float32)


def as_source(x: Any) -> Any:
    """Wrap a numpy array (or anything array-like) as a chunk source; pass sources through."""
    if hasattr(x, "read") and hasattr(x, "size") and hasattr(x, "dtype"):
        return x
    return ArraySource(x)


class CosineResult(NamedTuple):
    """Cosine cell value (None = blank), whether the cosine step passed, and its message fragment."""
    value: Any
    passed: bool
    message: str


class Figures(NamedTuple):
    """What the Error / Expected column reads of one output, measured by the pass (``Groups.figures``): the
    device's magnitudes over its finite elements and the observed error ``|device - bench|`` in float64 (the
    sums in the pass's order, within the bound of :func:`dumpers.metrics_kernel._figures` of the reference
    figures: ``observe`` and the tensor magnitudes of ``pytest_msprobe.precision.expected_error_facts``)."""
    n: int                      # elements (the finite and the others)
    sq_sum: float               # sum of d**2 over the finite d
    abs_sum: float              # sum of |d|
    value_sum: float            # sum of d
    max_abs: float              # max |d| (0.0 when none is finite)
    err_max: float              # max |d - b| where both are finite (0.0 when none)
    err_sum: float              # sum of |d - b| there
    err_mismatched: int         # non-finite positions other than both NaN or both the same infinity


@dataclass
class MetricSet:
    """Result of :func:`run`: cell values keyed by the details-row field names, plus side facts."""
    n: int
    values: dict = field(default_factory=dict)
    cosine: Optional[CosineResult] = None
    nonfinite_mismatch: int = 0       # non-finite positions where bench and device disagree
    nonfinite_agreed: int = 0         # non-finite positions where they agree (counted as equal)
    figures: Optional[Figures] = None     # with Groups.figures


class Groups(NamedTuple):
    """What to compute, with the parameters already in the types the standard compares them in."""
    eps: float                                   # relative-error epsilon (bench type)
    legacy: bool = True                          # cosine, max abs error, the three ratios
    ratios: tuple = ()                           # ((field name, threshold), ...) of the ratios
    binary: bool = False
    small_value: Optional[tuple] = None          # (sv, atol)
    absolute: Optional[tuple] = None             # (rtol, sv, atol, finite bound of the device type)
    ulp: Optional[tuple] = None                  # (min_eb, exponent_num, compute dtype name, threshold)
    agree_nonfinite: bool = True
    class_match: bool = True
    cosine_pass: float = 0.99
    figures: bool = False                        # the device's magnitudes and the observed error (Figures)


def _read(source: Any, start: int, stop: int) -> np.ndarray:
    bits = getattr(source, "read_bits", None)
    return bits(start, stop) if bits is not None else source.read(start, stop)


def _kernel_view(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint16) if a.dtype == np.float16 else a


def run(bench: Any, device: Any, groups: Groups, chunk: int = CHUNK) -> MetricSet:
    """Every requested metric of two prepared float arrays (or sources) of the same size, in one pass."""
    bs, ds = as_source(bench), as_source(device)
    if bs.size != ds.size:
        raise ValueError(f"bench has {bs.size} elements but device has {ds.size}; compare shapes first")
    if not 0 < chunk < 1 << 31:
        raise ValueError(f"chunk is {chunk} elements; the kernel counts a chunk in int32: pass 1 .. 2**31 - 1")
    tb, td = np.dtype(bs.dtype), np.dtype(ds.dtype)
    if tb not in _FLOATS or td not in _FLOATS:
        raise TypeError(f"float metrics need float16/32/64 arrays, not {tb.name} and {td.name}")
    tae = np.result_type(tb, td)
    n = bs.size
    g = groups
    flags = ((K.LEGACY if g.legacy else 0) | (K.BINARY if g.binary else 0)
             | (K.SMALL if g.small_value is not None else 0) | (K.ABSOLUTE if g.absolute is not None else 0)
             | (K.ULP if g.ulp is not None else 0) | (K.AGREE if g.agree_nonfinite else 0)
             | (K.CLASS_MATCH if g.class_match else 0) | (K.FIGURES if g.figures else 0))
    par = np.zeros(K.N_PAR)
    par[K.P_EPS] = tb.type(g.eps)
    par[K.P_RUN] = np.getbufsize()
    for slot, (_, t) in zip((K.P_T0, K.P_T1, K.P_T2), g.ratios):
        par[slot] = tae.type(t)
    if g.small_value is not None:
        par[K.P_SV], par[K.P_SV_ATOL] = tb.type(g.small_value[0]), tae.type(g.small_value[1])
    if g.absolute is not None:
        rtol, sv, atol, hi = g.absolute
        par[K.P_A_RTOL], par[K.P_A_SV], par[K.P_A_ATOL], par[K.P_A_HI] = (tae.type(rtol), tb.type(sv),
                                                                         tae.type(atol), td.type(hi))
    tc = np.dtype(np.float32)
    if g.ulp is not None:
        min_eb, exponent_num, compute, thr = g.ulp
        tc = np.dtype(compute)
        if tc not in _ULP_TYPES:
            raise TypeError(f"the ULP compute type is float32 or float64, not {tc.name}")
        par[K.P_MIN_EB], par[K.P_EXP], par[K.P_THR] = min_eb, exponent_num, tc.type(thr)
    k = max(min(chunk, n), 1)
    if g.legacy and n > chunk:          # one chunk: the cosine's normalised dot products after the pass
        flags |= K.DOTS
    scratch = np.float32 if tae == np.float16 else tae      # float16 results are kept in float32 (exact)
    sq, re = np.empty(k, scratch), np.empty(k, scratch)
    ulp = np.empty(k if g.ulp is not None else 0, tc)
    cnt = np.zeros(K.N_CNT, np.int64)
    mx = np.full(K.N_MAX, -1.0)
    fig = np.zeros(K.N_FIG if g.figures else 0)
    sums = np.zeros(K.N_OUT)
    sq_sum = re_sum = ulp_sum = dot = sdd = sbb = 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, n, chunk):             # the chunks' sums added in order, as Python floats
            stop = min(start + chunk, n)
            m = stop - start
            bc = _kernel_view(_read(bs, start, stop))
            dc = _kernel_view(_read(ds, start, stop))
            K.chunk_pass(bc, dc, flags, par, sq[:m], re[:m], ulp[:m], cnt, mx, fig, sums)
            dot += float(sums[K.O_DOT])
            sdd += float(sums[K.O_SDD])
            sbb += float(sums[K.O_SBB])
            sq_sum += float(sums[K.O_SQ])
            re_sum += float(sums[K.O_RE])
            ulp_sum += float(sums[K.O_ULP])
    out = MetricSet(n=n, nonfinite_mismatch=int(cnt[K.C_MISMATCH]), nonfinite_agreed=int(cnt[K.C_AGREED]))
    if g.figures:
        out.figures = Figures(n, *(float(fig[i]) for i in (K.F_SQ, K.F_ABS, K.F_SUM, K.F_PEAK, K.F_ERR_MAX,
                                                           K.F_ERR_SUM)), int(fig[K.F_ERR_BAD]))
    v = out.values
    if g.legacy:
        out.cosine = _cosine(n, chunk, mx, (dot, sdd, sbb), (bs, ds, par, (sq[:0], re[:0], ulp[:0]), fig[:0]), g)
        v["cosine"] = out.cosine.value
        v["max_abs_err"] = None if n == 0 else tae.type(mx[K.M_AE])
        for (key, _), c in zip(g.ratios, (cnt[K.C_R0], cnt[K.C_R1], cnt[K.C_R2])):
            v[key] = int(c) / n if n else 1
    if g.binary:
        v["binary_error_rate"] = int(cnt[K.C_BIN]) / n if n else "Nan"
    if g.small_value is not None:
        sv_count, masked = int(cnt[K.C_SV]), int(cnt[K.C_MASKED])
        v["small_value_err_ratio"] = int(cnt[K.C_SV_ERR]) / sv_count if sv_count else 0
        v["rmse"] = math.sqrt(sq_sum / n * (n / (n - masked + 0.0001) + 0.0001)) if n else float("nan")
        v["error_balance"] = abs(int(cnt[K.C_EBP]) - int(cnt[K.C_EBN])) / n if n else 0
        kept_total = int(cnt[K.C_KEPT])
        re_max = mx[K.M_RE]
        if kept_total and not (re_max < 0):
            v["max_rel_err"] = tae.type(re_max)
            v["mean_rel_err"] = tae.type(re_sum / kept_total)
        else:
            v["max_rel_err"] = v["mean_rel_err"] = 0
    if g.absolute is not None:
        inf_count, normal, abs_sv = int(cnt[K.C_INF]), int(cnt[K.C_NORMAL]), int(cnt[K.C_ASV])
        v["inf_nan_error_rate"] = int(cnt[K.C_INF_BAD]) / inf_count if inf_count else 0
        v["rel_err_error_rate"] = int(cnt[K.C_NORMAL_ERR]) / normal if normal else 0
        v["abs_err_error_rate"] = int(cnt[K.C_ASV_ERR]) / abs_sv if abs_sv else 0
    if g.ulp is not None:
        if n:
            v["ulp_max"] = tc.type(mx[K.M_ULP])
            v["ulp_mean"] = tc.type(ulp_sum / n)
            v["ulp_above_threshold_ratio"] = int(cnt[K.C_ULP_ABOVE]) / n
        else:
            v["ulp_max"] = v["ulp_mean"] = v["ulp_above_threshold_ratio"] = 0
    return out


def _cosine(n: int, chunk: int, mx: np.ndarray, sums: tuple, data: tuple, g: Groups) -> CosineResult:
    """Cosine similarity (2.1): msprobe's normalised formula (the values divided by their maxima) in one chunk;
    in several, the dot products summed during the pass (the same value up to rounding), unless the maxima are
    so large or small that the unscaled squares could overflow: then the normalised formula chunk by chunk."""
    if n == 0:
        raise ValueError(MSG_EMPTY_MAX)
    if n == 1:
        return CosineResult(None, True, MSG_SCALAR)
    max_d, max_b = mx[K.M_D], mx[K.M_B]
    d_zero, b_zero = max_d <= COSINE_ZERO_EPS, max_b <= COSINE_ZERO_EPS
    if d_zero and b_zero:
        return CosineResult(None, True, MSG_BOTH_ZERO)
    if d_zero:
        return CosineResult(None, False, MSG_DEVICE_ZERO)
    if b_zero:
        return CosineResult(None, False, MSG_BENCH_ZERO)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if n > chunk and all(_SAFE_LO < m < _SAFE_HI for m in (max_d, max_b)):
            dot, sdd, sbb = sums
        else:
            dot, sdd, sbb = _normalised_dots(n, chunk, float(max_d), float(max_b), data, g)
        cos = np.float64(dot) / (np.sqrt(np.float64(sdd)) * np.sqrt(np.float64(sbb)))
    if np.isnan(cos):
        return CosineResult(float("nan"), False, MSG_COS_NAN)
    cos = float(min(1.0, max(-1.0, cos)))
    return CosineResult(cos, cos > g.cosine_pass, "")


def _normalised_dots(n: int, chunk: int, md: float, mb: float, data: tuple, g: Groups) -> tuple:
    """The dot products of the values divided by the maxima (agreed non-finite positions zeroed as in the
    pass), each chunk read again by the kernel, the chunks' sums added in order."""
    bs, ds, par, scratch, fig = data
    par = par.copy()
    par[K.P_SCALE_D], par[K.P_SCALE_B] = md, mb
    flags = K.DOTS | K.SCALED | (K.AGREE if g.agree_nonfinite else 0)
    cnt, mx = np.zeros(K.N_CNT, np.int64), np.full(K.N_MAX, -1.0)
    out = np.zeros(K.N_OUT)
    dot = sdd = sbb = 0.0
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        bc = _kernel_view(_read(bs, start, stop))
        dc = _kernel_view(_read(ds, start, stop))
        K.chunk_pass(bc, dc, flags, par, *scratch, cnt, mx, fig, out)
        dot += float(out[K.O_DOT])
        sdd += float(out[K.O_SDD])
        sbb += float(out[K.O_SBB])
    return dot, sdd, sbb


def binary_error_rate(bench: Any, device: Any, *, agree_nonfinite: bool = False, chunk: int = CHUNK) -> Any:
    """count(B != D) / N (2.4) of arrays of any dtype; the string "Nan" for empty outputs."""
    bs, ds = as_source(bench), as_source(device)
    n = bs.size
    if n == 0:
        return "Nan"
    if np.dtype(bs.dtype).kind == "f" and np.dtype(ds.dtype).kind == "f":
        groups = Groups(eps=1.0, legacy=False, binary=True, agree_nonfinite=agree_nonfinite)
        return run(bs, ds, groups, chunk).values["binary_error_rate"]
    diff = 0
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        diff += int(K.count_unequal(np.ascontiguousarray(bs.read(start, stop)),
                                    np.ascontiguousarray(ds.read(start, stop))))
    return diff / n


def cosine(bench: np.ndarray, device: np.ndarray) -> float:
    """Plain cosine similarity of two float arrays as a Python float: 1.0 for two all-zero or one-element
    outputs, NaN when an all-zero side, inf/nan or an empty output makes it undefined."""
    if np.size(bench) == 0:
        return float("nan")
    res = run(bench, device, Groups(eps=0.0, agree_nonfinite=False)).cosine
    if res.value is None:
        return 1.0 if res.passed else float("nan")
    return float(res.value)


def max_abs_error(bench: np.ndarray, device: np.ndarray) -> float:
    """max |D - B| as a Python float (NaN propagates; 0.0 for empty arrays)."""
    if np.size(bench) == 0:
        return 0.0
    return float(run(bench, device, Groups(eps=0.0, agree_nonfinite=False)).values["max_abs_err"])


def warm_up() -> None:
    """Run the kernel once for the dtype pairs of fp32, bf16 (as float32 arrays and as bfloat16 bits), fp16 and
    fp64 outputs (1.7), every group on, so their compiled code is loaded (or compiled, the first time) before the
    first real output."""
    x = np.linspace(-1.0, 1.0, 8)
    groups = Groups(eps=1e-7, ratios=(("a", 0.01), ("b", 0.001), ("c", 0.0001)), binary=True,
                    small_value=(1e-3, 1e-5), absolute=(1e-3, 1e-3, 1e-5, 65504.0),
                    ulp=(-126, 23, "float64", 32.0), figures=True)
    for tb, td in ((np.float64, np.float32), (np.float32, np.float32), (np.float32, np.float16),
                   (np.float64, np.float64)):
        run(x.astype(tb), x.astype(td), groups._replace(ulp=(-14, 10, "float32", 1.0)) if tb is np.float32
            else groups)
    run(x.astype(np.float32), Bf16BitsSource(x), groups._replace(ulp=(-126, 7, "float32", 1.0)))
