"""The metric cells of a compared row (spec compare.md section 4): statistics differences, tensor metrics, CRC32.

Tensor metrics take cosine and the maximum absolute error from :mod:`dumpers.metrics_engine` (the
project's one metrics engine); the Euclidean distance and msprobe's relative error (the golden value's epsilon
added where the golden value is zero) are numpy expressions of their definitions.
"""
from __future__ import annotations

import math
from typing import Any

from dumpers.format import FORMULA_LEAD

NA, NAN_TEXT, INF, NEG_INF, DIFF, ZERO = "N/A", "Nan", "inf", "-inf", "Diff", "0"
UNSUPPORTED, SHAPE_UNMATCHED = "unsupported", "shape unmatched"
FLOAT_EPSILON = 2.220446049250313e-16        # a norm at or below this is an all-zero tensor (cosine)
COSINE_ROUND_ABOVE = 0.9999                  # cosines above this are printed with 6 decimals
THOUSANDTH, FIVE_THOUSANDTHS = 0.001, 0.005
TENSOR_METRICS = 6

# value classes of a statistic
_NUM, _NAN, _INF, _NEG, _DEV, _NA, _OTHER = range(7)


def _classify(value: Any) -> int:
    text = str(value)
    low = text.lower()
    if low == "nan":
        return _NAN
    if low == "inf" or value == math.inf:
        return _INF
    if low == "-inf" or value == -math.inf:
        return _NEG
    if low not in ("true", "false") and not isinstance(value, bool) and _number(value) is not None:
        return _NUM
    if "npu" in low or "cpu" in low or "cuda" in low:
        return _DEV
    if text == NA:
        return _NA
    return _OTHER


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


_NAN_SET = (_NUM, _NAN, _INF, _NEG)
_DIFF_SET = (_NUM, _NAN, _INF, _NEG, _DEV, _OTHER)


def stat_diff(npu: Any, bench: Any) -> tuple:
    """(diff, relative error) cell texts of one statistic, target ``npu`` against golden ``bench``."""
    if type(npu) is float and type(bench) is float and npu - npu == 0 and bench - bench == 0:
        if npu == bench and (npu != 0 or repr(npu) == repr(bench)):      # 0.0 and -0.0 print apart
            return ZERO, ZERO
        diff = npu - bench
        return repr(diff), (INF if bench == 0 else f"{abs(diff / bench * 100)!r}%")
    if str(npu) == str(bench):
        return ZERO, ZERO
    a, b = _classify(npu), _classify(bench)
    if a == _NUM and b == _NUM:
        n, g = float(str(npu)), float(str(bench))
        diff = n - g
        rel = INF if g == 0 else f"{abs(diff / g * 100)!r}%"
        return repr(diff), rel
    if (a == _NAN and b in _NAN_SET) or (b == _NAN and a in _NAN_SET):
        return NAN_TEXT, NAN_TEXT
    if a == _INF and b in (_NUM, _NEG) or a == _NUM and b == _NEG:
        return INF, INF
    if a == _NEG and b in (_NUM, _INF) or a == _NUM and b == _INF:
        return NEG_INF, NEG_INF
    if a == _NA or b == _NA:
        return NA, NA
    if a == _DEV and b == _DEV:
        return NA, NA
    if (a in (_DEV, _OTHER) and b in _DIFF_SET) or (b in (_DEV, _OTHER) and a in _DIFF_SET):
        return DIFF, DIFF
    return NA, NA


def cell_text(value: Any) -> str:
    """A cell as msprobe's CSV writes it (floats shortest round-trip, infinities with a leading space)."""
    if isinstance(value, float):
        if math.isinf(value):
            return " inf" if value > 0 else " -inf"
        return repr(value)
    if isinstance(value, bool):
        return str(value)
    return str(value)


def guard(text: str) -> str:
    """Spreadsheet formula guard for text from a dump: a leading ``= + - @`` on a non-number gets an apostrophe."""
    if text and text[0] in FORMULA_LEAD and text.strip() not in (" inf", "-inf", "inf"):
        try:
            float(text.rstrip("%"))
        except ValueError:
            return "'" + text
    return text


