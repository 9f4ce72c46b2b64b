"""How far a printed statistic may be from the tensor's own: msprobe (and this project's dumper) print a tensor's
Mean and Norm in its dtype, so a bf16 tensor's Mean and Norm are bf16 values, each within half an ulp of the value
before that rounding (docs/compare.md, "The first divergence"). Max and Min are elements of the tensor: exact.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["stat_rounding", "stat_rounding_columns"]


def stat_rounding(value: float, u: float) -> float:
    """How far a printed Mean or Norm may be from the tensor's own: msprobe (and this project's dumper) compute
    the statistics of a tensor in its dtype, so a bf16 tensor's Mean and Norm are bf16 values, each within half
    an ulp (``u 2^floor(log2|v|)``, at most ``u |v|``) of the value before that rounding. A value that is no
    value of the dtype was not rounded to it: then float32's half ulp. 0 for zero and non-finite values.
    (Max and Min are elements of the tensor: exact.)"""
    if not value or not math.isfinite(value) or not u:
        return 0.0
    mantissa, exponent = math.frexp(value)
    bits = round(-math.log2(u))
    if not (mantissa * 2.0 ** bits).is_integer():
        u = 2.0 ** -24 if u > 2.0 ** -24 else u
    half = math.ldexp(u, exponent - 1)
    return max(half, _SUBNORMAL_HALF_ULP.get(bits, 0.0))


def stat_rounding_columns(values: np.ndarray, u: np.ndarray) -> np.ndarray:
    """:func:`stat_rounding` over a column of values, each with its dtype's unit roundoff (NaN: unknown, 0)."""
    with np.errstate(all="ignore"):
        known = np.isfinite(values) & (values != 0) & np.isfinite(u) & (u > 0)
        mantissa, exponent = np.frexp(np.where(known, values, 1.0))
        bits = np.round(-np.log2(np.where(known, u, 1.0)))
        scaled = mantissa * 2.0 ** bits
        unit = np.where(scaled == np.floor(scaled), u, np.minimum(u, 2.0 ** -24))
        half = np.ldexp(np.where(known, unit, 0.0), exponent - 1)
        floor = np.zeros_like(half)
        for b, least in _SUBNORMAL_HALF_ULP.items():
            floor = np.where(bits == b, least, floor)
        return np.where(known, np.maximum(half, floor), 0.0)


# half the smallest subnormal of the dtypes with a reachable subnormal range (float16: 2^-24)
_SUBNORMAL_HALF_ULP = {11: 2.0 ** -25}
