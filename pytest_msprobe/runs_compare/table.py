"""msprobe's compare_result table: headers per mode, one line per target row, Result and Err_message
(spec compare.md sections 3 and 5)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from ..precision.verdict import ERROR, PASS, WARNING      # msprobe's compare spells its Result the same way
from . import cells
from .rows import NA, NO_FILE
from .xframework import SAME, Rules

TENSOR, STATISTICS, MD5 = "tensor", "statistics", "md5"
_LEVEL = {PASS: 0, WARNING: 1, ERROR: 2}

HEAD_A = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
          "NPU Requires_grad", "Bench Requires_grad"]
HEAD_S = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
HEAD_E = ["Requires_grad Consistent", "Result", "Err_message"]
TENSOR_METRIC_HEAD = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                      "Five Thousandths Err Ratio"]
STAT_METRIC_HEAD = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                    "MeanRelativeErr", "NormRelativeErr"]
STACK_HEAD, DATA_NAME_HEAD = "NPU_Stack_Info", "Data_name"

IGNORED_APIS = frozenset(("empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format",
                          "new_empty_strided", "new_empty", "empty_strided"))
INPUT_IGNORED_APIS = frozenset(("_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"))

MSG_INF_NAN = "error: There is nan/inf/-inf in the maximum or minimum value of NPU."
MSG_THOUSANDTH = "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6."
MSG_COSINE = "warning: The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1"
MSG_NORM_REL = "error: The NormRelativeErr of output is greater than 0.5."
MSG_NORM_WARN = "warning: The norm relative error of output is 10 times that of input."
MSG_GRAD = "error: The Required_Grad of NPU and Bench are inconsistent"
MSG_PARAM = "error: The scalar parameters of NPU and Bench are inconsistent."
MSG_DTYPE = "error: The dtype of NPU and Bench are inconsistent."
MSG_SHAPE = "error: The shape of NPU and Bench are inconsistent."
MSG_CRC_MISSING = "warning: The parameter of NPU does not match the bench."
MSG_CRC = "error: The CRC-32 value of NPU differs from that of the bench."


def header(mode: str, stack: bool) -> list:
    if mode == TENSOR:
        return HEAD_A + TENSOR_METRIC_HEAD + HEAD_S + HEAD_E + ([STACK_HEAD] if stack else []) + [DATA_NAME_HEAD]
    if mode == STATISTICS:
        return HEAD_A + STAT_METRIC_HEAD + HEAD_S + HEAD_E + ([STACK_HEAD] if stack else [])
    return HEAD_A + ["NPU MD5", "BENCH MD5"] + HEAD_E + ([STACK_HEAD] if stack else [])


@dataclass
class Line:
    """One compared row: the pair, its metric cells, and what the checkers said."""

    target: Any
    golden: Any                      # None: unmatched
    metrics: list = field(default_factory=list)
    result: str = PASS
    messages: list = field(default_factory=list)
    stack: Any = None
    observed: Any = None             # (max-abs, mean-abs) of the difference, where the tensors were read

    def flag(self, level: str, message: str) -> None:
        if _LEVEL[level] > _LEVEL[self.result]:
            self.result = level
        self.messages.append(message)

    @property
    def is_output(self) -> bool:
        return ".output." in self.target.name


def _grad_text(golden: Any) -> str:
    return NA if golden is None else golden.grad


def cells_of(line: Line, mode: str, stack: bool) -> list:
    """The cells of one line, as values (the writer turns them into text)."""
    t, g = line.target, line.golden
    a = [t.name, g.name if g else NA, t.dtype, g.dtype if g else NA, t.shape, g.shape if g else NA,
         t.grad, _grad_text(g)]
    consistent = str(t.grad == (g.grad if g else NA))
    tail = [consistent, line.result, json.dumps(line.messages)]
    if stack:
        tail.append(line.stack if line.stack is not None else NA)
    if mode == MD5:
        return a + [t.md5, g.md5 if g else NA] + tail
    stats = list(t.stats) + (list(g.stats) if g else [NA] * 4)
    if mode == TENSOR:
        return a + line.metrics + stats + tail + [str([t.data_name, g.data_name if g else NA])]
    return a + line.metrics + stats + tail


def statistics_metrics(line: Line) -> list:
    t, g = line.target, line.golden
    bench = g.stats if g else [NA] * 4
    pairs = [cells.stat_diff(n, b) for n, b in zip(t.stats, bench)]
    return [p[0] for p in pairs] + [p[1] for p in pairs]


def tensor_cells(line: Line, load_target: Callable, load_golden: Callable) -> list:
    """The six tensor metric cells; a loader gives the squeezed numpy array of a row of its side, or raises."""
    t, g = line.target, line.golden
    if g is None or t.data_name == NO_FILE or g.data_name == NO_FILE:
        return [cells.UNSUPPORTED] * cells.TENSOR_METRICS
    try:
        npu, bench = load_target(t), load_golden(g)
    except Exception:  # noqa: BLE001 - an unreadable or refused file is an unsupported row, as in msprobe
        return [cells.UNSUPPORTED] * cells.TENSOR_METRICS
    if npu.shape == bench.shape and npu.size and npu.dtype.kind == "f" and bench.dtype.kind == "f":
        line.observed = _observed(npu, bench)       # for the first divergence, from this one read
    return cells.tensor_metrics(npu, bench)


def _observed(npu: Any, bench: Any) -> tuple:
    from ..precision.expected_error import observe

    seen = observe(npu, bench)
    return seen.max_abs, seen.mean_abs


# ------------------------------------------------------------------ checkers
def _is_inf_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    return isinstance(value, str) and value.strip().lower() in ("inf", "-inf", "nan")


def _percent(value: Any) -> float:
    try:
        return float(str(value).strip("%")) / 100
    except ValueError:
        return 0.0


def _extreme(lines: list, column: int, lowest: bool) -> float:
    best = 1.0 if lowest else 0.0
    for line in lines:
        value = line.metrics[column]
        if value is None or value in (cells.NAN_TEXT, NA):
            continue
        if isinstance(value, str) and value.endswith("%"):
            value = _percent(value)
        if isinstance(value, str):
            continue
        best = min(best, value) if lowest else max(best, value)
    return best


def _ignore(lines: list, inputs: list) -> str:
    if not inputs:
        return ""
    parts = inputs[0].target.name.split(".")
    if len(parts) < 2:
        return ""
    if parts[1] in IGNORED_APIS:
        return "all"
    return "input" if parts[1] in INPUT_IGNORED_APIS else ""


def check_api(lines: list, mode: str, rules: Rules = SAME) -> None:
    """Result and Err_message of every line of one dump.json entry (``rules``: how the dtype and requires_grad
    rules read the pair, :mod:`.xframework`)."""
    inputs = [line for line in lines if not line.is_output]
    outputs = [line for line in lines if line.is_output]
    ignore = _ignore(lines, inputs)
    checked = [] if ignore == "all" else outputs if ignore == "input" else inputs + outputs
    if mode == MD5:
        for line in checked:
            g = line.golden
            npu, bench = line.target.md5, g.md5 if g else NA
            if npu != bench:
                missing = npu in (NA, cells.NAN_TEXT, "") or bench in (NA, cells.NAN_TEXT, "")
                line.flag(*(WARNING, MSG_CRC_MISSING) if missing else (ERROR, MSG_CRC))
        return
    for line in checked:                                         # InfNan
        g = line.golden
        bench = g.stats if g else [NA] * 4
        if _is_inf_nan(bench[0]) or _is_inf_nan(bench[1]):
            continue
        if _is_inf_nan(line.target.stats[0]) or _is_inf_nan(line.target.stats[1]):
            line.flag(ERROR, MSG_INF_NAN)
    whole = not ignore
    if mode == TENSOR and whole and outputs:                      # one-thousandth
        if _extreme(inputs, 4, True) > 0.9 and _extreme(outputs, 4, True) < 0.1:
            outputs[0].flag(ERROR, MSG_THOUSANDTH)
    if mode == STATISTICS and whole:                              # NormRelativeErr of outputs
        if abs(_extreme(inputs, 7, False)) < 0.1:
            for line in outputs:
                if abs(_percent(line.metrics[7])) > 0.5:
                    line.flag(ERROR, MSG_NORM_REL)
    for line in checked:                                          # requires_grad
        g = line.golden
        if g is not None and rules.grads_differ(line.target.grad, g.grad):
            line.flag(ERROR, MSG_GRAD)
    if whole:                                                     # scalar parameters
        for line in inputs:
            g = line.golden
            if g is None or "class" not in line.target.dtype or "class" not in g.dtype or line.target.shape != "[]":
                continue
            if line.target.stats[0] != g.stats[0]:
                line.flag(ERROR, MSG_PARAM)
    for line in checked:                                          # dtype
        g = line.golden
        if g is None or "qkv" in g.name or "gate_up" in g.name:
            continue
        if rules.dtypes_differ(line.target.dtype, g.dtype):
            line.flag(ERROR, MSG_DTYPE)
    for line in checked:                                          # shape
        g = line.golden
        if g is not None and line.target.shape != g.shape:
            line.flag(ERROR, MSG_SHAPE)
    if mode == TENSOR and whole and outputs:                      # cosine warning
        low_in, low_out = _extreme(inputs, 0, True), _extreme(outputs, 0, True)
        if low_in > 0.9 and low_in - low_out > 0.1:
            outputs[0].flag(WARNING, MSG_COSINE)
    if mode == STATISTICS and whole and outputs:                  # norm relative error x10
        rin, rout = abs(_extreme(inputs, 7, False)), abs(_extreme(outputs, 7, False))
        if (rin == 0 and rout > 0.1) or (rin != 0 and rout / rin > 10):
            outputs[0].flag(WARNING, MSG_NORM_WARN)
