"""The HTML page of an attribution: a bar chart of the shares and, with a checker result, each flagged API's
share beside its status. Self-contained (inline CSS, no script); every text is escaped."""
from __future__ import annotations

import html
from typing import Any, Optional

from .errors import verdict

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}.bar{background:#4a7bd0;height:1em;display:inline-block;vertical-align:middle}
.neg{background:#c8c8c8}.dom{background:#d0553f}.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.92em}
"""


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _bar(share: Optional[float], dominant: bool) -> str:
    if share is None:
        return ""
    width = max(0.0, min(1.0, abs(share))) * 300
    cls = "bar dom" if dominant else ("bar neg" if share < 0 else "bar")
    return f'<span class="{cls}" style="width:{width:.0f}px"></span>'


def section(result: Any) -> str:
    """The attribution section: drift, chart of shares, calls left as they ran, flagged APIs' shares."""
    e = html.escape
    d = result.plain
    parts = ['<section id="attribution"><h2>Attribution of the drift</h2>',
             f'<p>Loss as run {e(f"{result.loss:.8g}")}, ideal {e(f"{result.ideal_loss:.8g}")} '
             f'(|diff| {e(f"{d.loss:.4g}")}); gradients: relative norm {e(f"{d.grad:.4g}")}, cosine '
             f'{e(f"{d.cosine:.6f}")}. {result.n_candidates} calls corrected in the ideal run; {result.runs} runs '
             f'of the step, {result.seconds:.1f} s.</p>',
             '<p class="note">A call explains N% of the drift when correcting it alone (its output replaced by '
             'the bench\'s, rounded to its dtype) removes N% of the distance between the step as run and the '
             'ideal run, in the loss or in the gradients (the larger). Red: dominant (its error is beyond the '
             'rounding of a correct kernel).</p>',
             '<table><tr><th>API Name</th><th>Share</th><th></th><th>Loss</th><th>Gradients</th>'
             '<th>Error</th></tr>']
    for r in result.rows:
        err = "" if r.multiple is None else f"{r.multiple:.3g}x expected ({verdict(r.multiple)})"
        if r.backward_multiple is not None:
            err += f"; backward {r.backward_multiple:.3g}x ({verdict(r.backward_multiple)})"
        parts.append(f'<tr><td>{e(r.name)}</td><td class="num">{_pct(r.share)}</td><td>{_bar(r.share, r.dominant)}'
                     f'</td><td class="num">{_pct(r.loss_share)}</td><td class="num">{_pct(r.grad_share)}</td>'
                     f'<td>{e(err)}</td></tr>')
    parts.append("</table>")
    if result.together_share is not None:
        parts.append(f"<p>Corrected together, the calls found explain {_pct(result.together_share)} of the drift "
                     f"({_pct(result.together_loss_share)} of the loss drift).</p>")
    if result.statuses:
        shares = {r.name: r for r in result.rows if r.calls == 1}
        parts.append("<h3>Flagged APIs and their share</h3><table><tr><th>API Name</th><th>Status</th>"
                     "<th>Share</th><th></th></tr>")
        for name, status in result.statuses.items():
            row = shares.get(name)
            share = row.share if row is not None else None
            text = _pct(share) if row is not None else f"under {_pct(result.min_share)}"
            parts.append(f"<tr><td>{e(name)}</td><td>{e(status)}</td><td class=\"num\">{e(text)}</td>"
                         f"<td>{_bar(share, bool(row and row.dominant))}</td></tr>")
        parts.append("</table>")
    if result.uncorrectable:
        parts.append(f"<details><summary>{len(result.uncorrectable)} calls left as they ran</summary><table>"
                     "<tr><th>API Name</th><th>Why</th></tr>")
        parts += [f"<tr><td>{e(n)}</td><td>{e(why)}</td></tr>" for n, why in result.uncorrectable]
        parts.append("</table></details>")
    parts.append("</section>")
    return "\n".join(parts)


def page(result: Any) -> str:
    """A whole HTML page holding :func:`section`."""
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>pytest-msprobe attribution</title>"
            f"<style>{_STYLE}</style></head><body>\n{section(result)}\n</body></html>\n")
