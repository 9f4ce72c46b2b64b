"""The plain numpy reference of the precision metrics (spec precision-standard.md section 2), for the tests.

Whole arrays, the spec's formulas as written, every operation in the numpy type the spec prescribes; the
sums are numpy's (``np.sum``, ``np.einsum``) over chunks of ``chunk`` elements, as the engine sums them, so
the compiled kernel must give these numbers bit for bit.
"""
from __future__ import annotations

import math

import numpy as np

COSINE_ZERO_EPS = float(np.finfo(np.float64).eps)
RATIOS = (("hundred_ratio", 0.01), ("thousand_ratio", 0.001), ("ten_thousand_ratio", 0.0001))


def _nanmax(values: list):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return values[0] if len(values) == 1 else np.max(np.array(values, dtype=np.result_type(*values)))


def _pow2(k: np.ndarray) -> np.ndarray:
    """Exact 2**k of integral k in k's type; inf/nan as exp2 gives them."""
    fin = np.isfinite(k)
    res = np.exp2(k)
    res[fin] = np.ldexp(k.dtype.type(1), k[fin].astype(np.int32))
    return res


def reference(bench: np.ndarray, device: np.ndarray, *, eps: float, legacy: bool = True, binary: bool = False,
              small_value: tuple | None = None, absolute: tuple | None = None, ulp: tuple | None = None,
              agree_nonfinite: bool = True, class_match: bool = True, chunk: int = 1 << 16) -> dict:
    """The cells of :func:`dumpers.metrics_engine.run` (``absolute``: rtol, sv, atol, finite bound;
    ``ulp``: min_eb, exponent_num, compute dtype, threshold), plus ``cosine`` as (value, passed)."""
    b_all, d_all = np.asarray(bench).reshape(-1), np.asarray(device).reshape(-1)
    tb, td = b_all.dtype, d_all.dtype
    tae = np.result_type(tb, td)
    n = b_all.size
    eps_b = tb.type(eps)
    out: dict = {}
    acc = dict(max_d=[], max_b=[], max_ae=[], below=[0, 0, 0], bin=0, sv=0, sv_err=0, masked=0, sq=0.0,
               ebp=0, ebn=0, re_max=[], re_sum=0.0, re_n=0, inf=0, inf_bad=0, asv=0, asv_err=0, normal=0,
               normal_err=0, ulp_max=[], ulp_sum=0.0, ulp_above=0, dot=0.0, sdd=0.0, sbb=0.0)
    dl_all, bl_all = [], []
    with np.errstate(all="ignore"):
        for start in range(0, n, chunk):
            bc, dc = b_all[start:start + chunk], d_all[start:start + chunk]
            ae = np.abs(dc - bc)
            ab = np.abs(bc)
            abe = ab + eps_b
            re0 = ae / abe
            agreed = np.zeros(bc.size, bool)
            if agree_nonfinite and (legacy or binary):
                bad = ~np.isfinite(ae)
                bt = bc.astype(td)
                agreed = bad & ((np.isnan(dc) & np.isnan(bt)) | (dc == bt))
            if legacy:
                dl, bl = np.where(agreed, 0, dc), np.where(agreed, 0, bc)
                ael, rel = np.where(agreed, tae.type(0), ae), np.where(agreed, tae.type(0), re0)
                acc["max_d"].append(np.max(np.abs(dl)))
                acc["max_b"].append(np.max(np.abs(bl)))
                acc["max_ae"].append(np.max(ael))
                for i, (_, t) in enumerate(RATIOS):
                    acc["below"][i] += int(np.count_nonzero(rel < tae.type(t)))
                d64, b64 = dl.astype(np.float64), bl.astype(np.float64)
                dl_all.append(d64)
                bl_all.append(b64)
                acc["dot"] += float(np.einsum("i,i->", d64, b64))
                acc["sdd"] += float(np.einsum("i,i->", d64, d64))
                acc["sbb"] += float(np.einsum("i,i->", b64, b64))
            if binary:
                acc["bin"] += int(np.count_nonzero((bc != dc) & ~(agreed & np.isnan(dc) & np.isnan(bc))))
            bp = bc.astype(td)
            fin = np.isfinite(dc) & np.isfinite(bp)
            if small_value is not None:
                s = (ab <= tb.type(small_value[0])) & fin
                m = ~fin | s
                acc["sv"] += int(np.count_nonzero(s))
                acc["sv_err"] += int(np.count_nonzero(s & (ae > tae.type(small_value[1]))))
                acc["masked"] += int(np.count_nonzero(m))
                acc["sq"] += float(np.sum(np.square(np.where(m, tae.type(0), ae))))
                delta = dc - bp
                acc["ebp"] += int(np.count_nonzero(delta > 0))
                acc["ebn"] += int(np.count_nonzero(delta < 0))
                keep = re0[~m]
                if keep.size:
                    acc["re_max"].append(np.max(keep))
                    acc["re_sum"] += float(np.sum(keep))
                    acc["re_n"] += keep.size
            if absolute is not None:
                rtol, sv, atol, hi = tae.type(absolute[0]), tb.type(absolute[1]), tae.type(absolute[2]), absolute[3]
                s = (ab <= sv) & fin
                normal = fin & ~s
                acc["asv"] += int(np.count_nonzero(s))
                acc["asv_err"] += int(np.count_nonzero(s & (ae > atol)))
                acc["normal"] += int(np.count_nonzero(normal))
                acc["normal_err"] += int(np.count_nonzero(normal & (re0 > rtol)))
                i = np.flatnonzero(~fin)
                if i.size:
                    g = np.clip(bp[i], td.type(-hi), td.type(hi))
                    dcl = np.clip(dc[i], td.type(-hi), td.type(hi))
                    ok = (np.abs(dcl - g) / abe[i] <= rtol) | (np.isnan(dc[i]) & np.isnan(g))
                    if class_match:
                        ok = np.where(np.isinf(bp[i]), dc[i] == bp[i], ok)
                    acc["inf"] += i.size
                    acc["inf_bad"] += int(np.count_nonzero(~ok))
            if ulp is not None:
                min_eb, exponent_num, compute, thr = ulp
                tc = np.dtype(compute)
                bcc = bc.astype(tc)
                eb = np.where(bcc == 0, tc.type(0), np.floor(np.log2(np.abs(bcc))))
                eb = np.maximum(eb, tc.type(min_eb))
                u = np.abs(np.subtract(dc, bcc, dtype=tc) * _pow2(tc.type(exponent_num) - eb))
                if u.size:
                    acc["ulp_max"].append(np.max(u))
                acc["ulp_sum"] += float(np.sum(u))
                acc["ulp_above"] += int(np.count_nonzero(u > tc.type(thr)))
    if legacy:
        out["cosine"] = _cosine(n, chunk, acc, dl_all, bl_all)
        out["max_abs_err"] = _nanmax(acc["max_ae"])
        for (key, _), c in zip(RATIOS, acc["below"]):
            out[key] = c / n if n else 1
    if binary:
        out["binary_error_rate"] = acc["bin"] / n if n else "Nan"
    if small_value is not None:
        out["small_value_err_ratio"] = acc["sv_err"] / acc["sv"] if acc["sv"] else 0
        out["rmse"] = math.sqrt(acc["sq"] / n * (n / (n - acc["masked"] + 0.0001) + 0.0001)) if n else math.nan
        out["error_balance"] = abs(acc["ebp"] - acc["ebn"]) / n if n else 0
        re_max = _nanmax(acc["re_max"])
        if acc["re_n"] and not re_max < 0:
            out["max_rel_err"], out["mean_rel_err"] = re_max, tae.type(acc["re_sum"] / acc["re_n"])
        else:
            out["max_rel_err"] = out["mean_rel_err"] = 0
    if absolute is not None:
        out["inf_nan_error_rate"] = acc["inf_bad"] / acc["inf"] if acc["inf"] else 0
        out["rel_err_error_rate"] = acc["normal_err"] / acc["normal"] if acc["normal"] else 0
        out["abs_err_error_rate"] = acc["asv_err"] / acc["asv"] if acc["asv"] else 0
    if ulp is not None:
        tc = np.dtype(ulp[2])
        if n:
            out["ulp_max"], out["ulp_mean"] = _nanmax(acc["ulp_max"]), tc.type(acc["ulp_sum"] / n)
            out["ulp_above_threshold_ratio"] = acc["ulp_above"] / n
        else:
            out["ulp_max"] = out["ulp_mean"] = out["ulp_above_threshold_ratio"] = 0
    return out


