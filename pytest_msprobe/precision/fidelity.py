"""Replay fidelity: a replayed device output against the one the training run recorded, element by element.

Judged by the expected error of the call (:func:`compare_expected`, :mod:`.expected_error`): ``exact`` (every
element bitwise equal), ``within rounding (k x expected): ...`` (the difference is what two correct kernels of
the call may differ by) or ``differs (N x expected): max abs diff X, max N ulp, F% of elements`` (F: the share
of elements that differ at all). Without an estimate (:func:`compare_values`): ``exact``, ``close (max N ulp,
limit L)`` (every element within the dtype's ULP limit of :data:`CLOSE_ULP`) or ``differs: ...`` (F: the share
of elements beyond the limit). ``not compared: REASON``: the recorded file is there but cannot be read.
The ULP here is the integer distance between two floats, done the
``numpy.testing`` way (view as integers of the same width, negative values mirrored so that the integers are
monotonic in the float values, bfloat16 as int16, every NaN alike), not the standard's scaled ULP error.
Pure functions over numpy arrays and torch tensors; no pytest, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

EXACT = "exact"
CLOSE = "close"
WITHIN = "within rounding"
DIFFERS = "differs"
NOT_COMPARED = "not compared"

# ULP limit of "close", by dtype. Results of dtypes narrower than float32 are float32 computations rounded
# once to the dtype: two faithful runs of the call can fall on either side of one rounding boundary, 1 ULP.
# float32/float64 results are computed in the dtype itself: another summation order or fused multiply-add
# changes the last two bits, 4 ULP. A limit of 0 (integers, bool): equal or not.
CLOSE_ULP = {
    "float64": 4,
    "float32": 4,
    "float16": 1,
    "bfloat16": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_INT_VIEW = {8: "int64", 4: "int32", 2: "int16", 1: "int8"}
CHUNK = 1 << 20                       # elements per pass: bounds the temporary arrays
NAN_ULP = np.iinfo(np.uint64).max     # distance of a NaN to a number


@dataclass(frozen=True)
class Fidelity:
    """How a replayed output compares with the recorded one: the verdict, its text and its figures."""

    verdict: str                    # EXACT | CLOSE | DIFFERS
    text: str                       # the Replay Fidelity cell
    max_abs: float | None = None
    max_ulp: int | None = None
    fraction: float | None = None   # share of elements beyond the ULP limit (or unequal, for integers)
    multiple: float | None = None   # the difference as a multiple of the expected one (compare_expected)

    @property
    def faithful(self) -> bool:
        """Whether the replay reproduced the recorded output (exact or close)."""
        return self.verdict != DIFFERS


def close_ulp(dtype: Any) -> int:
    """The ULP limit of ``close`` for a dtype (torch or numpy dtype, or its name); 0 for non-float dtypes."""
    return CLOSE_ULP.get(_dtype_name(dtype), 0)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _as_torch(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    return torch.from_numpy(np.ascontiguousarray(x))


def _ordered_ints(chunk: Any, torch: Any) -> np.ndarray:
    """Float bits as int64, negative floats mirrored so that integer order is float order (-0.0 -> 0)."""
    view = getattr(torch, _INT_VIEW[chunk.element_size()])
    ints = chunk.view(view).numpy().astype(np.int64)
    low = np.int64(np.iinfo(_INT_VIEW[chunk.element_size()]).min)
    negative = ints < 0
    ints[negative] = low - ints[negative]
    return ints


def ulp_distance(a: Any, b: Any) -> np.ndarray:
    """Element-wise integer ULP distance of two float arrays/tensors of one dtype and shape (uint64).

    NaN is at distance 0 of NaN (whatever the payload) and :data:`NAN_ULP` of any number.

    Raises:
        ValueError: dtypes or shapes differ, or the dtype is not a floating-point one.
    """
    import torch

    ta, tb = _as_torch(a), _as_torch(b)
    if ta.dtype != tb.dtype or ta.shape != tb.shape:
        raise ValueError(f"ulp_distance needs one dtype and shape, got {ta.dtype}{tuple(ta.shape)} and "
                         f"{tb.dtype}{tuple(tb.shape)}")
    if not ta.is_floating_point():
        raise ValueError(f"ulp_distance needs floating-point values, got {ta.dtype}")
    return _ulp_flat(ta.reshape(-1).contiguous(), tb.reshape(-1).contiguous(), torch).reshape(tuple(ta.shape))


def _ulp_flat(fa: Any, fb: Any, torch: Any) -> np.ndarray:
    ia, ib = _ordered_ints(fa, torch), _ordered_ints(fb, torch)
    ua, ub = ia.view(np.uint64), ib.view(np.uint64)
    with np.errstate(over="ignore"):
        dist = np.where(ia >= ib, ua - ub, ub - ua)      # unsigned wrap-around: exact for every 64-bit pair
    na, nb = torch.isnan(fa).numpy(), torch.isnan(fb).numpy()
    dist[na & nb] = 0
    dist[na ^ nb] = NAN_ULP
    return dist


def _shape(t: Any) -> str:
    return str(tuple(int(s) for s in t.shape))


def _percent(fraction: float) -> str:
    return f"{100.0 * fraction:.3g}%"


def _abs_text(value: float) -> str:
    return f"{value:.3e}"


def compare_tensors(replayed: Any, recorded: Any) -> Fidelity:
    """Fidelity of one replayed tensor against the recorded one (torch tensors or numpy arrays)."""
    import torch

    tr, tc = _as_torch(replayed), _as_torch(recorded)
    if tr.dtype != tc.dtype:
        return Fidelity(DIFFERS, f"{DIFFERS}: dtype {_dtype_name(tr.dtype)}, recorded {_dtype_name(tc.dtype)}")
    if tr.shape != tc.shape:
        return Fidelity(DIFFERS, f"{DIFFERS}: shape {_shape(tr)}, recorded {_shape(tc)}")
    if tr.is_complex():
        tr, tc = torch.view_as_real(tr), torch.view_as_real(tc)
    fr, fc = tr.reshape(-1).contiguous(), tc.reshape(-1).contiguous()
    n = int(fr.numel())
    if fr.is_floating_point():
        return _compare_floats(fr, fc, n, close_ulp(fr.dtype), torch)
    return _compare_exact_only(fr, fc, n, torch)


def _compare_floats(fr: Any, fc: Any, n: int, limit: int, torch: Any) -> Fidelity:
    bitwise = True
    max_ulp = 0
    max_abs = 0.0
    beyond = nan_mismatch = 0
    for start in range(0, n, CHUNK):
        a, b = fr[start:start + CHUNK], fc[start:start + CHUNK]
        if _same_bits(a, b, torch):
            continue
        bitwise = False
        dist = _ulp_flat(a, b, torch)
        nan = dist == NAN_ULP
        nan_mismatch += int(nan.sum())
        finite_dist = dist[~nan]
        if finite_dist.size:
            max_ulp = max(max_ulp, int(finite_dist.max()))
        beyond += int((dist > limit).sum())
        diff = np.abs(a.to(torch.float64).numpy() - b.to(torch.float64).numpy())
        diff[(dist == 0) | nan] = 0.0         # same value (inf == inf, NaN alike) or NaN counted apart
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
    if bitwise:
        return Fidelity(EXACT, EXACT, 0.0, 0, 0.0)
    fraction = beyond / n if n else 0.0
    if beyond == 0:
        return Fidelity(CLOSE, f"{CLOSE} (max {max_ulp} ulp, limit {limit})", max_abs, max_ulp, 0.0)
    text = f"{DIFFERS}: max abs diff {_abs_text(max_abs)}, max {max_ulp} ulp, {_percent(fraction)} of elements"
    if nan_mismatch:
        text += f", NaN against a number at {nan_mismatch} element{'s' if nan_mismatch != 1 else ''}"
    return Fidelity(DIFFERS, text, max_abs, max_ulp, fraction)


def _same_bits(a: Any, b: Any, torch: Any) -> bool:
    """Whether two contiguous 1-D tensors of one dtype hold the same bits: compared eight bytes at a time where
    their length and offsets allow (about three times faster than in a 2-byte width), the rest in their own."""
    size = a.element_size()
    per_word = 8 // size
    whole = a.numel() - a.numel() % per_word
    if per_word > 1 and whole and a.storage_offset() % per_word == 0 and b.storage_offset() % per_word == 0:
        if not torch.equal(a[:whole].view(torch.int64), b[:whole].view(torch.int64)):
            return False
        a, b = a[whole:], b[whole:]
    view = getattr(torch, _INT_VIEW[size])
    return torch.equal(a.view(view), b.view(view))


def _compare_exact_only(fr: Any, fc: Any, n: int, torch: Any) -> Fidelity:
    unequal = 0
    max_abs = 0.0
    for start in range(0, n, CHUNK):
        a, b = fr[start:start + CHUNK], fc[start:start + CHUNK]
        if torch.equal(a, b):
            continue
        ne = (a != b).numpy()
        unequal += int(ne.sum())
        if a.dtype == torch.bool:
            max_abs = 1.0
        else:
            diff = np.abs(a.numpy().astype(np.float64) - b.numpy().astype(np.float64))
            max_abs = max(max_abs, float(diff.max()))
    if not unequal:
        return Fidelity(EXACT, EXACT, 0.0, 0, 0.0)
    fraction = unequal / n
    return Fidelity(DIFFERS, f"{DIFFERS}: max abs diff {max_abs:.6g}, {_percent(fraction)} of elements",
                    max_abs, None, fraction)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, np.ndarray) or (type(x).__module__.startswith("torch") and hasattr(x, "dtype")
                                         and hasattr(x, "numel"))


def compare_values(replayed: Any, recorded: Any, depth: int = 0) -> Fidelity:
    """Fidelity of one output of any kind: tensor, Python value, None, or a list/tuple/dict of those.

    A container is ``exact`` when every element is, ``differs`` when one element does (its text names the
    first such element, ``[k]``), else ``close`` with the largest ULP distance met.
    """
    if _is_tensor(replayed) and _is_tensor(recorded):
        return compare_tensors(replayed, recorded)
    if _is_tensor(replayed) or _is_tensor(recorded):
        return Fidelity(DIFFERS, f"{DIFFERS}: {_kind(replayed)} replayed, {_kind(recorded)} recorded")
    if isinstance(replayed, dict) and isinstance(recorded, dict) and depth < 16:
        if set(replayed) != set(recorded):
            return Fidelity(DIFFERS, f"{DIFFERS}: keys {sorted(map(str, replayed))}, recorded "
                                     f"{sorted(map(str, recorded))}")
        return _combine([(str(k), compare_values(replayed[k], recorded[k], depth + 1)) for k in replayed])
    if isinstance(replayed, (list, tuple)) and isinstance(recorded, (list, tuple)) and depth < 16:
        if len(replayed) != len(recorded):
            return Fidelity(DIFFERS, f"{DIFFERS}: {len(replayed)} elements, recorded {len(recorded)}")
        return _combine([(str(i), compare_values(a, b, depth + 1)) for i, (a, b) in enumerate(zip(replayed,
                                                                                                   recorded))])
    if type(replayed) is type(recorded) and replayed == recorded:
        return Fidelity(EXACT, EXACT)
    if (isinstance(replayed, float) and isinstance(recorded, float) and replayed != replayed
            and recorded != recorded):
        return Fidelity(EXACT, EXACT)                      # NaN alike
    return Fidelity(DIFFERS, f"{DIFFERS}: {_short(replayed)} replayed, {_short(recorded)} recorded")


def _combine(parts: list) -> Fidelity:
    if all(p.verdict == EXACT for _, p in parts):
        return Fidelity(EXACT, EXACT, 0.0, 0, 0.0)
    for key, p in parts:
        if p.verdict == DIFFERS:
            return Fidelity(DIFFERS, f"{DIFFERS}: [{key}] {p.text[len(DIFFERS) + 2:]}", p.max_abs, p.max_ulp,
                            p.fraction)
    close = [p for _, p in parts if p.verdict == CLOSE]
    worst = max(close, key=lambda p: p.max_ulp or 0)
    return Fidelity(CLOSE, worst.text, worst.max_abs, worst.max_ulp, 0.0)


def _kind(x: Any) -> str:
    return "a tensor" if _is_tensor(x) else f"a {type(x).__name__}"


def _short(x: Any, limit: int = 40) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def not_compared(reason: str) -> Fidelity:
    """The cell of a row whose recorded file exists but could not be read (damaged, refused)."""
    return Fidelity(NOT_COMPARED, f"{NOT_COMPARED}: {reason}")


def _float_numpy(t: Any) -> np.ndarray:
    import torch

    t = _as_torch(t)
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) or not t.is_floating_point() else t).numpy()


def compare_expected(replayed: Any, recorded: Any, expected: Any) -> Fidelity:
    """Fidelity of one replayed tensor judged by the expected error of the call.

    ``expected``: an :class:`.expected_error.Expected` for one correct run of the call (its ``pair()`` figures
    are what two correct runs may differ by), or a function of no arguments that gives one (called only when
    the tensors differ); None falls back to :func:`compare_values`. The cell is
    ``exact``, ``within rounding (k x expected): FIGURES`` or ``differs (N x expected): FIGURES`` with
    FIGURES ``max abs diff X, max N ulp, F% of elements`` (F: the share of elements that differ at all).
    """
    from . import expected_error as ee

    base = compare_values(replayed, recorded)
    if expected is None or base.verdict == EXACT or not (_is_tensor(replayed) and _is_tensor(recorded)):
        return base
    if callable(expected):
        expected = expected()
        if expected is None:
            return base
    tr, tc = _as_torch(replayed), _as_torch(recorded)
    if tr.dtype != tc.dtype or tr.shape != tc.shape or not tr.is_floating_point() or base.max_abs is None:
        return base
    a, b = _float_numpy(tr).reshape(-1), _float_numpy(tc).reshape(-1)
    observed = ee.observe(a, b)
    m = ee.multiple(observed, expected.pair())
    n = a.size
    unequal = int(np.count_nonzero((a != b) & ~(np.isnan(a) & np.isnan(b))))
    fraction = unequal / n if n else 0.0
    figures = f"max abs diff {_abs_text(base.max_abs)}, max {base.max_ulp} ulp, {_percent(fraction)} of elements"
    if observed.mismatched_nonfinite:
        figures += (f", NaN or inf against a number at {observed.mismatched_nonfinite} element"
                    f"{'s' if observed.mismatched_nonfinite != 1 else ''}")
    if ee.classify(m) == ee.BEYOND_ROUNDING:
        return Fidelity(DIFFERS, f"{DIFFERS} ({_times(m)} x expected): {figures}", base.max_abs, base.max_ulp,
                        fraction, m)
    return Fidelity(WITHIN, f"{WITHIN} ({_times(m)} x expected): {figures}", base.max_abs, base.max_ulp,
                    fraction, m)


def _times(m: float) -> str:
    return "inf" if m == float("inf") else f"{m:.2g}"
