"""`pytest-msprobe html-report`: render the HTML report of an accuracy-check run."""
from __future__ import annotations

import argparse

DESCRIPTION = ("Render a single self-contained HTML report (counts, sortable API table, per-API metrics, "
               "call stacks, plots) from an accuracy-check result CSV and its details twin.")
EPILOG = ("examples:\n  pytest-msprobe html-report out/ --dump dump/step0/rank   (the newest result CSV in out/)\n"
          "  pytest-msprobe html-report out/accuracy_checking_result_20261130120000.csv "
          "--dump dump/step0/rank -o report.html")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("result_csv", nargs="+", metavar="RESULT_CSV",
                        help="accuracy_checking_result_*.csv (ours or msprobe's), or the folder of a check's "
                             "CSVs (of several, the newest is read)")
    parser.add_argument("--details", help="the details CSV (default: the result CSV's details twin)")
    parser.add_argument("--dump", help="dump directory holding stack.json, to show each API's call stack")
    parser.add_argument("--compare", help="api_precision_compare_result CSV: show the NPU-vs-GPU verdict per API")
    parser.add_argument("-o", "--output", help="HTML file to write (default: beside the result CSV)")


def run(args: argparse.Namespace) -> int:
    from ..report.html import render_report

    from .paths import pick
    path = render_report(pick(args.result_csv, command="html-report"), args.details, args.output, dump_dir=args.dump,
                         compare_csv=args.compare)
    print(f"HTML report: {path}")
    return 0
