"""One worker of the checker on one dump, two source trees in turn (prints figures; asserts nothing).

Measures the wall time and the CPU time (the pytest process and its children) of
``pytest --msprobe-api-info DUMP`` with one worker, for each source tree given (``PYTHONPATH`` set to it), the
trees taken in turn in each round so that a busy moment of a shared machine hits them alike; prints every run
and the best and median of each tree. Comparing a release with the working tree on the same dump (for
example the real workload's bf16 Llama tensor dump, ``benchmarks/real_workload.py``) gives the checker's speed
change with the dump held fixed: a newer dumper may record other calls than an older one.

    python benchmarks/checker_ab.py DUMP_JSON TREE [TREE ...] [--rounds 5]

``TREE`` is a checkout's root (a ``git worktree`` of an older commit, say); the interpreter is this one.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(tree: str, dump_json: str, out: str) -> tuple:
    """(wall, CPU, exit status, pytest's last line) of one run."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, PYTHONPATH=tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)       # as an installed package runs: with its bytecode cache
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          f"--msprobe-api-info={dump_json}", "--msprobe-out", out],
                         cwd=out, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = res.stdout.strip().splitlines()
    return wall, cpu, res.returncode, lines[-1] if lines else res.stderr.strip()[-200:]


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump_json")
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    trees = [os.path.abspath(t) for t in args.trees]
    runs: dict = {t: [] for t in trees}
    work = tempfile.mkdtemp(prefix="checker-ab-")
    try:
        for r in range(args.rounds):
            for i, tree in enumerate(trees):
                wall, cpu, rc, last = one_run(tree, os.path.abspath(args.dump_json), os.path.join(work, str(i)))
                runs[tree].append((wall, cpu))
                print(f"round {r} {tree}: {wall:.2f} s wall, {cpu:.2f} s CPU, exit status {rc} ({last})",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = None
    for tree in trees:
        walls, cpus = [w for w, _ in runs[tree]], [c for _, c in runs[tree]]
        line = (f"{tree}: wall best {min(walls):.2f} s, median {statistics.median(walls):.2f} s; CPU best "
                f"{min(cpus):.2f} s, median {statistics.median(cpus):.2f} s")
        if base is None:
            base = min(walls)
        else:
            line += f"; best wall {min(walls) / base:.2f}x the first tree's"
        print(line)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
