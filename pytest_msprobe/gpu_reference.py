"""Per-item NPU-vs-GPU verdicts for ``--msprobe-gpu-csv``.

The GPU details CSV is an input of the run, so each item is judged against it as soon as its own rows
exist: the item's pass/fail is the compare's verdict for that API, not the raw device-vs-bench status.
The session end still writes the two ``api_precision_compare_*`` CSVs for the whole run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from dumpers.format import parse_row_name

from .report.apc import ApiVerdict, compare_tables
from .report.columns import DETAILS_HEADER
from .report.details_table import DetailsTable, read_details


class GpuReference:
    """The GPU details rows of one run, grouped by API call, and the compare of one API against them."""

    def __init__(self, path: str, version: str) -> None:
        self.table = read_details(path, "GPU")
        self.version = version
        self.by_call: dict = {}
        for row in self.table.rows:
            parsed = parse_row_name(row["API Name"].strip())
            if parsed is not None and parsed.api is not None:
                self.by_call.setdefault(parsed.call, []).append(row)

    def judge(self, call: str, detail_rows: list) -> Optional[ApiVerdict]:
        """The compare's verdict for ``call`` from our formatted details rows; None if the GPU has no rows."""
        gpu_rows = self.by_call.get(call)
        if not gpu_rows:
            return None
        gpu = DetailsTable(self.table.path, "GPU", rows=gpu_rows, kinds=self.table.kinds)
        return judge_tables(call, detail_rows, gpu, self.version)


def judge_tables(call: str, detail_rows: list, gpu: DetailsTable, version: str) -> Optional[ApiVerdict]:
    """The compare's verdict for ``call``: our formatted details rows (the NPU side) against ``gpu``."""
    npu = DetailsTable(Path("<this run>"), "NPU",
                       rows=[dict(zip(DETAILS_HEADER, cells[:len(DETAILS_HEADER)])) for cells in detail_rows])
    _, results = compare_tables(npu, gpu, version=version)
    for verdict in results:
        if verdict.name == call:
            return verdict
    return None
