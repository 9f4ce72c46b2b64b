"""``pytest-msprobe api-precision-compare``: the NPU-vs-GPU verdict on two details CSVs."""
from __future__ import annotations

import argparse
import sys

from ..precision import verdict
from ..precision.standards import DEFAULT_STANDARD, STANDARDS

DESCRIPTION = """\
Compare the accuracy_checking_details CSV of the device under test (NPU) with the one of a second
opinion (GPU) on the same dump, and write msprobe's api_precision_compare_result_{timestamp}.csv and
api_precision_compare_details_{timestamp}.csv. Each output is judged by the NPU/GPU ratio of its errors
against the CPU bench (benchmark standard), or by the NPU's own rates (binary, absolute threshold,
thousandth), or by its ULP error, as the precision standard prescribes.

Exit status: 0 when no API is error, 1 when at least one is, 2 when an input cannot be read."""

EPILOG = """\
example:
  pytest-msprobe api-precision-compare \\
      --npu npu/accuracy_checking_details_20261130101010.csv \\
      --gpu gpu/accuracy_checking_details_20261130111111.csv -o compare_out --plot

msprobe's spellings work too:
  pytest-msprobe api-precision-compare -npu NPU.csv -gpu GPU.csv -o ./
  pytest-msprobe api-precision-compare --npu_csv_path NPU.csv --gpu_csv_path GPU.csv --out_path ./"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the subcommand's options."""
    parser.add_argument("-npu", "--npu", "--npu_csv_path", dest="npu", required=True, metavar="NPU_CSV", nargs="+",
                        help="accuracy_checking_details_*.csv of the device under test, or its folder (of "
                             "several, the newest)")
    parser.add_argument("-gpu", "--gpu", "--gpu_csv_path", dest="gpu", required=True, metavar="GPU_CSV", nargs="+",
                        help="accuracy_checking_details_*.csv of the reference device, same dump, or its folder")
    parser.add_argument("-o", "--out", "--out_path", dest="out", default="./", metavar="DIR",
                        help="directory for the two api_precision_compare CSVs (default: ./)")
    parser.add_argument("--standard", default=None, choices=sorted(STANDARDS),
                        help=f"precision standard version; default: the one the CSVs were written under "
                             f"(msprobe 1.0.4 run_ut or 26.2 acc_check, recognised from their cells; "
                             f"{DEFAULT_STANDARD} when nothing tells)")
    parser.add_argument("--plot", action="store_true",
                        help="also write api_precision_compare_ratios_{timestamp}.png (ratios vs limits)")


def run(args: argparse.Namespace) -> int:
    """Run the compare and print where the files went and how many APIs passed."""
    from ..report.apc import run_compare

    from .paths import DETAILS, pick
    npu = pick(args.npu, DETAILS, command="api-precision-compare")
    gpu = pick(args.gpu, DETAILS, command="api-precision-compare")
    outcome = run_compare(npu, gpu, args.out, version=args.standard, plot=args.plot)
    counts = {s: 0 for s in verdict.COMPARE_STATUSES}
    for forward, backward, _ in outcome.apis.values():
        counts[verdict.compare_status(forward, backward)] += 1
    out = sys.stdout
    print(outcome.standard_reason or f"standard {outcome.version}", file=out)
    print(f"api_precision_compare (standard {outcome.version}): {len(outcome.apis)} APIs, "
          + ", ".join(f"{n} {s}" for s, n in counts.items()), file=out)
    for name in outcome.failed:
        print(f"  error: {name}", file=out)
    print(f"result:  {outcome.result_csv}", file=out)
    print(f"details: {outcome.details_csv}", file=out)
    if outcome.plot_png is not None:
        print(f"plot:    {outcome.plot_png}", file=out)
    return 1 if outcome.failed else 0
