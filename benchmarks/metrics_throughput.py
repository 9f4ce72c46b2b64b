"""Throughput and memory of the per-output metrics (prints figures, asserts nothing).

Usage: python benchmarks/metrics_throughput.py [--n 1e7] [--mem-n 1e8] [--skip-memory] [--kernel-only]

- throughput: elements/s of one details row (compare_output, default standard) for a bf16 device output
  of ``--n`` elements, on one thread; also each standard's metric group and all groups together (the one
  metric pass: numba's kernel per chunk, its sums in numpy's order);
- the kernel alone: ``chunk_pass`` over ``--n`` elements in the engine's chunks (without the engine's Python
  around it), for a bf16 device output (its int16 bits) and a float32 one against a float32 bench: the legacy
  group, with the cosine's dot products, with the benchmark group, each with and without the Error / Expected
  column's figures (``FIGURES``): what each adds to the pass;
- first call: the time of the first metric pass in a fresh interpreter, with numba's cache of the kernel
  (``cache=True``, in ``__pycache__``) present and with it removed (a cold compile);
- memory: peak extra resident memory while comparing a ``--mem-n``-element bf16 output, measured in a
  child process as VmHWM after the inputs exist minus VmRSS before the compare (Linux only).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _inputs(n: int):
    import torch

    gen = torch.Generator().manual_seed(0)
    bench = torch.randn(n, generator=gen, dtype=torch.float32)
    device = (bench * (1 + 1e-3 * torch.randn(n, generator=gen))).bfloat16()
    return bench, device


def _best(fn, repeat: int = 3) -> tuple:
    """Best wall time and best CPU time of this process (CPU time is fairer on a loaded machine)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def _line(label: str, n: int, times: tuple) -> str:
    wall, cpu = times
    return (f"  {label:52s} wall {wall * 1e3:7.1f} ms {n / wall / 1e6:6.1f} Me/s | "
            f"cpu {cpu * 1e3:7.1f} ms {n / cpu / 1e6:6.1f} Me/s")


