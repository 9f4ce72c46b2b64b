"""grad_probe with torch.distributed: two gloo ranks (spawned), per-rank export, rank filter, comparison."""
from __future__ import annotations

import datetime
import os
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist
import torch.multiprocessing as mp

from dumpers.grad_probe import GradComparator, GradientMonitor
from dumpers.grad_probe.summary import read_summary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(root: str, name: str, rank: int, ranks: list, change_at=None) -> None:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = GradientMonitor({"task": "grad_probe", "dump_path": os.path.join(root, name), "rank": ranks,
                           "grad_probe": {"grad_level": "L1"}}, "pytorch")
    mon.monitor(model)
    gen = torch.Generator().manual_seed(10 + rank)
    other = torch.Generator().manual_seed(500 + rank)
    for i in range(5):
        g = other if change_at is not None and i >= change_at else gen
        x, y = torch.randn(32, 8, generator=g), torch.randn(32, 2, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    mon.remove()


def _worker(rank: int, world: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        _train(root, "a", rank, [])
        _train(root, "b", rank, [], change_at=3)
        _train(root, "only1", rank, [1])
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks(tmp_path):
    # fork where the platform has it: a spawned child would import torch again (seconds per rank)
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True, start_method=method)
    a, b, only1 = tmp_path / "a", tmp_path / "b", tmp_path / "only1"
    assert sorted(os.listdir(a)) == ["rank0", "rank1"]
    assert sorted(os.listdir(only1)) == ["rank1"]                 # rank filter honoured
    # DDP averages gradients: both ranks export the same statistics
    assert read_summary(str(a / "rank0" / "grad_summary_4.csv")) == read_summary(str(a / "rank1" /
                                                                                     "grad_summary_4.csv"))
    res = GradComparator.compare_distributed(str(a), str(b), str(tmp_path / "out"), plot=False)
    assert [r.rank for r in res] == [0, 1]
    assert all(r.first_suspicious_step == 3 and r.summary[:3] == [1.0] * 3 for r in res)
    assert sorted(os.listdir(tmp_path / "out")) == ["rank0", "rank1"]
    (one,) = GradComparator.compare_distributed(str(a), str(only1), str(tmp_path / "out1"), plot=False)
    assert one.rank == 1 and one.summary == [1.0] * 5
    assert os.listdir(tmp_path / "out1") == ["rank1"]
