"""Random tensors from recorded statistics, vectorised with numpy (no per-element Python work).

What a generated tensor honours, for a recorded tensor item:

* dtype and shape exactly (0-d and empty shapes included);
* every finite value lies in [Min, Max]; element 0 is Min and the last element is Max, so both extremes are
  present exactly (msprobe's rule). A recorded inf/NaN is put back at those places (NaN at element 1, as
  msprobe 26.2 does) and the finite values are bounded by ``Min_except_inf_nan``/``Max_except_inf_nan``;
* Mean and Norm, when recorded and finite: the interior is a clipped normal whose location and scale are
  corrected a few times, so the achieved mean and norm usually land within 1% of the recorded ones
  (exactly reachable statistics are hit to float precision; impossible ones, e.g. a Norm larger than
  the range allows, get as close as [Min, Max] permits). The achieved values are reported, never assumed;
* integer tensors the same way, rounded; bool tensors honour "Max = any true", "Min = all true";
* index tensors (see :mod:`generators.index_rules`) stay within the indexed dimension; a recorded ignore
  index (e.g. -100 for cross_entropy) is kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dumpers import format as fmt
from generators import dumpjson

CORRECTION_ROUNDS_SMALL = 100  # fixed-point rounds fitting the clipped normal (stops once converged)
SMALL_TENSOR = 1 << 16         # up to this size the fit runs on the tensor itself
PROBE_SIZE = 1 << 14           # larger tensors: the fit runs on a sample, then one exact affine step
CORRECTION_TOL = 1e-6          # relative tolerance on mean and standard deviation
DESCRIBE_CHUNK = 1 << 20       # norms are summed in float64 chunk by chunk
DEFAULT_RANGE = (-1.0, 1.0)    # used when a float tensor has no finite statistics at all


class GenerationError(ValueError):
    """A tensor item that cannot be generated (unknown dtype, nothing known about it)."""


@dataclass(frozen=True)
class TensorSpec:
    """What the dump recorded about one tensor."""

    dtype: str
    shape: tuple
    min: Any = None
    max: Any = None
    mean: Any = None
    norm: Any = None
    min_finite: Any = None
    max_finite: Any = None

    @staticmethod
    def dtype_of(item: dict) -> str:
        """The canonical dtype of a tensor item; GenerationError for one that cannot be generated."""
        dtype = fmt.canonical_dtype(item.get("dtype"))
        if dtype is None or fmt.dtype_facts(dtype) is None:
            raise GenerationError(f"dtype {item.get('dtype')!r} cannot be generated")
        return dtype

    @classmethod
    def from_item(cls, item: dict) -> TensorSpec:
        dtype = cls.dtype_of(item)
        return cls(dtype=dtype, shape=tuple(item.get("shape") or ()), min=item.get("Min"),
                   max=item.get("Max"), mean=item.get("Mean"), norm=item.get("Norm"),
                   min_finite=item.get("Min_except_inf_nan"), max_finite=item.get("Max_except_inf_nan"))

    @property
    def numel(self) -> int:
        return dumpjson.element_count(list(self.shape))

    @property
    def nbytes(self) -> int:
        return self.numel * fmt.dtype_facts(self.dtype).itemsize


@dataclass(frozen=True)
class GenParams:
    """Knobs of one generated example (Hypothesis draws these; shrinking simplifies them).

    magnitude: 1 keeps the statistics-matched spread; 0 collapses every interior value to the simplest
        value in range (0 clamped into [Min, Max]). Extremes stay in place at any magnitude.
    match_stats: approximate Mean/Norm (True) or draw uniformly in [Min, Max] (False, msprobe's way).
    edge_values: overwrite some interior elements with edge values that fit in [Min, Max].
    """

    magnitude: float = 1.0
    match_stats: bool = True
    edge_values: bool = False


@dataclass(frozen=True)
class IndexBound:
    """Valid values of an index tensor: [low, high] (inclusive), plus an ignore value kept if recorded."""

    low: int
    high: int
    ignore: int | None = None


def _num(x: Any) -> float | None:
    return float(x) if dumpjson.is_number(x) else None


def finite_bounds(spec: TensorSpec, dt: fmt.DtypeInfo) -> tuple:
    """The finite [lo, hi] the values are drawn from (26.2 handling of inf/NaN statistics)."""
    lo, hi = _num(spec.min), _num(spec.max)
    if lo is None or not math.isfinite(lo):
        lo = _num(spec.min_finite) if _num(spec.min_finite) is not None and math.isfinite(spec.min_finite) else None
    if hi is None or not math.isfinite(hi):
        hi = _num(spec.max_finite) if _num(spec.max_finite) is not None and math.isfinite(spec.max_finite) else None
    if lo is None and hi is None:
        lo, hi = DEFAULT_RANGE
    elif lo is None:
        lo = hi - max(1.0, abs(hi))
    elif hi is None:
        hi = lo + max(1.0, abs(lo))
    if lo > hi:
        lo, hi = hi, lo
    lo, hi = min(max(lo, dt.lo), dt.hi), min(max(hi, dt.lo), dt.hi)
    return lo, hi


def _stats_targets(spec: TensorSpec, n: int) -> tuple:
    mean, norm = _num(spec.mean), _num(spec.norm)
    if mean is None or norm is None or not (math.isfinite(mean) and math.isfinite(norm)) or n < 3:
        return None, None
    return mean, norm


def _fit_clipped_normal(z: np.ndarray, lo: float, hi: float, mean: float, sd: float) -> tuple:
    """Location and scale (mu, sigma) such that clip(mu + sigma * z, lo, hi) has the given mean and sd.

    Fixed-point iteration on ``z`` (a standard normal sample, small): shift by the mean error, scale by
    the sd ratio. Converges for every reachable target; for an unreachable one (sd above what [lo, hi]
    allows) sigma grows until the values sit on the two bounds, the closest reachable shape.
    """
    mu, sigma = mean, sd
    cap = 1e3 * (hi - lo) + 1e-30
    tol = CORRECTION_TOL * max(abs(mean), sd, (hi - lo) * 1e-3)
    y = np.empty_like(z)
    for _ in range(CORRECTION_ROUNDS_SMALL):
        np.multiply(z, sigma, out=y)
        y += mu
        np.clip(y, lo, hi, out=y)
        m, s = float(y.mean()), float(y.std())
        if abs(m - mean) <= tol and abs(s - sd) <= tol:
            break
        mu += mean - m
        sigma = min(sigma * (sd / s), cap) if s > 0 else min(max(sigma, sd) * 2 + 1e-30, cap)
    return mu, sigma


def _interior_float(rng: np.random.Generator, k: int, lo: float, hi: float, spec: TensorSpec,
                    n: int, params: GenParams, work: np.dtype) -> np.ndarray:
    mean, norm = _stats_targets(spec, n) if params.match_stats else (None, None)
    gen_dtype = np.float64 if work == np.float64 else np.float32
    if mean is None or hi == lo:
        x = rng.random(k, dtype=gen_dtype).astype(work, copy=False)
        x *= (hi - lo)
        x += lo
        np.clip(x, lo, hi, out=x)
        return x
    # the extremes take part in the recorded statistics: the interior carries the rest
    mean_in = min(max((mean * n - lo - hi) / k, lo), hi)
    sumsq_in = max(norm * norm - lo * lo - hi * hi, 0.0)
    sd_in = math.sqrt(max(sumsq_in / k - mean_in * mean_in, 0.0))
    x = rng.standard_normal(k, dtype=gen_dtype).astype(work, copy=False)
    probe = x[: k if k <= SMALL_TENSOR else PROBE_SIZE].astype(np.float64)
    mu, sigma = _fit_clipped_normal(probe, lo, hi, mean_in, sd_in)
    x *= sigma
    x += mu
    np.clip(x, lo, hi, out=x)
    if k > SMALL_TENSOR:         # one exact affine step on the whole tensor removes the probe's sampling error
        m, s = float(x.mean(dtype=np.float64)), float(x.std(dtype=np.float64))
        if s > 0:
            x -= m
            x *= sd_in / s
            x += mean_in
            np.clip(x, lo, hi, out=x)
    return x


def _shrink(x: np.ndarray, lo: float, hi: float, magnitude: float) -> np.ndarray:
    if magnitude >= 1.0:
        return x
    centre = min(max(0.0, lo), hi)
    x -= centre
    x *= max(magnitude, 0.0)
    x += centre
    return x


def edge_candidates(dt: fmt.DtypeInfo, lo: float, hi: float) -> list:
    """Edge values of the dtype that lie within [lo, hi]: signed zeros, subnormals, neighbours of the
    extremes and of the dtype's max, exact ties (.5 values, repeats of the extremes)."""
    cands = [0.0, -0.0, dt.tiny_sub, -dt.tiny_sub, dt.tiny - dt.tiny_sub, dt.tiny, -dt.tiny, 0.5, -0.5, 1.5,
             -1.5, 2.5, dt.hi, dt.lo, hi, lo]
    if dt.numpy in ("float16", "float32", "float64"):
        ftype = np.dtype(dt.numpy).type
        cands += [float(np.nextafter(ftype(hi), ftype(-np.inf))), float(np.nextafter(ftype(lo), ftype(np.inf))),
                  float(np.nextafter(ftype(dt.hi), ftype(0)))]
    return [c for c in cands if lo <= c <= hi]


def _apply_edges(rng: np.random.Generator, x: np.ndarray, cands: list) -> None:
    """Overwrite about 1/16 of ``x`` (at least one element per candidate, as room allows) with edge values."""
    if not cands or x.size == 0:
        return
    count = min(x.size, max(len(cands), x.size // 16))
    pos = rng.choice(x.size, size=count, replace=False) if x.size <= 1 << 20 else rng.integers(0, x.size, count)
    picks = np.asarray(cands, dtype=np.float64)
    values = np.concatenate([picks, picks[rng.integers(0, len(cands), max(count - len(cands), 0))]])[:count]
    x[pos] = values


def _fill_float(rng, spec: TensorSpec, dt: fmt.DtypeInfo, params: GenParams) -> np.ndarray:
    n = spec.numel
    work = np.dtype(np.float64 if dt.numpy == "float64" else np.float32)
    out = np.empty(n, dtype=np.dtype(dt.numpy))
    if n == 0:
        return out.reshape(spec.shape)
    raw_lo, raw_hi = _num(spec.min), _num(spec.max)
    if raw_lo == math.inf or raw_hi == -math.inf:      # Min = +inf or Max = -inf: every element is that infinity
        out.fill(raw_lo if raw_lo == math.inf else raw_hi)
        return out.reshape(spec.shape)
    lo, hi = finite_bounds(spec, dt)
    k = max(n - 2, 0)
    if k:
        x = _interior_float(rng, k, lo, hi, spec, n, params, work)
        x = _shrink(x, lo, hi, params.magnitude)
        if params.edge_values:
            _apply_edges(rng, x, edge_candidates(dt, lo, hi))
        out[1:-1] = x
    # recorded infinities go back in as they were; finite extremes as clamped into the dtype's range
    first = raw_lo if raw_lo is not None and math.isinf(raw_lo) else lo
    last = raw_hi if raw_hi is not None and math.isinf(raw_hi) else hi
    out[0] = first
    out[-1] = last
    if any(v is not None and math.isnan(v) for v in (raw_lo, raw_hi)):
        out[1 if n >= 3 else n - 1] = np.nan
    return out.reshape(spec.shape)


def _int_bounds(spec: TensorSpec, dt: fmt.DtypeInfo) -> tuple:
    lo, hi = _num(spec.min), _num(spec.max)
    lo = math.ceil(lo) if lo is not None and math.isfinite(lo) else None
    hi = math.floor(hi) if hi is not None and math.isfinite(hi) else None
    if lo is None and hi is None:
        lo, hi = 0, 10
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    if lo > hi:
        lo, hi = hi, lo
    return int(min(max(lo, dt.lo), dt.hi)), int(min(max(hi, dt.lo), dt.hi))


def _fill_int(rng, spec: TensorSpec, dt: fmt.DtypeInfo, params: GenParams,
              index: IndexBound | None) -> np.ndarray:
    n = spec.numel
    out = np.empty(n, dtype=np.dtype(dt.numpy))
    if n == 0:
        return out.reshape(spec.shape)
    lo, hi = _int_bounds(spec, dt)
    ignore_first = False
    if index is not None:
        ignore_first = index.ignore is not None and lo == index.ignore
        lo_valid = max(lo if not ignore_first else index.low, index.low)
        hi_valid = min(hi, index.high)
        if lo_valid > hi_valid:                  # recorded range unusable: use the whole valid range
            lo_valid, hi_valid = index.low, max(index.high, index.low)
        lo, hi = lo_valid, hi_valid
    k = max(n - 2, 0)
    if k:
        mean, _norm = _stats_targets(spec, n) if params.match_stats and index is None else (None, None)
        if mean is None or hi == lo:
            x = rng.integers(lo, hi + 1, size=k, dtype=np.int64)
        else:
            xf = _interior_float(rng, k, float(lo), float(hi), spec, n, params, np.dtype(np.float64))
            x = np.rint(xf).astype(np.int64)
        if params.magnitude < 1.0:
            centre = min(max(0, lo), hi)
            x = centre + np.rint((x - centre) * max(params.magnitude, 0.0)).astype(np.int64)
        if params.edge_values:
            ties = [v for v in (lo, hi, 0, -1, 1) if lo <= v <= hi]
            _apply_edges(rng, x, ties)
            x = x.astype(np.int64)
        out[1:-1] = np.clip(x, lo, hi)
    out[0] = index.ignore if ignore_first else lo
    out[-1] = hi
    return out.reshape(spec.shape)


def _fill_bool(rng, spec: TensorSpec, params: GenParams) -> np.ndarray:
    n = spec.numel
    if n == 0:
        return np.empty(spec.shape, dtype=bool)
    any_true, all_true = spec.max, spec.min
    if all_true is True or all_true == 1:
        return np.ones(spec.shape, dtype=bool)
    if any_true is False or any_true == 0:
        return np.zeros(spec.shape, dtype=bool)
    out = rng.random(n, dtype=np.float32) < (0.5 * max(params.magnitude, 0.0) if params.magnitude < 1 else 0.5)
    out[0] = False
    out[-1] = True
    return out.reshape(spec.shape)


def _fill_complex(rng, spec: TensorSpec, dt: fmt.DtypeInfo, params: GenParams) -> np.ndarray:
    real_dt = fmt.dtype_facts("float64" if dt.name == "complex128" else "float32")
    absval = _fill_float(rng, TensorSpec(real_dt.name, spec.shape, spec.min, spec.max, spec.mean, None,
                                         spec.min_finite, spec.max_finite), real_dt, params)
    phase = rng.random(absval.shape) * (2 * np.pi)
    return (absval * np.exp(1j * phase)).astype(dt.numpy)


def generate(spec: TensorSpec, rng: np.random.Generator, params: GenParams = GenParams(),
             index: IndexBound | None = None) -> np.ndarray:
    """A numpy array honouring ``spec`` (bf16/fp8 are returned as float32 holding representable bounds).

    Raises:
        GenerationError: the dtype cannot be generated.
    """
    dt = fmt.dtype_facts(spec.dtype)
    if dt is None:
        raise GenerationError(f"dtype {spec.dtype!r} cannot be generated")
    if dt.kind == "bool":
        return _fill_bool(rng, spec, params)
    if dt.kind == "int":
        return _fill_int(rng, spec, dt, params, index)
    if dt.kind == "complex":
        return _fill_complex(rng, spec, dt, params)
    return _fill_float(rng, spec, dt, params)


def to_tensor(array: np.ndarray, dtype: str) -> Any:
    """The generated ``array`` as a CPU torch tensor of ``dtype`` (bfloat16/float8 from their float32 carrier)."""
    import torch

    tensor = torch.from_numpy(np.require(array, requirements="C"))
    return tensor.to(getattr(torch, dtype)) if str(tensor.dtype) != f"torch.{dtype}" else tensor


def describe(array: Any, spec: TensorSpec | None = None) -> str:
    """Short text: dtype, shape, achieved min/max/mean/norm (and the recorded targets, when given)."""
    a = np.asarray(array)
    head = f"{spec.dtype if spec else a.dtype}{list(a.shape)}"
    if a.size == 0:
        return f"{head} empty"
    if a.dtype == bool:
        return f"{head} true={int(a.sum())}/{a.size}"
    if np.iscomplexobj(a):
        a = np.abs(a)
    flat = a.reshape(-1)
    if flat.dtype.kind != "f":
        flat = flat.astype(np.float64)          # integer sums would overflow
    elif flat.dtype.itemsize < 4:
        flat = flat.astype(np.float32)          # numpy's float16 reductions are slow
    with np.errstate(all="ignore"):
        mn, mx = flat.min(), flat.max()
        mean = float(flat.mean(dtype=np.float64))
        chunks = (flat[i:i + DESCRIBE_CHUNK].astype(np.float64) for i in range(0, flat.size, DESCRIBE_CHUNK))
        norm = math.sqrt(sum(float(np.dot(c, c)) for c in chunks))
    text = f"{head} min={_g(mn)} max={_g(mx)} mean={_g(mean)} norm={_g(norm)}"
    if spec is not None and (spec.mean is not None or spec.norm is not None):
        text += f" (recorded mean={_g(spec.mean)} norm={_g(spec.norm)})"
    return text


def _g(x: Any) -> str:
    if x is None:
        return "null"
    try:
        return f"{float(x):.6g}"
    except (TypeError, ValueError):
        return str(x)