def _cosine(n: int, chunk: int, acc: dict, dl: list, bl: list):
    """(value or None, passed): 2.1's special cases, then msprobe's normalised formula (the unscaled dot
    products of the pass when there are several chunks and the maxima are moderate)."""
    if n <= 1:
        return None, True
    md, mb = _nanmax(acc["max_d"]), _nanmax(acc["max_b"])
    if md <= COSINE_ZERO_EPS or mb <= COSINE_ZERO_EPS:
        return None, bool(md <= COSINE_ZERO_EPS and mb <= COSINE_ZERO_EPS)
    with np.errstate(all="ignore"):
        if n > chunk and 1e-130 < md < 1e130 and 1e-130 < mb < 1e130:
            dot, sdd, sbb = acc["dot"], acc["sdd"], acc["sbb"]
        else:
            dot = sdd = sbb = 0.0
            for d64, b64 in zip(dl, bl):
                d, b = d64 / np.float64(md), b64 / np.float64(mb)
                dot += float(np.einsum("i,i->", d, b))
                sdd += float(np.einsum("i,i->", d, d))
                sbb += float(np.einsum("i,i->", b, b))
        cos = np.float64(dot) / (np.sqrt(np.float64(sdd)) * np.sqrt(np.float64(sbb)))
    if np.isnan(cos):
        return math.nan, False
    cos = float(min(1.0, max(-1.0, cos)))
    return cos, cos > 0.99
