"""The summary's split of failing APIs: beyond the rounding of a correct kernel, or within it.

Fed by the per-API ``rounding`` answer of :func:`pytest_msprobe.replay.expected.rounding_of` (``beyond``,
``within`` or ""); the text is shared by the terminal summary and the HTML report.
"""
from __future__ import annotations

from collections.abc import Mapping

BEYOND = "beyond"
WITHIN = "within"
ADVICE = ("they fail msprobe's fixed thresholds but not a correct kernel's arithmetic: judge them against a "
          "second opinion, --msprobe-reference cpu (same run) or --msprobe-gpu-csv (a GPU run's details CSV)")


def split(rounding: Mapping[str, str]) -> tuple:
    """(beyond, within, unknown): the failing API names of each kind, in the order given."""
    beyond = [n for n, k in rounding.items() if k == BEYOND]
    within = [n for n, k in rounding.items() if k == WITHIN]
    unknown = [n for n, k in rounding.items() if k not in (BEYOND, WITHIN)]
    return beyond, within, unknown


def summary_lines(rounding: Mapping[str, str], limit: int = 10) -> list:
    """Terminal lines: how many failing APIs are beyond rounding and how many within, with names and advice."""
    if not rounding:
        return []
    beyond, within, unknown = split(rounding)
    lines = [f"failing APIs beyond rounding: {len(beyond)}; within the rounding of a correct kernel: {len(within)}"
             + (f"; not judged: {len(unknown)}" if unknown else "")]
    if beyond:
        lines.append("  beyond rounding: " + _names(beyond, limit))
    if within:
        lines.append("  within rounding: " + _names(within, limit))
        lines.append("  " + ADVICE)
    return lines


def _names(names: list, limit: int) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... {len(names) - limit} more" if len(names) > limit else "")


def rounding_of_rows(rows: list, column: str) -> str:
    """``beyond`` / ``within`` / "" for an API from its details rows as read from a CSV (``column``: the
    ``Error / Expected`` header): the same rule as the check's (any failing row beyond, or all within)."""
    from ..precision.expected_error import BEYOND_ROUNDING, classify
    from ..precision.verdict import is_bad_row
    bad = [r for r in rows if is_bad_row(r.get("Status", ""))]
    if not bad:
        return ""
    values = []
    for r in bad:
        cell = (r.get(column) or "").strip()
        try:
            values.append(float(cell) if cell else None)
        except ValueError:
            values.append(None)
    if any(v is not None and classify(v) == BEYOND_ROUNDING for v in values):
        return BEYOND
    return WITHIN if all(v is not None for v in values) else ""


def html_split(views: list, column: str) -> dict | None:
    """For the HTML report: the failing (error) APIs beyond and within rounding, read from their details rows
    (None when nothing fails)."""
    from ..precision.verdict import ERROR_KEY, norm
    kinds = {v.name: rounding_of_rows(v.rows, column) for v in views if norm(v.status) == ERROR_KEY}
    if not kinds:
        return None
    beyond, within, unknown = split(kinds)
    return {"beyond": beyond, "within": within, "unknown": unknown, "advice": ADVICE}
