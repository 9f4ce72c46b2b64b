"""Per-step overhead of grad_probe at L0/L1/L2 on a small transformer (prints figures, asserts nothing).

Model: 4-layer TransformerEncoder, d_model 256, 4 heads, ff 1024, batch 8, seq 64, AdamW, one CPU thread
(``torch.set_num_threads(1)``). Each configuration trains WARMUP + STEPS optimizer steps. Printed per
configuration, as medians over the measured steps:

* wall: the step's wall-clock time on the training thread;
* cpu: the training thread's CPU time (``time.thread_time``): what the step costs by construction, robust
  against other processes on a shared machine (with one intra-op thread, every op runs on this thread);
* hook: the part of it spent in grad_probe's optimizer hook (statistics, the one host transfer, queueing);
* writer: CPU time the background writer thread spent per step (CSV rows, direction files), which runs
  beside training on another core.

    python benchmarks/grad_probe_overhead.py [--steps N] [--warmup N] [--device cpu|cuda] [--threads T]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from dumpers.grad_probe import GradientMonitor


def build(device: str):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt


def run(level: str | None, steps: int, warmup: int, device: str) -> dict:
    model, opt = build(device)
    x = torch.randn(8, 64, 256, device=device)
    target = torch.randn(8, 64, 256, device=device)
    mon = None
    with tempfile.TemporaryDirectory() as out:
        if level is not None:
            mon = GradientMonitor({"task": "grad_probe", "dump_path": out,
                                   "grad_probe": {"grad_level": level, "bounds": [-1e-3, 0, 1e-3]}}, "pytorch")
            mon.monitor(model)
        wall, cpu = [], []
        for i in range(warmup + steps):
            if device == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.thread_time()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), target).backward()
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
        res = {"wall": statistics.median(wall), "cpu": statistics.median(cpu), "hook": 0.0, "writer": 0.0,
               "drain": 0.0, "params": sum(p.numel() for p in model.parameters())}
        if mon is not None:
            t0 = time.perf_counter()
            mon.flush()
            res["drain"] = time.perf_counter() - t0
            impl = mon._impl
            res["hook"] = impl.hook_cpu_seconds / max(1, impl.exported_steps)
            res["writer"] = impl.writer.busy_seconds / max(1, impl.exported_steps)
            mon.remove()
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results: dict = {}
    for level in (None, "L0", "L1", "L2", None):           # bare at the start and the end, to see drift
        key = "bare" if level is None else level
        r = run(level, args.steps, args.warmup, args.device)
        results.setdefault(key, []).append(r)
        print(f"{key:>4}: wall {r['wall'] * 1e3:7.1f} ms  cpu {r['cpu'] * 1e3:7.1f} ms  hook {r['hook'] * 1e3:6.1f} ms"
              f"  writer {r['writer'] * 1e3:6.1f} ms/step  drain {r['drain'] * 1e3:6.1f} ms", flush=True)
    bare_wall = min(r["wall"] for r in results["bare"])
    bare_cpu = min(r["cpu"] for r in results["bare"])
    print(f"\nparameters: {results['bare'][0]['params']:,}  device: {args.device}  threads: {args.threads}  "
          f"steps: {args.steps}")
    for key in ("L0", "L1", "L2"):
        r = results[key][0]
        print(f"{key}: training-thread cpu {r['cpu'] / bare_cpu:.3f}x bare   wall {r['wall'] / bare_wall:.3f}x bare")
    print("target: L1 <= 1.2x bare")


if __name__ == "__main__":
    main()
