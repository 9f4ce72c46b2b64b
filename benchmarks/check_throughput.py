"""Throughput and memory of the accuracy check (prints figures; asserts nothing).

Builds a bf16 transformer dump with our dumper (2 encoder layers, d_model 64, 4 heads, seq 16, batch 4, one
AdamW step, tensor mode), then runs ``pytest --msprobe-api-info`` on it and prints:

* checked calls per second with one worker and with ``-n 2``, measured between the first and the last
  item report on the controller (so interpreter start, torch import and collection are excluded);
* peak RSS of a single-worker run on that dump and on a 10x larger one (20 encoder layers, 10x the
  entries and tensor bytes), which stays flat when tensors are loaded lazily.

Usage: python benchmarks/check_throughput.py [--workdir DIR] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TIMING_CONFTEST = '''
import os, time

_controller = True


def pytest_configure(config):
    global _controller
    _controller = not hasattr(config, "workerinput")


def pytest_runtest_logreport(report):
    path = os.environ.get("MSPROBE_BENCH_TIMES")
    if _controller and path and report.when == "call":
        with open(path, "a") as fh:
            fh.write(f"{time.monotonic()} {time.process_time()}\\n")
'''

RSS_WRAPPER = '''
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
'''


def build_dump(path: str, layers: int) -> str:
    """Dump one training step of a bf16 TransformerEncoder; returns the dump.json path."""
    code = f'''
import torch
from pytest_msprobe import PrecisionDebugger
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0)
model = torch.nn.TransformerEncoder(layer, num_layers={layers}, enable_nested_tensor=False).bfloat16()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(4, 16, 64).bfloat16()
dbg = PrecisionDebugger(task="tensor", dump_path={path!r}, level="L1")
dbg.start(model)
loss = model(x).float().pow(2).mean()
loss.backward()
opt.step()
dbg.stop()
dbg.step()
'''
    subprocess.run([sys.executable, "-c", code], check=True)
    return os.path.join(path, "step0", "rank", "dump.json")


def count_entries(dump_json: str) -> int:
    with open(dump_json) as fh:
        return len(json.load(fh)["data"])


def calls_per_second(workdir: str, dump_json: str, workers: int) -> tuple:
    times = os.path.join(workdir, f"times_{workers}.txt")
    if os.path.exists(times):
        os.remove(times)
    out = os.path.join(workdir, f"out_{workers}")
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--msprobe-api-info", dump_json,
           "--msprobe-out", out, "-o", "console_output_style=classic"]
    if workers > 1:
        cmd += ["-n", str(workers)]
    env = dict(os.environ, MSPROBE_BENCH_TIMES=times)
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    with open(times) as fh:
        pairs = [tuple(float(v) for v in line.split()) for line in fh if line.strip()]
    span = pairs[-1][0] - pairs[0][0]
    cpu = pairs[-1][1] - pairs[0][1]          # controller CPU time: the whole run when -n 1
    rate = (len(pairs) - 1) / span if span > 0 else float("inf")
    cpu_rate = (len(pairs) - 1) / cpu if cpu > 0 else float("inf")
    return rate, len(pairs), wall, cpu_rate


def peak_rss_mib(workdir: str, dump_json: str) -> float:
    out = os.path.join(workdir, "out_rss")
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-c", RSS_WRAPPER, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "--msprobe-api-info", dump_json, "--msprobe-out", out]
    res = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, check=True)
    return int(res.stdout.strip().splitlines()[-1]) / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default=None, help="where to build the dumps (default: a temporary directory)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the best is printed")
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="msprobe_bench_")
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "conftest.py"), "w") as fh:
        fh.write(TIMING_CONFTEST)
    with open(os.path.join(workdir, "pytest.ini"), "w") as fh:
        fh.write("[pytest]\n")
    small = build_dump(os.path.join(workdir, "small"), layers=2)
    large = build_dump(os.path.join(workdir, "large"), layers=20)
    print(f"dump: {count_entries(small)} entries (bf16 transformer, 2 layers); "
          f"10x dump: {count_entries(large)} entries (20 layers)")
    for workers in (1, 2):
        best = max((calls_per_second(workdir, small, workers) for _ in range(args.repeat)), key=lambda r: r[0])
        extra = f"; {best[3]:.1f} calls per CPU-second of the process" if workers == 1 else ""
        print(f"-n {workers}: {best[0]:.1f} checked calls/s ({best[1]} items; whole run {best[2]:.1f} s "
              f"incl. start-up{extra})")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    rss_small = peak_rss_mib(workdir, small)
    rss_large = peak_rss_mib(workdir, large)
    print(f"peak RSS, one worker: {rss_small:.0f} MiB (small dump), {rss_large:.0f} MiB (10x dump), "
          f"ratio {rss_large / rss_small:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
