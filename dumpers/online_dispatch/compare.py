"""Per-item accuracy check of online dispatch: the doc's Cosine / MaxAbsErr rule (spec section 6.1).

Cosine and MaxAbsErr are computed here (numpy only), in the same steps as the checker's
``pytest_msprobe.precision.metrics.cosine``/``max_abs_error``, so both give the same numbers (a test holds them
together); this module adds online dispatch's special cases, its verdict strings and its dropout rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# The doc's criteria, as data: an output fails if any rule holds.
COSINE_LOOSE = 0.99        # rule 1: Cosine < 0.99 and MaxAbsErr > 0.001
ABS_ERR_LOOSE = 0.001
COSINE_HARD = 0.9          # rule 2: Cosine < 0.9
ABS_ERR_HARD = 1.0         # rule 3: MaxAbsErr > 1
DROPOUT_MIN_NUMEL = 100    # dropout rule: with >= 100 elements the share of zeros may differ by < 0.1
DROPOUT_ZERO_SHARE = 0.1
EPS = float(np.finfo(np.float64).eps)
CHUNK = 1 << 16               # elements summed per dot product, as the checker's metrics do
_SAFE_LO, _SAFE_HI = 1e-130, 1e130   # maxima for which the unscaled float64 sums of squares cannot overflow

YES, NO, UNMATCHED, NONE = "Yes", "No", "Unmatched", "None"
FAILING = (NO, UNMATCHED)

SHAPE_UNMATCHED = "shape unmatched"
NOT_APPLICABLE = "N/A"
UNSUPPORTED = "unsupported"
NAN = "Nan"
MSG_SCALAR_TENSOR = "This tensor is scalar."
MSG_EMPTY = "This is empty data, can not compare."
MSG_SCALAR_DATA = "This is type of scalar data, can not compare."
MSG_ZERO_NPU = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
MSG_ZERO_BENCH = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
MSG_NAN = "Cannot compare by Cosine Similarity, the dump data has NaN."


@dataclass
class ItemCheck:
    """Cosine, MaxAbsErr and MaxRelativeErr cells of one output item, its verdict and message."""

    cosine: Any
    max_abs: Any
    max_rel: Any
    verdict: str
    message: str = ""


INPUT_CHECK = ItemCheck(1.0, 0.0, 0.0, YES)   # inputs are copies: never compared


def verdict(cosine: Any, max_abs: Any) -> str:
    """``Accuracy Reached or Not`` for one item from its Cosine and MaxAbsErr cells."""
    if cosine == SHAPE_UNMATCHED:
        return UNMATCHED
    if cosine == NOT_APPLICABLE:
        return NO
    if isinstance(cosine, str) or isinstance(max_abs, str) or max_abs is None:
        return NONE
    if cosine < COSINE_LOOSE and max_abs > ABS_ERR_LOOSE:
        return NO
    if cosine < COSINE_HARD or max_abs > ABS_ERR_HARD:
        return NO
    return YES


def max_relative_error(bench: np.ndarray, device: np.ndarray) -> float:
    """max |(D - B) / B|, with eps added to both sides where B == 0."""
    if bench.size == 0:
        return 0.0
    zero = bench == 0
    b = np.where(zero, bench + EPS, bench)
    d = np.where(zero, device + EPS, device)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return float(np.max(np.abs((d - b) / b)))


def _dots(device: np.ndarray, bench: np.ndarray, d_scale: Any, b_scale: Any) -> tuple:
    """Sums of d.b, d.d and b.b over chunks of ``CHUNK`` elements, each side divided by its scale (or not)."""
    dot = sdd = sbb = 0.0
    for start in range(0, bench.size, CHUNK):
        d = device[start:start + CHUNK]
        b = bench[start:start + CHUNK]
        if d_scale is not None:
            d, b = d / d_scale, b / b_scale
        dot += float(np.einsum("i,i->", d, b))
        sdd += float(np.einsum("i,i->", d, d))
        sbb += float(np.einsum("i,i->", b, b))
    return dot, sdd, sbb


def cosine(bench: np.ndarray, device: np.ndarray) -> float:
    """n.b / (|n| |b|) of two flat float64 arrays of two elements or more, clipped to [-1, 1].

    NaN when an inf/NaN is present or only one side is all zero (max |x| <= eps); 1.0 when both are.
    Up to ``CHUNK`` elements (or with extreme magnitudes) each side is first divided by its max |x|.
    """
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        b_max, d_max = np.max(np.abs(bench)), np.max(np.abs(device))
        d_zero, b_zero = bool(d_max <= EPS), bool(b_max <= EPS)
        if d_zero or b_zero:
            return 1.0 if d_zero and b_zero else float("nan")
        if not (np.isfinite(b_max) and np.isfinite(d_max)):
            return float("nan")
        safe = all(_SAFE_LO < m < _SAFE_HI for m in (d_max, b_max))
        scaled = bench.size <= CHUNK or not safe
        dot, sdd, sbb = _dots(device, bench, d_max if scaled else None, b_max if scaled else None)
        value = np.float64(dot) / (np.sqrt(np.float64(sdd)) * np.sqrt(np.float64(sbb)))
    if np.isnan(value):
        return float("nan")
    return float(min(1.0, max(-1.0, value)))


def max_abs_error(bench: np.ndarray, device: np.ndarray) -> float:
    """max |n - b| of two flat float64 arrays as a Python float (NaN propagates; 0.0 when empty)."""
    if bench.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.max(np.abs(device - bench)))


def _cosine_cell(bench: np.ndarray, device: np.ndarray) -> tuple[Any, str]:
    if bench.size == 1:
        return UNSUPPORTED, MSG_SCALAR_TENSOR
    with np.errstate(invalid="ignore", over="ignore"):
        n_norm = float(np.linalg.norm(device))
        b_norm = float(np.linalg.norm(bench))
    if n_norm <= EPS and b_norm <= EPS:
        return 1.0, ""
    if n_norm <= EPS:
        return NAN, MSG_ZERO_NPU
    if b_norm <= EPS:
        return NAN, MSG_ZERO_BENCH
    value = cosine(bench, device)
    if math.isnan(value):
        return NAN, MSG_NAN
    return value, ""


def check_arrays(bench: np.ndarray, device: np.ndarray, *, dropout: bool = False) -> ItemCheck:
    """Compare two float64 arrays of one output item."""
    if bench.shape != device.shape:
        return ItemCheck(SHAPE_UNMATCHED, SHAPE_UNMATCHED, SHAPE_UNMATCHED, UNMATCHED,
                         f"Shape of NPU and bench outputs differ: {list(device.shape)} vs {list(bench.shape)}.")
    if bench.size == 0:
        return ItemCheck(UNSUPPORTED, 0.0, 0.0, NONE, MSG_EMPTY)
    b, d = bench.reshape(-1), device.reshape(-1)
    cos, message = _cosine_cell(b, d)
    max_abs = max_abs_error(b, d)
    max_rel = max_relative_error(b, d)
    if dropout:
        return ItemCheck(cos, max_abs, max_rel, *_dropout_verdict(b, d))
    return ItemCheck(cos, max_abs, max_rel, verdict(cos, max_abs), message)


def _dropout_verdict(bench: np.ndarray, device: np.ndarray) -> tuple[str, str]:
    if bench.size < DROPOUT_MIN_NUMEL:
        return YES, "dropout: fewer than 100 elements, not judged"
    share = abs(int(np.count_nonzero(bench == 0)) - int(np.count_nonzero(device == 0))) / bench.size
    ok = share < DROPOUT_ZERO_SHARE
    return (YES if ok else NO), f"dropout: judged by the share of zeros (difference {share:.6f})"


def check_scalars(bench: Any, device: Any) -> ItemCheck:
    """Compare two bool/int/float outputs (errors only, Cosine is ``unsupported``)."""
    b, d = float(bench), float(device)
    diff = abs(d - b)
    rel = abs((d + EPS) - (b + EPS)) / abs(b + EPS) if b == 0 else diff / abs(b)
    return ItemCheck(UNSUPPORTED, diff, rel, NONE, MSG_SCALAR_DATA)


def unmatched(message: str) -> ItemCheck:
    """An item present on one side only, or of different kinds (tensor vs scalar)."""
    return ItemCheck(SHAPE_UNMATCHED, SHAPE_UNMATCHED, SHAPE_UNMATCHED, UNMATCHED, message)
