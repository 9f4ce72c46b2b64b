"""The one chunked pass behind every metric of the precision standard (spec precision-standard.md section 2).

:class:`_Engine` walks the prepared bench and device arrays in chunks and accumulates counts, sums and maxima
of every requested metric family (cosine, max abs error and the ratios; binary consistency; benchmark;
absolute threshold; ULP) into chunk-sized scratch arrays. :func:`.metrics.float_metrics` runs it. A chunk
without inf/nan goes through the compiled kernel of :mod:`.native_metrics` when there is one (same bits);
everything else is numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import native_metrics as nm
from .standards import (
    BF16,
    BF16_EPS,
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
        return BF16_EPS
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


def _read(source: Any, start: int, stop: int, buf: np.ndarray) -> np.ndarray:
    """A chunk of a source: a view when it can give one, else converted into ``buf``."""
    into = getattr(source, "read_into", None)
    if into is not None:
        return into(start, stop, buf)
    return source.read(start, stop)


class _Workspace:
    """Chunk-sized scratch arrays, allocated once per call and reused for every chunk."""

    def __init__(self, k: int, eng: _Engine) -> None:
        tb, td, tae = eng.tb, eng.td, eng.tae
        self.bc, self.dc = np.empty(k, tb), np.empty(k, td)
        self.diff, self.ae, self.ab, self.re0 = np.empty(k, tae), np.empty(k, tae), np.empty(k, tb), np.empty(k, tae)
        self.flag, self.small, self.keep = np.empty(k, bool), np.empty(k, bool), np.empty(k, bool)
        self.sq, self.delta = np.empty(k, tae), np.empty(k, td)
        self.d64 = np.empty(k if eng.legacy and td != np.float64 else 0, np.float64)
        self.b64 = np.empty(k if eng.legacy and tb != np.float64 else 0, np.float64)
        tc = eng.tc if eng.ulp is not None else np.dtype(np.float32)
        n_ulp = k if eng.ulp is not None else 0
        self.u1, self.u2, self.ints = np.empty(n_ulp, tc), np.empty(n_ulp, tc), np.empty(n_ulp, np.int32)


class _Engine:
    """One chunked pass over bench/device. Chunks without inf/nan take a shorter path (``_fast``)
    that gives the same numbers as the general path (``_slow``) with fewer array operations."""

    force_slow = False      # tests flip this to check that both paths agree

    def __init__(self, bs: Any, ds: Any, *, device_dtype: str, eps: float | None, legacy: bool,
                 binary: bool, small_value: SmallValue | None, absolute: AbsoluteThreshold | None,
                 ulp: UlpParams | None, agree_nonfinite: bool, absolute_class_match: bool, chunk: int) -> None:
        self.bs, self.ds, self.chunk = bs, ds, chunk
        self.n = bs.size
        self.device_dtype = device_dtype
        self.tb, self.td = np.dtype(bs.dtype), np.dtype(ds.dtype)
        self.tae = np.result_type(self.tb, self.td)
        self.eps_b = self.tb.type(relative_eps(self.tb, device_dtype) if eps is None else eps)
        self.legacy, self.binary, self.small_value, self.absolute, self.ulp = (
            legacy, binary, small_value, absolute, ulp)
        self.agree_nonfinite, self.class_match = agree_nonfinite, absolute_class_match
        self.ratio_t = {k: self.tae.type(t) for k, t in RATIO_THRESHOLDS.items()}
        self.need_bp = small_value is not None or absolute is not None
        self.td_max = float(np.finfo(self.td).max)
        if small_value is not None:
            self.sv_b, self.sv_atol = self.tb.type(small_value.sv), self.tae.type(small_value.atol)
        if absolute is not None:
            self.a_sv, self.a_atol, self.a_rtol = (self.tb.type(absolute.sv), self.tae.type(absolute.atol),
                                                   self.tae.type(absolute.rtol))
            self.hi = _FINITE_MAX.get(device_dtype, self.td_max)
        if ulp is not None:
            self.tc = np.dtype(ulp.compute)
            self.ulp_thr = self.tc.type(ulp.threshold)
        self.acc = _Acc()
        self.agreed_chunks: dict = {}
        self.dot = self.sdd = self.sbb = 0.0

    def run(self) -> MetricSet:
        w = _Workspace(min(self.chunk, self.n), self)
        kern = None if self.force_slow else self._kernel(w)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for start in range(0, self.n, self.chunk):
                stop = min(start + self.chunk, self.n)
                k = stop - start
                bc, dc = _read(self.bs, start, stop, w.bc[:k]), _read(self.ds, start, stop, w.dc[:k])
                if kern is None or not self._native(kern, w, k, bc, dc):
                    diff = np.subtract(dc, bc, out=w.diff[:k])
                    ae = np.abs(diff, out=w.ae[:k])
                    mx = np.max(ae)
                    ab = np.abs(bc, out=w.ab[:k])
                    clean = bool(np.isfinite(mx)) and not self.force_slow
                    if clean and self.need_bp and self.tb != self.td:
                        clean = float(np.max(ab)) <= self.td_max
                    if clean:
                        self._fast(w, k, bc, dc, diff, ae, mx, ab)
                    else:
                        self._slow(start, bc, dc, ae.copy(), ab.copy())
                if self.ulp is not None:
                    self._ulp(w, k, bc, dc)
        return self._result()

    # ---------------------------------------------------------------- chunk without inf/nan, compiled
    def _kernel(self, w: _Workspace) -> nm.Kernel | None:
        """The compiled clean-chunk pass for these dtypes and groups, or None (then numpy does it all)."""
        if not self.eps_b > 0:          # a zero or negative eps could give NaN or negative relative errors
            return None
        flags = ((nm.LEGACY if self.legacy else 0) | (nm.BINARY if self.binary else 0)
                 | (nm.SV if self.small_value is not None else 0) | (nm.ABS if self.absolute is not None else 0))
        sv, ab = self.small_value is not None, self.absolute is not None
        params = [float(self.eps_b), *(float(t) for t in self.ratio_t.values()),
                  float(self.sv_b) if sv else 0.0, float(self.sv_atol) if sv else 0.0,
                  float(self.a_sv) if ab else 0.0, float(self.a_atol) if ab else 0.0,
                  float(self.a_rtol) if ab else 0.0]
        kern = nm.kernel(self.tb, self.td, flags, params)
        if kern is None:
            return None
        dots = self.legacy and self.n > self.chunk
        if dots and kern.sums:
            kern.flags |= nm.DOTS
        copies = dots and not kern.sums      # float64 copies for numpy's einsums
        kern.bind(w.sq, w.re0, w.small, w.b64 if copies and self.tb != np.float64 else None,
                  w.d64 if copies and self.td != np.float64 else None)
        return kern

    def _native(self, kern: nm.Kernel, w: _Workspace, k: int, bc, dc) -> bool:
        """``_fast`` in one compiled pass; False (nothing accumulated) when the chunk is not clean."""
        if not (bc.dtype == self.tb and dc.dtype == self.td and bc.flags.c_contiguous and dc.flags.c_contiguous):
            return False
        if not kern(bc, dc, k):
            return False
        o = kern.out.tolist()
        if self.need_bp and self.tb != self.td and not o[nm.O_MAB] <= self.td_max:
            return False
        c = kern.cnt.tolist()
        acc, tae = self.acc, self.tae
        if self.legacy:
            acc.max_ae = _nanmax_merge(acc.max_ae, tae.type(o[nm.O_MAE]))
            acc.max_b = _nanmax_merge(acc.max_b, o[nm.O_MAB])
            acc.max_d = _nanmax_merge(acc.max_d, o[nm.O_MAD])
            for key, i in zip(self.ratio_t, (nm.C_R0, nm.C_R1, nm.C_R2)):
                acc.below[key] += c[i]
            if kern.flags & nm.DOTS:
                self.dot += o[nm.O_DOT]
                self.sdd += o[nm.O_SDD]
                self.sbb += o[nm.O_SBB]
            elif self.n > self.chunk:
                self._dots(dc if self.td == np.float64 else w.d64[:k], bc if self.tb == np.float64 else w.b64[:k])
        if self.binary:
            acc.binary_diff += c[nm.C_BIN]
        if self.small_value is not None:
            acc.eb_pos += c[nm.C_EBP]
            acc.eb_neg += c[nm.C_EBN]
            ns = c[nm.C_NS]
            acc.sv_count += ns
            acc.sv_err += c[nm.C_SVERR]
            acc.masked += ns
            acc.sq_sum += o[nm.O_SQ] if kern.sums else float(np.sum(w.sq[:k]))
            kept = c[nm.C_KEPT]
            if kept:
                acc.re_max = _nanmax_merge(acc.re_max, tae.type(o[nm.O_REMAX]))
                acc.re_sum += o[nm.O_RE] if kern.sums else float(np.sum(w.re0[:kept]))
                acc.re_count += kept
        if self.absolute is not None:
            ns = c[nm.C_NS2]
            acc.abs_sv_count += ns
            acc.abs_sv_err += c[nm.C_ASERR]
            acc.normal_err += c[nm.C_NERR]
            acc.normal_count += k - ns
        return True

    # ---------------------------------------------------------------- chunk without inf/nan
    def _fast(self, w: _Workspace, k: int, bc, dc, diff, ae, mx, ab) -> None:
        acc = self.acc
        flag = w.flag[:k]
        if self.small_value is not None and not (self.tb == self.td and diff.dtype == self.td):
            delta = np.subtract(dc, bc.astype(self.td), out=w.delta[:k])
        else:
            delta = diff
        if self.small_value is not None:       # before diff's buffer is reused
            acc.eb_pos += int(np.count_nonzero(np.greater(delta, 0, out=flag)))
            acc.eb_neg += int(np.count_nonzero(np.less(delta, 0, out=flag)))
        re0 = None
        if self.legacy or self.need_bp:
            re0 = np.add(ab, self.eps_b, out=w.re0[:k])
            np.divide(ae, re0, out=re0)
        if self.legacy:
            acc.max_ae = _nanmax_merge(acc.max_ae, mx)
            acc.max_b = _nanmax_merge(acc.max_b, float(np.max(ab)))
            acc.max_d = _nanmax_merge(acc.max_d, max(float(np.max(dc)), -float(np.min(dc))))
            for key, t in self.ratio_t.items():
                acc.below[key] += int(np.count_nonzero(np.less(re0, t, out=flag)))
            if self.n > self.chunk:         # one chunk: the cosine takes the normalised pass instead
                d64 = dc if dc.dtype == np.float64 else w.d64[:k]
                b64 = bc if bc.dtype == np.float64 else w.b64[:k]
                if d64 is not dc:
                    np.copyto(d64, dc)
                if b64 is not bc:
                    np.copyto(b64, bc)
                self._dots(d64, b64)
        if self.binary:
            acc.binary_diff += int(np.count_nonzero(np.not_equal(bc, dc, out=flag)))
        if self.small_value is not None:
            s = np.less_equal(ab, self.sv_b, out=w.small[:k])
            ns = int(np.count_nonzero(s))
            sq = np.square(ae, out=w.sq[:k])
            if ns:
                acc.sv_count += ns
                acc.sv_err += int(np.count_nonzero(np.logical_and(s, np.greater(ae, self.sv_atol, out=flag),
                                                                  out=flag)))
                acc.masked += ns
                kept = np.logical_not(s, out=w.keep[:k])
                if np.isfinite(np.square(mx)):  # finite x * 0 is 0: no branch per element on a random mask
                    np.multiply(sq, kept, out=sq)
                else:
                    sq[s] = 0
            acc.sq_sum += float(np.sum(sq))
            keep = re0[kept] if ns else re0
            if keep.size:
                acc.re_max = _nanmax_merge(acc.re_max, np.max(keep))
                acc.re_sum += float(np.sum(keep))
                acc.re_count += keep.size
        if self.absolute is not None:
            s = np.less_equal(ab, self.a_sv, out=w.small[:k])
            ns = int(np.count_nonzero(s))
            acc.abs_sv_count += ns
            big = np.greater(re0, self.a_rtol, out=flag)
            if ns:
                acc.normal_err += int(np.count_nonzero(big & ~s))
                acc.abs_sv_err += int(np.count_nonzero(np.logical_and(s, np.greater(ae, self.a_atol, out=flag),
                                                                      out=flag)))
            else:
                acc.normal_err += int(np.count_nonzero(big))
            acc.normal_count += k - ns

    def _dots(self, d, b) -> None:
        d64 = d.astype(np.float64, copy=False)
        b64 = b.astype(np.float64, copy=False)
        self.dot += float(np.einsum('i,i->', d64, b64))
        self.sdd += float(np.einsum('i,i->', d64, d64))
        self.sbb += float(np.einsum('i,i->', b64, b64))

    # ---------------------------------------------------------------- general chunk
    def _slow(self, start, bc, dc, ae, ab) -> None:
        acc, td = self.acc, self.td
        agreed = None
        if self.agree_nonfinite and (self.legacy or self.binary):
            agreed, mismatch = _agreement(dc, bc, ae, td)
            acc.agreed += agreed.size
            acc.mismatch += mismatch.size
            if agreed.size:
                self.agreed_chunks[start] = agreed
        abe = ab + self.eps_b
        re0 = ae / abe
        if self.legacy:
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
            for k, t in self.ratio_t.items():
                acc.below[k] += int(np.count_nonzero(rel < t))
            self._dots(dl, bl)
        if self.binary:
            acc.binary_diff += int(np.count_nonzero(bc != dc))
            if agreed is not None and agreed.size:
                acc.binary_diff -= int(np.count_nonzero(np.isnan(dc[agreed]) & np.isnan(bc[agreed])))
        if not self.need_bp:
            return
        bp = bc if self.tb == td else bc.astype(td)
        fin = np.isfinite(dc) & np.isfinite(bp)
        if self.small_value is not None:
            s = (ab <= self.sv_b) & fin
            m = ~fin | s
            acc.sv_count += int(np.count_nonzero(s))
            acc.sv_err += int(np.count_nonzero(s & (ae > self.sv_atol)))
            nm = int(np.count_nonzero(m))
            acc.masked += nm
            acc.sq_sum += float(np.sum(np.square(np.where(m, self.tae.type(0), ae))))
            delta = dc - bp
            acc.eb_pos += int(np.count_nonzero(delta > 0))
            acc.eb_neg += int(np.count_nonzero(delta < 0))
            if nm < m.size:
                keep = re0[~m]
                acc.re_max = _nanmax_merge(acc.re_max, np.max(keep))
                acc.re_sum += float(np.sum(keep))
                acc.re_count += keep.size
        if self.absolute is not None:
            s = (ab <= self.a_sv) & fin
            normal = fin & ~s
            acc.abs_sv_count += int(np.count_nonzero(s))
            acc.abs_sv_err += int(np.count_nonzero(s & (ae > self.a_atol)))
            acc.normal_count += int(np.count_nonzero(normal))
            acc.normal_err += int(np.count_nonzero(normal & (re0 > self.a_rtol)))
            inf_idx = np.flatnonzero(~fin)
            if inf_idx.size:
                d_i, g_i = dc[inf_idx], bp[inf_idx]
                gcl = np.clip(g_i, td.type(-self.hi), td.type(self.hi))
                dcl = np.clip(d_i, td.type(-self.hi), td.type(self.hi))
                ok = (np.abs(dcl - gcl) / abe[inf_idx] <= self.a_rtol) | (np.isnan(d_i) & np.isnan(gcl))
                if self.class_match:
                    ok = np.where(np.isinf(g_i), d_i == g_i, ok)
                acc.inf_count += inf_idx.size
                acc.inf_bad += int(np.count_nonzero(~ok))

    def _ulp(self, w: _Workspace, k: int, bc, dc) -> None:
        acc, tc, p = self.acc, self.tc, self.ulp
        bcc = bc if bc.dtype == tc else bc.astype(tc)
        eb = np.abs(bcc, out=w.u1[:k])
        np.log2(eb, out=eb)
        np.floor(eb, out=eb)
        np.copyto(eb, tc.type(0), where=np.equal(bcc, 0, out=w.flag[:k]))
        np.maximum(eb, tc.type(p.min_eb), out=eb)
        np.subtract(tc.type(p.exponent_num), eb, out=eb)
        scale = _pow2(eb, out=w.u2[:k], ints=w.ints[:k])
        u = np.subtract(dc, bcc, out=w.u1[:k], dtype=tc) if dc.dtype != tc else np.subtract(dc, bcc, out=w.u1[:k])
        np.multiply(u, scale, out=u)
        np.abs(u, out=u)
        if k:
            acc.ulp_max = _nanmax_merge(acc.ulp_max, np.max(u))
        acc.ulp_sum += float(np.sum(u))
        acc.ulp_above += int(np.count_nonzero(np.greater(u, self.ulp_thr, out=w.flag[:k])))

    # ---------------------------------------------------------------- results
    def _result(self) -> MetricSet:
        n, acc, tae = self.n, self.acc, self.tae
        out = MetricSet(n=n, nonfinite_mismatch=acc.mismatch, nonfinite_agreed=acc.agreed)
        v = out.values
        if self.legacy:
            out.cosine = self._cosine()
            v["cosine"] = out.cosine.value
            v["max_abs_err"] = acc.max_ae
            for k in RATIO_THRESHOLDS:
                v[k] = acc.below[k] / n if n else 1
        if self.binary:
            v["binary_error_rate"] = acc.binary_diff / n if n else "Nan"
        if self.small_value is not None:
            v["small_value_err_ratio"] = acc.sv_err / acc.sv_count if acc.sv_count else 0
            if n:
                v["rmse"] = math.sqrt(acc.sq_sum / n * (n / (n - acc.masked + 0.0001) + 0.0001))
            else:
                v["rmse"] = float("nan")
            v["error_balance"] = abs(acc.eb_pos - acc.eb_neg) / n if n else 0
            if acc.re_count and not (acc.re_max < 0):
                v["max_rel_err"] = acc.re_max
                v["mean_rel_err"] = tae.type(acc.re_sum / acc.re_count)
            else:
                v["max_rel_err"] = 0
                v["mean_rel_err"] = 0
        if self.absolute is not None:
            v["inf_nan_error_rate"] = acc.inf_bad / acc.inf_count if acc.inf_count else 0
            v["rel_err_error_rate"] = acc.normal_err / acc.normal_count if acc.normal_count else 0
            v["abs_err_error_rate"] = acc.abs_sv_err / acc.abs_sv_count if acc.abs_sv_count else 0
        if self.ulp is not None:
            if n:
                v["ulp_max"] = acc.ulp_max
                v["ulp_mean"] = self.tc.type(acc.ulp_sum / n)
                v["ulp_above_threshold_ratio"] = acc.ulp_above / n
            else:
                v["ulp_max"] = v["ulp_mean"] = v["ulp_above_threshold_ratio"] = 0
        return out

    def _cosine(self) -> CosineResult:
        """Cosine similarity (2.1). One chunk: msprobe's normalised formula, exactly. Several chunks: the
        dot products summed during the pass (same value up to rounding), unless the maxima are so large
        or small that the unscaled squares could overflow; then a second, normalised pass."""
        n, acc = self.n, self.acc
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
        safe = all(_SAFE_LO < m < _SAFE_HI for m in (acc.max_d, acc.max_b))
        if n > self.chunk and safe:
            dot, sdd, sbb = self.dot, self.sdd, self.sbb
        else:
            dot, sdd, sbb = self._normalised_dots()
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            cos = np.float64(dot) / (np.sqrt(np.float64(sdd)) * np.sqrt(np.float64(sbb)))
        if np.isnan(cos):
            return CosineResult(float("nan"), False, MSG_COS_NAN)
        cos = float(min(1.0, max(-1.0, cos)))
        return CosineResult(cos, cos > COSINE_PASS, "")

    def _normalised_dots(self) -> tuple:
        md, mb = np.float64(self.acc.max_d), np.float64(self.acc.max_b)
        dot = sdd = sbb = 0.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for start in range(0, self.n, self.chunk):
                stop = min(start + self.chunk, self.n)
                d64 = self.ds.read(start, stop).astype(np.float64) / md
                b64 = self.bs.read(start, stop).astype(np.float64) / mb
                agreed = self.agreed_chunks.get(start)
                if agreed is not None:
                    d64[agreed] = 0.0
                    b64[agreed] = 0.0
                dot += float(np.einsum('i,i->', d64, b64))
                sdd += float(np.einsum('i,i->', d64, d64))
                sbb += float(np.einsum('i,i->', b64, b64))
        return dot, sdd, sbb


# unscaled float64 sums of squares are safe for maxima in this range (n <= 2^63 elements)
_SAFE_LO, _SAFE_HI = 1e-130, 1e130


def _pow2(k: np.ndarray, out: np.ndarray | None = None, ints: np.ndarray | None = None) -> np.ndarray:
    """Exact 2**k for integral k (numpy's vectorised exp2 may be off in the last bit); inf/nan pass through."""
    one = k.dtype.type(1)
    fin = np.isfinite(k)
    if fin.all():
        if ints is None:
            return np.ldexp(one, k.astype(np.int32), out=out)
        np.copyto(ints, k, casting="unsafe")
        return np.ldexp(one, ints, out=out)
    res = np.exp2(k, out=out)
    res[fin] = np.ldexp(one, k[fin].astype(np.int32))
    return res
