"""The two CSVs of an accuracy check: ``accuracy_checking_result_{ts}.csv`` and ``..._details_{ts}.csv``.

Layout as msprobe writes them (spec precision-standard.md section 6): UTF-8 with one BOM, comma separated,
minimal quoting, CRLF records (bare LF inside quoted messages). The result CSV keeps msprobe's four columns
exactly (a row has three fields unless it carries a Message). The details CSV may carry three extra last
columns, ``Data Mode`` (``real_data`` / ``random_data``), ``Replay Fidelity`` (``exact``, ``within rounding
(...)``, ``differs (...)`` or blank, see docs/recorded.md) and ``Error / Expected`` (the device's error as a
multiple of the expected error of the call, docs/expected-error.md); readers that select columns by name, like
msprobe's api_precision_compare, ignore them.

Crash safety: for each API the details rows are written first and the result row last, each flushed to the
OS at once, so a killed process leaves whole rows behind and a result row means "this API is complete".
"""
from __future__ import annotations

import csv
import datetime
import errno
import io
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dumpers import atomic
from dumpers.format import DEFAULT_PRECISION, FORMULA_LEAD, format_cell, parse_row_name, safe_text

from ..precision.standards import DEFAULT_STANDARD
from ..precision.verdict import DEFAULT_FAIL_ON, is_failing  # is_failing: a result row's roll-up, for readers
from .columns import (BLANK, DATA_MODE_COLUMN, DETAIL_METRIC_FIELDS, DETAILS_HEADER, EXPECTED_COLUMN,
                      FIDELITY_COLUMN, RESULT_HEADER)

try:
    import fcntl
except ImportError:         # no advisory locks on this platform: exclusive creation still keeps pairs apart
    fcntl = None  # type: ignore[assignment]

BOM = "\ufeff"
RESULT_PREFIX = "accuracy_checking_result_"
DETAILS_PREFIX = "accuracy_checking_details_"
RESULT_NAME_RE = re.compile(r"^accuracy_checking_result_(\d{14})\.csv\Z")
FILE_MODE = 0o640
DIR_MODE = 0o750


# --------------------------------------------------------------------------------------------------
# Which pair a check writes, so that two checks never share or replace one. A new pair is claimed (claim.py)
# by creating both files exclusively (O_EXCL): of two checks started in the same second into one
# --msprobe-out, one gets ..._{ts}.csv and the other the next free second. While a check writes its pair it
# holds an exclusive advisory lock on the result file (a second check continuing the same pair, --lf or
# --msprobe-result-csv, stops with one line), and its end-of-run rewrite (rows back in dump order after -n)
# replaces only the file it wrote, unchanged since.
MAX_TRIES = 3600            # one free name within the next hour of one-second stamps


class PairBusy(OSError):
    """Another check is writing this CSV pair."""


_ADVICE = {
    errno.ENOSPC: "free space on its disk or give another --msprobe-out, then run the same command with --lf to "
                  "finish the pair",
    errno.EFBIG: "the file-size limit (ulimit -f) is reached; raise it or give another --msprobe-out, then run "
                 "the same command with --lf to finish the pair",
    errno.EACCES: "give a folder you can write with --msprobe-out",
    errno.EPERM: "give a folder you can write with --msprobe-out",
    errno.EROFS: "the file system is read-only; give a writable folder with --msprobe-out",
    errno.ENOTDIR: "a part of the path is a file; give a folder with --msprobe-out",
}
_ADVICE[getattr(errno, "EDQUOT", errno.ENOSPC)] = _ADVICE[errno.ENOSPC]


