"""Per-item accuracy check of online dispatch: the doc's Cosine / MaxAbsErr rule (spec section 6.1).

Cosine and MaxAbsErr come from the metric engine the checker uses (:mod:`dumpers.metrics_engine`); this
module adds online dispatch's special cases, its verdict strings and its dropout rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dumpers.metrics_engine import cosine, max_abs_error

# The doc's criteria, as data: an output fails if any rule holds.
COSINE_LOOSE = 0.99        # rule 1: Cosine < 0.99 and MaxAbsErr > 0.001
ABS_ERR_LOOSE = 0.001
COSINE_HARD = 0.9          # rule 2: Cosine < 0.9
ABS_ERR_HARD = 1.0         # rule 3: MaxAbsErr > 1
DROPOUT_MIN_NUMEL = 100    # dropout rule: with >= 100 elements the share of zeros may differ by < 0.1
DROPOUT_ZERO_SHARE = 0.1
EPS = float(np.finfo(np.float64).eps)

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
