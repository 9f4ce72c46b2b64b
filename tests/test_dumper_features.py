"""PrecisionDebugger behaviour: naming, encodings, filters, steps, modes, errors, grad_probe forwarding."""
from __future__ import annotations

import json
import os
import sys
import types
import zlib

import pytest
import torch

from dumpers import format as fmt
from dumpers import json_render
from dumpers.config import ConfigError, ConfigWarning
from dumpers.journal import read_journal
from dumpers.torch_dump import DumpPathError, PrecisionDebugger


@pytest.fixture(autouse=True)
def fresh_debugger():
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


def rank_dir(root, step=0):
    return os.path.join(str(root), f"step{step}", "rank")


def load(root, step=0, name="dump.json"):
    with open(os.path.join(rank_dir(root, step), name)) as fh:
        return json.load(fh)


def dump_once(tmp_path, fn, risk_level=None, **kwargs):
    """One dump window around ``fn``; ``risk_level`` goes through a config.json (msprobe has no such argument)."""
    if risk_level is not None:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path), "risk_level": risk_level}))
        kwargs["config_path"] = str(cfg)
    dbg = PrecisionDebugger(dump_path=str(tmp_path), **kwargs)
    dbg.start()
    result = fn()
    dbg.stop()
    dbg.flush()
    return load(tmp_path)["data"], result


def test_operators_are_named_as_written(tmp_path):
    x = torch.randn(3, 3)
    y = torch.randn(3, 3)
    scale = 2.0

    def run():
        a = x * 2
        b = 2 * x
        c = 1 + x
        d = scale * x
        e = x - y
        f = x.mul(2)
        g = x @ y
        h = x > 0
        i = x < 0
        j = -x             # __neg__ is not in msprobe 26.2's list: not recorded
        k = x[0]           # nor is __getitem__ (msprobe 1.x recorded it)
        z = x.clone()
        z[1] = 0.5
        z += 1
        return a, b, c, d, e, f, g, h, i, j, k

    data, _ = dump_once(tmp_path, run)
    assert list(data) == [
        "Tensor.__mul__.0.forward", "Tensor.__rmul__.0.forward", "Tensor.__radd__.0.forward",
        "Tensor.__rmul__.1.forward", "Tensor.__sub__.0.forward", "Tensor.mul.0.forward",
        "Tensor.__matmul__.0.forward", "Tensor.__gt__.0.forward", "Tensor.__lt__.0.forward",
        "Tensor.__setitem__.0.forward", "Tensor.__iadd__.0.forward"]
    assert data["Tensor.__setitem__.0.forward"]["input_args"][1] == {"type": "int", "value": 1}


def test_non_tensor_encodings(tmp_path):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)

    def run():
        x.clone()[0:2, ...] = 1.0
        x.new_empty(torch.Size([2]), dtype=torch.float16)
        torch.sum(x, dim=1, keepdim=True, dtype=torch.float64)
        x.split([1, 2], 0)
        torch.cat([x, x], dim=0)

    data, _ = dump_once(tmp_path, run, risk_level="ALL")      # split and cat are low-risk APIs
    index = data["Tensor.__setitem__.0.forward"]["input_args"][1]
    assert index == [{"type": "slice", "value": [0, 2, None]}, {"type": "ellipsis", "value": "..."}]
    new_empty = data["Tensor.new_empty.0.forward"]
    assert new_empty["input_args"][1] == {"type": "torch.Size", "value": [2]}
    assert new_empty["input_kwargs"]["dtype"] == {"type": "torch.dtype", "value": "torch.float16"}
    total = data["Torch.sum.0.forward"]
    assert total["input_kwargs"] == {"dim": {"type": "int", "value": 1}, "keepdim": {"type": "bool", "value": True},
                                     "dtype": {"type": "torch.dtype", "value": "torch.float64"}}
    split = data["Tensor.split.0.forward"]
    assert split["input_args"][1] == [{"type": "int", "value": 1}, {"type": "int", "value": 2}]
    assert len(split["output"]) == 2 and split["output"][1]["shape"] == [2, 4]
    assert len(data["Torch.cat.0.forward"]["input_args"][0]) == 2


