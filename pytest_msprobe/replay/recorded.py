"""The recorded side of a replay: the dump's outputs as the device side (``recorded``) and replay fidelity.

Framework-neutral, over CPU torch values. A side (:class:`.pipeline.Side`) carries, besides its outputs and the
gradients of the call's tensor arguments, ``node_grads``: the gradients in the layout the dumper records them
(PyTorch: the input gradients of the output's autograd node; MindSpore: one per positional argument). The
adapter's ``gradient_mapping`` says which of those is which argument's gradient. From the bench side, this
module builds the device side of ``recorded`` (with a SKIP reason for every output the dump did not record);
from a device side, the ``Replay Fidelity`` cell of every row the dump recorded.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from generators.recorded import BACKWARD, FORWARD, not_recorded_reason

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


def _numpy_leaves(value: Any) -> list:
    """The floating-point tensors of a nested value as float numpy arrays (bf16/fp16 through float32)."""
    import torch

    from .sides import leaves
    out = []
    for leaf in leaves(value):
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or not leaf.is_complex()):
            t = leaf.detach().cpu()
            out.append((t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy())
    return out


def _expected(api: str, call: Any, value: Any, direction: str, index: int) -> Any:
    """The expected error of one replayed output (None where it cannot be estimated: non-float, odd values)."""
    import torch

    from ..precision import expected_error as ee
    from ..precision.standards import HF32_APIS
    if call is None or not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None
    try:
        from .expected import call_arrays
        m = call_arrays(call)
        hf32 = "hf32" if api in HF32_APIS and value.dtype == torch.float32 else None
        return ee.expected_error(api, value.dtype, m.inputs, _numpy_leaves(value)[0], kwargs=m.options,
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
