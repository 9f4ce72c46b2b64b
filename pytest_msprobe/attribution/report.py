"""The outputs of an attribution: ``attribution_result_{timestamp}.csv``, the terminal table, the HTML page."""
from __future__ import annotations

import csv
import io
import os
import sys
from typing import Any, Optional

from dumpers import atomic
from dumpers.format import format_cell, safe_text

from ..report.acc_csv import make_dirs, new_timestamp
from .errors import verdict

RESULT_PREFIX = "attribution_result_"
HTML_PREFIX = "attribution_report_"
NOT_CORRECTED = "not corrected"

HEADER = ("API Name", "Share", "Loss Share", "Grad Share", "Share Rest Corrected", "Dominant", "Error Verdict",
          "Device Error", "Expected Error", "Error Multiple", "Backward Error Multiple", "Loss Left",
          "Grad Rel Norm Left", "Grad Cosine", "Worst Param", "Worst Param Rel Norm", "Dtype", "Calls", "Runs",
          "Message")


def _num(value: Optional[float]) -> str:
    return "" if value is None else format_cell(float(value))


def row_cells(row: Any) -> list:
    """The CSV cells of one :class:`~.api.Row`."""
    d = row.distance
    return [safe_text(row.name), _num(row.share), _num(row.loss_share), _num(row.grad_share), _num(row.rest_share),
            "yes" if row.dominant else "no", verdict(row.multiple), _num(row.device_err), _num(row.expected_err),
            _num(row.multiple), _num(row.backward_multiple), _num(d.loss if d else None), _num(d.grad if d else None),
            _num(d.cosine if d else None), safe_text(d.worst_param if d else ""),
            _num(d.worst_param_rel if d else None), row.dtype, str(row.calls), str(row.runs),
            safe_text(row.message)]


def csv_text(result: Any) -> str:
    """The whole CSV: the reported calls, most impactful first, then the calls left as they ran."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(HEADER)
    for row in result.rows:
        writer.writerow(row_cells(row))
    blank = [""] * (len(HEADER) - 4)
    for name, reason in result.uncorrectable:
        writer.writerow([safe_text(name), *blank, "1", "0", safe_text(f"{NOT_CORRECTED}: {reason}")])
    return buf.getvalue()


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def summary_lines(result: Any) -> list:
    """What the terminal shows: the drift, the table of reported calls, the calls left as they are, the cost."""
    d = result.plain
    lines = [f"drift of the step as run from the ideal run ({result.n_candidates} calls corrected): "
             f"loss {result.loss:.8g} vs {result.ideal_loss:.8g} (|diff| {d.loss:.4g}), gradients: relative norm "
             f"{d.grad:.4g}, cosine {d.cosine:.6f}, worst parameter {d.worst_param or '-'} ({d.worst_param_rel:.4g})"]
    name_w = max([len("API Name")] + [len(r.name) for r in result.rows[:30]])
    lines.append(f"{'API Name':<{name_w}}  {'Share':>7}  {'Loss':>7}  {'Grad':>7}  {'Others fixed':>12}  "
                 f"{'Error':>28}  Dominant")
    for r in result.rows[:30]:
        err = "" if r.multiple is None else f"{r.multiple:.3g}x expected"
        if r.backward_multiple is not None:
            err += f" (bwd {r.backward_multiple:.3g}x)"
        lines.append(f"{r.name:<{name_w}}  {_pct(r.share):>7}  {_pct(r.loss_share):>7}  {_pct(r.grad_share):>7}  "
                     f"{_pct(r.rest_share):>12}  {err:>28}  {'yes' if r.dominant else 'no'}")
    if len(result.rows) > 30:
        lines.append(f"... {len(result.rows) - 30} more rows in the CSV")
    if not (d.loss > 0 or d.grad > 0):
        lines.append("the step as run equals the ideal run: there is no drift to attribute")
    elif not result.rows:
        lines.append(f"(no call explains {_pct(result.min_share)} of the drift or more)")
    if result.together_share is not None:
        lines.append(f"the {len(result.culprits)} call(s) above corrected together explain "
                     f"{_pct(result.together_share)} of the drift "
                     f"({_pct(result.together_loss_share)} of the loss drift)")
    dominant = result.dominant
    lines.append("dominant (explains the drift and its error is beyond the rounding of a correct kernel): "
                 + (", ".join(r.name for r in dominant) if dominant else "none"))
    if result.uncorrectable:
        counts: dict = {}
        for _, reason in result.uncorrectable:
            counts[reason] = counts.get(reason, 0) + 1
        lines.append(f"{len(result.uncorrectable)} call(s) left as they ran:")
        lines += [f"  {n} x {reason}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    if result.budget_hit:
        lines.append("the budget of runs was spent before the search ended: raise budget= (--budget)")
    lines.append(f"{result.runs} runs of the step, {result.seconds:.2f} s")
    return lines


def write_outputs(result: Any, out_dir: str, *, stream: Any = None) -> None:
    """Write the CSV and the HTML page into ``out_dir`` and print the terminal summary."""
    from .html import page

    make_dirs(out_dir)
    stamp = new_timestamp()
    result.csv_path = os.path.join(out_dir, f"{RESULT_PREFIX}{stamp}.csv")
    atomic.write_text(result.csv_path, csv_text(result))
    result.html_path = os.path.join(out_dir, f"{HTML_PREFIX}{stamp}.html")
    atomic.write_text(result.html_path, page(result))
    out = stream if stream is not None else sys.stdout
    print("\n".join(summary_lines(result)), file=out)
    print(f"written: {result.csv_path}\n         {result.html_path}", file=out)