def test_statistics_rules():
    from dumpers.torch_dump.stats import StatBatch

    batch = StatBatch(md5=True)
    items = [batch.add(t) for t in (
        torch.tensor([1.0, float("inf"), -2.0, float("nan")]), torch.tensor([True, False]),
        torch.tensor([3, 7, -1]), torch.tensor(5), torch.empty(0), torch.tensor([3 + 4j, 0j]),
        torch.tensor([1.5, -0.5], dtype=torch.bfloat16))]
    batch.resolve()
    f, b, i, s, e, c, bf = items
    assert f["Max_except_inf_nan"] == 1.0 and f["Min_except_inf_nan"] == -2.0
    assert (b["Max"], b["Min"], b["Mean"], b["Norm"]) == (True, False, None, None)
    assert (i["Max"], i["Min"], i["Mean"], i["Norm"]) == (7, -1, None, None)
    assert (s["Max"], s["Min"], s["Mean"], s["Norm"]) == (5, 5, 5, 5) and isinstance(s["Max"], int)
    assert (e["Max"], e["Mean"], e["shape"]) == (None, None, [0])
    assert (c["Max"], c["Min"], c["Mean"], c["Norm"]) == (5.0, 0.0, 2.5, None)
    assert bf["Max"] == 1.5 and bf["Norm"] == torch.linalg.vector_norm(torch.tensor([1.5, -0.5],
                                                                                      dtype=torch.bfloat16)).item()
    raw = torch.tensor([1.5, -0.5], dtype=torch.bfloat16).float().numpy().tobytes()
    assert bf["md5"] == f"{zlib.crc32(raw):08x}"
    assert list(f)[:8] == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"]


def test_no_grad_autocast_inplace_and_views(tmp_path):
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)

    def run():
        with torch.no_grad():
            lin(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = lin(x)
        y = x.clone()
        y.add_(1.0)
        v = x.transpose(0, 1)
        v.sum().item()
        return out

    data, out = dump_once(tmp_path, run, risk_level="ALL")    # transpose is a low-risk API
    assert "Functional.linear.0.backward" not in data
    assert data["Functional.linear.0.forward"]["output"][0]["requires_grad"] is False
    assert data["Functional.linear.1.forward"]["output"][0]["dtype"] == "torch.bfloat16"
    add_ = data["Tensor.add_.0.forward"]
    assert add_["input_args"][0]["Max"] + 1.0 == pytest.approx(add_["output"][0]["Max"])
    assert data["Tensor.transpose.0.forward"]["output"][0]["shape"] == [4, 2]
    assert out.dtype == torch.bfloat16


def test_nested_outputs_and_backward_entries(tmp_path):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)

        def forward(self, x):
            h = self.fc(x)
            values, index = torch.max(h, dim=1)
            return {"v": values, "pair": (h.relu(), index)}

    net = Net()

    def run():
        out = net(torch.randn(5, 3))
        (out["v"].sum() + out["pair"][0].sum()).backward()

    data, _ = dump_once(tmp_path, run, level="mix", model=net)
    mx = data["Torch.max.0.forward"]
    assert [o["dtype"] for o in mx["output"]] == ["torch.float32", "torch.int64"]
    assert "Torch.max.0.backward" in data and "Tensor.relu.0.backward" in data
    module_out = data["Module.fc.Linear.forward.0"]["output"]
    assert module_out[0]["shape"] == [5, 4]
    bwd = data["Functional.linear.0.backward"]
    assert bwd["input"][0]["shape"] == [5, 4]


def test_filters_list_scope_and_data_mode(tmp_path):
    x = torch.randn(4, requires_grad=True)

    def steps():
        y = torch.relu(x)
        z = torch.sigmoid(y)
        w = torch.tanh(z)
        w.sum().backward()

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "a"),
                               "statistics": {"list": ["relu", "tanh"], "data_mode": ["forward"]}}))
    data, _ = dump_once(tmp_path / "a", steps, config_path=str(cfg))
    assert list(data) == ["Torch.relu.0.forward", "Torch.tanh.0.forward"]
    PrecisionDebugger.reset()
    cfg.write_text(json.dumps({"dump_path": str(tmp_path / "b"), "statistics": {
        "scope": ["Torch.sigmoid.0.forward", "Torch.tanh.0.forward"], "data_mode": ["input"]}}))
    data, _ = dump_once(tmp_path / "b", steps, config_path=str(cfg))
    assert list(data) == ["Torch.sigmoid.0.forward", "Torch.tanh.0.forward"]
    assert set(data["Torch.tanh.0.forward"]) == {"input_args", "input_kwargs"}
    PrecisionDebugger.reset()
    cfg.write_text(json.dumps({"dump_path": str(tmp_path / "c"), "statistics": {"data_mode": ["backward"]}}))
    data, _ = dump_once(tmp_path / "c", steps, config_path=str(cfg))
    assert data and all(k.endswith(".backward") for k in data)


def test_steps_context_manager_and_journal(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path), step=[1, 2])
    x = torch.randn(3)
    for step in range(4):
        with dbg:
            torch.exp(x)
            if step == 1:
                journal = os.path.join(rank_dir(tmp_path, 1), fmt.JOURNAL)
                state = read_journal(journal)
                assert list(state.data) == ["Torch.exp.0.forward"]
                assert state.header["task"] == "statistics"
    assert sorted(os.listdir(tmp_path)) == ["step1", "step2"]
    assert list(load(tmp_path, 2)["data"]) == ["Torch.exp.0.forward"]
    assert not os.path.exists(os.path.join(rank_dir(tmp_path, 1), fmt.JOURNAL))


