"""Slowdown of a MindSpore (PyNative, CPU) training step under the MindSpore dumper.

Model: 4 residual blocks of Dense(256->1024) + GELU + Dense(1024->256) + LayerNorm, batch 64, Adam, one
``value_and_grad`` step. The cases (bare, L1 statistics, mix statistics, L0 statistics, L1 tensor) take turns
step by step, so a busy machine slows them alike; prints median and minimum step times and their ratios to
the bare step.

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


class Case:
    """One training set-up (own network, optimizer and, unless bare, debugger) stepped on demand."""

    def __init__(self, ms, name: str, task, level, workdir: str) -> None:
        from mindspore import nn

        from pytest_msprobe.mindspore import PrecisionDebugger
        ms.set_seed(0)
        self.name = name
        self.net = build(ms)
        loss_fn = nn.CrossEntropyLoss()
        self.opt = nn.Adam(self.net.trainable_params(), learning_rate=1e-3)
        self.grad_fn = ms.value_and_grad(lambda x, y: loss_fn(self.net(x), y), None, self.opt.parameters)
        self.dbg = None
        self.dump_path = None
        if task is not None:
            cfg = os.path.join(workdir, f"{task}_{level}.json")
            self.dump_path = os.path.join(workdir, f"{task}_{level}")
            with open(cfg, "w") as fh:
                json.dump({"task": task, "level": level, "dump_path": self.dump_path}, fh)
            self.dbg = PrecisionDebugger(cfg)
        self.times: list = []

    def step(self, x, y, record: bool) -> None:
        t0 = time.perf_counter()
        if self.dbg is not None:
            self.dbg.start(self.net)
        loss, grads = self.grad_fn(x, y)
        self.opt(grads)
        loss.asnumpy()
        if self.dbg is not None:
            self.dbg.stop()
            self.dbg.step()
        if record:
            self.times.append(time.perf_counter() - t0)

    def entries(self) -> int:
        if self.dump_path is None:
            return 0
        with open(os.path.join(self.dump_path, "step0", "rank", "dump.json")) as fh:
            return len(json.load(fh)["data"])


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
    rs = np.random.RandomState(0)
    x = ms.Tensor(rs.randn(64, 256).astype(np.float32))
    y = ms.Tensor(rs.randint(0, 10, 64).astype(np.int32))
    with tempfile.TemporaryDirectory() as workdir:
        cases = [Case(ms, name, task, level, workdir) for name, task, level in CASES]
        for i in range(args.warmup + args.steps):     # interleaved, so machine load hits every case alike
            for case in cases:
                case.step(x, y, record=i >= args.warmup)
        for case in cases:
            if case.dbg is not None:
                case.dbg.close()
        entries = {case.name: case.entries() for case in cases}
    bare = cases[0]
    print(f"MindSpore {ms.__version__} PyNative CPU, {args.steps} interleaved steps per case "
          f"(4x Dense 256-1024-256 + LayerNorm, batch 64, Adam)")
    print(f"{'case':<16}{'median ms':>10}{'min ms':>9}{'ratio(median)':>15}{'ratio(min)':>12}{'entries':>9}")
    for case in cases:
        med, low = statistics.median(case.times), min(case.times)
        print(f"{case.name:<16}{med * 1e3:>10.1f}{low * 1e3:>9.1f}{med / statistics.median(bare.times):>15.2f}"
              f"{low / min(bare.times):>12.2f}{entries[case.name]:>9}")


if __name__ == "__main__":
    main()
