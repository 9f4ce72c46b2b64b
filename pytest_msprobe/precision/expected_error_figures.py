"""What the expected-error model reads of tensors: their magnitudes (:class:`Profile`, of an array or a tensor
or of dump statistics) and the observed difference of two (:class:`Observed`).

Part of :mod:`.expected_error` (which re-exports :class:`TensorStat`, :class:`Observed` and :func:`observe`);
pure, no I/O. Two sources of the same figures: :func:`profile_array` and :func:`observe` read arrays and sum in
numpy's order, bit for bit (the compiled reads of :mod:`dumpers.metrics_sums`): the reference, and what a row
the metric pass did not measure takes; :func:`from_pass` takes the figures the metric pass measured while it
read a device output and its bench (:class:`dumpers.metrics_engine.Figures`: the same terms summed in the
pass's order, held to the reference by tests/test_expected_error_figures.py), so the Error / Expected column
needs no read of its own.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TensorStat:
    """What a statistics dump records of a tensor (dump.json's dtype, shape, Max, Min, Mean, Norm)."""

    dtype: str
    shape: tuple
    max: float
    min: float
    mean: float
    norm: float

    @classmethod
    def from_dump(cls, entry: Mapping) -> TensorStat:
        """From a dump.json tensor entry; missing or non-numeric statistics become NaN."""
        def num(key: str) -> float:
            try:
                return float(entry.get(key))
            except (TypeError, ValueError):
                return math.nan
        return cls(str(entry.get("dtype", "")), tuple(int(s) for s in entry.get("shape") or ()), num("Max"),
                   num("Min"), num("Mean"), num("Norm"))

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass(frozen=True)
class Profile:
    """The magnitudes of one tensor the model needs."""

    numel: int
    shape: tuple
    rms: float
    max_abs: float
    mean_abs: float
    mean: float


# dtypes the compiled sums take (as float64 values, summed in numpy's order: its bits)
_FUSED = (np.dtype(np.float32), np.dtype(np.float64))
# ... and the bits they widen themselves: float16 as uint16, bfloat16 as int16
_BITS = {"torch.bfloat16": "int16", "torch.float16": "uint16"}


def _flat_for_sums(x: Any) -> np.ndarray:
    """A flat numpy array :func:`dumpers.metrics_sums.magnitude_sums` reads: float32/float64 values, or the
    bits of float16 (uint16) and bfloat16 (int16) values, no converted copy; other dtypes as float64."""
    if hasattr(x, "detach"):
        t = x.detach().cpu().reshape(-1)
        bits = _BITS.get(str(t.dtype))
        if bits is not None:
            import torch
            return t.view(getattr(torch, bits)).numpy()
        x = t.numpy()
    a = np.asarray(x).reshape(-1)
    if a.dtype == np.float16:
        return a.view(np.uint16)
    return a if a.dtype in _FUSED else a.astype(np.float64)


def _values(bits: np.ndarray) -> np.ndarray:
    """The float values of an array :func:`_flat_for_sums` made (bits widened to float32)."""
    if bits.dtype == np.int16:
        return (bits.astype(np.int32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32) if bits.dtype == np.uint16 else bits


def profile_array(x: Any) -> Profile:
    """The magnitudes of a numpy array or a torch tensor (float16 and bfloat16 read as their bits): numpy's
    float64 sums of the squares, magnitudes and values of the finite elements, and their largest magnitude."""
    shape = tuple(np.shape(x))
    flat = _flat_for_sums(x)
    n = int(flat.size)
    if n == 0:
        return Profile(0, shape, 0.0, 0.0, 0.0, 0.0)
    from dumpers import metrics_sums as K
    sq = absum = total = peak = 0.0
    run = np.getbufsize()
    for start in range(0, n, 1 << 20):
        c = flat[start:start + (1 << 20)]
        part = K.magnitude_sums(c, run)
        if not all(math.isfinite(v) for v in part):        # rare: leave the non-finite elements out
            c = _values(c)
            c = c[np.isfinite(c)].astype(np.float64)
            mag = np.abs(c)
            with np.errstate(over="ignore"):                  # squares beyond float64's range: inf, as the pass
                part = (float(np.square(c).sum()), float(mag.sum()), float(c.sum()),
                        float(mag.max()) if c.size else 0.0)
        sq, absum, total, peak = sq + part[0], absum + part[1], total + part[2], max(peak, part[3])
    return Profile(n, shape, math.sqrt(sq / n), peak, absum / n, total / n)


class LazyProfile:
    """The :class:`Profile` of an array or tensor, measured when the model first asks for a magnitude (most
    calls need their output's alone), kept in ``memo`` under the array's identity."""

    __slots__ = ("array", "memo", "shape")

    def __init__(self, array: Any, memo: dict) -> None:
        self.array, self.memo, self.shape = array, memo, tuple(np.shape(array))

    def profile(self) -> Profile:
        key = id(self.array)
        if key not in self.memo:
            self.memo[key] = profile_array(self.array)
        return self.memo[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.profile(), name)


def profile_stat(s: TensorStat | Mapping) -> Profile:
    if not isinstance(s, TensorStat):
        s = TensorStat.from_dump(s)
    n = s.numel
    finite = [v for v in (s.max, s.min) if math.isfinite(v)]
    peak = max((abs(v) for v in finite), default=0.0)
    rms = s.norm / math.sqrt(n) if n and math.isfinite(s.norm) else peak
    mean = s.mean if math.isfinite(s.mean) else 0.0
    return Profile(n, tuple(s.shape), rms, peak, max(abs(mean), 0.8 * rms), mean)


@dataclass(frozen=True)
class Observed:
    """An observed difference of two tensors: its max-abs and mean-abs over the elements."""

    max_abs: float
    mean_abs: float
    mismatched_nonfinite: int = 0      # NaN against a number, or infinities that differ


def observe(a: Any, b: Any) -> Observed:
    """Max-abs and mean-abs of ``a - b`` (arrays of one shape, any float dtype; computed in float64).

    Positions where both are NaN, or both the same infinity, count as equal; any other non-finite mismatch
    makes the figures infinite and is counted.
    """
    fa, fb = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if fa.shape != fb.shape:
        raise ValueError(f"observe: sizes differ ({fa.size} and {fb.size} elements)")
    n = int(fa.size)
    from dumpers import metrics_sums as K
    peak = total = 0.0
    bad = 0
    run = np.getbufsize()
    fused = fa.dtype in _FUSED and fb.dtype in _FUSED
    for start in range(0, n, 1 << 20):
        x, y = fa[start:start + (1 << 20)], fb[start:start + (1 << 20)]
        top = K.abs_diff_max(x, y) if fused else math.nan
        if math.isfinite(top):                             # the common case: one fused pass, no temporary
            peak, total = max(peak, top), total + K.float64_sum(x, y, K.T_ABS_DIFF, run)
            continue
        with np.errstate(invalid="ignore", over="ignore"):     # inf - inf: judged below
            d = np.abs(np.subtract(x, y, dtype=np.float64))
        if not np.isfinite(d).all():                       # rare: judge the non-finite positions
            x, y = x.astype(np.float64), y.astype(np.float64)
            finite = np.isfinite(x) & np.isfinite(y)
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            bad += int(np.count_nonzero(~finite & ~same))
            d = d[finite]
        if d.size:
            peak = max(peak, float(d.max()))
            total += float(d.sum())
    if bad:
        return Observed(math.inf, math.inf, bad)
    return Observed(peak, total / n if n else 0.0, 0)


def from_pass(figures: Any, shape: tuple) -> tuple:
    """``(Profile, Observed)`` of a device output against its bench from what the metric pass measured while it
    read them (:class:`dumpers.metrics_engine.Figures`): what :func:`profile_array` of the output and
    :func:`observe` of the two give, the same terms summed in the pass's order (within the bound of
    ``dumpers.metrics_kernel._figures``, about 1e-11 relative, where the reference sums in numpy's order)."""
    n = int(figures.n)
    if n == 0:
        return Profile(0, tuple(shape), 0.0, 0.0, 0.0, 0.0), Observed(0.0, 0.0, 0)
    profile = Profile(n, tuple(shape), math.sqrt(figures.sq_sum / n), figures.max_abs, figures.abs_sum / n,
                      figures.value_sum / n)
    bad = int(figures.err_mismatched)
    observed = Observed(math.inf, math.inf, bad) if bad else Observed(figures.err_max, figures.err_sum / n, 0)
    return profile, observed
