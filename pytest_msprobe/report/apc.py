"""NPU-vs-GPU compare: read two accuracy_checking_details CSVs, judge each output, write msprobe's
``api_precision_compare_result_{ts}.csv`` and ``api_precision_compare_details_{ts}.csv``.

Spec: precision-standard.md sections 5, 6 and 9 (#8, #10). The verdict rules are pure functions in
:mod:`pytest_msprobe.precision.apc_rules`; this module only reads, matches, groups and writes.

Row handling (both versions): rows are matched by ``API Name``; an output present on one side only, a
duplicated GPU row, a blank cell a rule needs, a DEVICE Dtype mismatch, an empty output and an fp64 row each
become a SKIP details row with the reason, and every API gets exactly one result row.
"""
from __future__ import annotations

import csv
import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dumpers.format import format_cell, parse_row_name, safe_text

from ..precision import apc_rules as R
from ..precision.standards import DEFAULT_STANDARD, ERROR, SKIP, TOPK_HINT, StandardVersion
from .columns import APC_DETAILS_HEADER, APC_RESULT_HEADER, BLANK
from .details_table import (COPIED_COLUMNS, REQUIRED_COLUMNS, ApcInputError, DetailsTable, PathLike,
                            read_details)
from .standard_detect import choose_standard, detect_standard

__all__ = ["COPIED_COLUMNS", "REQUIRED_COLUMNS", "ApcInputError", "ApiVerdict", "CompareOutcome", "DetailsTable",
           "compare_tables", "details_record", "read_details", "result_record", "run_compare", "write_csv"]
_EMPTY_SHAPE = re.compile(r"(?:^\(|,\s*)0\s*(?:,|\))")


# --------------------------------------------------------------------------------------------------
class _CellError(Exception):
    pass


def _number(row: Mapping[str, str], column: str, side: str, blank_zero: bool) -> float:
    text = row[column].strip()
    if not text:
        if blank_zero:
            return 0.0
        raise _CellError(f"ERROR: Input data is an empty string (column {column} of the {side} row)")
    try:
        return float(text)
    except ValueError:
        raise _CellError(f"ERROR: Input data cannot be converted to float (column {column} of the {side} "
                         f"row holds {text!r})") from None


def _judge(npu: Mapping[str, str], gpu: Mapping[str, str], api: str, std: StandardVersion,
           rules: R.ApcRules, name: str) -> R.RowVerdict:
    """The verdict of one matched pair of rows (5.3-5.5 with the SKIP fixes of section 9)."""
    dtype = npu["DEVICE Dtype"].strip()
    if not dtype:
        return R.skip_verdict(npu.get("Message", "")
                              or "The NPU row has no DEVICE Dtype (run_ut skipped it).")
    gpu_dtype = gpu["DEVICE Dtype"].strip()
    if not gpu_dtype:
        return R.skip_verdict(f"The GPU row of {name} was not compared: "
                              f"{gpu.get('Message', '').strip() or 'it has no DEVICE Dtype'}")
    if gpu_dtype != dtype:
        return R.skip_verdict(f"DEVICE Dtype differs: NPU {dtype}, GPU {gpu_dtype}; outputs are compared "
                              f"only at the same dtype.")
    shape = npu.get("Shape", "").strip()
    if shape and _EMPTY_SHAPE.search(shape):
        return R.skip_verdict(f"The output is empty (Shape {shape}); there is nothing to compare.")
    algorithm = R.select_algorithm(api, dtype, std, has_rel_err_cell=bool(npu["相对误差错误率"].strip()))
    if not algorithm:
        return R.skip_verdict(R.UNSUPPORTED_DTYPE_MESSAGE)
    zero = rules.blank_reads_as_zero
    try:
        if algorithm == R.ALGO_BENCHMARK:
            cols = [m.source for m in R.BENCHMARK_METRICS]
            return R.benchmark_verdict({c: _number(npu, c, "NPU", zero) for c in cols},
                                       {c: _number(gpu, c, "GPU", zero) for c in cols},
                                       api=api, dtype=dtype, std=std)
        if algorithm == R.ALGO_BINARY:
            return R.binary_verdict(_number(npu, "二进制一致错误率", "NPU", False), api=api)
        if algorithm == R.ALGO_ABSOLUTE:
            rates = {c: _number(npu, c, "NPU", False) for c, _, _ in R.ABSOLUTE_METRICS}
            return R.absolute_verdict(rates, std)
        if algorithm == R.ALGO_THOUSANDTH:
            return R.thousandth_verdict(_number(npu, "双千指标", "NPU", False), rules)
        mean, prop = "ULP误差平均值", "ULP误差大于阈值占比"
        return R.ulp_verdict(_number(npu, mean, "NPU", zero), _number(npu, prop, "NPU", zero),
                             _number(gpu, mean, "GPU", zero), _number(gpu, prop, "GPU", zero),
                             dtype=dtype, std=std, rules=rules)
    except _CellError as exc:
        message = str(exc)
        if algorithm != R.ALGO_BENCHMARK and all(npu[m.source].strip() for m in R.BENCHMARK_METRICS):
            message += ("; the row has only benchmark cells, as msprobe 26.2 acc_check writes them: "
                        "compare such files with --standard 26.2")
        return R.skip_verdict(message)


