"""How fast ``pytest-msprobe generate`` writes a suite, and how fast pytest collects a large one.

Prints figures; asserts nothing. Usage: python benchmarks/generate_speed.py [--calls 2000]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from pytest_msprobe.suite.generate import generate

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "mlp_fp32_tensor_L1" / "step0" / "rank" / "dump.json"
STATS = ROOT / "tests" / "data" / "mlp_fp32_statistics_L1" / "step0" / "rank" / "dump.json"


def tree_size(root: str) -> tuple:
    n = size = 0
    for base, _, files in os.walk(root):
        for f in files:
            n += 1
            size += os.path.getsize(os.path.join(base, f))
    return n, size


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def synthetic_dump(path: pathlib.Path, calls: int) -> None:
    """A statistics dump of ``calls`` gelu/linear calls, copied from the sample statistics dump."""
    doc = json.loads(STATS.read_text())
    data = doc["data"]
    out = {}
    for i in range(calls):
        api = "gelu" if i % 2 else "linear"
        for direction in ("forward", "backward"):
            key = f"Functional.{api}.0.{direction}"
            if key in data:
                out[f"Functional.{api}.{i}.{direction}"] = copy.deepcopy(data[key])
    doc["data"] = out
    path.write_text(json.dumps(doc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "real")
        t = timed(lambda: generate(str(SAMPLE), out, scripts=["Functional.gelu.0"], force=True), args.repeat)
        n, size = tree_size(out)
        print(f"real data, sample dump (15 calls): {t * 1000:.1f} ms per generate, {n} files, {size / 1024:.1f} KiB")

        big = pathlib.Path(tmp) / "big.json"
        synthetic_dump(big, args.calls)
        out = os.path.join(tmp, "random")
        t = timed(lambda: generate(str(big), out, random=True, force=True), max(1, args.repeat // 2))
        n, size = tree_size(out)
        module = pathlib.Path(out) / "test_msprobe.py"
        print(f"random data, {args.calls} calls: {t:.2f} s per generate ({t / args.calls * 1e6:.0f} us per call), "
              f"{n} files, {size / 1024:.0f} KiB, module {module.stat().st_size / 1024:.0f} KiB")

        pytest = os.path.join(os.path.dirname(sys.executable), "pytest")
        t0 = time.perf_counter()
        res = subprocess.run([pytest, "--collect-only", "-q", "-p", "no:cacheprovider", out],
                             capture_output=True, text=True, cwd=tmp)
        t = time.perf_counter() - t0
        collected = sum(1 for ln in res.stdout.splitlines() if "::" in ln)
        print(f"pytest --collect-only of the {args.calls}-call suite: {t:.2f} s wall (incl. start-up), "
              f"{collected} cases")


if __name__ == "__main__":
    main()
