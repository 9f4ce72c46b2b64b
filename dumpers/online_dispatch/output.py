"""Output directory, compare_result CSV and console lines of online dispatch (spec sections 7 and 8)."""
from __future__ import annotations

import csv
import os
import sys
import time
from collections.abc import Iterable
from typing import IO

from dumpers.format import BLANK

DIR_MODE = 0o750
FILE_MODE = 0o640
CPU_DIR = "cpu"
NPU_DIR = "npu"        # the device under test keeps msprobe's folder name on every device type

COMPARE_RESULT_HEADER = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU max", "NPU min", "NPU mean", "Bench max", "Bench min", "Bench mean",
    "Cosine", "MaxAbsErr", "MaxRelativeErr", "Accuracy Reached or Not", "NPU_Stack_Info", "Err_message",
]
ACCURACY_COLUMN = COMPARE_RESULT_HEADER.index("Accuracy Reached or Not")
NAME_COLUMN = 0
MESSAGE_COLUMN = len(COMPARE_RESULT_HEADER) - 1

_RED, _GREEN, _RESET = "\033[31m", "\033[32m", "\033[0m"


def dir_name(rank: int, timestamp: str, tag: str | None) -> str:
    """``msprobe_{tag}_rank{R}_{ts}``, or ``msprobe_rank{R}_{ts}`` without a tag."""
    return f"msprobe_{tag}_rank{rank}_{timestamp}" if tag else f"msprobe_rank{rank}_{timestamp}"


def csv_name(rank: int, timestamp: str) -> str:
    return f"compare_result_rank{rank}_{timestamp}.csv"


def make_run_dir(dump_path: str, rank: int, tag: str | None) -> tuple[str, str]:
    """Create ``{dump_path}/msprobe_..._{timestamp}/{cpu,npu}`` and return ``(run_dir, timestamp)``.

    The timestamp has one-second resolution; when that directory already exists (two blocks in the same
    second) this waits for the next second instead of msprobe's unconditional one-second sleep.
    """
    while True:
        timestamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
        run_dir = os.path.join(dump_path, dir_name(rank, timestamp, tag))
        try:
            os.mkdir(run_dir, DIR_MODE)
        except FileExistsError:
            time.sleep(1.0 - (time.time() % 1.0) + 0.01)
            continue
        for sub in (CPU_DIR, NPU_DIR):
            os.mkdir(os.path.join(run_dir, sub), DIR_MODE)
        return run_dir, timestamp


class CompareCsv:
    """The compare_result CSV, written row by row as ops are judged (so a crash keeps what was done)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fh: IO[str] | None = open(path, "w", newline="", encoding="utf-8")  # noqa: SIM115 - streamed
        os.chmod(path, FILE_MODE)
        self._writer = csv.writer(self._fh)
        self._writer.writerow(COMPARE_RESULT_HEADER)

    def write(self, rows: Iterable[list]) -> None:
        if self._fh is None:
            raise ValueError(f"{self.path} is closed")
        self._writer.writerows(rows)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def blank_stats() -> list:
    return [BLANK, BLANK, BLANK]


def console(text: str, *, failed: bool | None = None, stream: IO[str] | None = None) -> None:
    """Print one line; Failed lines in red and Pass lines in green when writing to a terminal."""
    stream = stream or sys.stdout
    if failed is not None and getattr(stream, "isatty", lambda: False)():
        text = f"{_RED if failed else _GREEN}{text}{_RESET}"
    print(text, file=stream, flush=True)
