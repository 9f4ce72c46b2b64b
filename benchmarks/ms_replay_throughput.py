"""Time to check one MindSpore API call (bench + device + backward + compare), real and random data.

Dumps one training step of a small net (Dense 256->256, ReLU, softmax, exp, sigmoid, tanh in float16, sum; batch
64) with the MindSpore dumper, then replays every replayable call ``--reps`` times through
``pytest_msprobe.replay.run_case`` on ``ms-cpu``; prints the MindSpore import/setup time and the median time per
call for each API and overall.

    .venv/bin/python benchmarks/ms_replay_throughput.py [--reps 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np


def dump(ms, base: str, task: str) -> str:
    from mindspore import mint, nn, ops

    from pytest_msprobe.mindspore import PrecisionDebugger

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(256, 256)
            self.relu = nn.ReLU()

        def construct(self, x):
            h = ops.softmax(self.relu(self.fc(x)), axis=-1)
            h = mint.exp(h) * 0.5 + mint.nn.functional.sigmoid(h)
            return ops.sum(ops.tanh(ops.cast(h, ms.float16)).astype(ms.float32))

    cfg = os.path.join(base, f"{task}.json")
    with open(cfg, "w") as fh:
        json.dump({"task": task, "level": "L1", "dump_path": os.path.join(base, task), task: {}}, fh)
    dbg = PrecisionDebugger(cfg)
    net = Net()
    grad_fn = ms.value_and_grad(net, None, net.trainable_params())
    x = ms.Tensor(np.random.RandomState(0).randn(64, 256).astype(np.float32))
    dbg.start(net)
    grad_fn(x)
    dbg.stop()
    dbg.step()
    dbg.close()
    return os.path.join(base, task, "step0", "rank", "dump.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    t0 = time.perf_counter()
    from pytest_msprobe.devices.mindspore_backends import MsCpuBackend, mindspore
    ms = mindspore()
    setup = time.perf_counter() - t0
    print(f"MindSpore {ms.__version__} import + replay set-up: {setup:.2f} s")

    from generators.loader import load_dump
    from pytest_msprobe.replay import RunOptions, run_case
    backend = MsCpuBackend()
    with tempfile.TemporaryDirectory() as base:
        for task, random in (("tensor", False), ("statistics", True)):
            cases = [c for c in load_dump(dump(ms, base, task)) if not c.problem]
            options = RunOptions(random=random)
            run_case(cases[0], backend, 0, options)          # warm-up
            per_api, statuses = {}, {}
            for case in cases:
                times = []
                for _ in range(args.reps):
                    t = time.perf_counter()
                    result = run_case(case, backend, 0, options)
                    times.append(time.perf_counter() - t)
                per_api[case.name] = statistics.median(times)
                statuses[case.name] = f"{result.forward}/{result.backward or '-'}"
            mode = "random data" if random else "real data"
            print(f"\n{mode}: {len(cases)} replayable calls, median of {args.reps} runs each")
            for name, sec in per_api.items():
                print(f"  {name:<28} {sec * 1e3:8.2f} ms  {statuses[name]}")
            total = sum(per_api.values())
            print(f"  {'all calls':<28} {total * 1e3:8.2f} ms  ({len(cases) / total:.1f} calls/s)")


if __name__ == "__main__":
    main()
