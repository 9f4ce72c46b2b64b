"""Cell formatting of msprobe's CSVs (spec precision-standard.md section 6.3)."""
from __future__ import annotations

# the cell text itself lives below both CSV writers (the checker's and online dispatch's)
from dumpers.csvcell import DEFAULT_PRECISION, format_cell, safe_text  # noqa: F401
from dumpers.csvcell import FORMULA_LEAD as _FORMULA_LEAD  # noqa: F401
