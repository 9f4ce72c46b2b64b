"""What the replay's parts share (the pipeline, both framework adapters, the item): the run's options, the per-API
seed, the records of one call, of one side of it and of a case's result, the bench dtype and copies (spec
precision-standard.md 1.2), SKIP/error results, and the judging.

No pytest here, and torch only inside the functions that take tensors: the item turns a :class:`CaseResult` into
an outcome (through :mod:`pytest_msprobe.precision.verdict`) and the controller turns its payload into CSV rows.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from dataclasses import dataclass, field
from typing import Any

from dumpers import format as fmt

from ..precision import verdict
from ..precision.fields import reason_metrics
from ..settings import DEFAULT_EXAMPLES, DEFAULT_FAIL_ON, DEFAULT_FIDELITY, DEFAULT_SEED, DEFAULT_STANDARD

REAL_DATA = "real_data"
RANDOM_DATA = "random_data"
INVALID = "invalid"             # summary kind of an entry the dump cannot replay (neither real nor random data)
OUT_KWARG_MESSAGE = "function with out=... arguments don't support automatic differentiation, skip backward."
NO_BACKWARD_MESSAGE = "function backward result is None, skip backward."
MULTI_BACKWARD_MESSAGE = "Multiple backward is not supported."


@dataclass
class RunOptions:
    """What the plugin's options decide for every case."""

    standard: str = DEFAULT_STANDARD
    random: bool = False
    seed: int = DEFAULT_SEED
    max_bytes: int | None = None
    edge_values: bool = False
    examples: int = DEFAULT_EXAMPLES
    fail_on: str = DEFAULT_FAIL_ON
    error_data_dir: str | None = None       # save inputs/outputs of failing APIs here when set
    reproduce: str = ""                     # command template with {name}, shown for failing examples
    device_type: str | None = None          # the backend the user named (None: the framework's default)
    timeout: float | None = None            # per-API time limit in seconds (None: none)
    fidelity: str = DEFAULT_FIDELITY        # report | strict (an unfaithful replay fails its item)


@dataclass
class CaseResult:
    """Everything known about one API after its run (or why it was not run)."""

    name: str
    forward: str
    backward: str | None                  # None: blank cell
    message: str | None                   # the result CSV's 4th field (None: three fields)
    details: list = field(default_factory=list)
    data_mode: str = REAL_DATA
    seed: int | None = None
    summary: str = ""                        # inputs summary (random data)
    note: str = ""                           # extra text for the pytest report (shrunk example, ...)
    invalid: bool = False                    # an entry the dump cannot replay (counted apart in the summary)
    fidelity: dict = field(default_factory=dict)   # row name -> Replay Fidelity cell (rows with a recording)
    multiples: dict = field(default_factory=dict)  # row name -> device error / expected error (replay.expected)

    @property
    def unfaithful(self) -> list:
        """(row name, fidelity cell) of every row whose replay differs from the recorded output."""
        return [(name, text) for name, text in self.fidelity.items() if verdict.is_unfaithful(text)]

    def fidelity_failure(self, mode: str) -> str:
        """Why the API fails for its replay fidelity under ``mode`` (``--msprobe-fidelity``), or ""."""
        if not verdict.fidelity_fails(self.fidelity.values(), mode):
            return ""
        return "\n".join([f"{self.name}: the replay did not reproduce the recorded output (--msprobe-fidelity "
                          f"{mode}):"] + [f"  {row}: {text}" for row, text in self.unfaithful])

    def failing(self, fail_on: str = DEFAULT_FAIL_ON) -> bool:
        return verdict.is_failing(self.forward, self.backward, fail_on=fail_on)

    @property
    def skipped(self) -> bool:
        return verdict.item_outcome(self.forward, self.backward) == verdict.SKIPPED

    def worst(self) -> tuple:
        """(row name, reason) of the first error row, else the first warning row, else ('', '')."""
        for level in (verdict.ERROR_KEY, verdict.WARNING_KEY):
            for row in self.details:
                if verdict.norm(row.status) == level:
                    return row.name, reason(row)
        if self.failing(verdict.WARNING):
            return self.name, (self.message or "").strip()
        return "", ""

    @property
    def kind(self) -> str:
        """How the summary counts this API: its data mode, or invalid."""
        return INVALID if self.invalid else self.data_mode

    def standards(self) -> list:
        return sorted({str(getattr(r, "standard", "") or "") for r in self.details} - {""})


def reason(row: Any) -> str:
    """The last line of a row's message and its key metrics: why the row has its status."""
    lines = [ln for ln in str(row.message or "").splitlines() if ln.strip()]
    text = lines[-1] if lines else str(row.status)
    parts = reason_metrics(row.metrics or {})
    return text + (f" [{parts}]" if parts else "")


@functools.lru_cache(maxsize=None)
def _compare() -> Any:
    """The compare layer (imported on first use)."""
    from ..precision import compare
    return compare


