"""``pytest-msprobe overflow-check -i STEP_DIR``: the first call that turns finite inputs into inf/nan."""
from __future__ import annotations

import argparse
import sys

DESCRIPTION = ("Find the first call, per rank and across ranks, whose inputs are finite and whose outputs hold "
               "inf or nan (msprobe's overflow_check), from a statistics or tensor dump.")
EPILOG = """examples:
  pytest-msprobe overflow-check -i dump/step3 -o overflow_out
  pytest-msprobe overflow-check -i dump/step3/rank0

exit status: 0 checked (anomaly_analyze_*.json written when one is found), 2 nothing could be read."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--input_path", required=True, metavar="STEP_DIR",
                        help="a step directory (holding rank*) or one rank directory")
    parser.add_argument("-o", "--output_path", default="./output", metavar="OUT",
                        help="where anomaly_analyze_{time}.json goes (default ./output)")


def run(args: argparse.Namespace) -> int:
    from pytest_msprobe.runs_compare.inputs import CompareInputError
    from pytest_msprobe.runs_compare.overflow import check_and_write

    try:
        path, summary = check_and_write(args.input_path, args.output_path,
                                        report=lambda line: print(line, file=sys.stderr))
    except CompareInputError as exc:
        print(f"pytest-msprobe overflow-check: error: {exc}", file=sys.stderr)
        return 2
    print(summary)
    if path:
        print(f"-> {path}")
    return 0