@dataclass
class ApiVerdict:
    """One result row: the API call, its forward and backward roll-ups (None = blank) and message."""
    name: str
    forward: str | None
    backward: str | None
    message: str = ""


@dataclass
class _Group:
    api: str
    forward: list = field(default_factory=list)       # list[(status, message)]
    backward: list = field(default_factory=list)
    invalid: str = ""


def compare_tables(npu: DetailsTable, gpu: DetailsTable, *, version: str = DEFAULT_STANDARD
                   ) -> tuple[list[tuple[str, R.RowVerdict]], list[ApiVerdict]]:
    """Judge every output of ``npu`` against ``gpu``.

    Returns:
        (details rows as (output name, verdict), result rows), in first-seen API order; an API's outputs
        stay together, outputs found only in the GPU file come after the NPU file's outputs of their API.
    """
    std, rules = R.get_rules(version)
    gpu_rows: dict = {}
    for row in gpu.rows:
        gpu_rows.setdefault(row["API Name"].strip(), []).append(row)
    npu_names = {row["API Name"].strip() for row in npu.rows}
    groups: dict = {}
    details: dict = {}        # group key -> list[(name, verdict)]

    def add(name: str, verdict: R.RowVerdict) -> None:
        parsed = parse_row_name(name)
        if parsed is None or parsed.api is None:
            verdict = R.skip_verdict(f"The API name {name} is invalid.")
            groups[name] = _Group(name, invalid=verdict.message)
            details.setdefault(name, []).append((name, verdict))
            return
        key = parsed.call
        group = groups.setdefault(key, _Group(parsed.api))
        getattr(group, parsed.direction).append((verdict.status, verdict.message))
        details.setdefault(key, []).append((name, verdict))

    for row in npu.rows:
        name = row["API Name"].strip()
        parsed = parse_row_name(name)
        matches = gpu_rows.get(name, [])
        if parsed is None or parsed.api is None:
            verdict = R.skip_verdict("")
        elif not matches:
            verdict = R.skip_verdict(f"This API : {name} does not exist in the GPU data.")
        elif len(matches) > 1:
            verdict = R.skip_verdict(f"This API : {name} has multiple records in the GPU data "
                                     f"({len(matches)} rows); keep one row per output in {gpu.path}.")
        else:
            verdict = _judge(row, matches[0], parsed.api, std, rules, name)
            for column in COPIED_COLUMNS & verdict.cells.keys():
                verdict.cells[column] = npu.copied_text(column, row[column].strip() or "0")
        add(name, verdict)
    for name in gpu_rows:
        if name not in npu_names:
            add(name, R.skip_verdict(f"This API : {name} does not exist in the NPU data."))

    rows = [item for key in groups for item in details[key]]
    results = [_result_row(key, g, std) for key, g in groups.items()]
    return rows, results


def _last_skip(entries: list) -> str:
    for status, message in reversed(entries):
        if status == SKIP:
            return message
    return ""


def _result_row(key: str, group: _Group, std: StandardVersion) -> ApiVerdict:
    if group.invalid:
        return ApiVerdict(key, SKIP, SKIP, group.invalid)
    forward = R.rollup([s for s, _ in group.forward], std)
    backward = R.rollup([s for s, _ in group.backward], std)
    message = ""
    if forward == ERROR and group.api == "topk" and std.apc_topk_hint_in_result:
        message = TOPK_HINT
    elif forward == SKIP:
        message = _last_skip(group.forward)
    elif backward == SKIP:
        message = _last_skip(group.backward)
    return ApiVerdict(key, forward, backward, message)


# --------------------------------------------------------------------------------------------------
def _cell(value: object) -> str:
    if value is None:
        return BLANK
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return format_cell(value)


def details_record(name: str, verdict: R.RowVerdict) -> list:
    """One api_precision_compare_details row (28 cells, APC_DETAILS_HEADER order)."""
    middle = [_cell(verdict.cells.get(col)) for col in APC_DETAILS_HEADER[1:-3]]
    return [safe_text(name), *middle, verdict.status, verdict.algorithm or BLANK, safe_text(verdict.message)]


