"""The ``pytest-msprobe`` console command: subcommands for what is not a pytest run.

Each subcommand lives in its own module of this package (``add_arguments(parser)``, ``run(args) -> int``);
this file only maps names to them, so ``--help`` is fast and a broken subcommand cannot break the others.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Optional, Sequence

# name -> (module, summary). The module defines add_arguments(parser) and run(args) -> int.
SUBCOMMANDS = {
    "api-precision-compare": ("pytest_msprobe.cli.api_precision_compare",
                              "compare NPU and GPU accuracy_checking_details CSVs (final verdict)"),
    "compare": ("pytest_msprobe.cli.compare", "compare two runs' dumps API by API (msprobe's compare, -da)"),
    "overflow-check": ("pytest_msprobe.cli.overflow_check",
                       "the first call turning finite inputs into inf/nan, per rank and across ranks"),
    "grad-compare": ("pytest_msprobe.cli.grad_compare", "compare two grad_probe dumps step by step"),
    "repair-dump": ("pytest_msprobe.cli.repair_dump", "finalise a dump whose training process died mid-step"),
    "summary": ("pytest_msprobe.cli.summary", "summarise an accuracy_checking_result CSV"),
    "generate": ("pytest_msprobe.cli.generate", "turn captured calls into a committed regression test suite"),
    "html-report": ("pytest_msprobe.cli.html_report", "render the HTML report of an accuracy-check run"),
    "attribute": ("pytest_msprobe.cli.attribute", "which API calls explain a training step's drift (runs the script)"),
}


EPILOG = """examples:
  pytest-msprobe api-precision-compare -npu npu/accuracy_checking_details_X.csv \\
      -gpu gpu/accuracy_checking_details_Y.csv -o out/
  pytest-msprobe html-report out/accuracy_checking_result_X.csv --dump dump/step0/rank
  pytest-msprobe generate dump/step0/rank/dump.json -o tests/regressions \\
      --from-result out/accuracy_checking_result_X.csv
  pytest-msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o compare_out -da
  pytest-msprobe overflow-check -i npu_dump/step0 -o overflow_out
  pytest-msprobe grad-compare run1/ run2/ -o grad_out/
  pytest-msprobe repair-dump dump/step0/rank
  pytest-msprobe attribute train.py:step --candidates out/accuracy_checking_result_X.csv -o attr/

msprobe's names: api_precision_compare is api-precision-compare; run_ut, acc_check, multi_run_ut and
multi_acc_check are 'pytest --msprobe-api-info=DUMP' (-n N for several workers); '-f pytorch' is not needed.
'pytest-msprobe COMMAND --help' explains each command."""


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-msprobe",
        description="pytest-msprobe tools that are not a pytest run. The accuracy check itself is "
                    "'pytest --msprobe-api-info dump.json'.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, summary) in SUBCOMMANDS.items():
        sub.add_parser(name, help=summary, add_help=False)
    return parser


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one subcommand; imports only that subcommand's module."""
    module, summary = SUBCOMMANDS[command]
    mod = importlib.import_module(module)
    parser = argparse.ArgumentParser(
        prog=f"pytest-msprobe {command}", description=getattr(mod, "DESCRIPTION", summary),
        epilog=getattr(mod, "EPILOG", None), formatter_class=argparse.RawDescriptionHelpFormatter)
    mod.add_arguments(parser)
    parser.set_defaults(_run=mod.run, command=command)
    return parser


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("pytest-msprobe")
    except (ImportError, PackageNotFoundError):
        from .. import __version__
        return __version__


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .habits import CHECK_COMMANDS, check_pointer, strip_framework
    argv = strip_framework(sys.argv[1:] if argv is None else argv)      # msprobe's "-f pytorch COMMAND"
    if argv and argv[0] in ("--version", "-V"):
        print(f"pytest-msprobe {_version()}")
        return 0
    if argv and argv[0].replace("_", "-") in SUBCOMMANDS:             # msprobe's api_precision_compare
        argv[0] = argv[0].replace("_", "-")
    if argv and argv[0] in CHECK_COMMANDS:
        print(check_pointer(argv[0], argv[1:]), file=sys.stderr)
        return 2
    if not argv or argv[0] not in SUBCOMMANDS:
        top = _top_parser()
        if argv and not argv[0].startswith("-"):
            top.error(f"unknown command {argv[0]!r}; choose one of: {', '.join(SUBCOMMANDS)}")
        top.parse_args(argv)          # handles -h / --help
        top.print_help()
        return 2
    args = build_parser(argv[0]).parse_args(argv[1:])
    run: Callable = args._run
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except FileNotFoundError as exc:
        print(f"pytest-msprobe {args.command}: error: {exc.filename}: {(exc.strerror or 'no such file').lower()}; "
              f"check the path "
              f"('pytest-msprobe {args.command} --help' shows what to pass)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"pytest-msprobe {args.command}: error: {exc}", file=sys.stderr)
        return 2

