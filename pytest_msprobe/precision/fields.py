"""The metric fields of a details row, in CSV column order, with their short and display labels.

One table: the CSV layout (``report/columns.py``) maps its headers onto these fields, failure texts use the
short labels and the HTML report the display labels.
"""
from __future__ import annotations

# field, short label (failure reasons, summaries), display label (HTML report; None: the CSV header)
METRICS = (
    ("cosine", "cosine", "cosine"),
    ("max_abs_err", "max_abs", "max abs err"),
    ("hundred_ratio", "double_hundred", "ratio rel<0.01"),
    ("thousand_ratio", "double_thousand", "ratio rel<0.001"),
    ("ten_thousand_ratio", "double_ten_thousand", "ratio rel<0.0001"),
    ("binary_error_rate", "binary_error_rate", "binary err rate"),
    ("error_balance", "error_balance", "error balance"),
    ("rmse", "rmse", "RMSE"),
    ("small_value_err_ratio", "small_value_err_ratio", "small-value err ratio"),
    ("max_rel_err", "max_rel_err", "max rel err"),
    ("mean_rel_err", "mean_rel_err", "mean rel err"),
    ("inf_nan_error_rate", "inf_nan_error_rate", "inf/nan err rate"),
    ("rel_err_error_rate", "rel_err_error_rate", "rel err rate"),
    ("abs_err_error_rate", "abs_err_error_rate", "abs err rate"),
    ("ulp_max", "ulp_max", "max ULP"),
    ("ulp_mean", "ulp_mean", "mean ULP"),
    ("ulp_above_threshold_ratio", "ulp_above_threshold_ratio", "ratio ULP>thr"),
)

# keys of a DetailRow's metrics, in details-CSV column order (columns 5..21)
DETAIL_METRIC_FIELDS = [name for name, _, _ in METRICS]
SHORT_LABEL = {name: short for name, short, _ in METRICS}
DISPLAY_LABEL = {name: display for name, _, display in METRICS if display}
# the metrics a failure reason quotes, in this order
REASON_FIELDS = ("cosine", "max_abs_err", "hundred_ratio", "thousand_ratio", "ten_thousand_ratio",
                 "binary_error_rate")


def reason_metrics(metrics: dict) -> str:
    """``cosine=0.98, max_abs=0.5`` from the numeric reason metrics of a row (missing ones left out)."""
    parts = []
    for key in REASON_FIELDS:
        v = (metrics or {}).get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            parts.append(f"{SHORT_LABEL[key]}={float(v):.6g}")
    return ", ".join(parts)
