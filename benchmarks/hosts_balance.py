"""Load balance across hosts for calls of very different cost (prints figures; asserts nothing).

Dumps one training step with our dumper (task tensor, L1, fp32): many small calls (SMALL Linear 16x16 and
ReLU layers) followed by two large GEMMs (SIZE x SIZE matmuls) at the very end of the step, so that in dump
order the costliest calls come last. Starts two simulated hosts (``python -m pytest_msprobe.host_server
127.0.0.1:0``, each in its own directory and process group, one worker each) and checks the dump across them
with each scheduling on offer:

* ``--dist load`` and ``--dist worksteal`` of xdist,
* each with the calls in dump order and xdist's own scheduler; with the largest inputs first (what the plugin
  does on every xdist worker, :func:`pytest_msprobe.api_items.by_size`) and xdist's own scheduler, which sends each
  worker a run of consecutive calls ("runs"); and, under ``load``, largest first with the plugin's scheduler,
  whose first distribution deals the calls out one per worker in turn ("dealt", :mod:`pytest_msprobe.schedule`;
  ``worksteal`` is xdist's own). A small plugin, ``-p balanceplug --balance-order ... --balance-deal ...``,
  forces dump order (after the plugin's ordering) and xdist's own scheduler.

For each it prints, from the run of median span out of --repeat: the checking span (from the start of the
first item to the end of the last, as reported to the controller: interpreter start, torch import and
collection left out), the CPU seconds of the items each worker ran, which workers ran the large GEMMs, the
wall time of the whole run, and the load average of the machine before the runs; then the span of each run.

Usage: python benchmarks/hosts_balance.py [--workdir DIR] [--repeat N] [--size N] [--small N]

Figures (defaults: --size 2048 --small 20, 47 API items, --repeat 2; 2 cores shared with other jobs, load
average 3-4, so spans vary by a second between runs; the CPU split is the steadier figure):

    scheduling                        span s  cpu gw0  cpu gw1  GEMMs on  wall s  load  spans of each run
    load, dump order                     5.9      3.4      1.2       gw0    18.7  3.43  4.8, 5.9
    load, largest first, runs            4.9      4.8      0.6       gw0    13.4  3.99  4.0, 4.9
    load, largest first, dealt           4.4      2.8      2.7   gw0+gw1    12.1  3.73  4.4, 4.3
    worksteal, dump order                4.3      1.2      3.3       gw1    12.2  3.58  4.3, 4.2
    worksteal, largest first, runs       3.5      3.5      1.8       gw0    10.1  3.30  3.4, 3.5

With runs of consecutive calls, largest first puts both GEMMs at the head of the first worker's run (load: a
first chunk of max(2, N // workers // 4) per worker; worksteal: N // workers each), and that worker does most
of the work (4.8 s of CPU against 0.6 s). Dealt, each worker starts on one GEMM and the work splits evenly
(2.8 s and 2.7 s), the shortest span under ``load``. The wall time is mostly the start of three interpreters importing
torch on 2 busy cores.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLUGIN = '''
import json, os, time

import pytest

_controller = True


def pytest_addoption(parser):
    # options, not environment variables: workers on other hosts get the controller's arguments only
    parser.addoption("--balance-order", default="plugin", choices=["plugin", "dump"])
    parser.addoption("--balance-deal", default="yes", choices=["yes", "no"])


def pytest_configure(config):
    global _controller
    _controller = not hasattr(config, "workerinput")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    order = {id(item): i for i, item in enumerate(items)}
    res = yield
    if config.getoption("balance_order") == "dump":
        items.sort(key=lambda item: order.get(id(item), len(order)))
    return res


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """--balance-deal no: xdist's own scheduler, which sends each worker a run of consecutive calls."""
    if config.getoption("balance_deal") == "no":
        from xdist.scheduler import LoadScheduling, WorkStealingScheduling
        return {"load": LoadScheduling, "worksteal": WorkStealingScheduling}[config.getvalue("dist")](config, log)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    cpu = time.process_time()
    try:
        return (yield)
    finally:
        item.user_properties.append(("cpu", time.process_time() - cpu))


def pytest_runtest_logreport(report):
    path = os.environ.get("BALANCE_TIMES")
    if _controller and path and report.when == "call":
        node = getattr(report, "node", None)
        worker = node.gateway.id if node is not None else "-"
        with open(path, "a") as fh:
            cpu = dict(report.user_properties).get("cpu", 0.0)
            fh.write(json.dumps([time.monotonic(), worker, report.nodeid, report.duration, cpu]) + "\\n")
'''

DUMP = '''
import sys
import torch
from pytest_msprobe import PrecisionDebugger

