"""The outputs a dump recorded for one call: forward outputs and the input gradients of its backward entry.

A tensor dump holds, beside the inputs, what the training run produced: ``{call}.forward.output.N`` files and,
in the backward entry's ``output`` list, the gradients of the call's inputs (``{call}.backward.output.N``).
They are untrusted input like every other tensor file and load through
:func:`generators.tensorfile.load_tensor_file` (confined to the dump's tensor directory, no pickles, shape and
dtype checked against dump.json) under the same kind of byte budget as the inputs, checked from the dump's shapes
before any file is read. A file that is missing or refused does not stop the others: its place holds a
:class:`NotRecorded` with the reason, which becomes that output's SKIP reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dumpers import format as fmt
from generators import dumpjson
from generators.budget import default_max_bytes
from generators.tensorfile import TensorFileError, load_tensor_file

FORWARD = "forward"
BACKWARD = "backward"
DIRECTIONS = (FORWARD, BACKWARD)


class RecordedError(ValueError):
    """A case whose recorded outputs cannot be used at all; the message is the SKIP reason and says what to do."""


@dataclass(frozen=True)
class NotRecorded:
    """The place of an output whose recorded value is not available, and why."""

    reason: str
    damaged: bool = False       # a tensor file was recorded but cannot be read (missing, refused, corrupt)

    def __bool__(self) -> bool:
        return False


@dataclass
class RecordedOutputs:
    """What the training run produced for one call, as CPU tensors (or decoded values) in dump order.

    ``forward`` holds the elements of the forward entry's ``output`` list; ``backward`` those of the backward
    entry's ``output`` list (the gradients of the call's inputs, ``None`` where the dump wrote null). Either
    holds a :class:`NotRecorded` where a file is missing or refused.
    """

    name: str
    forward: list = field(default_factory=list)
    backward: list = field(default_factory=list)
    has_backward: bool = False

    def problems(self) -> dict:
        """``{"forward.output.0": reason, ...}`` for every output that is not available."""
        found = {}
        for direction, values in ((FORWARD, self.forward), (BACKWARD, self.backward)):
            for i, value in enumerate(values):
                reason = not_recorded_reason(value)
                if reason is not None:
                    found[row_suffix(direction, i)] = reason
        return found

    def get(self, direction: str, index: int) -> Any:
        """The recorded value at ``index`` of ``direction``; a :class:`NotRecorded` when there is none."""
        values = self.forward if direction == FORWARD else self.backward
        if 0 <= index < len(values):
            return values[index]
        return NotRecorded(f"{self.name}.{row_suffix(direction, index)} was not recorded: the dump's "
                           f"{direction} entry has {len(values)} outputs")


def row_suffix(direction: str, index: int) -> str:
    """``forward.output.0``: the part of a details row name after the call name."""
    return f"{direction}.output.{index}"


def not_recorded_reason(value: Any, depth: int = 0) -> str | None:
    """The first reason found in ``value`` (a recorded element, possibly nested), or None when it is whole."""
    if isinstance(value, NotRecorded):
        return value.reason
    if depth < dumpjson.MAX_DEPTH:
        subs = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        for sub in subs:
            reason = not_recorded_reason(sub, depth + 1)
            if reason is not None:
                return reason
    return None


def _output_list(entry: Any) -> list:
    value = entry.get("output") if isinstance(entry, dict) else None
    return value if isinstance(value, list) else []


def recorded_items(case: Any) -> list:
    """(direction, top-level index, item) of every tensor item the case's entries record as outputs."""
    found = []
    for direction, entry in ((FORWARD, case.forward), (BACKWARD, case.backward)):
        for path, item in dumpjson.iter_tensor_items(_output_list(entry)):
            found.append((direction, path[0], item))
    return found


def has_recorded_files(case: Any) -> bool:
    """Whether the case's forward entry names a tensor file for at least one output (a tensor dump)."""
    return any(direction == FORWARD and dumpjson.tensor_file_name(item) is not None
               for direction, _, item in recorded_items(case))


def recorded_problem(case: Any) -> str | None:
    """Why the case has no recorded forward output to judge at all, or None when it has one."""
    if getattr(case, "problem", None):
        return str(case.problem)
    if not isinstance(case.forward, dict) or "output" not in case.forward:
        return (f"{case.name}: the dump recorded no outputs for this call (dumped with data_mode 'input'?); "
                "dump with data_mode 'all' or 'output' to judge recorded outputs")
    if not recorded_items(case):
        return (f"{case.name}: the call's recorded output holds no tensor; there is nothing recorded to judge, "
                "use a device backend (--msprobe-device-type cpu, cuda, npu)")
    if not has_recorded_files(case):
        return (f"{case.name}: the dump recorded statistics only for the outputs (task 'statistics'); dump with "
                "task 'tensor' to judge recorded outputs")
    if case.tensor_dir is None:
        return (case.tensor_dir_problem
                or f"{case.name}: the dump has no tensor directory ({case.dump_json}); copy dump_tensor_data "
                   "next to dump.json")
    return None


