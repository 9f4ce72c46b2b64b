"""``pytest-msprobe grad-compare DIR1 DIR2 -o OUT``: compare two grad_probe exports step by step."""
from __future__ import annotations

import argparse

DESCRIPTION = ("Compare two grad_probe exports (the dump_path of two runs made with the same config at grad_level "
               "L1 or L2): per rank, similarities.csv, anomalies.csv and similarities_picture/*.png.")
EPILOG = ("The problem-step rule: for any parameter, a first-step similarity below 0.97, or a drop of more than "
          "0.03 from one step to the next, marks the step as suspicious.\n"
          "exit status: 0 done, 1 a suspicious step was found and --fail-on-anomaly was given, 2 nothing to "
          "compare.\n\n"
          "example:\n  pytest-msprobe grad-compare ./grad_run_npu ./grad_run_gpu -o ./grad_compare")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dump_path1", metavar="DIR1", help="one export root (the config's dump_path)")
    parser.add_argument("dump_path2", metavar="DIR2", help="the other export root")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="result directory (created)")
    parser.add_argument("--no-plots", action="store_true", help="write the CSVs only")
    parser.add_argument("--fail-on-anomaly", action="store_true",
                        help="exit with status 1 when any rank has a suspicious step")


def run(args: argparse.Namespace) -> int:
    from dumpers.grad_probe.comparator import GradComparator

    try:
        results = GradComparator.compare_distributed(args.dump_path1, args.dump_path2, args.output,
                                                     plot=not args.no_plots)
    except (RuntimeError, TypeError) as exc:
        print(f"pytest-msprobe grad-compare: error: {exc}")
        return 2
    for r in results:
        where = "" if r.rank is None else f"rank{r.rank} "
        print(f"grad-compare: {where}compared steps {r.steps[0]}..{r.steps[-1]} ({len(r.steps)}), "
              f"{len(r.params)} parameters -> {r.output_dir}")
    flagged = any(r.anomalies for r in results)
    return 1 if flagged and args.fail_on_anomaly else 0
