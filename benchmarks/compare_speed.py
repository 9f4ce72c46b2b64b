"""How long ``pytest-msprobe compare`` takes on two large statistics dumps.

Writes a synthetic statistics dump.json of ``--calls`` API calls (default 119 000, about 176 MB: the layout of
benchmarks/real_workload.py's collection figure, each tensor's statistics drawn from a seeded generator) and a
perturbed copy (every statistic moved by a relative 1e-3, one call in a thousand by 60%), then times the compare
of the copy against the original in a fresh process: wall and CPU time, peak RSS, rows written. Run with
``nice``; the target is under 10 s on 2 cores.

    PYTHONPATH=. python benchmarks/compare_speed.py [--calls N] [--workdir DIR] [--runs R]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APIS = ["Functional.linear", "Tensor.add", "Torch.matmul", "Functional.gelu", "Tensor.__mul__"]


def _tensor(rng: random.Random, shape: list, scale: float) -> dict:
    top = rng.uniform(1, 4)
    return {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": shape, "Max": top * scale,
            "Min": -rng.uniform(1, 4) * scale, "Mean": rng.uniform(-1e-2, 1e-2) * scale,
            "Norm": rng.uniform(50, 200) * scale, "requires_grad": True}


def write_dump(path: str, calls: int, *, perturbed: bool) -> int:
    """One synthetic dump.json; the same statistics for both files except the perturbation. Returns its size."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = random.Random(1234)
    with open(path, "w") as fh:
        fh.write('{\n "task": "statistics",\n "level": "L1",\n "framework": "pytorch",\n'
                 ' "dump_data_dir": null,\n "data": {\n')
        for i in range(calls):
            api = APIS[i % len(APIS)]
            scale = 1.0
            if perturbed:
                scale = 1.6 if i % 1000 == 999 else 1.001
            fwd = {"input_args": [_tensor(rng, [4, 256, 768], 1.0), _tensor(rng, [768, 768], 1.0)],
                   "input_kwargs": {}, "output": [_tensor(rng, [4, 256, 768], scale)]}
            bwd = {"input": [_tensor(rng, [4, 256, 768], scale)],
                   "output": [_tensor(rng, [4, 256, 768], scale), _tensor(rng, [768, 768], scale)]}
            sep = "," if i + 1 < calls else ""
            fh.write(f'  "{api}.{i}.forward": {json.dumps(fwd, indent=1)},\n'
                     f'  "{api}.{i}.backward": {json.dumps(bwd, indent=1)}{sep}\n')
        fh.write(" }\n}\n")
    return os.path.getsize(path)


def _calls_in(path: str) -> int:
    """The number of forward entries of a dump written by :func:`write_dump` (its last key's call index + 1)."""
    with open(path, "rb") as fh:
        fh.seek(max(0, os.path.getsize(path) - 65536))
        tail = fh.read().decode(errors="replace")
    keys = [line.split('"')[1] for line in tail.splitlines() if line.startswith('  "') and '.backward"' in line]
    return int(keys[-1].rsplit(".", 2)[1]) + 1 if keys else -1


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=119_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="compare_speed_")
    golden = os.path.join(work, "golden", "step0", "rank", "dump.json")
    target = os.path.join(work, "target", "step0", "rank", "dump.json")
    if args.workdir and os.path.isfile(golden) and os.path.isfile(target) and args.calls == _calls_in(golden):
        size = os.path.getsize(golden)          # the files of an earlier run with the same --calls
    else:
        size = write_dump(golden, args.calls, perturbed=False)
        write_dump(target, args.calls, perturbed=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    figures = []
    for run in range(args.runs):
        out = os.path.join(work, f"out{run}")
        shutil.rmtree(out, ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "pytest_msprobe.cli", "compare", "-tp",
                              os.path.dirname(os.path.dirname(target)), "-gp",
                              os.path.dirname(os.path.dirname(golden)), "-o", out, "-da"],
                             env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if res.returncode:
            print(res.stdout, res.stderr)
            return 1
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        rows = sum(1 for name in os.listdir(out) if name.endswith(".csv")
                   for _ in open(os.path.join(out, name))) - 1
        figures.append((cpu, wall, after.ru_maxrss / 1024, rows, res.stdout.strip().splitlines()[-2:],
                        os.getloadavg()[0]))
    cpu, wall, rss, rows, tail, _ = min(figures)
    print(f"statistics compare of two {size / 1e6:.0f} MB dump.json ({args.calls} calls, {rows} rows) with -da: "
          f"{cpu:.1f} s CPU ({wall:.1f} s wall), peak RSS {rss:.0f} MiB, the least CPU of {args.runs} run(s) on "
          f"{os.cpu_count()} CPUs (target < 10 s on 2 cores; all runs, CPU / wall / 1-min load average: "
          + ", ".join(f"{c:.1f} s / {w:.1f} s / {load:.1f}" for c, w, _, _, _, load in figures) + ")")
    for line in tail:
        print("  " + line)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
