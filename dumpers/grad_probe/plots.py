"""Similarity plots: msprobe's line per parameter, plus the problem-step rule drawn in.

Uses matplotlib's object API with the Agg canvas: no pyplot state, no backend switch in the caller's process.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from .anomaly import FIRST_STEP_MIN, Anomaly


def plot_similarity(path: str, key: str, steps: Sequence[int], values: Sequence[float],
                    flagged: Sequence[Anomaly] = (), first_step: int | None = None) -> None:
    """Write one PNG (640x480): similarity per step, the 0.97 threshold, flagged steps marked in red and the
    first suspicious step of the whole comparison highlighted."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    pts = [(s, v) for s, v in zip(steps, values) if v is not None and not math.isnan(v)]
    xs = [s for s, _ in pts]
    ys = [v for _, v in pts]
    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.5, color="tab:blue", label="similarity")
    ax.axhline(FIRST_STEP_MIN, color="tab:orange", linestyle="--", linewidth=1,
               label=f"first-step threshold {FIRST_STEP_MIN}")
    if flagged:
        ax.scatter([a.step for a in flagged], [a.similarity for a in flagged], s=60, facecolors="none",
                   edgecolors="red", linewidths=1.5, zorder=3, label="suspicious (rule)")
    if first_step is not None:
        ax.axvspan(first_step - 0.4, first_step + 0.4, color="red", alpha=0.12, zorder=0)
        ax.axvline(first_step, color="red", linewidth=1, linestyle=":",
                   label=f"first suspicious step {first_step}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    low = min([*ys, FIRST_STEP_MIN]) if ys else FIRST_STEP_MIN
    ax.set_ylim(max(0.0, low - 0.02), 1.01)
    if xs:
        ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.set_xlabel("steps")
    ax.set_ylabel("similarities")
    ax.set_title(f"{key}_similarities")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize="small")
    fig.savefig(path)