path, size, small = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.small = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(small))
        self.big_a = torch.nn.Parameter(torch.randn(size, size) / size ** 0.5)
        self.big_b = torch.nn.Parameter(torch.randn(size, size) / size ** 0.5)

    def forward(self, x, y):
        for layer in self.small:
            x = torch.relu(layer(x))
        z = torch.matmul(torch.matmul(y, self.big_a), self.big_b)
        return x.pow(2).mean() + z.pow(2).mean()


model = Mixed()
dbg = PrecisionDebugger(task="tensor", dump_path=path, level="L1")
dbg.start(model)
model(torch.randn(4, 16), torch.randn(size, size)).backward()
dbg.stop()
dbg.step()
'''

SCHEDULES = [("load, dump order", "load", "dump", "no"),
             ("load, largest first, runs", "load", "plugin", "no"),
             ("load, largest first, dealt", "load", "plugin", "yes"),
             ("worksteal, dump order", "worksteal", "dump", "no"),
             ("worksteal, largest first, runs", "worksteal", "plugin", "no")]


class Host:
    """A host server on 127.0.0.1 in its own directory and process group."""

    def __init__(self, directory: str, env: dict) -> None:
        os.makedirs(directory, exist_ok=True)
        self.log = os.path.join(directory, "server.log")
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "pytest_msprobe.host_server", "127.0.0.1:0"],
                                         cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            text = open(self.log).read()
            if "listening on" in text:
                self.address = text.split("listening on ", 1)[1].split(",", 1)[0]
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"host server did not start: {text}")
            time.sleep(0.1)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def build_dump(workdir: str, size: int, small: int) -> str:
    """The dump of one step of the mixed model; returns its dump.json path."""
    path = os.path.join(workdir, "dump")
    subprocess.run([sys.executable, "-c", DUMP, path, str(size), str(small)], check=True)
    return os.path.join(path, "step0", "rank", "dump.json")


def run_once(workdir: str, dump_json: str, hosts: list, dist: str, order: str, deal: str, env: dict) -> dict:
    """One distributed check; its figures."""
    times = os.path.join(workdir, "times.jsonl")
    if os.path.exists(times):
        os.remove(times)
    out = os.path.join(workdir, "out")
    os.makedirs(out, exist_ok=True)
    run_env = dict(env, BALANCE_TIMES=times)
    tx = [arg for host in hosts for arg in ("--tx", f"socket={host.address}")]
    load = os.getloadavg()[0]
    start = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               "-p", "balanceplug", "--msprobe-api-info", dump_json, "--msprobe-out", out, *tx, "--dist", dist,
               f"--balance-order={order}", f"--balance-deal={deal}"]   # one argument: "dump" is also a folder here
    proc = subprocess.run(command, cwd=workdir, env=run_env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    reports = [json.loads(line) for line in open(times)]
    cpu: dict = {}
    for _, worker, _, _, seconds in reports:
        cpu[worker] = cpu.get(worker, 0.0) + seconds
    big = sorted({worker for _, worker, nodeid, _, _ in reports if "matmul" in nodeid})
    span = max(r[0] for r in reports) - min(r[0] - r[3] for r in reports)
    return {"wall": wall, "span": span, "cpu": cpu, "big": big, "load": load,
            "items": len(reports)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=2048, help="side of the two large matmuls")
    parser.add_argument("--small", type=int, default=20, help="number of small Linear+ReLU layers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="msprobe_hosts_balance_") as tmp:
        workdir = args.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "balanceplug.py"), "w") as fh:
            fh.write(PLUGIN)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([workdir, ROOT] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p])
        dump_json = build_dump(workdir, args.size, args.small)
        hosts: list = []
        try:
            hosts = [Host(os.path.join(workdir, name), env) for name in ("A", "B")]
            print(f"dump {dump_json}: two {args.size}x{args.size} matmuls after {args.small} Linear+ReLU layers; "
                  f"hosts {hosts[0].address} (gw0), {hosts[1].address} (gw1), one worker each; "
                  f"{os.cpu_count()} cores")
            print(f"{'scheduling':32} {'span s':>7} {'cpu gw0':>8} {'cpu gw1':>8} {'GEMMs on':>9} {'wall s':>7} "
                  f"{'load':>5}  spans of each run")
            for label, dist, order, deal in SCHEDULES:
                runs = [run_once(workdir, dump_json, hosts, dist, order, deal, env) for _ in range(args.repeat)]
                mid = sorted(runs, key=lambda r: r["span"])[len(runs) // 2]
                spans = ", ".join(f"{r['span']:.1f}" for r in runs)
                print(f"{label:32} {mid['span']:7.1f} {mid['cpu'].get('gw0', 0):8.1f} {mid['cpu'].get('gw1', 0):8.1f} "
                      f"{'+'.join(mid['big']):>9} {mid['wall']:7.1f} {statistics.mean(r['load'] for r in runs):5.2f}  "
                      f"{spans}", flush=True)
        finally:
            for host in hosts:
                host.stop()


if __name__ == "__main__":
    main()