class CsvWriteError(OSError):
    """A result or details CSV that cannot be written: one line naming the file and what to do."""

    def __init__(self, path: str, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        advice = _ADVICE.get(exc.errno or 0, "check the disk and the folder, then run the same command with --lf "
                                              "to finish the pair")
        path = os.path.abspath(path)
        super().__init__(exc.errno, f"cannot write {path}: {reason}; {advice}")
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


def stop_run(exc: OSError) -> Any:
    """End the pytest run with one line for a CSV that cannot be written (``pytest.exit``: the session still
    finishes, and the rows written so far stay whole)."""
    import pytest
    pytest.exit(f"pytest-msprobe: {exc}", returncode=pytest.ExitCode.INTERRUPTED)


def next_second(ts: str) -> str:
    """``YYYYmmddHHMMSS`` one second later (file names keep msprobe's pattern)."""
    t = datetime.datetime.strptime(ts, "%Y%m%d%H%M%S") + datetime.timedelta(seconds=1)
    return t.strftime("%Y%m%d%H%M%S")


def create_exclusive(path: str, mode: int) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def lock(fd: int, path: str) -> None:
    """Take the exclusive advisory lock of the pair whose result file is open as ``fd`` (held until closed).

    Raises:
        PairBusy: another check holds it.
    """
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise PairBusy(f"{path} is being written by another check; wait for that check to end, or leave out "
                       f"--lf / --msprobe-result-csv to write a new pair") from None


def identity(fd: int) -> tuple:
    """(device, inode, size) of an open file."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size


def unchanged(path: str, ident: Any) -> bool:
    """Whether ``path`` is still the file of ``ident`` (:func:`identity`), with nothing written since."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino, st.st_size) == tuple(ident)


class held:
    """``with held(path):`` the pair's lock on the result file as it is now (for a rewrite before writing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh: Any = None

    def __enter__(self) -> held:
        if os.path.exists(self.path):
            self.fh = open(self.path, "rb")     # noqa: SIM115 - closed on exit
            try:
                lock(self.fh.fileno(), self.path)
            except OSError:
                self.fh.close()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()



STANDARD_MARK = re.compile(r"\(standard (?P<version>[0-9.]+)\)\s*$")    # in a Data Mode cell (mark_data_mode)


def mark_data_mode(data_mode: str, standard: str) -> str:
    """The ``Data Mode`` cell of a row checked under ``standard``: ``real_data (standard 26.2)``, unchanged under
    the default standard (:mod:`.standard_detect` reads the mark back)."""
    if standard == DEFAULT_STANDARD:
        return data_mode
    return f"{data_mode} (standard {standard})".strip()


def new_timestamp() -> str:
    """Local time ``YYYYmmddHHMMSS``, read once per run (both file names share it)."""
    return time.strftime("%Y%m%d%H%M%S")


def csv_paths(out_dir: str, timestamp: str) -> tuple:
    """(result path, details path) of a run started at ``timestamp``."""
    return (os.path.join(out_dir, f"{RESULT_PREFIX}{timestamp}.csv"),
            os.path.join(out_dir, f"{DETAILS_PREFIX}{timestamp}.csv"))


def details_path_for(result_path: str) -> str:
    """The details twin of a result CSV: ``result`` replaced by ``details`` in the file name only."""
    head, base = os.path.split(result_path)
    return os.path.join(head, base.replace("result", "details", 1))


def timestamp_of(result_path: str) -> str | None:
    m = RESULT_NAME_RE.match(os.path.basename(result_path))
    return m.group(1) if m else None


def cell_name(cell: str) -> str:
    """A name cell as written by :func:`safe_text` -> the name (the neutralising apostrophe removed)."""
    if cell[:1] == "'" and cell[1:2] and cell[1] in FORMULA_LEAD:
        return cell[1:]
    return cell


def api_of_output(row_name: str) -> str:
    """``Functional.linear.0.backward.output.2`` -> ``Functional.linear.0``."""
    name = cell_name(row_name)
    parsed = parse_row_name(name)
    return parsed.call if parsed is not None else name


# --- rows -----------------------------------------------------------------------------------------
def result_cells(name: str, forward: str, backward: str | None, message: str | None) -> list[str]:
    """One result row: three fields, or four when there is a Message (API-level SKIP)."""
    cells = [safe_text(name), forward or BLANK, backward if backward else BLANK]
    if message is not None:
        cells.append(safe_text(message))
    return cells


def detail_cells(row: Any, *, precision: int = DEFAULT_PRECISION) -> list[str]:
    """One details row from a ``DetailRow`` (name, dtypes, shape, metrics, status, message)."""
    shape = row.shape
    if isinstance(shape, (list, tuple)):
        shape = str(tuple(shape))
    metrics = row.metrics or {}
    cells = [safe_text(str(row.name)), format_cell(row.bench_dtype), format_cell(row.device_dtype),
             format_cell(shape)]
    cells += [format_cell(metrics.get(key), precision) for key in DETAIL_METRIC_FIELDS]
    cells += [str(row.status), safe_text(row.message or "")]
    return cells


def row_text(cells: Sequence[str]) -> str:
    """``cells`` as one CSV line, its ``\r\n`` included: what the writer puts in the file for them."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(cells)
    return buf.getvalue()


def _joined(line: str, tail: Sequence[str]) -> str:
    """The line of a row's cells followed by ``tail``: the same text as ``row_text(cells + tail)``. The writer
    quotes each field on its own, but for one case: a row of one empty field is written ``""``, which beside
    other fields is written as nothing (hence ``tail`` rendered after a leading empty field)."""
    if not tail:
        return line
    head = line[:-2]
    return ("" if head == '""' else head) + row_text(["", *tail])


# --- reading --------------------------------------------------------------------------------------
@dataclass
class ResultRow:
    name: str
    forward: str
    backward: str
    message: str | None


def _read_rows(path: str) -> list[list[str]]:
    with open(path, "r", encoding="utf-8-sig", newline="") as fh:
        text = fh.read()
    complete = text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text)))
    if rows and not complete:
        rows.pop()          # the last record was cut by a killed writer
    return rows


