"""Per-step overhead of grad_probe at L0/L1/L2 on a small transformer (prints figures, asserts nothing).

Model: 4-layer TransformerEncoder, d_model 256, 4 heads, ff 1024, batch 8, seq 64, AdamW, one CPU thread.
Each configuration trains WARMUP + STEPS optimizer steps; the figure is the median step time on the training
thread (statistics, the one host transfer and queueing included; file writing runs on the writer thread), and
"drain" is the time the writer still needed after the last step. Because the step medians are noisy on a shared
machine, the time spent inside the optimizer hook is printed too: (bare + hook) / bare is the overhead the
training thread pays by construction.

    python benchmarks/grad_probe_overhead.py [--steps N] [--device cpu|cuda] [--threads T]
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


def run(level: str | None, steps: int, warmup: int, device: str) -> tuple[float, float, float, int]:
    model, opt = build(device)
    x = torch.randn(8, 64, 256, device=device)
    target = torch.randn(8, 64, 256, device=device)
    mon = None
    with tempfile.TemporaryDirectory() as out:
        if level is not None:
            mon = GradientMonitor({"task": "grad_probe", "dump_path": out,
                                   "grad_probe": {"grad_level": level, "bounds": [-1e-3, 0, 1e-3]}}, "pytorch")
            mon.monitor(model)
        times = []
        for i in range(warmup + steps):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), target).backward()
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hook = 0.0
        if mon is not None:
            mon.remove()
            hook = mon._impl.hook_seconds / max(1, mon._impl.exported_steps)
        drain = time.perf_counter() - t0
    return statistics.median(times), hook, drain, sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    for level in (None, "L0", "L1", "L2", None):           # bare twice: start and end, to see drift
        key = "bare" if level is None else level
        med, hook, drain, n = run(level, args.steps, args.warmup, args.device)
        results.setdefault(key, []).append((med, hook))
        print(f"{key:>4}: median step {med * 1e3:8.2f} ms   in the optimizer hook {hook * 1e3:7.2f} ms/step   "
              f"writer drain after last step {drain * 1e3:7.1f} ms", flush=True)
    bare = min(m for m, _ in results["bare"])
    print(f"\nparameters: {n:,}  device: {args.device}  threads: {args.threads}  steps: {args.steps}")
    for key in ("L0", "L1", "L2"):
        med, hook = results[key][0]
        print(f"{key}: measured {med / bare:.3f}x bare step; training-thread cost alone {(bare + hook) / bare:.3f}x")
    print("target: L1 <= 1.2x bare")


if __name__ == "__main__":
    main()
