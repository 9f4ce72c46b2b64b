"""``pytest-msprobe generate``: captured calls -> a regression test suite to commit (see docs/generate.md)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..settings import DEFAULT_SEED, DEFAULT_STANDARD
from ..suite.plan import DEFAULT_STATUSES

DESCRIPTION = """\
Turn captured API calls into a small regression suite that runs with plain pytest, without the
original dump: DIR/test_<name>.py (one parametrized test, one case per call, id = the call's dump name)
and DIR/<name>_data/ (a mini dump with only the selected entries and the tensor files their inputs need,
or, with --random, their statistics and the seed)."""

EPILOG = """\
examples:
  # every call of a dump
  pytest-msprobe generate dump/step0/rank0/dump.json -o tests/msprobe
  # the APIs that failed a checker run, with a standalone script for one of them
  pytest-msprobe generate dump/step0/rank0/dump.json -o tests/msprobe --name gelu_fp16 \\
      --from-result accuracy_checking_result_20260101120000.csv --script Functional.gelu.0
  # only some APIs, inputs generated from the statistics
  pytest-msprobe generate dump.json -o tests/msprobe --api 'Functional.linear.*' --api gelu --random

then: pytest tests/msprobe [--msprobe-device-type npu] [-n 4]"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dump", metavar="DUMP.json", help="the dump.json (or a directory holding exactly one)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="directory of the generated suite")
    parser.add_argument("--api", action="append", default=[], metavar="PATTERN",
                        help="select calls by dump name (Functional.gelu.0), API (Functional.gelu) or base "
                             "name (gelu); wildcards * ? allowed; repeatable (default: every call)")
    parser.add_argument("--from-result", metavar="RESULT_CSV", default=None, nargs="+",
                        help="select the APIs of this accuracy_checking_result CSV that have --status (a "
                             "folder, or several CSVs: the newest)")
    parser.add_argument("--status", default=",".join(DEFAULT_STATUSES), metavar="LIST",
                        help="with --from-result: statuses to select, from error,warning,pass,skip "
                             "(default error)")
    parser.add_argument("--random", action="store_true",
                        help="random-data suite: keep the statistics and the seed instead of tensor files")
    parser.add_argument("--seed", type=int, default=None, metavar="INT",
                        help=f"seed of the random-data suite (default {DEFAULT_SEED})")
    parser.add_argument("--standard", default=DEFAULT_STANDARD, metavar="VERSION",
                        help="precision standard named in the comments and used by default (1.0.4 or 26.2)")
    parser.add_argument("--name", default="msprobe",
                        help="suite name: test_<name>.py and <name>_data/ (default msprobe)")
    parser.add_argument("--force", action="store_true",
                        help="write into a directory that holds other files (only generated files are replaced)")
    parser.add_argument("--script", action="append", default=[], metavar="CALL_NAME",
                        help="also write reproduce_<call>.py, a standalone reproduction of that call (no pytest); "
                             "repeatable")


def run(args: Any) -> int:
    from ..suite.generate import generate
    from ..suite.plan import GenerateError
    if args.seed is not None and not 0 <= args.seed < 2 ** 32:
        print(f"pytest-msprobe generate: error: --seed {args.seed} is out of range; use 0 to 4294967295",
              file=sys.stderr)
        return 2
    try:
        from .paths import pick
        from_result = pick(args.from_result, command="generate") if args.from_result else None
        written = generate(args.dump, args.output, apis=args.api, from_result=from_result,
                           statuses=args.status, random=args.random, name=args.name, force=args.force,
                           scripts=args.script, seed=DEFAULT_SEED if args.seed is None else args.seed,
                           standard=args.standard)
    except (GenerateError, ValueError) as exc:
        print(f"pytest-msprobe generate: error: {exc}", file=sys.stderr)
        return 2
    tensors = sum(1 for w in written if "/dump_tensor_data/" in w)
    module = next(w for w in written if w.startswith("test_"))
    calls = _count_calls(os.path.join(args.output, f"{args.name}_data", "generated.json"))
    print(f"wrote {os.path.join(args.output, module)} ({calls} call{'s' if calls != 1 else ''}) and "
          f"{args.name}_data/ ({tensors} tensor file{'s' if tensors != 1 else ''})")
    for w in written:
        if w.startswith("reproduce_"):
            print(f"wrote {os.path.join(args.output, w)}")
    print(f"run it: pytest {args.output}")
    return 0


def _count_calls(manifest: str) -> int:
    import json
    with open(manifest, encoding="utf-8") as fh:
        return len(json.load(fh).get("calls", []))