def read_result_csv(path: str) -> list[ResultRow]:
    """Rows of a result CSV written by us or by msprobe (BOM optional, 3 or 4 fields)."""
    rows = _read_rows(path)
    if not rows:
        raise ValueError(f"{path}: empty file, expected the header {','.join(RESULT_HEADER)}")
    if rows[0][:1] != [RESULT_HEADER[0]]:
        raise ValueError(f"{path}: not an accuracy_checking_result CSV (first header cell {rows[0][:1]!r}, "
                         f"expected {RESULT_HEADER[0]!r})")
    out = []
    for r in rows[1:]:
        if len(r) < 3 or not r[0]:
            continue
        out.append(ResultRow(cell_name(r[0]),
                             r[1], r[2], r[3] if len(r) > 3 else None))
    return out


def read_details_csv(path: str) -> tuple:
    """(header, rows) of a details CSV; rows shorter than msprobe's 23 columns are dropped."""
    rows = _read_rows(path)
    if not rows:
        return list(DETAILS_HEADER), []
    header = rows[0]
    return header, [r for r in rows[1:] if len(r) >= len(DETAILS_HEADER)]


def failing_apis(path: str, *, fail_on: str = DEFAULT_FAIL_ON) -> set[str]:
    """API names whose result row fails (used as a CI baseline)."""
    return {r.name for r in read_result_csv(path) if is_failing(r.forward, r.backward, fail_on=fail_on)}


# --- writing --------------------------------------------------------------------------------------
def make_dirs(path: str, mode: int = DIR_MODE) -> None:
    """``os.makedirs`` giving ``mode`` (through the umask) to every directory it creates, not just the last:
    Python creates the intermediate ones with the default 0o777."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent != path:
        make_dirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of this folder", path) from None


class _Sink:
    """One CSV file appended to with unbuffered writes: a write that fails (a full disk, a file-size limit) is
    cut back to the last whole row, so the file holds whole rows only, and says which file and what to do."""

    def __init__(self, path: str, header: Sequence[str]) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        except OSError as exc:
            raise CsvWriteError(path, exc) from None
        self.size = os.fstat(self.fd).st_size
        if self.size == 0:
            self.write(BOM + row_text(header))

    def write(self, text: str) -> None:
        raw = text.encode("utf-8")
        data = memoryview(raw)
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as exc:
            self.cut(self.size)
            raise CsvWriteError(self.path, exc) from None
        self.size += len(raw)

    def cut(self, size: int) -> None:
        """Back to ``size`` bytes (the end of a whole row), as far as the file system lets it."""
        try:
            os.ftruncate(self.fd, size)
            self.size = size
        except OSError:
            pass

    def sync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise CsvWriteError(self.path, exc) from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _has_column(path: str, column: str) -> bool:
    """Whether a details CSV being continued has ``column`` (a new or empty file gets every column)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return True
    with open(path, "r", encoding="utf-8-sig", newline="") as fh:
        first = next(csv.reader(fh), [])
    return column in first


