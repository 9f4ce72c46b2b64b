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
