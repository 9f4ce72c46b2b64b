"""Cell formatting of msprobe's CSVs (spec precision-standard.md section 6.3)."""
from __future__ import annotations

from typing import Any

# the cell text itself lives below both CSV writers (the checker's and online dispatch's)
from dumpers.csvcell import DEFAULT_PRECISION, format_cell, safe_text  # noqa: F401
from dumpers.csvcell import FORMULA_LEAD as _FORMULA_LEAD  # noqa: F401


def parse_cell(text: str) -> Any:
    """Read a metric cell back: blank -> None, numbers -> float, anything else -> the string."""
    if text is None:
        return None
    t = text.strip()
    if t == "":
        return None
    try:
        return float(t)
    except ValueError:
        return text