def test_counting_restarts_per_step_and_accumulates_within(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path))
    x = torch.randn(3)
    dbg.start()
    torch.exp(x)
    dbg.stop()
    dbg.start()
    torch.exp(x)
    dbg.stop()
    dbg.step()
    dbg.start()
    torch.exp(x)
    dbg.stop()
    assert list(load(tmp_path, 0)["data"]) == ["Torch.exp.0.forward", "Torch.exp.1.forward"]
    assert list(load(tmp_path, 1)["data"]) == ["Torch.exp.0.forward"]


def test_forward_backward_dump_end(tmp_path):
    x = torch.randn(3, requires_grad=True)
    dbg = PrecisionDebugger(dump_path=str(tmp_path))
    dbg.start()
    y = torch.exp(x)
    dbg.forward_backward_dump_end()
    torch.sin(x)
    y.sum().backward()
    dbg.stop()
    assert list(load(tmp_path)["data"]) == ["Torch.exp.0.forward", "Torch.exp.0.backward"]


def test_md5_and_tensor_task_files(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "d"),
                               "tensor": {"summary_mode": "md5"}}))
    x = torch.randn(2, 3)
    data, _ = dump_once(tmp_path / "d", lambda: torch.tanh(x), config_path=str(cfg))
    item = data["Torch.tanh.0.forward"]["input_args"][0]
    assert item["md5"] == f"{zlib.crc32(x.numpy().tobytes()):08x}"
    assert item["data_name"] == "Torch.tanh.0.forward.input.0.pt"
    saved = torch.load(os.path.join(rank_dir(tmp_path / "d"), "dump_tensor_data", item["data_name"]))
    assert torch.equal(saved, x)


def test_rank_filter_without_distributed_dumps_nothing(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"dump_path": str(tmp_path / "d"), "rank": [1]}))
    dbg = PrecisionDebugger(config_path=str(cfg))
    dbg.start()
    torch.exp(torch.ones(2))
    dbg.stop()
    assert not os.path.exists(tmp_path / "d")


def test_errors_are_clear(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DumpPathError, match="dump_path"):
        PrecisionDebugger(dump_path=str(blocker / "sub"))
    with pytest.raises(ConfigError, match="level"):
        PrecisionDebugger(dump_path=str(tmp_path), level="L7")
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        PrecisionDebugger(dump_path=str(tmp_path), model="not a model")
    with pytest.warns(ConfigWarning, match="task 'overflow_check' is ignored") as seen:
        inert = PrecisionDebugger(dump_path=str(tmp_path / "inert"), task="overflow_check")
    assert len(seen) == 1                      # one warning, and a debugger whose calls do nothing
    inert.start()
    torch.relu(torch.ones(2))
    inert.stop()
    inert.step()
    assert not os.path.exists(tmp_path / "inert")
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(dump_path=str(tmp_path), level="mix")
    with pytest.raises(ConfigError, match="model"):
        dbg.start()


def test_singleton_first_construction_wins(tmp_path):
    first = PrecisionDebugger(dump_path=str(tmp_path / "a"))
    second = PrecisionDebugger(dump_path=str(tmp_path / "b"), level="mix")
    assert first is second and second.config.dump_path == str(tmp_path / "a")


def test_grad_probe_builds_and_forwards_to_the_monitor(tmp_path, monkeypatch):
    calls = []

    class FakeMonitor:
        def __init__(self, config, framework):
            calls.append(("init", config["dump_path"], config["grad_probe"], framework))

        def monitor(self, model):
            calls.append(("monitor", type(model).__name__))

        def stop(self):
            calls.append(("stop",))

    fake = types.ModuleType("dumpers.grad_probe")
    fake.GradientMonitor = FakeMonitor
    monkeypatch.setitem(sys.modules, "dumpers.grad_probe", fake)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "grad_probe", "dump_path": "./unused", "grad_probe": {"grad_level": "L1"}}))
    dbg = PrecisionDebugger(config_path=str(cfg), dump_path=str(tmp_path / "gp"))
    dbg.start()
    dbg.monitor(torch.nn.Linear(2, 2))
    dbg.step()
    dbg.stop()
    assert calls == [("init", str(tmp_path / "gp"), {"grad_level": "L1"}, "pytorch"), ("monitor", "Linear"),
                     ("stop",)]
    assert not os.path.exists(tmp_path / "gp" / "step0")


