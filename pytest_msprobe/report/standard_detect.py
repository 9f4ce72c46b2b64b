"""Which precision standard wrote a details CSV: msprobe 1.0.4's run_ut layout, or msprobe 26.2's acc_check.

Our own CSVs say it: a check run under a standard other than the default marks each row's ``Data Mode``
cell (``real_data (standard 26.2)``, :func:`.acc_csv.mark_data_mode`), a column msprobe's readers ignore; a
CSV with a ``Data Mode`` column and no mark was written under the default, 1.0.4. msprobe's CSVs are
recognised from their cells:

* 26.2 judges every fp16/bf16/fp32 output by the benchmark standard, so its float rows carry only the
  benchmark cells, also for APIs that 1.0.4's lists judge by ULP, absolute threshold or binary consistency;
  1.0.4 fills the ULP, absolute-threshold or binary cells of those rows instead;
* 1.0.4 spells the status ``Warning``, 26.2 ``warning``;
* a few messages exist in one version only.

A file that fits both layouts (only benchmark-standard APIs, no warning) carries no evidence.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from dumpers.format import parse_row_name

from ..precision import apc_rules as R
from ..precision.standards import DEFAULT_STANDARD, STANDARDS
from .acc_csv import STANDARD_MARK
from .columns import DATA_MODE_COLUMN
from .details_table import read_details

BENCHMARK_CELLS = ("小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "误差均衡性")
OTHER_STANDARD_CELLS = ("ULP误差平均值", "ULP误差大于阈值占比", "相对误差错误率", "绝对误差错误率",
                        "inf/nan错误率", "二进制一致错误率")
# messages only one version writes (spec precision-standard.md sections 3 and 8)
_MESSAGES = (
    ("only perform binary comparison", "26.2"),
    ("is not supported for new precision standard", "26.2"),
    ("There is not bench calculation result", "26.2"),
    ("not support for acc_check", "26.2"),
    ("Compare algorithm is not supported for", "1.0.4"),
    ("not support for run ut", "1.0.4"),
)
_STATUS = {std.warning: name for name, std in STANDARDS.items()}   # 1.0.4 spells it Warning, 26.2 warning


@dataclass(frozen=True)
class Detection:
    """The standard a details CSV was written under (None: nothing tells) and why."""

    standard: Optional[str]
    reason: str


def _filled(row: Mapping[str, str], columns: tuple) -> list:
    return [c for c in columns if row.get(c, "").strip()]


def _row_evidence(row: Mapping[str, str]) -> Optional[tuple]:
    """(standard, why) that this row's cells show, or None."""
    name = row.get("API Name", "").strip()
    status = row.get("Status", "").strip()
    if status in _STATUS:
        return _STATUS[status], f"row {name} has the status {status!r}"
    message = row.get("Message", "")
    for text, version in _MESSAGES:
        if text in message:
            return version, f"row {name} says {text!r}"
    dtype = row.get("DEVICE Dtype", "").strip()
    if dtype not in R.FLOAT_LIKE_DTYPES or dtype in R.UNSUPPORTED_DTYPES:
        return None
    other = _filled(row, OTHER_STANDARD_CELLS)
    if other:
        return "1.0.4", (f"the {dtype} output {name} has {other[0]} filled (1.0.4 judges it by another "
                         f"standard than the benchmark; 26.2 judges every float output by the benchmark)")
    parsed = parse_row_name(name)
    if parsed is None or parsed.api is None or not _filled(row, BENCHMARK_CELLS):
        return None
    algorithm = R.select_algorithm(parsed.api, dtype, STANDARDS["1.0.4"])
    if algorithm in (R.ALGO_ULP, R.ALGO_ABSOLUTE, R.ALGO_BINARY):
        return "26.2", (f"the {dtype} output {name} has only benchmark cells, which 26.2 writes for every float "
                        f"output (1.0.4 judges {parsed.api} by {algorithm})")
    return None


