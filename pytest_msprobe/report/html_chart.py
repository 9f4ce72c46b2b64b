"""The HTML report's chart: for each API, the metric that decided its status, on one scale.

msprobe's status chain ends with a verdict sentence in each output's Message (cosine below 0.99, the
double-hundred/thousand/ten-thousand ratios, max abs error below 0.001); the sentence that decided the worst
output names the metric plotted for its API. Ratios and the cosine are plotted as their distance from 1, errors
and rates as they are, so every API that has a deciding metric gets a bar, whichever metric it failed on.
"""
from __future__ import annotations

import base64
import io
import math
from typing import Any, Dict, List, Optional

from ..precision.compare import (
    V_COS_ERR,
    V_HUNDRED_ERR,
    V_MAXABS_PASS,
    V_TEN_THOUSAND_PASS,
    V_TEN_THOUSAND_WARN,
    V_THOUSAND_ERR,
    V_THOUSAND_PASS,
    V_THOUSAND_WARN,
)
from ..precision.fields import SHORT_LABEL
from ..precision.verdict import SEVERITY, norm
from .columns import FIELD_OF_HEADER

# verdict sentence -> the metric field it decided on
_SENTENCES = ((V_COS_ERR, "cosine"), (V_MAXABS_PASS, "max_abs_err"), (V_HUNDRED_ERR, "hundred_ratio"),
              (V_THOUSAND_ERR, "thousand_ratio"), (V_THOUSAND_WARN, "thousand_ratio"),
              (V_THOUSAND_PASS, "thousand_ratio"), (V_TEN_THOUSAND_WARN, "ten_thousand_ratio"),
              (V_TEN_THOUSAND_PASS, "ten_thousand_ratio"))
# metrics whose perfect value is 1 (plotted as 1 - value)
_UNIT = frozenset({"cosine", "hundred_ratio", "thousand_ratio", "ten_thousand_ratio"})
# where no sentence decided (the other standards), the first of these with a value
_FALLBACK = ("binary_error_rate", "ulp_max", "small_value_err_ratio", "max_rel_err", "rmse", "error_balance",
             "inf_nan_error_rate", "rel_err_error_rate", "abs_err_error_rate", "cosine", "max_abs_err")
_HEADER_OF_FIELD = {f: h for h, f in FIELD_OF_HEADER.items()}
FLOOR = 1e-16


def _value(row: Dict[str, str], field: str) -> Optional[float]:
    try:
        x = float(row.get(_HEADER_OF_FIELD.get(field, ""), ""))
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def deciding_metric(row: Dict[str, str]) -> Optional[tuple]:
    """(metric field, plotted value) that decided a details row's status; None when no metric did."""
    message = row.get("Message") or ""
    decided = None
    at = -1
    for sentence, field in _SENTENCES:
        where = message.rfind(sentence.strip())
        if where > at:
            at, decided = where, field
    fields = (decided,) if decided else _FALLBACK
    for field in fields:
        v = _value(row, field)
        if v is not None:
            shown = 1.0 - v if field in _UNIT else abs(v)
            return field, max(shown, FLOOR) if not math.isinf(shown) else 1e30
    return None


def api_bar(rows: List[Dict[str, str]]) -> Optional[tuple]:
    """(metric field, value) of an API: its worst output's deciding metric (the largest value among outputs of
    that status)."""
    rank = {s: i for i, s in enumerate(SEVERITY)}
    best = None
    for row in rows:
        got = deciding_metric(row)
        if got is None:
            continue
        key = (rank.get(norm(row.get("Status", "")), 9), -got[1])
        if best is None or key < best[0]:
            best = (key, got)
    return best[1] if best else None


def plot_png(views: List[Any], colours: Dict[str, str], limit: int = 60) -> Optional[str]:
    """A bar per API (the first ``limit`` in the report's order): the metric that decided its status, as a
    base64 PNG data URI; None when no API has one."""
    bars = []
    for v in views:
        got = api_bar(v.rows)
        if got is not None:
            bars.append((v, got))
    if not bars:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = bars[:limit]
    fig, ax = plt.subplots(figsize=(max(8, 0.3 * len(bars) + 3), 5.5))
    x = range(len(bars))
    heights = [value for _, (_, value) in bars]
    ax.bar(x, heights, color=[colours.get(v.status, "#1f77b4") for v, _ in bars])
    for i, (_, (field, value)) in enumerate(bars):
        ax.annotate(SHORT_LABEL.get(field, field), (i, value), rotation=90, fontsize=6, ha="center", va="bottom",
                    xytext=(0, 2), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_ylim(FLOOR, max([1.0, *heights]) * 100)
    ax.set_ylabel("deciding metric: 1 - value for cosine and ratios, else the value")
    ax.set_xticks(list(x))
    ax.set_xticklabels([v.name for v, _ in bars], rotation=90, fontsize=7)
    ax.set_title("Per API, the metric that decided its status (worst output); red = error, orange = warning, "
                 "green = pass", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
