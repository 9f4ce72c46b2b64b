"""Slowdown of a MindSpore (PyNative, CPU) training step under the MindSpore dumper.

Model: 4 residual blocks of Dense(256->1024) + GELU + Dense(1024->256) + LayerNorm, batch 64, Adam, one
``value_and_grad`` step. Prints the median step time bare and with the dump at L1 statistics, mix statistics,
L0 statistics and L1 tensor, and each one's ratio to the bare step.

    .venv/bin/python benchmarks/ms_dump_overhead.py [--steps 8] [--warmup 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

CASES = (("bare", None, None), ("L1 statistics", "statistics", "L1"), ("mix statistics", "statistics", "mix"),
         ("L0 statistics", "statistics", "L0"), ("L1 tensor", "tensor", "L1"))


def build(ms, d_model: int = 256, d_ff: int = 1024, blocks: int = 4):
    from mindspore import nn, ops

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.up = nn.Dense(d_model, d_ff)
            self.down = nn.Dense(d_ff, d_model)
            self.norm = nn.LayerNorm((d_model,))

        def construct(self, x):
            return self.norm(x + self.down(ops.gelu(self.up(x))))

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.blocks = nn.SequentialCell([Block() for _ in range(blocks)])
            self.head = nn.Dense(d_model, 10)

        def construct(self, x):
            return self.head(self.blocks(x))

    return Net()


def run_case(ms, task, level, steps: int, warmup: int, workdir: str) -> float:
    from mindspore import nn

    from pytest_msprobe.mindspore import PrecisionDebugger
    ms.set_seed(0)
    net = build(ms)
    loss_fn = nn.CrossEntropyLoss()
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    rs = np.random.RandomState(0)
    x = ms.Tensor(rs.randn(64, 256).astype(np.float32))
    y = ms.Tensor(rs.randint(0, 10, 64).astype(np.int32))
    dbg = None
    if task is not None:
        cfg = os.path.join(workdir, f"{task}_{level}.json")
        with open(cfg, "w") as fh:
            json.dump({"task": task, "level": level, "dump_path": os.path.join(workdir, f"{task}_{level}")}, fh)
        dbg = PrecisionDebugger(cfg)
    times = []
    try:
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            if dbg is not None:
                dbg.start(net)
            loss, grads = grad_fn(x, y)
            opt(grads)
            loss.asnumpy()
            if dbg is not None:
                dbg.stop()
                dbg.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        if dbg is not None:
            dbg.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:                                   # with some numpy builds the first scalar op leaves an error pending
        _ = ms.Tensor(np.ones((1,), np.float32)) * 2.0
    except SystemError:
        pass
    with tempfile.TemporaryDirectory() as workdir:
        results = {name: run_case(ms, task, level, args.steps, args.warmup, workdir)
                   for name, task, level in CASES}
        entries = {}
        for name, task, level in CASES[1:]:
            with open(os.path.join(workdir, f"{task}_{level}", "step0", "rank", "dump.json")) as fh:
                entries[name] = len(json.load(fh)["data"])
    bare = results["bare"]
    print(f"MindSpore {ms.__version__} PyNative CPU, median of {args.steps} steps "
          f"(4x Dense 256-1024-256 + LayerNorm, batch 64, Adam)")
    print(f"{'case':<16}{'step ms':>10}{'ratio':>8}{'entries':>9}")
    for name, _task, _level in CASES:
        print(f"{name:<16}{results[name] * 1e3:>10.1f}{results[name] / bare:>8.2f}"
              f"{entries.get(name, 0):>9}")


if __name__ == "__main__":
    main()
