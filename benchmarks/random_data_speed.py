"""Print how fast random inputs are generated from statistics, and how fast dump.json files load.

Usage: python benchmarks/random_data_speed.py [--elements 10000000]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from generators.inputs import build_inputs  # noqa: E402
from generators.loader import load_dump  # noqa: E402
from generators.random_data import GenParams, IndexBound, TensorSpec, generate  # noqa: E402


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--elements", type=int, default=10_000_000)
    args = parser.parse_args()
    n = args.elements
    rng = np.random.default_rng(0)
    rows = [
        ("float32 uniform [Min, Max]", TensorSpec("float32", (n,), -3.0, 5.0), GenParams(match_stats=False), None),
        ("float32 Mean/Norm matched", TensorSpec("float32", (n,), -3.0, 5.0, 0.1, 1000.0), GenParams(), None),
        ("float16 Mean/Norm matched", TensorSpec("float16", (n,), -3.0, 5.0, 0.1, 1000.0), GenParams(), None),
        ("bfloat16 Mean/Norm matched (fp32 array)", TensorSpec("bfloat16", (n,), -3.0, 5.0, 0.1, 1000.0),
         GenParams(), None),
        ("float32 with edge values", TensorSpec("float32", (n,), -3.0, 5.0, 0.1, 1000.0),
         GenParams(edge_values=True), None),
        ("float32 inf/NaN recorded", TensorSpec("float32", (n,), float("-inf"), float("nan"), None, None, -3.0, 5.0),
         GenParams(), None),
        ("int64 uniform", TensorSpec("int64", (n,), 0, 1000), GenParams(), None),
        ("int64 index (bound 50257)", TensorSpec("int64", (n,), 0, 60000), GenParams(), IndexBound(0, 50256)),
        ("bool", TensorSpec("bool", (n,), False, True), GenParams(), None),
    ]
    print(f"generation of {n:,} elements (best of 3, numpy {np.__version__}, {os.cpu_count()} CPUs)")
    for label, spec, params, index in rows:
        seconds = best_of(lambda spec=spec, params=params, index=index: generate(spec, rng, params, index=index))
        print(f"  {label:45s} {seconds:7.3f} s  {n / seconds / 1e6:8.1f} M elements/s")

    with tempfile.TemporaryDirectory() as tmp:
        item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [n], "Max": 5.0, "Min": -3.0,
                "Mean": 0.1, "Norm": 1000.0, "requires_grad": True}
        path = os.path.join(tmp, "dump.json")
        with open(path, "w") as fh:
            json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                       "data": {"Torch.relu.0.forward": {"input_args": [item], "input_kwargs": {}},
                                "Torch.relu.0.backward": {"input": [item], "output": [item]}}}, fh)
        case = load_dump(path).cases[0]
        seconds = best_of(lambda: build_inputs(case, seed=1))
        print(f"  {'build_inputs: input + grad_output, to torch':45s} {seconds:7.3f} s  (2 x {n:,} elements)")

        entries = 20_000
        data = {}
        for i in range(entries):
            small = {**item, "shape": [8, 16]}
            data[f"Functional.linear.{i}.forward"] = {"input_args": [small, small], "input_kwargs": {},
                                                      "output": [small]}
            data[f"Functional.linear.{i}.backward"] = {"input": [small], "output": [small, None, small]}
        with open(path, "w") as fh:
            json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                       "data": data}, fh, indent=1)
        size = os.path.getsize(path)
        seconds = best_of(lambda: load_dump(path), repeat=2)
        print(f"load_dump of a {size / 1e6:.1f} MB dump.json with {2 * entries:,} entries: {seconds:.3f} s "
              f"({size / 1e6 / seconds:.1f} MB/s, {entries / seconds:,.0f} calls/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
