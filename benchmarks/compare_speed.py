"""How long ``pytest-msprobe compare`` takes on two large statistics dumps.

Writes a synthetic statistics dump.json of ``--calls`` API calls (default 119 000, about 176 MB: the layout of
benchmarks/real_workload.py's collection figure, each tensor's statistics drawn from a seeded generator) and a
perturbed copy (every statistic moved by a relative 1e-3, one call in a thousand by 60%), then times the compare
of the copy against the original in a fresh process: wall time and the CPU time of all its processes, the
largest peak RSS of one of them, rows written, the load average, taken in turn with the sides read by two
worker processes (the default for dumps this large) and in-process. Run with ``nice``; the target is under 10 s
on 2 cores. Then a tensor compare of two dumps of ``--tensor-mb`` MB of tensor files each, against reading the same
files alone, and the bytes the compare read against the files' size (each file should be read once).

    PYTHONPATH=. python benchmarks/compare_speed.py [--calls N] [--workdir DIR] [--runs R] [--tensor-mb MB]
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


def write_tensor_dump(root: str, calls: int, numel: int, *, perturbed: bool) -> int:
    """A tensor dump of ``calls`` Functional.gelu calls (one fp32 input, one output of ``numel`` elements, as
    torch.save files in dump_tensor_data); the copy moves every element by a relative 1e-6. Returns its tensor
    bytes."""
    import torch

    data_dir = os.path.join(root, "dump_tensor_data")
    os.makedirs(data_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(5)
    data, total = {}, 0
    for i in range(calls):
        key = f"Functional.gelu.{i}.forward"
        entry: dict = {"input_args": [], "input_kwargs": {}, "output": []}
        for part, suffix in (("input_args", "input.0"), ("output", "output.0")):
            tensor = torch.randn(numel, generator=gen)
            if perturbed:
                tensor = tensor * (1 + 1e-6)
            name = f"{key}.{suffix}.pt"
            path = os.path.join(data_dir, name)
            torch.save(tensor, path)
            total += os.path.getsize(path)
            entry[part].append({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [numel],
                                "Max": tensor.max().item(), "Min": tensor.min().item(),
                                "Mean": tensor.mean().item(), "Norm": tensor.norm().item(),
                                "requires_grad": False, "data_name": name})
        data[key] = entry
    with open(os.path.join(root, "dump.json"), "w") as fh:
        json.dump({"task": "tensor", "level": "L1", "framework": "pytorch",
                   "dump_data_dir": "dump_tensor_data", "data": data}, fh)
    return total


_CHILD = """
import sys
from pytest_msprobe.cli import main
code = main(sys.argv[1:])
with open("/proc/self/io") as fh:
    print(dict(line.split(": ") for line in fh.read().splitlines())["rchar"])
sys.exit(code)
"""


# the same command with the two sides read in-process whatever their size
_IN_PROCESS = """
import sys
from pytest_msprobe.runs_compare import sideproc
sideproc.PROCESS_MIN_BYTES = sys.maxsize
from pytest_msprobe.cli import main
sys.exit(main(sys.argv[1:]))
"""


# runs a command and says the largest peak RSS of one of its processes (its own workers included)
_MEASURED = """
import resource, subprocess, sys
res = subprocess.run(sys.argv[1:])
print("peak-rss-kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(res.returncode)
"""


def _peak_rss_mib(stderr: str) -> float:
    lines = [line for line in stderr.splitlines() if line.startswith("peak-rss-kib ")]
    return int(lines[-1].split()[1]) / 1024 if lines else float("nan")


def tensor_figure(work: str, megabytes: int) -> None:
    """Time a tensor compare of two dumps of ``megabytes`` MB of tensor files each against reading the same files
    (both from the page cache, just written), and count the bytes the compare read (``rchar``)."""
    numel = 1 << 20                                        # 4 MiB per fp32 tensor
    calls = max(1, megabytes * (1 << 20) // (2 * 4 * numel + 1024))
    roots = [os.path.join(work, "tensor", side, "step0", "rank") for side in ("golden", "target")]
    total = sum(write_tensor_dump(root, calls, numel, perturbed=side == 1) for side, root in enumerate(roots))
    files = [os.path.join(root, "dump_tensor_data", name) for root in roots
             for name in os.listdir(os.path.join(root, "dump_tensor_data"))]
    buf = bytearray(8 * numel + 4096)
    start = time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    read_s = time.perf_counter() - start
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = os.path.join(work, "tensor", "out")
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _CHILD, "compare", "-tp", os.path.dirname(roots[1]), "-gp",
                          os.path.dirname(roots[0]), "-o", out, "-da"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        print(res.stdout, res.stderr)
        return
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    rchar = int(res.stdout.strip().splitlines()[-1])
    print(f"tensor compare of two dumps of {calls} calls ({total / 1e6:.0f} MB of tensor files in all): {wall:.1f} s "
          f"wall ({cpu:.1f} s CPU), {total / 1e6 / wall:.0f} MB/s; reading the same files alone (page cache): "
          f"{read_s:.2f} s, {total / 1e6 / read_s:.0f} MB/s; bytes read by the compare {rchar / total:.2f}x the "
          f"tensor files (dump.json and the interpreter's own files included); 1-min load average "
          f"{os.getloadavg()[0]:.1f}")


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=119_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--tensor-mb", type=int, default=256,
                        help="also time a tensor compare of two dumps of this many MB of tensor files (0: not)")
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
    ways = {"two reading processes": ["-m", "pytest_msprobe.cli"], "in-process": ["-c", _IN_PROCESS]}
    figures: dict = {way: [] for way in ways}
    for run in range(args.runs):                    # the two ways taken in turn, under the same load
        for way, command in ways.items():
            out = os.path.join(work, f"out{run}")
            shutil.rmtree(out, ignore_errors=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", _MEASURED, sys.executable, *command, "compare", "-tp",
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
            figures[way].append((wall, cpu, _peak_rss_mib(res.stderr), rows,
                                 res.stdout.strip().splitlines()[-2:], os.getloadavg()[0]))
    for way, runs in figures.items():
        wall, cpu, rss, rows, tail, _ = min(runs)
        print(f"statistics compare of two {size / 1e6:.0f} MB dump.json ({args.calls} calls, {rows} rows) with -da, "
              f"{way}: {wall:.1f} s wall ({cpu:.1f} s CPU of all its processes), largest peak RSS of one process "
              f"{rss:.0f} MiB; the least wall time of {args.runs} run(s) on {os.cpu_count()} CPUs (target < 10 s on 2 "
              "cores; all runs, wall / CPU / 1-min load average: "
              + ", ".join(f"{w:.1f} s / {c:.1f} s / {load:.1f}" for w, c, _, _, _, load in runs) + ")")
    for line in tail:
        print("  " + line)
    if args.tensor_mb:
        tensor_figure(work, args.tensor_mb)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
