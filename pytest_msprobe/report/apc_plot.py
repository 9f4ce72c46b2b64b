"""A PNG of the NPU/GPU ratios of one compare against their limits (matplotlib, Agg backend)."""
from __future__ import annotations

import math
from pathlib import Path

from ..precision import apc_rules as R
from ..precision.standards import DEFAULT_STANDARD
from ..precision.verdict import ERROR_KEY, PASS_KEY, WARNING_KEY

# the plotted ratio columns: (ratio column, verdict column, legend label, marker)
_LABELS = {"small_value_err_ratio": ("small-value error", "o"), "rmse": ("RMSE", "s"),
           "max_rel_err": ("max rel err", "^"), "mean_rel_err": ("mean rel err", "v"),
           "error_balance": ("error balance (not counted)", "x")}
_SERIES = tuple((m.ratio_column, m.status_column, *_LABELS[m.key]) for m in R.BENCHMARK_METRICS) + (
    ("ULP误差大于阈值占比比值", "ULP误差判定结果", "ULP proportion", "D"),)
_COLOURS = {PASS_KEY: "tab:green", ERROR_KEY: "tab:red", WARNING_KEY: "tab:orange"}


def plot_ratios(rows: list, path: str | Path, *, version: str = DEFAULT_STANDARD) -> Path:
    """Plot every finite ratio of the details rows (one x position per output) on a log scale, with the
    version's default (L0) warning and error limits as horizontal lines. Returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    std, _ = R.get_rules(version)
    judged = [(name, v) for name, v in rows if any(s[0] in v.cells for s in _SERIES)]
    width = min(max(6.0, 0.25 * len(judged) + 3.0), 40.0)
    fig, ax = plt.subplots(figsize=(width, 4.5))
    try:
        for column, status_column, label, marker in _SERIES:
            xs, ys, colours = [], [], []
            for x, (_, v) in enumerate(judged):
                value = v.cells.get(column)
                if isinstance(value, float) and math.isfinite(value):
                    xs.append(x)
                    ys.append(max(value, 1e-6))
                    colours.append(_COLOURS.get(str(v.cells.get(status_column, PASS_KEY)).lower(), "tab:blue"))
            if xs:
                ax.scatter(xs, ys, marker=marker, c=colours, label=label, alpha=0.8)
        limits = std.apc_levels["L0"]
        drawn = set()
        for lim in limits.values():
            for value, style in ((lim.error, "--"), (lim.warning, ":")):
                if value is not None and (value, style) not in drawn:
                    drawn.add((value, style))
                    ax.axhline(value, color="grey", linestyle=style, linewidth=0.8)
                    ax.annotate(f"{ERROR_KEY if style == '--' else WARNING_KEY} > {value:g}", (0, value),
                                xycoords=("axes fraction", "data"), fontsize=7, color="grey",
                                va="bottom")
        ax.set_yscale("log")
        ax.set_ylabel("NPU / GPU ratio")
        ax.set_xticks(range(len(judged)))
        ax.set_xticklabels([n for n, _ in judged], rotation=90, fontsize=6)
        ax.set_title(f"api_precision_compare ratios (standard {std.name}; colour = verdict)")
        if judged:
            from matplotlib.lines import Line2D

            handles = [Line2D([], [], marker=marker, color="grey", linestyle="None", label=label)
                       for _, _, label, marker in _SERIES]
            ax.legend(handles=handles, fontsize=7, loc="upper right")
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)
    return out
