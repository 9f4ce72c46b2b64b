"""Overhead of the PyTorch dumper on a training step (prints figures; no assertions).

A 4-layer TransformerEncoder (d_model 256, 4 heads, feed-forward 1024, batch 8, sequence 64), AdamW,
one CPU thread. For each configuration (L1 statistics, L1 tensor, mix statistics) two identical models
train side by side, one bare and one dumped, alternating step by step, so a machine whose load changes
affects both alike; the ratio is the median of the per-round ratios. The dumped step includes
start(), stop() (dump.json, stack.json, construct.json written) and step().

Last figures (shared 2-vCPU virtual machine, bare step 150-210 ms; docs/dump.md has the split):
L1 statistics 1.37-1.45x wall (1.50 once, in a slow phase; CPU the same); L1 tensor 2.1-2.8x on a
quiet disk, up to 3.3x while the page cache is still writing out earlier gigabytes; mix statistics
1.60-1.68x. The first version measured 2.03x, 5.2x and 2.4x. Targets: statistics <= 1.5x, tensor <= 3x.
The CPU column adds the tensor writer process's CPU time to this process's.
Each configuration starts after ``os.sync()`` so earlier runs' dirty pages do not slow this one.

    python benchmarks/dump_overhead.py [--steps 10] [--warmup 2] [--risk-level ALL|FOCUS|CORE] [--only L1]
    python benchmarks/dump_overhead.py --skip-cost       # per call: bare, skipped by risk_level, recorded

At the default risk_level (522 entries against 537 at ALL): 1.41-1.53x wall against 1.47x at ALL, alternating
runs at a load average of 4-5 (noise); ``--skip-cost``: 3.8 us for a skipped call, 2.8 us for one in no list.
Without ``--risk-level`` the config has no such key: msprobe's default, "FOCUS", which leaves the low-risk
APIs (the transposes of attention, ...) out of the dump.
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

CONFIGS = [("L1 statistics", "statistics", "L1"), ("L1 tensor", "tensor", "L1"),
           ("mix statistics", "statistics", "mix")]


def build():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 64, 256)
    target = torch.randn(8, 64, 256)
    return model, opt, x, target


def _writer_cpu(dbg) -> float:
    """CPU seconds used so far by the dump's tensor writer process (0 when there is none)."""
    proc = getattr(getattr(getattr(dbg, "session", None), "writer", None), "_proc", None)
    if proc is None:
        return 0.0
    try:
        with open(f"/proc/{proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def train_step(model, opt, x, target, dbg=None) -> tuple:
    """(wall seconds, CPU seconds: this process plus its tensor writer process) of one step."""
    w0 = _writer_cpu(dbg) if dbg else 0.0
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
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if dbg:
        cpu += _writer_cpu(dbg) - w0     # (the writer may still be busy with this step's files: close)
    return wall, cpu


def _debugger(root: str, task: str, level: str, model, risk_level) -> PrecisionDebugger:
    PrecisionDebugger.reset()
    if risk_level is None:
        return PrecisionDebugger(dump_path=root, task=task, level=level, model=model)
    config = os.path.join(root, "config.json")
    with open(config, "w") as fh:
        json.dump({"task": task, "dump_path": root, "level": level, "risk_level": risk_level}, fh)
    return PrecisionDebugger(config_path=config, model=model)


def skip_cost(calls: int = 20000) -> None:
    """Microseconds per call: ``x.transpose(0, 1)`` bare, skipped by the risk level (FOCUS), recorded (ALL), and
    ``x.view(16)`` (in no wrap list) under the dump: the floor any call pays under a function mode."""
    x = torch.randn(4, 4)

    def loop(fn) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls * 1e6

    transpose, view = (lambda: x.transpose(0, 1)), (lambda: x.view(16))
    print(f"{calls} calls in one dump window, best of 3, us/call:")
    print(f"  x.transpose bare              {min(loop(transpose) for _ in range(3)):7.2f}")
    for label, risk_level, fn in (("x.view, in no list (FOCUS)", "FOCUS", view),
                                  ("x.transpose skipped (FOCUS)", "FOCUS", transpose),
                                  ("x.transpose recorded (ALL)", "ALL", transpose)):
        root = tempfile.mkdtemp(prefix="msprobe-bench-")
        try:
            best = []
            for _ in range(3):
                dbg = _debugger(root, "statistics", "L1", None, risk_level)
                dbg.start()
                best.append(loop(fn))
                dbg.stop()
                dbg.step()
                PrecisionDebugger.reset()
            print(f"  {label:<29} {min(best):7.2f}")
        finally:
            shutil.rmtree(root, ignore_errors=True)


def measure(task: str, level: str, steps: int, warmup: int, root: str, risk_level=None) -> dict:
    if hasattr(os, "sync"):
        os.sync()           # start from a clean page cache: earlier runs' dirty pages would slow the writer
    bare = build()
    dumped = build()
    dbg = _debugger(root, task, level, dumped[0], risk_level)
    rows = []
    for i in range(warmup + steps):
        b = train_step(*bare)
        d = train_step(*dumped, dbg=dbg)
        if i >= warmup:
            rows.append((b, d))
    t0 = time.perf_counter()
    dbg.flush()                 # the tensor files still in flight after the last step (not in the ratios)
    drain = time.perf_counter() - t0
    with open(os.path.join(root, f"step{warmup + steps - 1}", "rank", "dump.json")) as fh:
        entries = len(json.load(fh)["data"])
    PrecisionDebugger.reset()
    med = statistics.median
    return {"bare_wall": med(b[0] for b, _ in rows), "bare_cpu": med(b[1] for b, _ in rows),
            "wall": med(d[0] for _, d in rows), "cpu": med(d[1] for _, d in rows),
            "wall_ratio": med(d[0] / b[0] for b, d in rows), "cpu_ratio": med(d[1] / b[1] for b, d in rows),
            "entries": entries, "drain": drain}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="PyTorch dumper overhead on a TransformerEncoder step")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--risk-level", choices=("ALL", "FOCUS", "CORE"), default=None,
                        help="config.json's risk_level (default: no such key, i.e. FOCUS)")
    parser.add_argument("--only", default="", help="run only the configurations whose name starts with this")
    parser.add_argument("--skip-cost", action="store_true", help="only the per-call cost of a skipped API")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.skip_cost:
        skip_cost()
        return 0
    print(f"TransformerEncoder 4x(d256, 4 heads, ff1024), batch 8 x seq 64, AdamW, 1 thread; "
          f"medians of {args.steps} alternating bare/dumped steps")
    print(f"{'configuration':<16} {'bare ms':>8} {'dump ms':>8} {'ratio':>6} {'bare cpu':>9} {'dump cpu':>9} "
          f"{'ratio':>6} {'entries':>8}")
    for name, task, level in CONFIGS:
        if not name.startswith(args.only):
            continue
        root = tempfile.mkdtemp(prefix="msprobe-bench-")
        try:
            r = measure(task, level, args.steps, args.warmup, root, args.risk_level)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{name:<16} {r['bare_wall'] * 1e3:8.1f} {r['wall'] * 1e3:8.1f} {r['wall_ratio']:6.2f} "
              f"{r['bare_cpu'] * 1e3:9.1f} {r['cpu'] * 1e3:9.1f} {r['cpu_ratio']:6.2f} {r['entries']:8d}")
        if task == "tensor":
            print(f"{'':<16} tensor files still being written after the last step: {r['drain'] * 1e3:.0f} ms")
    print("ms = wall clock; cpu = CPU time of this process (every thread) plus its tensor writer process")
    print("targets: L1 statistics <= 1.5x, L1 tensor <= 3x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
