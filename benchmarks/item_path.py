"""The files one item's path goes through, from collection to its CSV row (prints figures; asserts nothing).

A real pytest session (in this process, one worker) checks one call of a dump; ``sys.setprofile`` records every
function of the project (``pytest_msprobe``, ``generators``, ``dumpers``) that runs from the start of collection
(``pytest_collectstart`` of the session) until the controller has written the call's result row (its
``pytest_runtest_logreport`` of the call phase). Module and class bodies that imports run, and what they call,
are left out: a file counts when one of its functions runs (numba's compiled kernels run no Python frame).
Printed:

* the number of files and, per file, how many of its functions ran and how often it was entered (called from
  code of another file: pytest, the interpreter, or another of the project's files);
* every **back call**: a file called while it is already on the call stack below another project file (A calls
  B, which calls back into A, a callback included): the ping-pong that the path should not have.

    python benchmarks/item_path.py [--dump tests/data/msprobe_26_2_bf16/llama] [--item Functional.linear.0]
                                   [--list]
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from collections import Counter

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGES = tuple(os.path.join(ROOT, p) + os.sep for p in ("pytest_msprobe", "generators", "dumpers"))


def _project(filename: str) -> str | None:
    """The path of a project file relative to the root, or None for any other code."""
    return os.path.relpath(filename, ROOT) if filename.startswith(PACKAGES) else None


class PathTracer:
    """A pytest plugin that records the project's function calls from collection to the item's CSV row."""

    def __init__(self, item: str) -> None:
        self.item = item
        self.calls: list = []              # (file, function, caller's project file or None) per call event
        self.back_calls: list = []         # (file, function, calling file, calling function)
        self.stack: list = []              # (project file or None, module or class body) of each frame
        self.importing = 0                 # module and class bodies on the stack (their calls are not counted)
        self.on = False

    def _profile(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            body = not code.co_flags & inspect.CO_OPTIMIZED        # a module or class body: an import runs it
            self.importing += body
            path = _project(code.co_filename)
            caller = next((f for f, _ in reversed(self.stack) if f is not None), None)
            if path is not None and not self.importing:
                self.calls.append((path, code.co_name, caller))
                if caller is not None and caller != path and any(f == path for f, _ in self.stack):
                    back = frame.f_back
                    self.back_calls.append((path, code.co_name, caller, back.f_code.co_name if back else "?"))
            self.stack.append((path if not body else None, body))
        elif event == "return" and self.stack:
            _, body = self.stack.pop()
            self.importing -= body

    def pytest_collectstart(self, collector) -> None:
        if not self.on and collector.nodeid == "":
            self.on = True
            self.stack, self.importing = [], 0
            sys.setprofile(self._profile)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report) -> None:      # trylast: after the controller wrote the row
        if self.on and report.when == "call" and report.nodeid.endswith("::" + self.item):
            self.stop()

    def stop(self) -> None:
        sys.setprofile(None)
        self.on = False


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", default=os.path.join(ROOT, "tests", "data", "msprobe_26_2_bf16", "llama"))
    ap.add_argument("--item", default="Functional.linear.0", help="the call checked (its dump name)")
    ap.add_argument("--list", action="store_true", help="every function that ran, per file")
    args = ap.parse_args(argv)
    tracer = PathTracer(args.item)
    with tempfile.TemporaryDirectory(prefix="msprobe-item-path-") as out:
        rc = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", out,
                          f"--msprobe-api-info={args.dump}", f"--msprobe-out={out}", "-k", args.item],
                         plugins=[tracer])
        tracer.stop()
    files = Counter(path for path, _, _ in tracer.calls)
    entered = Counter(path for path, _, caller in tracer.calls if caller != path)
    functions: dict = {}
    for path, name, _ in tracer.calls:
        functions.setdefault(path, Counter())[name] += 1
    packages = Counter(path.split(os.sep)[0] for path in files)
    print(f"one item ({args.item}) from collection to its CSV row, exit status {rc}: {len(files)} project files ("
          + ", ".join(f"{packages[p]} in {p}" for p in sorted(packages)) + f"), {len(tracer.back_calls)} back calls")
    for path in sorted(files):
        line = f"  {path:<48} {len(functions[path]):3d} functions, entered {entered[path]:3d} times"
        print(line)
        if args.list:
            print("      " + ", ".join(sorted(functions[path])))
    seen = set()
    for path, name, caller, caller_name in tracer.back_calls:
        if (path, name, caller, caller_name) not in seen:
            seen.add((path, name, caller, caller_name))
            print(f"  back call: {caller}:{caller_name} -> {path}:{name} (while {path} is lower on the stack)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
