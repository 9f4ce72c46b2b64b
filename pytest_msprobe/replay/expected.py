"""The device's error as a multiple of the expected error of the call (the details CSV's ``Error / Expected``).

For every compared floating-point output and gradient: the device value against the bench (the exact result to
the device dtype's precision), divided by what a correct kernel of the call makes
(:mod:`pytest_msprobe.precision.expected_error`). Where the bench ran in the device's own dtype (``conv1d`` and
``conv2d`` in float32, ``type_as``) both sides are correct runs and the figures for two runs apply. An API
whose failing rows are all within that is ``within`` rounding: it fails msprobe's fixed thresholds, not a
correct kernel's arithmetic.
"""
from __future__ import annotations

from typing import Any

from dumpers import format as fmt

from ..precision import verdict

WITHIN = "within"
BEYOND = "beyond"


def _numpy(t: Any) -> Any:
    import torch

    t = t.detach().cpu()
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()


def _float_leaves(value: Any) -> list:
    import torch

    from .sides import leaves
    return [x for x in leaves(value) if isinstance(x, torch.Tensor) and x.is_floating_point()]


class CallArrays:
    """A replayed call's floating-point input tensors and output gradient (the model converts and measures
    those it needs), its non-tensor keyword arguments, and the model's cache of their magnitudes: made once per
    call for every row that asks."""

    def __init__(self, call: Any) -> None:
        import torch
        self.inputs = _float_leaves([list(call.args), dict(call.kwargs)])
        self.options = {k: v for k, v in call.kwargs.items() if not isinstance(v, torch.Tensor)}
        grads = _float_leaves(call.grad_output) if call.grad_output is not None else []
        self.grad = grads[0] if grads else None
        self.cache: dict = {}


_LAST: list = []          # [(call, CallArrays)] of the call being judged; dropped when its rows are done


def call_arrays(call: Any) -> CallArrays:
    """The :class:`CallArrays` of ``call`` (made at its first request, shared by Replay Fidelity and the
    Error / Expected column)."""
    if not _LAST or _LAST[0][0] is not call:
        _LAST[:] = [(call, CallArrays(call))]
    return _LAST[0][1]


def _pairs(name: str, api: str, bench: Any, device: Any, direction: str) -> list:
    from ..precision.standards import FIRST_OUTPUT_ONLY_APIS
    if isinstance(bench, (list, tuple)) and isinstance(device, (list, tuple)):
        count = 1 if api in FIRST_OUTPUT_ONLY_APIS else min(len(bench), len(device))
        return [(fmt.output_row_name(name, direction, i), i, bench[i], device[i]) for i in range(count)]
    return [(fmt.output_row_name(name, direction, 0), 0, bench, device)]


def device_multiples(call: Any, bench_out: Any, device_out: Any, bench_grads: list, device_grads: list) -> dict:
    """{row name: multiple} of every floating-point row both sides produced (rows it cannot judge are absent;
    whatever goes wrong leaves the column blank, never the check)."""
    try:
        return _multiples(call, bench_out, device_out, bench_grads, device_grads)
    except (RuntimeError, ValueError, TypeError, IndexError, ArithmeticError, MemoryError):
        return {}
    finally:
        _LAST.clear()                           # the last user of the call's arrays


def _multiples(call: Any, bench_out: Any, device_out: Any, bench_grads: list, device_grads: list) -> dict:
    import torch

    from ..precision import expected_error as ee
    arrays = call_arrays(call)
    rows: list = [(*p, fmt.FORWARD) for p in _pairs(call.name, call.api, bench_out, device_out, fmt.FORWARD)]
    rows += [(*p, fmt.BACKWARD) for p in _pairs(call.name, call.api, list(bench_grads), list(device_grads),
                                                 fmt.BACKWARD)] if device_grads else []
    out: dict = {}
    for row, index, bench, device, direction in rows:
        if not (isinstance(bench, torch.Tensor) and isinstance(device, torch.Tensor)) or bench.shape != device.shape \
                or not device.is_floating_point() or device.numel() == 0:
            continue
        device_array = _numpy(device)
        try:
            expected = ee.expected_error(call.api, device.dtype, arrays.inputs, device_array,
                                         kwargs=arrays.options, direction=direction, index=index,
                                         grad_output=arrays.grad, cache=arrays.cache)
        except (ValueError, TypeError, IndexError, ArithmeticError):
            continue
        if bench.dtype == device.dtype:          # the bench is a correct run in the same dtype, not the exact one
            expected = expected.pair()
        out[row] = ee.multiple(ee.observe(device_array, _numpy(bench)), expected)
    return out


def multiple_cell(value: float | None) -> str:
    """The ``Error / Expected`` cell: blank (not judged), ``inf``, or the multiple to 3 significant digits."""
    if value is None:
        return ""
    return "inf" if value == float("inf") else f"{value:.3g}"


def rounding_of(result: Any) -> str:
    """For a failing API: ``beyond`` when a failing row's error is beyond the rounding of a correct kernel,
    ``within`` when every failing row is within it, "" when it cannot be told (or the API does not fail)."""
    from ..precision import expected_error as ee
    multiples = getattr(result, "multiples", {}) or {}
    bad = [r for r in result.details if verdict.is_bad_row(r.status)]
    if not bad:
        return ""
    values = [multiples.get(r.name) for r in bad]
    if any(v is not None and ee.classify(v) == ee.BEYOND_ROUNDING for v in values):
        return BEYOND
    return WITHIN if all(v is not None for v in values) else ""