def prepare_compare() -> None:
    """Import the compare layer now, once per process, before the first call. The compiled metric kernel is
    loaded (numba's cache; compiled the first time for this Python) per dtype pair on its first use, so a run
    pays only for the pairs its outputs have; with ``--msprobe-timeout`` the pipeline loads the usual pairs
    before the first timed call (``pipeline._warm_up``)."""
    _compare()


def skip_result(name: str, message: str, *, data_mode: str = REAL_DATA, seed: int | None = None,
                direction_row: bool = True) -> CaseResult:
    """API-level SKIP (spec 3.4): result row with the message, one SKIP details row."""
    rows = [_compare().skip_row(fmt.output_row_name(name, fmt.FORWARD, 0), message)] if direction_row else []
    return CaseResult(name, verdict.SKIP, verdict.SKIP, message, rows, data_mode, seed)


def error_result(name: str, message: str, *, data_mode: str = REAL_DATA, seed: int | None = None) -> CaseResult:
    """API reported as error without metrics (timeout, crashed worker)."""
    row = _compare().skip_row(fmt.output_row_name(name, fmt.FORWARD, 0), message)
    row = dataclasses.replace(row, status=verdict.ERROR)
    return CaseResult(name, verdict.ERROR, None, message, [row], data_mode, seed)


def _namer(call: str, direction: str) -> Any:
    """The row names of ``call``'s outputs in ``direction``: index -> ``{call}.{direction}.output.{index}``."""
    return functools.partial(fmt.output_row_name, call, direction)


def _direction(row_name: str) -> str | None:
    parsed = fmt.parse_row_name(row_name)
    return parsed.direction if parsed is not None else None


def case_name(case: Any) -> str:
    return getattr(case, "name", None) or f"{case.prefix}.{case.api}.{case.index}"


def data_mode(case: Any, options: RunOptions) -> str:
    """Where the inputs of ``case`` come from (the details CSV's Data Mode): random or real data."""
    if options.random or not getattr(case, "has_tensor_files", True):
        return RANDOM_DATA
    return REAL_DATA


def exc_text(exc: BaseException) -> str:
    """An exception as a SKIP reason: its text (a KeyError's quotes dropped), else its type."""
    text = str(exc).strip()
    if isinstance(exc, KeyError) and text.startswith("'") and text.endswith("'"):
        text = text[1:-1]
    return text or type(exc).__name__


def backward_messages(api: str, kwargs: dict) -> list:
    """Why backward is not run for this call (spec 1.4), before anything runs."""
    from ..precision.standards import NO_BACKWARD_APIS
    messages = []
    if "out" in kwargs:
        messages.append(OUT_KWARG_MESSAGE)
    if api in NO_BACKWARD_APIS:
        messages.append(NO_BACKWARD_MESSAGE)
    return messages


def judge(name: str, api: str, std: Any, outputs: tuple, messages: list, mode: str, seed: int,
          note: str = "", skips: dict | None = None) -> CaseResult:
    """Detail rows and roll-up of one call from its CPU-side outputs (bench, device, bench grads, device grads).

    Dropout rule (spec 3.5), compare_outputs, roll-up (3.6), the backward SKIP row for ``messages`` (3.3) and
    the result row's message. ``note`` is appended to every row's message. ``skips``: {row name: reason} of
    rows that are SKIP whatever was compared (an output the dump did not record, for ``recorded``).
    """
    compare = _compare()
    b_cmp, d_cmp, bg_cmp, dg_cmp = outputs
    details: list = []
    if "dropout" in name:
        forward = compare.dropout_status(b_cmp, d_cmp)
        backward = (compare.dropout_status(bg_cmp[0], dg_cmp[0])
                    if bg_cmp and dg_cmp and bg_cmp[0] is not None else None)
    else:
        fwd_rows = compare.compare_outputs(api, _namer(name, fmt.FORWARD), b_cmp, d_cmp, version=std.name)
        bwd_rows = (compare.compare_outputs(api, _namer(name, fmt.BACKWARD), bg_cmp, dg_cmp, version=std.name)
                    if bg_cmp else [])
        if skips:
            fwd_rows, bwd_rows = ([compare.skip_row(r.name, skips[r.name]) if r.name in skips else r for r in rows]
                                  for rows in (fwd_rows, bwd_rows))
        details = list(fwd_rows) + list(bwd_rows)
        forward = compare.rollup([r.status for r in fwd_rows], version=std.name) or verdict.PASS
        backward = compare.rollup([r.status for r in bwd_rows], version=std.name) if bwd_rows else None
    if note:
        for row in details:
            row.message = f"{row.message}\n{note}" if str(row.message or "").strip() else note
    message = None
    if messages:
        text = "".join(messages)
        details.append(compare.skip_row(fmt.output_row_name(name, fmt.BACKWARD, 0), text))
        if backward is None and std.all_skip_is_skip:
            backward = verdict.SKIP
            message = text
    if forward == verdict.SKIP:
        first = next((r for r in details if _direction(r.name) == fmt.FORWARD), None)
        message = first.message if first is not None else (message or "")
    result = CaseResult(name, forward, backward, message, details, mode, seed)
    if note:
        result.note += f"\n{note}"
    return result


