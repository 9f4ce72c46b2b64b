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