def throughput(n: int) -> None:
    import torch

    from pytest_msprobe.precision import compare as M
    from pytest_msprobe.precision import standards as S
    from pytest_msprobe.precision.compare import _source, compare_output

    torch.set_num_threads(1)
    bench, device = _inputs(n)
    import numpy as np

    from dumpers import metrics_engine

    metrics_engine.warm_up()
    print(f"throughput, bf16 device output of {n:.0e} elements, 1 thread, chunk {M.CHUNK}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    bs, ds = _source(bench, np.dtype("float32")), _source(device, np.dtype("float32"))
    f32 = bench.numpy()
    f32_device = f32 * np.float32(1.001)
    everything = {"binary": True, "small_value": S.BENCHMARK_SMALL_VALUE_1_0_4[S.BF16],
                  "absolute": S.API_PRECISION_THRESHOLDS["add"][S.BF16], "ulp": S.ULP_PARAMS[S.BF16]}
    groups = {"benchmark group (float32 arrays)": {"small_value": everything["small_value"]},
              "absolute group (float32 arrays)": {"absolute": everything["absolute"]},
              "legacy metrics only (float32 arrays)": {}}
    cases = [(f"details row, {label} standard", lambda api=api: compare_output(api, "x", bench, device))
             for api, label in (("gelu", "benchmark"), ("linear", "ulp"), ("add", "absolute"), ("relu", "binary"))]
    cases += [(label, lambda kw=kw: M.float_metrics(f32, f32_device, device_dtype=S.BF16, **kw))
              for label, kw in groups.items()]
    cases.append(("every group but ULP (float32 arrays)", lambda: M.float_metrics(
        f32, f32_device, device_dtype=S.BF16, **{k: v for k, v in everything.items() if k != "ulp"})))
    cases.append(("every metric of section 2 at once",
                  lambda: M.float_metrics(bs, ds, device_dtype=S.BF16, **everything)))
    for label, fn in cases:
        print(_line(label, n, _best(fn)))


def kernel_alone(n: int) -> None:
    import numpy as np
    import torch

    from dumpers import metrics_kernel as K
    from dumpers.metrics_engine import CHUNK

    bench, device = _inputs(n)
    b = bench.numpy()
    f32 = (b * np.float32(1.001)).astype(np.float32)
    par = np.zeros(K.N_PAR)
    par[K.P_EPS] = 2.0 ** -8
    for slot, t in zip((K.P_T0, K.P_T1, K.P_T2), (0.01, 0.001, 0.0001)):
        par[slot] = np.float32(t)
    par[K.P_SV], par[K.P_SV_ATOL] = np.float32(2.0 ** -10), np.float32(1e-5)
    par[K.P_RUN] = np.getbufsize()
    sq, re, ulp = (np.empty(CHUNK, np.float32) for _ in range(3))
    out = np.zeros(K.N_OUT)

    def one(d: Any, flags: int) -> None:
        cnt, mx, fig = np.zeros(K.N_CNT, np.int64), np.full(K.N_MAX, -1.0), np.zeros(K.N_FIG)
        for s in range(0, n, CHUNK):
            m = min(CHUNK, n - s)
            K.chunk_pass(b[s:s + m], d[s:s + m], flags, par, sq[:m], re[:m], ulp[:m], cnt, mx, fig, out)

    print(f"the kernel alone (chunk_pass), {n:.0e} elements in chunks of {CHUNK}, float32 bench, best of 5")
    for label, d in (("bf16 device (int16 bits)", device.view(torch.int16).numpy()), ("fp32 device", f32)):
        for groups, flags in (("legacy", K.LEGACY | K.AGREE), ("legacy + dots", K.LEGACY | K.AGREE | K.DOTS),
                              ("legacy + dots + benchmark", K.LEGACY | K.AGREE | K.DOTS | K.SMALL)):
            for extra, more in (("", 0), (" + figures", K.FIGURES)):
                one(d, flags | more)
                print(_line(f"{label}, {groups}{extra}", n, _best(lambda d=d, f=flags | more: one(d, f), 5)))


FIRST_CALL = ("import time; t0 = time.perf_counter(); from dumpers import metrics_engine; "
              "metrics_engine.warm_up(); print(time.perf_counter() - t0)")


def first_call() -> None:
    """Import and first pass over the usual dtype pairs in a fresh interpreter: numba's cache warm, then cold."""
    import glob
    import shutil

    import dumpers

    cache = os.path.join(os.path.dirname(dumpers.__file__), "__pycache__")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
        dumpers.__file__)), os.environ.get("PYTHONPATH")]))}

    def timed() -> float:
        out = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, env=env, check=True)
        return float(out.stdout.split()[-1])

    timed()                                   # the cache exists after this
    warm = min(timed() for _ in range(2))
    saved = os.path.join(cache, "saved-kernel-cache")
    os.makedirs(saved, exist_ok=True)
    moved = []
    for path in glob.glob(os.path.join(cache, "metrics_*.*.nb[ic]")):
        moved.append(shutil.move(path, saved))
    try:
        cold = timed()
    finally:
        for path in glob.glob(os.path.join(cache, "metrics_*.*.nb[ic]")):
            os.remove(path)
        for path in moved:
            shutil.move(path, cache)
        os.rmdir(saved)
    print(f"first call (import + warm_up of the usual dtype pairs in a fresh interpreter): {warm:.2f} s with numba's "
          f"cache, {cold:.2f} s compiling the kernel (no cache)")


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def memory_child(n: int) -> None:
    import torch

    from pytest_msprobe.precision.compare import compare_output

    torch.set_num_threads(1)
    bench, device = _inputs(n)
    import gc
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:   # reset the high-water mark
        f.write("5")
    before = _rss_kb("VmRSS")
    t0 = time.perf_counter()
    row = compare_output("gelu", "x", bench, device)
    dt = time.perf_counter() - t0
    peak = _rss_kb("VmHWM")
    inputs_mb = (bench.numel() * 4 + device.numel() * 2) / 2 ** 20
    print(f"memory, bf16 device output of {n:.0e} elements (inputs {inputs_mb:.0f} MB): "
          f"peak extra {(peak - before) / 1024:.0f} MB, {dt:.1f} s, status {row.status}")


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--mem-n", type=float, default=1e8)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--skip-first-call", action="store_true")
    p.add_argument("--kernel-only", action="store_true", help="only the kernel alone, with and without figures")
    p.add_argument("--memory-child", type=float, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.memory_child:
        memory_child(int(a.memory_child))
        return 0
    if a.kernel_only:
        kernel_alone(int(a.n))
        return 0
    throughput(int(a.n))
    kernel_alone(int(a.n))
    if not a.skip_first_call:
        first_call()
    if not a.skip_memory:
        subprocess.run([sys.executable, __file__, "--memory-child", str(a.mem_n)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