def test_buffers_updated_inside_kernels_are_summarised_afresh(tmp_path):
    bn = torch.nn.BatchNorm1d(3)
    x = torch.randn(8, 3) + 5.0

    def run():
        bn(x)
        bn(x)          # running_mean was updated by the first call without a version bump

    data, _ = dump_once(tmp_path, run)
    first = data["Functional.batch_norm.0.forward"]["input_args"][1]
    second = data["Functional.batch_norm.1.forward"]["input_args"][1]
    assert first["Max"] == 0.0
    assert second["Max"] == pytest.approx((0.1 * x.mean(0)).max().item())     # momentum 0.1 from zeros


def test_fast_json_writer_matches_json_module(data_dir):
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    samples = [json.loads(p.read_text()) for p in sorted(data_dir.rglob("*.json"))[:12]]
    samples.append({"a": [1.5, float("nan"), float("inf"), -float("inf"), True, None, "\u00e9\"\n", {}, [], (1, 2),
                          Level.HIGH], 3: {"x": -0.0, "y": 1e300, "z": 2**70, "s": [1, 2], "t": [True, 2]},
                    None: 1, 2.5: False})
    for obj in samples:
        assert json_render.dumps_json_fast(obj) == fmt.dumps_json(obj)
    with pytest.raises(TypeError):
        json_render.dumps_json_fast({"x": object()})


def test_python_level_apis_are_recorded_as_written(tmp_path):
    pool = torch.nn.MaxPool2d(2)
    x = torch.randn(1, 2, 4, 4)

    def run():
        pool(x)                                               # boolean-dispatch wrapper inside torch
        torch.nn.functional.max_pool2d(x, 2, stride=1)
        torch.nn.functional.layer_norm(x, (4,), eps=1e-3)
        x.split(2, dim=2)

    data, _ = dump_once(tmp_path, run, risk_level="ALL")      # split is a low-risk API
    first = data["Functional.max_pool2d.0.forward"]
    assert [a.get("value") for a in first["input_args"][1:]] == [2, 2, 0, 1]
    assert list(first["input_kwargs"]) == ["ceil_mode", "return_indices"]
    second = data["Functional.max_pool2d.1.forward"]
    assert len(second["input_args"]) == 2 and list(second["input_kwargs"]) == ["stride"]
    assert list(data["Functional.layer_norm.0.forward"]["input_kwargs"]) == ["eps"]
    assert len(data["Tensor.split.0.forward"]["input_args"]) == 2
    stack = load(tmp_path, name="stack.json")
    lines = {k: group[1][0] for group in stack.values() for k in group[0]}
    assert "pooling.py" in lines["Functional.max_pool2d.0.forward"]
    assert "max_pool2d(x, 2, stride=1)" in lines["Functional.max_pool2d.1.forward"]


def test_inference_mode_tensors(tmp_path):
    def run():
        with torch.inference_mode():
            y = torch.relu(torch.randn(3))
            y.add_(1)

    data, _ = dump_once(tmp_path, run, task="tensor")
    assert list(data) == ["Torch.relu.0.forward", "Tensor.add_.0.forward"]


def test_module_scope_range(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"dump_path": str(tmp_path / "d"), "level": "mix", "statistics": {
        "scope": ["Module.1.ReLU.forward.0", "Module.2.Linear.forward.0"], "data_mode": ["forward"]}}))
    data, _ = dump_once(tmp_path / "d", lambda: net(torch.randn(4, 3)), config_path=str(cfg), model=net)
    assert list(data) == ["Functional.relu.0.forward", "Module.1.ReLU.forward.0", "Functional.linear.1.forward",
                          "Module.2.Linear.forward.0"]
    construct = load(tmp_path / "d", name="construct.json")
    assert construct["Functional.linear.0.forward"] == "Module.0.Linear.forward.0"   # filtered names stay


def test_methods_work_on_the_class_like_msprobe(tmp_path):
    with pytest.raises(RuntimeError, match="constructed"):
        PrecisionDebugger.start()
    PrecisionDebugger(dump_path=str(tmp_path))
    PrecisionDebugger.start()
    torch.exp(torch.ones(2))
    PrecisionDebugger.stop()
    PrecisionDebugger.step()
    assert list(load(tmp_path)["data"]) == ["Torch.exp.0.forward"]


def test_parameters_changed_through_data_are_summarised_afresh_each_step(tmp_path):
    lin = torch.nn.Linear(2, 2)
    x = torch.randn(3, 2)
    dbg = PrecisionDebugger(dump_path=str(tmp_path))
    for _ in range(2):
        with dbg:
            lin(x)
        lin.weight.data.mul_(2.0)          # old-style update: the parameter's version counter does not move
    maxima = [load(tmp_path, s)["data"]["Functional.linear.0.forward"]["input_args"][1]["Max"] for s in (0, 1)]
    assert maxima[1] == pytest.approx(2 * maxima[0])