class AccCsvWriter:
    """Appends API results to a result/details CSV pair, creating each file with BOM and header.

    ``write_api`` writes the API's details rows, then its result row, flushing after each file; files are
    fsynced at most every ``fsync_interval`` seconds and on ``close``.
    """

    def __init__(self, result_path: str, details_path: str | None = None, *,
                 data_mode_column: bool = True, precision: int = DEFAULT_PRECISION,
                 fsync_interval: float = 1.0) -> None:
        self.result_path = result_path
        self.details_path = details_path or details_path_for(result_path)
        self.precision = precision
        self.data_mode_column = data_mode_column and _has_column(self.details_path, DATA_MODE_COLUMN)
        self.fidelity_column = self.data_mode_column and _has_column(self.details_path, FIDELITY_COLUMN)
        self.expected_column = self.fidelity_column and _has_column(self.details_path, EXPECTED_COLUMN)
        header = (list(DETAILS_HEADER) + ([DATA_MODE_COLUMN] if self.data_mode_column else [])
                  + ([FIDELITY_COLUMN] if self.fidelity_column else [])
                  + ([EXPECTED_COLUMN] if self.expected_column else []))
        for p in (self.result_path, self.details_path):
            d = os.path.dirname(os.path.abspath(p))
            try:
                make_dirs(d)
            except OSError as exc:
                raise CsvWriteError(d, exc) from None
        self._details = _Sink(self.details_path, header)
        try:
            self._result = _Sink(self.result_path, RESULT_HEADER)
            lock(self._result.fd, self.result_path)   # one check writes a pair at a time
        except OSError:
            self._details.close()
            if getattr(self, "_result", None) is not None:
                self._result.close()
            raise
        self.failed: OSError | None = None      # the write that failed: nothing more is written
        self._fsync_interval = fsync_interval
        self._last_sync = time.monotonic()
        self.rows_written = 0

    def write_api(self, result: Sequence[str], details: Iterable[Sequence[str]], data_mode: str = "",
                  fidelity: Sequence[str] = (), expected: Sequence[str] = ()) -> None:
        """Write one API: its details rows (already formatted cells), then its result row.

        ``fidelity``: the Replay Fidelity cell of each details row, in order (missing ones are blank);
        ``expected``: the Error / Expected cell of each details row, likewise."""
        self.write_rows(result, [row_text(cells) for cells in details], data_mode, fidelity, expected)

    def write_rows(self, result: Sequence[str], rows: Sequence[str], data_mode: str = "",
                   fidelity: Sequence[str] = (), expected: Sequence[str] = ()) -> None:
        """:meth:`write_api` with each details row's cells already rendered by :func:`row_text` (where they
        were computed: a worker sends one string a row, not its 23 cells)."""
        lines = []
        for i, line in enumerate(rows):
            tail = []
            if self.data_mode_column:
                tail.append(data_mode)
            if self.fidelity_column:
                tail.append(safe_text(fidelity[i]) if i < len(fidelity) and fidelity[i] else "")
            if self.expected_column:
                tail.append(safe_text(expected[i]) if i < len(expected) and expected[i] else "")
            lines.append(_joined(line, tail))
        if self.failed is not None:
            raise self.failed
        before = self._details.size
        try:
            if lines:
                self._details.write("".join(lines))
            self._result.write(row_text(list(result)))
        except OSError as exc:
            self._details.cut(before)           # no details rows of an API without its result row
            self.failed = exc
            raise
        self.rows_written += 1
        now = time.monotonic()
        if now - self._last_sync >= self._fsync_interval:
            self.sync()
            self._last_sync = now

    def sync(self) -> None:
        if self.failed is None:
            for sink in (self._details, self._result):
                sink.sync()

    def identities(self) -> tuple:
        """(result, details) :func:`identity` of the files written so far."""
        return identity(self._result.fd), identity(self._details.fd)

    def close(self) -> None:
        try:
            self.sync()
        finally:
            self._details.close()
            self._result.close()

    def __enter__(self) -> AccCsvWriter:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rewrite(path: str, rows: list[list[str]]) -> None:
    with atomic.atomic_open(path, mode=FILE_MODE, fsync=True, newline="") as fh:
        fh.write(BOM)
        csv.writer(fh, lineterminator="\r\n").writerows(rows)


