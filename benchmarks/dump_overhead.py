"""Overhead of the PyTorch dumper on a training step (prints figures; no assertions).

A 4-layer TransformerEncoder (d_model 256, 4 heads, feed-forward 1024, batch 8, sequence 64), AdamW,
one CPU thread. Each configuration trains the same model from the same seed: bare, L1 statistics
dump, L1 tensor dump (every tensor written to disk by the background writer), and mix statistics.
The dumped steps include start(), stop() (dump.json, stack.json, construct.json written) and step().

    python benchmarks/dump_overhead.py [--steps 8] [--warmup 2]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import torch

from dumpers.torch_dump import PrecisionDebugger


def build():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 64, 256)
    target = torch.randn(8, 64, 256)
    return model, opt, x, target


def run(config, steps: int, warmup: int, dump_root: str):
    """Seconds per step (median over ``steps``) and the number of dump entries of one step."""
    model, opt, x, target = build()
    dbg = None
    if config is not None:
        task, level = config
        PrecisionDebugger.reset()
        dbg = PrecisionDebugger(dump_path=dump_root, task=task, level=level, model=model)
    times, cpu = [], []
    for i in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        if dbg:
            dbg.start()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if dbg:
            dbg.stop()
            dbg.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    entries = 0
    if dbg:
        last = os.path.join(dump_root, f"step{warmup + steps - 1}", "rank", "dump.json")
        with open(last) as fh:
            entries = len(json.load(fh)["data"])
        PrecisionDebugger.reset()
    return statistics.median(times), statistics.median(cpu), entries


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="PyTorch dumper overhead on a TransformerEncoder step")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    configs = [("bare", None), ("L1 statistics", ("statistics", "L1")), ("L1 tensor", ("tensor", "L1")),
               ("mix statistics", ("statistics", "mix"))]
    results = {}
    for name, config in configs:
        root = tempfile.mkdtemp(prefix="msprobe-bench-")
        try:
            results[name] = run(config, args.steps, args.warmup, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    bare, bare_cpu, _ = results["bare"]
    print(f"TransformerEncoder 4x(d256, 4 heads, ff1024), batch 8 x seq 64, AdamW, 1 thread; "
          f"median of {args.steps} steps")
    print(f"{'configuration':<16} {'wall ms':>9} {'ratio':>7} {'cpu ms':>9} {'ratio':>7} {'entries/step':>13}")
    for name, (sec, cpu, entries) in results.items():
        print(f"{name:<16} {sec * 1e3:9.1f} {sec / bare:7.2f} {cpu * 1e3:9.1f} {cpu / bare_cpu:7.2f} {entries:13d}")
    print("cpu = process CPU time (all threads of this process): the figure that does not depend on other load")
    print("targets: L1 statistics <= 1.5x, L1 tensor <= 3x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
