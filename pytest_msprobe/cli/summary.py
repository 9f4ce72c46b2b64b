"""``pytest-msprobe summary RESULT_CSV``: counts and failing APIs of an accuracy_checking_result CSV.

Reads our CSVs and msprobe's (its details twin is used when present). Exit status 1 when an API fails
(error, or warning with ``--fail-on warning``), so the command can gate CI on a CSV made elsewhere.
"""
from __future__ import annotations

import argparse
import os
from collections import Counter

from ..precision import verdict
from ..precision.fields import REASON_FIELDS, SHORT_LABEL
from ..report import acc_csv
from ..report.columns import DETAILS_HEADER, HEADER_OF_FIELD

DESCRIPTION = "Summarise an accuracy_checking_result CSV (ours or msprobe's): counts and the failing APIs."
EPILOG = ("examples: pytest-msprobe summary out/   (the newest result CSV in out/)\n"
          "          pytest-msprobe summary out/accuracy_checking_result_20260101120000.csv --top 20")

# the details columns a failing API's reason quotes: (CSV header, short label)
_METRICS = tuple((HEADER_OF_FIELD[f], SHORT_LABEL[f]) for f in REASON_FIELDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("result_csv", nargs="+", metavar="RESULT_CSV",
                        help="accuracy_checking_result_{timestamp}.csv, or the folder of a check's CSVs "
                             "(of several, the newest is read)")
    parser.add_argument("--details", default=None,
                        help="the details CSV (default: the result CSV's 'details' twin, if it exists)")
    parser.add_argument("--top", type=int, default=10, help="how many failing APIs to list (default 10)")
    parser.add_argument("--fail-on", choices=verdict.FAIL_ON_CHOICES, default=verdict.DEFAULT_FAIL_ON,
                        help="which status makes the exit status 1 (default error)")


def _worst_rows(details_path: str) -> dict:
    """API -> (row name, status, short reason) of its first error row, else its first warning row."""
    header, rows = acc_csv.read_details_csv(details_path)
    col = {name: i for i, name in enumerate(header)}
    status_i = col.get("Status", DETAILS_HEADER.index("Status"))
    msg_i = col.get("Message", DETAILS_HEADER.index("Message"))
    worst: dict = {}
    for r in rows:
        status = r[status_i].strip().lower()
        if not verdict.is_bad_row(status):
            continue
        api = acc_csv.api_of_output(r[0])
        if api in worst and (worst[api][1] == verdict.ERROR_KEY or status == verdict.WARNING_KEY):
            continue
        lines = [ln for ln in r[msg_i].splitlines() if ln.strip()]
        metrics = ", ".join(f"{label}={r[col[m]].strip()}" for m, label in _METRICS
                            if m in col and r[col[m]].strip())
        reason = (lines[-1] if lines else status) + (f" [{metrics}]" if metrics else "")
        worst[api] = (r[0], status, reason)
    return worst


def summarise(result_csv: str, details_csv: str | None = None, *, top: int = 10,
              fail_on: str = verdict.DEFAULT_FAIL_ON) -> tuple:
    """(lines to print, number of failing APIs)."""
    rows = acc_csv.read_result_csv(result_csv)
    fwd = Counter(r.forward.strip() or "blank" for r in rows)
    bwd = Counter(r.backward.strip() or "blank" for r in rows)
    failing = [r for r in rows if verdict.is_failing(r.forward, r.backward, fail_on=fail_on)]
    skipped = [r for r in rows if verdict.is_skip(r.forward)]
    lines = [f"{result_csv}: {len(rows)} APIs",
             "forward:  " + ", ".join(f"{k} {v}" for k, v in fwd.most_common()),
             "backward: " + ", ".join(f"{k} {v}" for k, v in bwd.most_common())]
    if details_csv is None:
        twin = acc_csv.details_path_for(result_csv)
        details_csv = twin if os.path.exists(twin) else None
    worst = _worst_rows(details_csv) if details_csv else {}
    if failing:
        lines.append(f"failing APIs ({len(failing)}, fail on {fail_on}):")
        for r in failing[:top]:
            row, _, reason = worst.get(r.name, (r.name, "", (r.message or "").strip()))
            lines.append(f"  {r.name}: forward {r.forward}, backward {r.backward.strip() or '-'}"
                         + (f"; {row}: {reason}" if reason else ""))
        if len(failing) > top:
            lines.append(f"  ... {len(failing) - top} more")
    if skipped:
        reasons = Counter((r.message or "").strip() or "(no reason)" for r in skipped)
        lines.append(f"SKIP ({len(skipped)}):")
        for reason, n in reasons.most_common(top):
            lines.append(f"  {n} x {reason}")
    return lines, len(failing)


def run(args: argparse.Namespace) -> int:
    from .paths import pick
    lines, n_failing = summarise(pick(args.result_csv, command="summary"), args.details, top=args.top,
                                 fail_on=args.fail_on)
    print("\n".join(lines))
    return 1 if n_failing else 0