def fixed12(value: float) -> float:
    """msprobe's printed metric: the value rounded to 12 decimals."""
    return float(f"{value:.12f}")


def _relative_errors(npu: Any, bench: Any) -> Any:
    import numpy as np

    n = npu if npu.dtype.kind == "f" else npu.astype(np.float64)
    b = bench if bench.dtype.kind == "f" else bench.astype(np.float64)
    rtype = np.result_type(n, b, np.float32)
    n = n.astype(rtype, copy=True)
    b = b.astype(rtype, copy=True)
    zero = b == 0
    if zero.any():
        eps = np.finfo(rtype).eps
        n[zero] += eps
        b[zero] += eps
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.abs((n - b) / b)


def tensor_metrics(npu: Any, bench: Any) -> list:
    """The six metric cells (Cosine, EucDist, MaxAbsErr, MaxRelativeErr, one-thousandth and five-thousandths
    ratios) of two numpy arrays already squeezed as msprobe squeezes them."""
    import numpy as np

    from dumpers.metrics_engine import cosine, max_abs_error

    if npu.size == 0:
        return [UNSUPPORTED] * TENSOR_METRICS
    if npu.shape != bench.shape:
        return [SHAPE_UNMATCHED] * TENSOR_METRICS
    if npu.ndim == 0:
        n64, b64 = np.float64(npu), np.float64(bench)
        with np.errstate(all="ignore"):
            mae = abs(n64 - b64)
        rel = _relative_errors(npu.reshape(1), bench.reshape(1))
        mre = np.max(rel)
        return [UNSUPPORTED, UNSUPPORTED, NAN_TEXT if np.isnan(mae) else fixed12(mae),
                NAN_TEXT if np.isnan(mre) else fixed12(mre), UNSUPPORTED, UNSUPPORTED]
    if npu.dtype.kind == "f" or bench.dtype.kind == "f":
        n_bad = ~np.isfinite(npu) if npu.dtype.kind == "f" else np.zeros(npu.shape, bool)
        b_bad = ~np.isfinite(bench) if bench.dtype.kind == "f" else np.zeros(bench.shape, bool)
        if n_bad.any() or b_bad.any():
            same = (np.array_equal(np.isinf(npu), np.isinf(bench)) and np.array_equal(np.isnan(npu), np.isnan(bench)))
            if not same:
                return [NA] * TENSOR_METRICS
            npu, bench = npu.copy(), bench.copy()
            npu[n_bad] = 0
            bench[b_bad] = 0
    n64 = npu.reshape(-1).astype(np.float64)
    b64 = bench.reshape(-1).astype(np.float64)
    with np.errstate(all="ignore"):
        n_norm, b_norm = np.linalg.norm(n64), np.linalg.norm(b64)
        if n_norm <= FLOAT_EPSILON and b_norm <= FLOAT_EPSILON:
            cos: Any = 1.0
        elif n_norm <= FLOAT_EPSILON or b_norm <= FLOAT_EPSILON:
            cos = NAN_TEXT
        else:
            value = cosine(b64, n64)
            cos = NAN_TEXT if math.isnan(value) else fixed12(value)
            if not isinstance(cos, str) and cos > COSINE_ROUND_ABOVE:
                cos = round(cos, 6)
        euc = float(np.linalg.norm(n64 - b64, ord=2))
    mae = max_abs_error(b64, n64)
    rel = _relative_errors(npu, bench)
    mre = float(np.max(rel))
    size = rel.size
    return [cos, euc, NAN_TEXT if math.isnan(mae) else fixed12(mae), NAN_TEXT if math.isnan(mre) else fixed12(mre),
            fixed12(int(np.count_nonzero(rel < THOUSANDTH)) / size),
            fixed12(int(np.count_nonzero(rel < FIVE_THOUSANDTHS)) / size)]