def seed_note(result: CaseResult) -> str:
    """`` (random data, seed N)`` for an API replayed with random data, else ""."""
    return f" (random data, seed {result.seed})" if result.data_mode == RANDOM_DATA else ""


def describe(result: CaseResult, note: str = "") -> str:
    """The failure text of an API: statuses, every failing output with its reason, the inputs and notes."""
    lines = [f"{result.name}: forward {result.forward}, backward {result.backward or '-'}{note}"]
    for row in result.details:
        status = str(row.status)
        if verdict.is_bad_row(status):
            lines.append(f"  {row.name}: {status}: {reason(row)}")
    if result.summary and result.data_mode == RANDOM_DATA and result.summary not in result.note:
        lines.append(f"  inputs: {result.summary}")
    if result.note:
        lines.append(result.note.strip())
    return "\n".join(lines)


# --- the two sides of a call: seed, nested values, the bench dtype and copies, the records ---------
BENCH = "bench"
DEVICE = "device"


def item_seed(name: str, seed: int) -> int:
    """Per-API seed from the run seed and the API's dump name: the same on every worker and every run."""
    return zlib.crc32(f"{seed}:{name}".encode()) & 0x7FFFFFFF


# --- nested values ------------------------------------------------------------------------------
def map_leaves(fn: Any, obj: Any) -> Any:
    """``obj`` (nested lists, tuples, dicts) with ``fn`` applied to every leaf."""
    from torch.utils._pytree import tree_map
    return tree_map(fn, obj)


def leaves(obj: Any) -> list:
    """Every leaf of the nested ``obj``, in order (None included)."""
    from torch.utils._pytree import tree_leaves
    return tree_leaves(obj)


def raise_target(args: Any, kwargs: dict, api: str) -> Any:
    """The bench dtype of spec 1.2: None (no cast), torch.float32 or torch.float64."""
    import torch

    from ..precision.standards import HF32_APIS, NO_RAISE_APIS
    if api in NO_RAISE_APIS:
        return None
    floats = (torch.float16, torch.bfloat16, torch.float32)
    found = {x.dtype for x in leaves([list(args), kwargs]) if isinstance(x, torch.Tensor) and x.dtype in floats}
    if not found:
        return None
    if found == {torch.float32}:
        return None if api in HF32_APIS else torch.float64
    return torch.float32


def copy_tensor(x: Any, target: Any, api: str, clone: bool = True) -> Any:
    """Detached copy (spec 1.2.5: a few in-place view APIs keep the graph), raised to ``target``; with
    ``clone`` False an unraised tensor is not copied (the caller's next step copies it)."""
    import torch

    from ..precision.standards import HF32_APIS, NO_DETACH_APIS
    if not isinstance(x, torch.Tensor):
        return x
    raisable = x.dtype in (torch.float16, torch.bfloat16, torch.float32) and x.dtype != target
    raise_it = target is not None and raisable and not (api in HF32_APIS and x.dtype == torch.float32)
    if api in NO_DETACH_APIS:
        y = x.clone() if clone or raise_it else x
        return y.to(target) if raise_it else y
    # a cast to another dtype is a copy already: one pass over the data, not a clone and then a cast
    if raise_it:
        return x.detach().to(target)
    return x.detach().clone() if clone else x.detach()


def copy_leaves(obj: Any, target: Any, api: str, clone: bool = True) -> Any:
    """``obj`` (nested) with every tensor copied by :func:`copy_tensor`."""
    return map_leaves(lambda x: copy_tensor(x, target, api, clone), obj)


def cpu_leaves(obj: Any) -> Any:
    """``obj`` (nested) with every torch tensor detached and on the CPU."""
    import torch

    return map_leaves(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, obj)


def cast_leaves(obj: Any, target: Any) -> Any:
    """``obj`` (nested) with every float16, bfloat16 and float32 tensor detached and cast to ``target`` (float64
    tensors and everything else as they are)."""
    import torch

    eligible = (torch.float16, torch.bfloat16, torch.float32)

    def cast(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in eligible and x.dtype != target:
            return x.detach().to(target)
        return x
    return map_leaves(cast, obj)


def first_grad(grad: Any) -> Any:
    """The dumped output gradient that backward is fed: a tensor, or the first of a list."""
    if isinstance(grad, (list, tuple)):
        return grad[0] if grad else None
    return grad


@dataclass
class Call:
    """What both sides of one call share."""

    name: str
    api: str
    func: Any
    args: list
    kwargs: dict
    grad_output: Any            # the dumped output gradient (None: no backward)
    plan: Any                   # the adapter's backward plan (None: no backward)
    seed: int
    autocast: Any = None        # the AutocastState the device side runs under (None: none)


@dataclass
class Side:
    """One side's results, as CPU torch values: outputs, input gradients, the gradient it was fed."""

    out: Any
    grads: list
    grad_in: Any = None
    message: str = ""           # why backward could not run ("" : it ran, or was not asked for)
    backward_ran: bool = False
    node_grads: list = field(default_factory=list)   # the gradients in the layout the dumper records them
    node_name: str = ""         # the autograd node they are the input gradients of (PyTorch)
