"""Per-output metrics of the precision standard (spec precision-standard.md section 2).

The computation is the one metric pass of :mod:`dumpers.metrics_engine` (a compiled kernel per chunk, numpy's
sums), shared with online dispatch; this module hands it the standard's parameters in the types the spec
prescribes (section 1.7) and names the results as the details row does. Each metric is computed in the
numeric type the spec prescribes and returns the same scalar type msprobe writes (section 6.3): float32
results stay ``np.float32``, float64 results are ``np.float64`` or Python ``float``, "no data" results are
the integer ``0``.

Inputs may be numpy arrays (any shape; they are flattened) or any object with ``dtype`` (a numpy dtype),
``size`` and ``read(start, stop) -> np.ndarray`` returning a 1-D slice in that dtype, and optionally
``read_into(start, stop, out)`` filling a given buffer or ``read_bits(start, stop)`` returning a float32
source's bfloat16 values as their int16 bits. The compare layer hands the engine's own sources: a tensor's
numpy view as an ``ArraySource`` (a float16 tensor compared as float32 converted chunk by chunk) and a bfloat16
tensor's bits as a ``Bf16BitsSource`` (the kernel widens them, no converted copy).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dumpers import metrics_engine as engine
from dumpers.metrics_engine import (  # noqa: F401 - the engine's names the compare layer uses
    CHUNK,
    MSG_BENCH_ZERO,
    MSG_BOTH_ZERO,
    MSG_COS_NAN,
    MSG_DEVICE_ZERO,
    MSG_EMPTY_MAX,
    MSG_SCALAR,
    ArraySource,
    Bf16BitsSource,
    CosineResult,
    MetricSet,
    as_source,
)

from .standards import (
    BF16,
    BF16_EPS,
    BF16_MAX,
    COSINE_PASS,
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


def relative_eps(bench_dtype: Any, device_dtype: str) -> float:
    """The epsilon of the relative errors (1.7): 2^-8 for a bf16 device output, else the bench's eps."""
    if device_dtype == BF16:
        return BF16_EPS
    return float(np.finfo(np.dtype(bench_dtype)).eps)


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
        chunk: elements per chunk (default: the engine's ``CHUNK``).

    Returns:
        MetricSet whose ``values`` hold the computed cells by DETAIL_METRIC_FIELDS name.
    """
    bs, ds = as_source(bench), as_source(device)
    if eps is None:
        eps = relative_eps(bs.dtype, device_dtype)
    hi = _FINITE_MAX.get(device_dtype, float(np.finfo(np.dtype(ds.dtype)).max))
    groups = engine.Groups(
        eps=eps, legacy=legacy, ratios=tuple(RATIO_THRESHOLDS.items()), binary=binary,
        small_value=None if small_value is None else (small_value.sv, small_value.atol),
        absolute=None if absolute is None else (absolute.rtol, absolute.sv, absolute.atol, hi),
        ulp=None if ulp is None else (ulp.min_eb, ulp.exponent_num, ulp.compute, ulp.threshold),
        agree_nonfinite=agree_nonfinite, class_match=absolute_class_match, cosine_pass=COSINE_PASS)
    return engine.run(bs, ds, groups, chunk or CHUNK)


def binary_error_rate(bench: Any, device: Any, *, agree_nonfinite: bool = False) -> Any:
    """count(B != D) / N (2.4); the string "Nan" for empty outputs. Works for every dtype."""
    return engine.binary_error_rate(bench, device, agree_nonfinite=agree_nonfinite)
