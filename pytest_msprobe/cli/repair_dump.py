"""``pytest-msprobe repair-dump DIR``: finalise dumps whose training process died mid-step."""
from __future__ import annotations

import argparse

DESCRIPTION = """Finalise a dump whose training process died before stop().

While dumping, each rank directory keeps an append-only journal (dump.journal) of every recorded call.
This command rebuilds dump.json, stack.json and construct.json of every rank directory under DIR that
still has a journal, so the dump can be read and checked like a finished one."""

EPILOG = """examples:
  pytest-msprobe repair-dump ./dump_path              every step and rank under dump_path
  pytest-msprobe repair-dump ./dump_path/step3/rank0  one rank directory"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dump_dir", metavar="DIR", help="a dump_path, step directory or rank directory")
    parser.add_argument("--keep-journal", action="store_true",
                        help="leave dump.journal in place after rebuilding the JSON files")


def run(args: argparse.Namespace) -> int:
    import sys

    from dumpers.repair import RepairError, repair

    try:
        results = repair(args.dump_dir, keep_journal=args.keep_journal)
    except (RepairError, FileNotFoundError) as exc:
        print(f"pytest-msprobe repair-dump: {exc.strerror if isinstance(exc, RepairError) else exc}",
              file=sys.stderr)
        return 1
    if not results:
        print(f"{args.dump_dir}: nothing to repair (no dump.journal found; the dump was finalised by stop())")
        return 0
    for result in results:
        print(result.summary())
    return 0
