"""``pytest-msprobe compare -tp TARGET -gp GOLDEN -o OUT``: msprobe's compare of two runs, API by API."""
from __future__ import annotations

import argparse
import importlib.util
import sys

DESCRIPTION = """Compare a target run's dump with a golden run's dump, API by API, as msprobe's compare does.

TARGET and GOLDEN are two dump.json files, two rank directories, or two step directories (rank subdirectories
are paired by sorted rank). The mode follows dump.json's task: tensor (real data), statistics, or md5 (a
statistics dump with CRC32 values). One compare_result_{rank}_{timestamp}.csv per rank is written to OUT."""

EPILOG = """examples:
  pytest-msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o compare_out
  pytest-msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o compare_out -da
  pytest-msprobe compare -tp npu/step0/rank0/dump.json -gp gpu/step0/rank0/dump.json -o out -fm
  pytest-msprobe compare -tp mindspore_dump/step0 -gp torch_dump/step0 -o out -am

exit status: 0 compared (whatever the results), 2 nothing could be compared."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-tp", "--target_path", required=True, metavar="TARGET", help="the run under test")
    parser.add_argument("-gp", "--golden_path", required=True, metavar="GOLDEN", help="the reference run")
    parser.add_argument("-o", "--output_path", default="./output", metavar="OUT",
                        help="result directory, created (default ./output)")
    parser.add_argument("-fm", "--fuzzy_match", action="store_true",
                        help="match calls by name without their call index")
    parser.add_argument("-da", "--diff_analyze", action="store_true",
                        help="also name the first divergence: diff_analyze_{time}.json in OUT")
    parser.add_argument("-am", "--api_mapping", nargs="?", const=True, default=None, metavar="FILE",
                        help="MindSpore target against a PyTorch golden: match MindSpore API names to PyTorch's "
                             "(msprobe's table; FILE adds a table of your own: ms_api, pt_api, ms_args, pt_args, "
                             "ms_output, pt_output, ...)")
    parser.add_argument("-cm", "--cell_mapping", nargs="?", const=True, default=None, metavar="FILE",
                        help="match Cell.* with Module.* rows, cell paths renamed by FILE (`target: golden` lines)")
    parser.add_argument("-dm", "--data_mapping", default=None, metavar="FILE",
                        help="match rows by FILE (`target row name: golden row name` lines); dtypes not checked")
    parser.add_argument("-lm", "--layer_mapping", nargs="?", const=True, default=None, metavar="FILE",
                        help="MindSpore target: pair calls by their place in the module tree (construct.json), "
                             "names renamed per class by FILE (`DenseBlock: {dense: linear}`)")
    parser.add_argument("--xlsx", action="store_true", help="write .xlsx instead of .csv (needs openpyxl)")
    parser.add_argument("--html", action="store_true",
                        help="also write compare_view_{timestamp}.html in OUT: the divergence curve (relative error "
                             "of each call's output in execution order, ranks as lines), the first divergence "
                             "marked (with -da) and its rows")


def run(args: argparse.Namespace) -> int:
    from pytest_msprobe.runs_compare.runner import without_cycle_collection

    with without_cycle_collection():        # the whole command builds acyclic data only; it ends right after
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from pytest_msprobe.runs_compare import mapping
    from pytest_msprobe.runs_compare.inputs import CompareInputError
    from pytest_msprobe.runs_compare.runner import compare_runs

    chosen = [flag for flag, value in (("-am", args.api_mapping), ("-cm", args.cell_mapping),
                                       ("-dm", args.data_mapping), ("-lm", args.layer_mapping)) if value]
    if args.fuzzy_match and chosen:
        print(f"pytest-msprobe compare: error: -fm cannot be combined with {chosen[0]}; leave one out",
              file=sys.stderr)
        return 2
    if args.layer_mapping and len(chosen) > 1:
        other = next(flag for flag in chosen if flag != "-lm")
        print(f"pytest-msprobe compare: error: -lm makes its own row mapping; leave out {other}", file=sys.stderr)
        return 2
    if args.xlsx and importlib.util.find_spec("openpyxl") is None:
        print("pytest-msprobe compare: error: --xlsx needs openpyxl, which is not installed; "
              "install it (pip install openpyxl) or leave out --xlsx for CSV", file=sys.stderr)
        return 2
    if args.xlsx and args.html:
        print("pytest-msprobe compare: error: --html reads the compare CSVs; leave out --xlsx", file=sys.stderr)
        return 2
    try:
        names = mapping.load(args.api_mapping, args.cell_mapping, args.data_mapping, args.layer_mapping)
        results = compare_runs(args.target_path, args.golden_path, args.output_path, fuzzy=args.fuzzy_match,
                               xlsx=args.xlsx, report=lambda line: print(line, file=sys.stderr), names=names)
    except CompareInputError as exc:
        print(f"pytest-msprobe compare: error: {exc}", file=sys.stderr)
        return 2
    if not results:
        print("pytest-msprobe compare: nothing was compared", file=sys.stderr)
        return 2
    for result in results:
        print(f"compare: {result.pair.label or 'dump'} ({result.mode}, {len(result.lines)} rows) -> {result.path}")
    path = None
    if args.diff_analyze:
        from pytest_msprobe.runs_compare.diverge import analyze_and_write
        path, summary = analyze_and_write(results, args.output_path)
        print(summary)
        if path:
            print(f"first divergence -> {path}")
    if args.html:
        import os

        from pytest_msprobe.runs_compare.html import render_compare_view
        from pytest_msprobe.runs_compare.runner import timestamp
        view = render_compare_view([r.path for r in results], path,
                                   os.path.join(args.output_path, f"compare_view_{timestamp()}.html"))
        print(f"compare view -> {view}")
    return 0