def result_record(result: ApiVerdict) -> list:
    """One api_precision_compare_result row (4 cells)."""
    return [safe_text(result.name), result.forward or BLANK, result.backward or BLANK,
            safe_text(result.message)]


def write_csv(path: Path, header: list, records: list) -> None:
    """Write a CSV as msprobe does: UTF-8 with BOM, minimal quoting, CRLF records."""
    with open(path, "w", encoding="utf-8-sig", newline="") as f:
        writer = csv.writer(f, lineterminator="\r\n")
        writer.writerow(header)
        writer.writerows(records)


@dataclass
class CompareOutcome(Mapping):
    """What a compare produced. As a mapping: API call name -> (forward, backward) status (None = blank).

    Attributes:
        result_csv, details_csv: the written files; plot_png: the ratio plot (None unless asked for).
        apis: API call name -> (forward status, backward status, message), in result-row order.
        rows: details rows as (output name, RowVerdict).
    """
    result_csv: Path
    details_csv: Path
    apis: dict
    rows: list
    version: str
    plot_png: Path | None = None
    standard_reason: str = ""

    def __getitem__(self, name: str) -> tuple:
        forward, backward, _ = self.apis[name]
        return forward, backward

    def __iter__(self) -> Iterator[str]:
        return iter(self.apis)

    def __len__(self) -> int:
        return len(self.apis)

    def count(self, status: str) -> int:
        """Number of APIs whose forward or backward result is ``status`` (case-insensitive)."""
        s = status.lower()
        return sum(1 for f, b, _ in self.apis.values() if s in ((f or "").lower(), (b or "").lower()))

    @property
    def failed(self) -> list:
        """API call names with an error verdict."""
        return [n for n, (f, b, _) in self.apis.items() if ERROR in (f, b)]


def _free_timestamp(out: Path, started: float) -> str:
    """``YYYYmmddHHMMSS`` of ``started``, moved on by seconds while a compare of that name exists in
    ``out`` (two compares within one second must not overwrite each other)."""
    t = int(started)
    while True:
        ts = time.strftime("%Y%m%d%H%M%S", time.localtime(t))
        names = (f"api_precision_compare_{kind}_{ts}.csv" for kind in ("result", "details"))
        if not any((out / name).exists() for name in names):
            return ts
        t += 1


def run_compare(npu_details_csv: PathLike, gpu_details_csv: PathLike, out_dir: PathLike, *,
                version: str | None = DEFAULT_STANDARD, plot: bool = False,
                timestamp: str | None = None) -> CompareOutcome:
    """Compare an NPU details CSV with a GPU details CSV and write the two compare CSVs into ``out_dir``.

    Args:
        version: precision standard name ("1.0.4" or "26.2"); None: the one the CSVs were written under
            (:mod:`.standard_detect`), and why is ``standard_reason`` of the outcome.
        plot: also write ``api_precision_compare_ratios_{ts}.png`` (matplotlib, Agg).
        timestamp: ``YYYYmmddHHMMSS`` of the file names (existing files are replaced); default the
            local start time, moved on by a second while ``out_dir`` already has a compare of that name.

    Raises:
        ApcInputError: an input CSV cannot be read (the message names file and column).
        ValueError: unknown version.
    """
    if version:
        R.get_rules(version)
    started = time.time()
    npu = read_details(npu_details_csv, "NPU")
    gpu = read_details(gpu_details_csv, "GPU")
    version, why = _standard_of(npu, gpu, version)
    rows, results = compare_tables(npu, gpu, version=version)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ts = timestamp or _free_timestamp(out, started)
    result_csv = out / f"api_precision_compare_result_{ts}.csv"
    details_csv = out / f"api_precision_compare_details_{ts}.csv"
    write_csv(result_csv, APC_RESULT_HEADER, [result_record(r) for r in results])
    write_csv(details_csv, APC_DETAILS_HEADER, [details_record(n, v) for n, v in rows])
    outcome = CompareOutcome(result_csv, details_csv,
                             {r.name: (r.forward, r.backward, r.message) for r in results}, rows, version,
                             standard_reason=why)
    if plot:
        from .apc_plot import plot_ratios

        outcome.plot_png = plot_ratios(rows, out / f"api_precision_compare_ratios_{ts}.png", version=version)
    return outcome


def _standard_of(npu: DetailsTable, gpu: DetailsTable, requested: str | None) -> tuple:
    """(standard, why): ``requested``, or the one both CSVs were written under."""
    try:
        return choose_standard(detect_standard(npu.rows), detect_standard(gpu.rows), requested)
    except ValueError as exc:
        raise ApcInputError(str(exc)) from None