def detect_standard(rows: list, columns: Optional[list] = None) -> Detection:
    """The standard the details rows (column name -> cell text) were written under, and why."""
    columns = list(rows[0]) if columns is None and rows else list(columns or [])
    for row in rows:
        m = STANDARD_MARK.search(row.get(DATA_MODE_COLUMN, ""))
        if m is not None:
            return Detection(m.group("version"), f"its Data Mode column says 'standard {m.group('version')}'")
    votes: dict = {}
    for row in rows:
        found = _row_evidence(row)
        if found is not None:
            votes.setdefault(found[0], []).append(found[1])
    if votes:
        best = max(votes, key=lambda v: len(votes[v]))
        n = len(votes[best])
        others = sum(len(v) for k, v in votes.items() if k != best)
        tail = f"; {others} row(s) point the other way" if others else ""
        return Detection(best, f"{votes[best][0]}" + (f" (and {n - 1} more row(s))" if n > 1 else "") + tail)
    if DATA_MODE_COLUMN in columns:
        return Detection(DEFAULT_STANDARD, f"written by pytest-msprobe under the default standard "
                                           f"{DEFAULT_STANDARD} (its Data Mode column has no mark)")
    return Detection(None, "its rows fit both layouts (benchmark-standard APIs only, no warning)")


def choose_standard(npu: Detection, gpu: Detection, requested: Optional[str] = None) -> tuple:
    """(standard, explanation) for a compare of two details CSVs.

    ``requested`` (``--standard``, ``--msprobe-standard``) wins; otherwise the detected standard, the
    default when neither CSV tells.

    Raises:
        ValueError: without ``requested``, the two CSVs were written under different standards.
    """
    if requested:
        note = "".join(f"; the {side} CSV looks like {d.standard} ({d.reason})"
                       for side, d in (("NPU", npu), ("GPU", gpu)) if d.standard not in (None, requested))
        return requested, f"standard {requested}, as requested{note}"
    if npu.standard and gpu.standard and npu.standard != gpu.standard:
        raise ValueError(f"the NPU CSV was written under standard {npu.standard} ({npu.reason}) but the GPU CSV "
                         f"under {gpu.standard} ({gpu.reason}); check both dumps under one standard "
                         f"(--msprobe-standard), or choose the compare's with --standard")
    chosen = npu.standard or gpu.standard
    if chosen is None:
        return DEFAULT_STANDARD, (f"standard {DEFAULT_STANDARD} (the default): neither CSV tells the standards "
                                  f"apart ({npu.reason}); pass --standard 26.2 if acc_check 26.2 wrote them")
    if npu.standard and gpu.standard and npu.reason == gpu.reason:
        return chosen, f"standard {chosen}, detected from the CSVs: NPU and GPU CSV: {npu.reason}"
    parts = [f"{side} CSV: {d.reason}" for side, d in (("NPU", npu), ("GPU", gpu)) if d.standard]
    return chosen, f"standard {chosen}, detected from the CSVs: " + "; ".join(parts)


def standard_of_csv(path: str) -> Detection:
    """:func:`detect_standard` of a details CSV file (read as the compare reads it)."""
    table = read_details(path, "GPU")
    return detect_standard(table.rows, list(table.rows[0]) if table.rows else [])


def standard_for_gpu_csv(path: str) -> tuple:
    """(standard, explanation) of a run checked against the GPU details CSV ``path`` (``--msprobe-gpu-csv``)
    when no standard was given: the one that CSV was written under, so both sides are judged alike.
    An unreadable CSV gives the default (the compare reports the file's problem)."""
    try:
        found = standard_of_csv(path)
    except (OSError, ValueError):
        return DEFAULT_STANDARD, ""
    if found.standard is None:
        return DEFAULT_STANDARD, (f"standard {DEFAULT_STANDARD} (the default): the GPU CSV does not tell the "
                                  f"standards apart ({found.reason}); pass --msprobe-standard to choose")
    return found.standard, f"standard {found.standard}, that of the GPU CSV: {found.reason}"
