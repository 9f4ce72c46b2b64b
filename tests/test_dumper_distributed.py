"""torch.distributed (gloo, 2 ranks on the CPU): rank directories and Distributed.* entries."""
from __future__ import annotations

import json
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch built without torch.distributed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, dump_path: str) -> None:
    from dumpers.torch_dump import PrecisionDebugger

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)
        model = torch.nn.Linear(4, 2)
        dbg = PrecisionDebugger(dump_path=dump_path, level="L1")
        dbg.start()
        loss = model(torch.randn(3, 4)).square().mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        flag = torch.tensor([float(rank + 1)])
        work = dist.all_reduce(flag, async_op=True)
        work.wait()
        gathered = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(gathered, flag)
        dbg.stop()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_write_rank_directories(tmp_path):
    world = 2
    mp.spawn(_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    assert sorted(p.name for p in (tmp_path / "step0").iterdir()) == ["rank0", "rank1"]
    for rank in range(world):
        data = json.loads((tmp_path / "step0" / f"rank{rank}" / "dump.json").read_text())["data"]
        keys = [k for k in data if k.startswith("Distributed.")]
        assert keys == ["Distributed.all_reduce.0.forward", "Distributed.all_reduce.1.forward",
                        "Distributed.all_reduce.2.forward", "Distributed.all_gather.0.forward"]
        flag = data["Distributed.all_reduce.2.forward"]
        assert flag["input_args"][0]["Max"] == rank + 1          # before the collective
        assert flag["output"][0]["Max"] == 3.0                     # the arguments after it (1 + 2)
        assert flag["input_kwargs"]["async_op"] == {"type": "bool", "value": True}
        gathered = data["Distributed.all_gather.0.forward"]["output"][0]
        assert [g["Max"] for g in gathered] == [3.0, 3.0]
        assert "Functional.linear.0.forward" in data and "Functional.linear.0.backward" in data
