"""Cell formatting of msprobe's CSVs (spec precision-standard.md section 6.3)."""
from __future__ import annotations

import math
from typing import Any

from .columns import BLANK

DEFAULT_PRECISION = 14
_FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")


def format_cell(value: Any, precision: int = DEFAULT_PRECISION) -> str:
    """Format one metric cell the way msprobe writes it.

    None -> blank (" "); bool -> "True"/"False"; int -> plain integer; Python float and float64 ->
    fixed-point with ``precision`` decimals ("nan"/"inf" for non-finite); float32/float16 numpy scalars ->
    their shortest ``str()`` (msprobe does not convert them); strings unchanged.
    """
    if value is None:
        return BLANK
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    tname = type(value).__name__
    if tname in ("float32", "float16"):
        return str(value)
    if tname in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return str(int(value))
    if tname == "bool_":
        return str(bool(value))
    x = float(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{precision}f}"


def safe_text(text: str) -> str:
    """Neutralise spreadsheet formula injection in free-text cells taken from a dump (names, messages).

    A cell that starts with =, +, -, @, tab or CR gets a leading apostrophe. Numbers are never passed here.
    """
    if text and text[0] in _FORMULA_LEAD:
        return "'" + text
    return text
