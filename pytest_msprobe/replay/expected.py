"""What a replay is judged by beyond msprobe's metrics, both through the expected error of the call
(:mod:`pytest_msprobe.precision.expected_error`, one :class:`CallArrays` per call shared by both): the device's
error against the bench as a multiple of it (the details CSV's ``Error / Expected``), and the recorded side.

For every compared floating-point output and gradient: the device value against the bench (the exact result to
the device dtype's precision), divided by what a correct kernel of the call makes
(:mod:`pytest_msprobe.precision.expected_error`). Where the bench ran in the device's own dtype (``conv1d`` and
``conv2d`` in float32, ``type_as``) both sides are correct runs and the figures for two runs apply. An API
whose failing rows are all within that is ``within`` rounding: it fails msprobe's fixed thresholds, not a
correct kernel's arithmetic.

The recorded side (framework-neutral, over CPU torch values): a side (:class:`.result.Side`) carries, besides
its outputs and the gradients of the call's tensor arguments, ``node_grads``: the gradients in the layout the
dumper records them (PyTorch: the input gradients of the output's autograd node; MindSpore: one per positional
argument); the adapter's ``gradient_mapping`` says which of those is which argument's gradient. From the bench
side this module builds the device side of ``recorded`` (with a SKIP reason for every output the dump did not
record); from a device side, the ``Replay Fidelity`` cell of every row the dump recorded.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dumpers import format as fmt
from generators.recorded import BACKWARD, FORWARD, not_recorded_reason

from ..precision import verdict

WITHIN = "within"
BEYOND = "beyond"


def _numpy(t: Any) -> Any:
    import torch

    t = t.detach().cpu()
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()


def _float_leaves(value: Any) -> list:
    import torch

    from .result import leaves
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


def device_multiples(call: Any, bench_out: Any, device_out: Any, bench_grads: list, device_grads: list,
                     details: Iterable = ()) -> dict:
    """{row name: multiple} of every floating-point row both sides produced (rows it cannot judge are absent;
    whatever goes wrong leaves the column blank, never the check). ``details``: the call's details rows; a row
    the metric pass measured (its ``figures``) takes the device's magnitudes and the observed error from there,
    the others read the tensors."""
    try:
        measured = {r.name: r.figures for r in details if getattr(r, "figures", None) is not None}
        return _multiples(call, bench_out, device_out, bench_grads, device_grads, measured)
    except (RuntimeError, ValueError, TypeError, IndexError, ArithmeticError, MemoryError):
        return {}
    finally:
        _LAST.clear()                           # the last user of the call's arrays


def _multiples(call: Any, bench_out: Any, device_out: Any, bench_grads: list, device_grads: list,
               measured: dict) -> dict:
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
        figures = measured.get(row)
        if figures is not None and figures.n == device.numel():     # measured by the metric pass
            output, observed = ee.from_pass(figures, tuple(device.shape))
        else:
            output, observed = _numpy(device), None
        try:
            expected = ee.expected_error(call.api, device.dtype, arrays.inputs, output,
                                         kwargs=arrays.options, direction=direction, index=index,
                                         grad_output=arrays.grad, cache=arrays.cache)
        except (ValueError, TypeError, IndexError, ArithmeticError):
            continue
        if bench.dtype == device.dtype:          # the bench is a correct run in the same dtype, not the exact one
            expected = expected.pair()
        if observed is None:
            observed = ee.observe(output, _numpy(bench))
        out[row] = ee.multiple(observed, expected)
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


# --------------------------------------------------------------------------------------------------
# the recorded side and Replay Fidelity
NO_GRADIENT_RECORDED = ("the dump records no gradient for this input: its backward entry holds the input "
                        "gradients of the call's last autograd step{node}, none of which is this input's")


def _row(name: str, direction: str, i: int) -> str:
    return f"{name}.{direction}.output.{i}"


def _first_only(api: str) -> bool:
    from ..precision.standards import FIRST_OUTPUT_ONLY_APIS
    return api in FIRST_OUTPUT_ONLY_APIS


def load(case: Any, options: Any, *, required: bool) -> Any:
    """The case's recorded outputs; None when there are none and they are not ``required``.

    Raises:
        generators.recorded.RecordedError: ``required`` (the ``recorded`` device type) and the case records no
            usable output (the message is the SKIP reason).
    """
    from generators.recorded import RecordedError, has_recorded_files, load_recorded
    if not required and not has_recorded_files(case):
        return None
    try:
        return load_recorded(case, max_bytes=options.max_bytes)
    except RecordedError:
        if required:
            raise
        return None


def device_forward(name: str, api: str, bench_out: Any, recorded: Any) -> tuple:
    """(device output shaped like ``bench_out`` from the recording, {row name: SKIP reason}).

    A row with nothing recorded holds the bench's own value as a placeholder; the row itself is a SKIP.
    """
    skips: dict = {}
    if isinstance(bench_out, (list, tuple)):
        count = 1 if _first_only(api) else len(bench_out)
        values = []
        for i, bench in enumerate(bench_out):
            value = recorded.get(FORWARD, i) if i < count else bench
            reason = not_recorded_reason(value) if i < count else None
            if reason is not None:
                skips[_row(name, FORWARD, i)] = reason
                value = bench
            values.append(value)
        return (tuple(values) if isinstance(bench_out, tuple) else values), skips
    value = recorded.get(FORWARD, 0)
    reason = not_recorded_reason(value)
    if reason is not None:
        return bench_out, {_row(name, FORWARD, 0): reason}
    return value, skips


def device_backward(name: str, bench_grads: list, mapping: list, recorded: Any, node_name: str = "") -> tuple:
    """(device input gradients from the recording, one per bench gradient, {row name: SKIP reason}).

    Args:
        bench_grads: the bench's gradients of the call's tensor arguments (None where there is none).
        mapping: for each of them ``(k, transposed)``: the entry of the recorded backward output that holds
            it, or None (see :func:`generators.recorded.match_gradients`).
        node_name: the autograd node whose gradients the dump records, for the SKIP reason.
    """
    import torch
    grads: list = []
    skips: dict = {}
    for i, bench in enumerate(bench_grads):
        if bench is None:
            grads.append(None)
            continue
        pick = mapping[i] if i < len(mapping) else None
        if pick is None:
            skips[_row(name, BACKWARD, i)] = NO_GRADIENT_RECORDED.format(node=f" ({node_name})" if node_name else "")
            grads.append(bench)
            continue
        k, transposed = pick
        value = recorded.get(BACKWARD, k)
        reason = not_recorded_reason(value)
        if reason is None and not isinstance(value, torch.Tensor):
            reason = f"{_row(name, BACKWARD, k)}: the dump recorded no gradient (null) for this input"
        if reason is not None:
            skips[_row(name, BACKWARD, i)] = reason
            grads.append(bench)
            continue
        grads.append(value.t() if transposed else value)
    return grads, skips


def _expected(api: str, call: Any, value: Any, direction: str, index: int) -> Any:
    """The expected error of one replayed output (None where it cannot be estimated: non-float, odd values)."""
    import torch

    from ..precision import expected_error as ee
    from ..precision.standards import HF32_APIS
    if call is None or not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None
    try:
        m = call_arrays(call)
        hf32 = "hf32" if api in HF32_APIS and value.dtype == torch.float32 else None
        return ee.expected_error(api, value.dtype, m.inputs, value, kwargs=m.options,
                                 direction=direction, index=index,
                                 grad_output=m.grad if direction == BACKWARD else None, input_dtype=hf32,
                                 cache=m.cache)
    except (ValueError, TypeError, IndexError, ArithmeticError):
        return None


def fidelity(name: str, api: str, device: Any, mapping: list, recorded: Any, call: Any = None) -> dict:
    """{row name: Fidelity} of every forward and gradient row of ``device`` whose output the dump recorded.

    A gradient row is judged on the replayed node gradient its mapping names, against the recorded one at the
    same place (both in the node's layout: a transposed weight gradient needs no transposing). With ``call``
    (the replayed call's inputs), each tensor is judged by the expected error of the call
    (:func:`..precision.fidelity.compare_expected`); a recorded file that cannot be read is ``not compared``.
    """
    import torch

    from ..precision.fidelity import compare_expected, not_compared
    cells: dict = {}
    out = device.out
    pairs = list(enumerate(out))[:1 if _first_only(api) else None] if isinstance(out, (list, tuple)) else [(0, out)]
    for i, value in pairs:
        rec = recorded.get(FORWARD, i)
        if not_recorded_reason(rec) is None:
            cells[_row(name, FORWARD, i)] = compare_expected(
                value, rec, lambda value=value, i=i: _expected(api, call, value, FORWARD, i))
        elif getattr(rec, "damaged", False):
            cells[_row(name, FORWARD, i)] = not_compared(rec.reason)
    node_grads = getattr(device, "node_grads", None) or []
    for i, pick in enumerate(mapping):
        if pick is None or pick[0] >= len(node_grads):
            continue
        rec = recorded.get(BACKWARD, pick[0])
        if isinstance(rec, torch.Tensor) and node_grads[pick[0]] is not None:
            value = node_grads[pick[0]]
            cells[_row(name, BACKWARD, i)] = compare_expected(
                value, rec, lambda value=value, i=i: _expected(api, call, value, BACKWARD, i))
        elif getattr(rec, "damaged", False):
            cells[_row(name, BACKWARD, i)] = not_compared(rec.reason)
    return cells


def usage_problem(backend: Any, cases: Iterable) -> str | None:
    """Why the ``recorded`` device type cannot judge these cases at all (statistics-only dumps), or None."""
    from generators.recorded import has_recorded_files

    from ..devices.base import is_recorded
    if not is_recorded(backend):
        return None
    replayable = [c for c in cases if not getattr(c, "problem", None)]
    if replayable and not any(has_recorded_files(c) for c in replayable):
        return ("the dump holds statistics only (task 'statistics'), no recorded outputs to judge; dump with task "
                "'tensor' (data_mode 'all'), or choose a device type that runs the calls (cpu, cuda, npu)")
    return None