def required_bytes(case: Any, directions: tuple = DIRECTIONS) -> int:
    """Bytes the case's recorded output files hold, computed from the dump's shapes and dtypes alone."""
    total = 0
    for direction, _, item in recorded_items(case):
        if direction in directions and dumpjson.tensor_file_name(item) is not None:
            dt = fmt.dtype_facts(fmt.canonical_dtype(item.get("dtype")) or "")
            total += dumpjson.element_count(item.get("shape") or []) * (dt.itemsize if dt else 8)
    return total


def load_recorded(case: Any, *, max_bytes: int | None = None, directions: tuple = DIRECTIONS) -> RecordedOutputs:
    """The recorded outputs of ``case`` (the directions asked for), loaded from the dump's tensor files.

    Args:
        max_bytes: budget for all recorded output files of the case (default: a quarter of the available
            memory, as for the inputs), checked from the dump's shapes before any file is read; every file's
            size is charged against it as it loads.
        directions: ``("forward", "backward")`` or a part of it.

    Raises:
        RecordedError: the case records no usable output at all (no outputs, statistics only, no tensor
            directory, over the budget, an undecodable value); a single missing or refused file is a
            :class:`NotRecorded` in its place instead.
    """
    problem = recorded_problem(case)
    if problem is not None:
        raise RecordedError(problem)
    limit = default_max_bytes() if max_bytes is None else int(max_bytes)
    need = required_bytes(case, directions)
    if need > limit:
        raise RecordedError(f"{case.name}: the recorded outputs need {need} bytes, over the budget of {limit} "
                            "bytes; raise --msprobe-max-bytes if the machine has the memory")
    remaining = [limit]

    def make(direction: str):
        def _make(path: tuple, item: dict) -> Any:
            where = f"{case.name}.{row_suffix(direction, path[0])}"
            if dumpjson.tensor_file_name(item) is None:
                return NotRecorded(f"{where} was recorded as statistics only (no tensor file); dump with task "
                                   "'tensor' to judge it")
            try:
                tensor = load_tensor_file(case.tensor_dir, item, max_bytes=remaining[0], where=where)
            except TensorFileError as exc:
                return NotRecorded(str(exc), damaged=True)
            remaining[0] -= tensor.element_size() * tensor.nelement()
            return tensor
        return _make

    out = RecordedOutputs(name=case.name, has_backward=isinstance(case.backward, dict))
    for direction in directions:
        entry = case.forward if direction == FORWARD else case.backward
        try:
            raw = _output_list(entry)
            made = make(direction)
            tensors = {path: made(path, item) for path, item in dumpjson.iter_tensor_items(raw)}
            values = dumpjson.decode_value(raw, tensors)
        except dumpjson.ValueDecodeError as exc:
            raise RecordedError(f"{case.name}.{direction} output: {exc}") from None
        if direction == FORWARD:
            out.forward = values
        else:
            out.backward = values
    return out


def match_gradients(arg_grads: list, node_grads: list) -> list:
    """Where the dump's backward entry holds each gradient of the call's inputs: ``(k, transposed)`` or None.

    The dumper records the input gradients of the call's last autograd node (what ``grad_fn.register_hook``
    sees), which are not always the gradients of the call's arguments: ``linear`` records (bias, input, weight
    transposed); a composite call such as ``cross_entropy`` records the gradient of an inner step. Run the call
    once with the same hook and pass both lists here: argument gradient ``i`` is node gradient ``k`` when they
    are bitwise equal, or equal after transposing a 2-D node gradient. Position ``i`` is preferred, then an
    unused ``k``; None where no node gradient is that argument's.
    """
    import torch

    def same(a: Any, b: Any) -> bool:
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a, b))

    used: set = set()
    found: list = []
    for i, grad in enumerate(arg_grads):
        candidates = []
        if isinstance(grad, torch.Tensor):
            for k, node in enumerate(node_grads):
                if same(node, grad):
                    candidates.append((k, False))
                elif isinstance(node, torch.Tensor) and node.dim() == 2 and same(node.t(), grad):
                    candidates.append((k, True))
        pick = next((c for c in candidates if c[0] == i), None)
        pick = pick or next((c for c in candidates if c[0] not in used), None)
        pick = pick or (candidates[0] if candidates else None)
        if pick is not None:
            used.add(pick[0])
        found.append(pick)
    return found


def recorded_files(case: Any) -> list:
    """(real path, data_name) of the case's recorded output files that are present inside the dump.

    What a generated suite copies beside the inputs, so that ``recorded`` and replay fidelity work without the
    dump; a missing or refused file is left out (the suite then SKIPs that output with the reason).
    """
    import os

    from generators.tensorfile import PathRefused, safe_join
    if case.tensor_dir is None:
        return []
    found = []
    for _, _, item in recorded_items(case):
        name = dumpjson.tensor_file_name(item)
        if name is None:
            continue
        try:
            path = safe_join(case.tensor_dir, name)
        except PathRefused:
            continue
        if os.path.isfile(path):
            found.append((path, name))
    return found