def keep_apis(result_path: str, details_path: str | None, keep: set[str]) -> None:
    """Rewrite the pair atomically, keeping only the rows of APIs in ``keep`` (one result row each).

    Used before a resumed run: rows of APIs that will run again (failed, unfinished, or whose details were
    cut off) disappear, so the finished files hold every API exactly once.
    """
    details_path = details_path or details_path_for(result_path)
    if os.path.exists(result_path):
        rows = _read_rows(result_path)
        header, body = (rows[0], rows[1:]) if rows else (list(RESULT_HEADER), [])
        seen: set[str] = set()
        kept = []
        for r in body:
            if len(r) >= 3 and cell_name(r[0]) in keep and cell_name(r[0]) not in seen:
                seen.add(cell_name(r[0]))
                kept.append(r)
        _rewrite(result_path, [header] + kept)
    if os.path.exists(details_path):
        rows = _read_rows(details_path)
        if rows:
            header = rows[0]
            kept = [r for r in rows[1:] if len(r) >= len(DETAILS_HEADER) and api_of_output(r[0]) in keep]
            _rewrite(details_path, [header] + kept)


def sort_apis(result_path: str, details_path: str | None, order: dict) -> None:
    """Rewrite the pair atomically with the APIs of ``order`` (name -> position, e.g. dump order) sorted by
    it, after the rows of APIs not in ``order`` (kept in file order). Each API's details rows stay
    together. Used when parallel workers wrote rows in completion order."""
    details_path = details_path or details_path_for(result_path)

    def key(pos_name: tuple) -> tuple:
        pos, name = pos_name
        return (1, order[name], pos) if name in order else (0, 0, pos)

    rows = _read_rows(result_path)
    if len(rows) > 2:
        body = sorted(((i, cell_name(r[0])) for i, r in enumerate(rows[1:])), key=key)
        _rewrite(result_path, [rows[0]] + [rows[1 + i] for i, _ in body])
    if os.path.exists(details_path):
        rows = _read_rows(details_path)
        groups: list = []            # [api, [rows]] for each run of consecutive rows of one API
        for r in rows[1:]:
            api = api_of_output(r[0]) if r else ""
            if groups and groups[-1][0] == api:
                groups[-1][1].append(r)
            else:
                groups.append([api, [r]])
        ordered = sorted(((i, g[0]) for i, g in enumerate(groups)), key=key)
        if rows:
            _rewrite(details_path, [rows[0]] + [r for i, _ in ordered for r in groups[i][1]])


def finished_apis(result_path: str, *, include_failing: bool, fail_on: str = DEFAULT_FAIL_ON) -> set[str]:
    """APIs with a result row (optionally leaving out failing ones, which a ``--lf`` run repeats)."""
    if not os.path.exists(result_path):
        return set()
    return {r.name for r in read_result_csv(result_path)
            if include_failing or not is_failing(r.forward, r.backward, fail_on=fail_on)}
