"""The ``pytest-msprobe`` console command: subcommands for what is not a pytest run.

Each subcommand lives in its own module; this file only maps names to them, so ``--help`` is fast and a
broken subcommand cannot break the others.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Optional, Sequence

# name -> (module, summary). The module defines add_arguments(parser) and run(args) -> int.
SUBCOMMANDS = {
    "api-precision-compare": ("pytest_msprobe.report.apc_cli",
                              "compare NPU and GPU accuracy_checking_details CSVs (final verdict)"),
    "grad-compare": ("dumpers.grad_probe.cli", "compare two grad_probe dumps step by step"),
    "repair-dump": ("generators.repair_cli", "finalise a dump whose training process died mid-step"),
    "summary": ("pytest_msprobe.report.summary_cli", "summarise an accuracy_checking_result CSV"),
    "generate": ("pytest_msprobe.generate_cli", "turn captured calls into a committed regression test suite"),
    "html-report": ("pytest_msprobe.report.html_cli", "render the HTML report of an accuracy-check run"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-msprobe",
        description="pytest-msprobe tools that are not a pytest run. The accuracy check itself is "
                    "'pytest --msprobe-api-info dump.json'.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, summary) in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        p = sub.add_parser(name, help=summary, description=getattr(mod, "DESCRIPTION", summary),
                           epilog=getattr(mod, "EPILOG", None),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Optional[Callable] = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as exc:
        print(f"pytest-msprobe {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
