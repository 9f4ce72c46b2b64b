"""A details CSV as the NPU-vs-GPU compare and the standard detection read it: ours or msprobe's.

Spec: precision-standard.md section 5.1 (the columns a details CSV must have) and 5.7 (the NPU cells copied
into the compare's output as they were read). The doc spellings of the headers (spaces, case) are read as
the code headers (section 9 #22).
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from .columns import DETAILS_HEADER
from dumpers.format import format_cell

PathLike = Union[str, Path]

# columns a details CSV must have (5.1)
REQUIRED_COLUMNS = (
    "API Name", "DEVICE Dtype", "小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值",
    "误差均衡性", "二进制一致错误率", "inf/nan错误率", "相对误差错误率", "绝对误差错误率",
    "ULP误差平均值", "ULP误差大于阈值占比", "双千指标",
)
# NPU values copied into the output as they were read (5.7)
COPIED_COLUMNS = frozenset({
    "二进制一致错误率", "inf/nan错误率", "相对误差错误率", "绝对误差错误率",
    "ULP误差平均值", "ULP误差大于阈值占比", "双千指标",
})



class ApcInputError(ValueError):
    """A details CSV that cannot be compared (missing, empty, wrong header, broken rows)."""


def _key(header: str) -> str:
    return "".join(header.split()).lower()


# doc spellings (spaces, case) map onto the code headers (section 9 #22)
_CANONICAL = {_key(h): h for h in DETAILS_HEADER}


@dataclass
class DetailsTable:
    """A details CSV as read: its rows (canonical column -> cell text) and how each column parsed."""
    path: Path
    side: str
    rows: list = field(default_factory=list)     # list[dict[str, str]]
    kinds: dict = field(default_factory=dict)    # column -> "int" | "float" | "text"

    def copied_text(self, column: str, text: str) -> str:
        """An NPU cell as the compare copies it: integers and floats re-formatted when the whole column
        is numeric (as msprobe's reader types it), else the text as read."""
        kind = self.kinds.get(column, "text")
        if kind == "int":
            return str(int(float(text)))
        if kind == "float":
            return format_cell(float(text))
        return text


def _column_kind(values: list) -> str:
    kind = "int"
    for v in values:
        t = v.strip()
        if not t:
            return "text"
        try:
            float(t)
        except ValueError:
            return "text"
        if kind == "int" and not re.fullmatch(r"[+-]?\d+", t):
            kind = "float"
    return kind if values else "text"


def table_from_rows(path: PathLike, side: str, rows: list) -> DetailsTable:
    """A table of rows already in memory (canonical column -> cell text), typed as :func:`read_details` types
    a file's columns."""
    return DetailsTable(Path(path), side, rows=list(rows),
                        kinds={c: _column_kind([r.get(c, "") for r in rows]) for c in COPIED_COLUMNS})


def read_details(path: PathLike, side: str = "NPU") -> DetailsTable:
    """Read an ``accuracy_checking_details_*.csv`` (ours or msprobe's; BOM or not, CRLF or LF).

    Raises:
        ApcInputError: the file is missing, not UTF-8, empty, lacks required columns or has broken rows;
            the message names the file, the side and the column or line.
    """
    p = Path(path)
    what = f"{side} details CSV {str(p)!r}"
    if not p.is_file():
        raise ApcInputError(f"{what} does not exist; pass the accuracy_checking_details_*.csv written by "
                            f"run_ut / acc_check or by 'pytest --msprobe-api-info'")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ApcInputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            f"pass the CSV file itself, not a spreadsheet export") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise ApcInputError(f"{what} is empty; expected a header starting with "
                            f"'{','.join(DETAILS_HEADER[:4])},...' and one row per compared output")
    columns = [_CANONICAL.get(_key(h), h) for h in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        hint = ""
        if _key(header[0]) == "apiname" and "Forward Test Success" in header:
            hint = " (this is a result CSV: pass accuracy_checking_details_*.csv, not *_result_*.csv)"
        elif "比对结果" in header:
            hint = " (this is an api_precision_compare output, not a run_ut details CSV)"
        raise ApcInputError(f"The following columns {{{','.join(missing)}}} are missing in {what}{hint}")
    table = DetailsTable(p, side)
    for record in reader:
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if len(record) != len(columns):
            raise ApcInputError(f"{what}, line {reader.line_num}: {len(record)} cells but the header has "
                                f"{len(columns)} columns; the file is cut off or was edited "
                                f"(re-run the check)")
        table.rows.append(dict(zip(columns, record)))
    if not table.rows:
        raise ApcInputError(f"{what} has a header but no rows; the check that wrote it compared nothing")
    table.kinds = {c: _column_kind([r[c] for r in table.rows]) for c in COPIED_COLUMNS}
    return table
