"""Slowdown of a training step under online dispatch, with process_num 0 and 2 (prints figures only).

Model: a 3-layer MLP (width 256, GELU, LayerNorm), batch 64, cross-entropy, SGD; the forward pass and
``loss.backward()`` each run in their own ``PtdbgDispatch`` block, dump_mode "OFF" (CSV only) unless
``--dump-mode`` says otherwise. Each configuration trains WARMUP + STEPS steps; printed per configuration,
as medians over the measured steps:

* wall: the step's wall-clock time on the training thread, and its ratio to the step without the mode;
* cpu: the training thread's CPU time (``time.thread_time``), robust against other load on the machine;
* ops: aten ops intercepted per step.

With process_num 2 the worker pool is started by the warm-up steps (workers are shared between blocks),
so the figures are the steady state. Setting ``--threads`` fixes torch's intra-op thread count.

    python benchmarks/online_dispatch_overhead.py [--steps N] [--warmup N] [--dtype float32|bfloat16]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from dumpers.online_dispatch import PtdbgDispatch, shutdown_workers


def build(dtype: torch.dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
        torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).to(dtype)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def run(process_num: int | None, args: argparse.Namespace) -> dict:
    dtype = getattr(torch, args.dtype)
    model, opt = build(dtype)
    x = torch.randn(64, 128).to(dtype)
    y = torch.randint(0, 10, (64,))
    root = tempfile.mkdtemp(prefix="od_bench_")
    walls, cpus, ops = [], [], []
    for step in range(args.warmup + args.steps):
        opt.zero_grad()
        w0, c0 = time.perf_counter(), time.thread_time()
        if process_num is None:
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            loss.backward()
            n = 0
        else:
            kw = {"dump_mode": args.dump_mode, "process_num": process_num}
            with PtdbgDispatch(dump_path=tempfile.mkdtemp(dir=root), **kw) as fwd:
                loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            with PtdbgDispatch(dump_path=tempfile.mkdtemp(dir=root), **kw) as bwd:
                loss.backward()
            n = fwd.api_index + bwd.api_index
        opt.step()
        if step >= args.warmup:
            walls.append(time.perf_counter() - w0)
            cpus.append(time.thread_time() - c0)
            ops.append(n)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus), "ops": statistics.median(ops)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--dump-mode", default="OFF", choices=["OFF", "auto", "all"])
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave as is)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"online dispatch overhead: MLP 128-256-256-10, batch 64, {args.dtype}, dump_mode {args.dump_mode}, "
          f"{torch.get_num_threads()} intra-op threads, median of {args.steps} steps")
    base = run(None, args)
    print(f"{'configuration':<22}{'wall ms':>10}{'x off':>8}{'cpu ms':>10}{'x off':>8}{'ops/step':>10}")
    print(f"{'mode off':<22}{base['wall'] * 1e3:>10.2f}{1:>8.1f}{base['cpu'] * 1e3:>10.2f}{1:>8.1f}{0:>10}")
    for num in (0, 2):
        r = run(num, args)
        print(f"{'process_num=' + str(num):<22}{r['wall'] * 1e3:>10.2f}{r['wall'] / base['wall']:>8.1f}"
              f"{r['cpu'] * 1e3:>10.2f}{r['cpu'] / base['cpu']:>8.1f}{r['ops']:>10.0f}")
    shutdown_workers()


if __name__ == "__main__":
    main()
