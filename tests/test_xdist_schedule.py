"""xdist's first distribution deals the largest calls out one per worker (real xdist workers, real dumps)."""
from __future__ import annotations

import json

import pytest
import torch

from pytest_msprobe import PrecisionDebugger

pytest_plugins = ["pytester"]

WHERE = '''
import json, os


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)
    if report.when == "call" and node is not None:
        with open(os.path.join(os.path.dirname(__file__), "where.jsonl"), "a") as fh:
            fh.write(json.dumps([report.nodeid, node.gateway.id]) + "\\n")
'''


def _dump(path) -> None:
    """A step of 12 small matmuls, then two large ones (the costliest calls come last in dump order)."""
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(dump_path=str(path), task="statistics", level="L1")
    small, big = torch.randn(4, 4), torch.randn(256, 256)
    dbg.start()
    for _ in range(12):
        torch.matmul(small, small)
    torch.matmul(big, big)
    torch.matmul(big, big)
    dbg.stop()
    dbg.step()
    dbg.flush()
    PrecisionDebugger.reset()


@pytest.mark.parametrize("dist", ["load", "worksteal"])
def test_the_two_largest_calls_run_on_different_workers(pytester, dist):
    _dump(pytester.path / "dump")
    pytester.makeconftest(WHERE)
    res = pytester.runpytest("--msprobe-api-info", str(pytester.path / "dump" / "step0"), "--msprobe-random",
                             "-n", "2", "--dist", dist, "-p", "no:randomly")
    assert res.parseoutcomes().get("passed") == 14, res.stdout.str()
    where = dict(json.loads(line) for line in (pytester.path / "where.jsonl").read_text().splitlines())
    big = [worker for nodeid, worker in where.items() if nodeid.endswith(("Torch.matmul.12", "Torch.matmul.13"))]
    assert len(big) == 2 and big[0] != big[1], where
    assert set(where.values()) == {"gw0", "gw1"}


CONTROLLER_IMPORTS = '''
import os, sys


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):        # before xdist starts any worker
        with open(os.path.join(os.path.dirname(__file__), "controller.txt"), "w") as fh:
            fh.write(str("torch" in sys.modules))
'''


def test_the_controller_starts_the_workers_without_importing_torch(pytester):
    """With a CPU build of torch and the cpu device, the controller has nothing to learn from ``import torch``
    before its workers start (they import it in parallel)."""
    if torch.version.cuda is not None or torch.version.hip is not None:
        pytest.skip("a GPU build of torch: the controller asks torch.cuda whether a GPU is there")
    import subprocess
    import sys

    _dump(pytester.path / "dump")
    pytester.makeconftest(CONTROLLER_IMPORTS)
    res = subprocess.run([sys.executable, "-m", "pytest", "--msprobe-api-info", str(pytester.path / "dump" / "step0"),
                          "--msprobe-random", "-n", "2", "-p", "no:randomly", "-q"], cwd=pytester.path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (pytester.path / "controller.txt").read_text() == "False"


class _Node:
    """What xdist's schedulers use of a worker: the items sent to it, and whether it was told to stop."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(pytester, n_items: int):
    """A dealt ``load`` scheduler over two fake workers that collected ``n_items`` items, after its first
    distribution."""
    from pytest_msprobe.schedule import DealtLoad
    sched = DealtLoad(pytester.parseconfig("--tx", "2*popen", "-p", "xdist"))
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, [f"dump.json::Api.{i}" for i in range(n_items)])
    sched.schedule()
    return sched, nodes


def _run_queue(sched, node, duration: float) -> list:
    """Complete ``node``'s items one at a time, each taking ``duration``: after each, its queue length and how
    many items were still unsent."""
    steps = []
    while sched.node2pending[node] and not node.shutting_down:
        sched.mark_test_complete(node, sched.node2pending[node][0], duration)
        steps.append((len(sched.node2pending[node]), len(sched.pending)))
    return steps


def test_a_load_worker_on_short_items_keeps_enough_queued_to_cover_the_round_trip(pytester):
    """xdist refills a queue below a quarter of the fair share, down to two items near the end: a worker then
    waits for the controller after every item. Items of 2 ms keep 50 ms of work queued instead (25 items),
    never more than a fair share of what is left, and every item still runs exactly once."""
    from pytest_msprobe.schedule import QUEUED_S
    sched, (a, b) = _scheduler(pytester, 400)
    want = round(QUEUED_S / 0.002)
    steps = _run_queue(sched, a, 0.002)
    refilled = [(queued, left) for queued, left in steps if left > 0]
    assert len(refilled) > 100
    assert all(queued >= min(want, 1 + left // 2) for queued, left in refilled), steps
    assert any(queued == want for queued, _ in refilled)      # xdist's own refill would have left 2 near the end
    assert all(queued <= max(want, 400 // 4) for queued, _ in steps)
    _run_queue(sched, b, 0.002)
    assert not sched.pending and a.shutting_down and b.shutting_down
    assert sorted(a.sent + b.sent) == list(range(400))


def test_a_load_worker_on_long_items_is_refilled_as_xdist_refills_it(pytester):
    """Items of 200 ms cover any round trip: the queue runs down and is refilled exactly as xdist's own ``load``
    does it (apart from the dealt first distribution)."""
    from xdist.scheduler import LoadScheduling
    sched, (a, _) = _scheduler(pytester, 400)
    plain = LoadScheduling(pytester.parseconfig("--tx", "2*popen", "-p", "xdist"))
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        plain.add_node(node)
        plain.add_node_collection(node, [f"dump.json::Api.{i}" for i in range(400)])
    plain.schedule()
    assert _run_queue(sched, a, 0.2) == _run_queue(plain, nodes[0], 0.2)
