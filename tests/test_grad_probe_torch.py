"""PyTorch gradient monitor on real training loops: CSV values against a direct computation."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

torch = pytest.importorskip("torch")

from dumpers.grad_probe import GradientMonitor
from dumpers.grad_probe.summary import read_summary


def config(path, level="L1", **top):
    section = {"grad_level": level}
    for key in ("param_list", "bounds"):
        if key in top:
            section[key] = top.pop(key)
    return {"task": "grad_probe", "dump_path": str(path), "rank": [], "step": [], **top, "grad_probe": section}


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 3))


def train(model, steps, *, seed=1, lr=0.05, opt_cls=torch.optim.SGD, data=None):
    """Train ``steps`` iterations; return the gradients each optimizer step saw, in named_parameters order."""
    opt = opt_cls(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    seen = []
    for i in range(steps):
        x, y = data(i) if data else (torch.randn(16, 12, generator=gen), torch.randn(16, 3, generator=gen))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        seen.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
    return seen


def f32(x) -> str:
    return repr(float(np.float32(float(x))))


def expected_cells(g: torch.Tensor, level: str, bounds=(-1, 0, 1)) -> dict:
    cells = {"max": f32(g.max()), "min": f32(g.min()), "norm": f32(g.norm()), "shape": str(list(g.shape))}
    if level == "L0":
        cells["MD5"] = hashlib.md5(g.float().contiguous().numpy().tobytes()).hexdigest()
    if level == "L2":
        v = g.float().reshape(-1)
        edges = [-float("inf"), *bounds, float("inf")]
        names = ["(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)"]
        for name, lo, hi in zip(names, edges[:-1], edges[1:]):
            count = int(((v > lo) & (v <= hi)).sum()) if hi != float("inf") else int((v > lo).sum())
            cells[name] = repr(count / v.numel())
        cells["=0"] = repr(int((v == 0).sum()) / v.numel())
    return cells


@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
def test_mlp_csv_matches_direct_computation(tmp_path, level):
    model = mlp()
    mon = GradientMonitor(config(tmp_path, level), "pytorch")
    mon.monitor(model)
    seen = train(model, 3)
    mon.remove()
    rank0 = tmp_path / "rank0"
    assert sorted(os.listdir(rank0)) == (["grad_summary_0.csv", "grad_summary_1.csv", "grad_summary_2.csv"]
                                         + ([] if level == "L0" else ["step0", "step1", "step2"]))
    for step, grads in enumerate(seen):
        rows = read_summary(str(rank0 / f"grad_summary_{step}.csv"))
        assert [r["param_name"] for r in rows] == list(grads)
        for row in rows:
            g = grads[row["param_name"]]
            exp = expected_cells(g, level)
            assert {k: row[k] for k in exp} == exp
            if level != "L0":
                d = np.load(rank0 / f"step{step}" / f"{row['param_name']}.npy")
                assert d.dtype == np.bool_ and np.array_equal(d, (g > 0).numpy())


def test_transformer_l2_and_step_filter(tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    cfg = config(tmp_path, "L2", step=[1, 3])
    mon = GradientMonitor(cfg, "pytorch")
    mon.monitor(model)
    gen = torch.Generator().manual_seed(3)
    seen = train(model, 4, opt_cls=torch.optim.AdamW, lr=1e-3,
                 data=lambda i: (torch.randn(2, 8, 32, generator=gen), torch.randn(2, 8, 32, generator=gen)))
    mon.flush()
    assert mon.step == 4
    rank0 = tmp_path / "rank0"
    assert sorted(os.listdir(rank0)) == ["grad_summary_1.csv", "grad_summary_3.csv", "step1", "step3"]
    rows = read_summary(str(rank0 / "grad_summary_3.csv"))
    names = [n for n, _ in model.named_parameters()]
    assert [r["param_name"] for r in rows] == names and len(names) == 24
    for row in rows:
        exp = expected_cells(seen[3][row["param_name"]], "L2")
        assert {k: row[k] for k in exp} == exp
    mon.remove()


def test_doc_example_param_list_and_none_grads(tmp_path):
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.zeros(4))
    model.frozen = torch.nn.Parameter(torch.zeros(2))
    model.other = torch.nn.Parameter(torch.zeros(3))
    mon = GradientMonitor(config(tmp_path, "L2", bounds=[-10, 0, 10], param_list=["w", "frozen", "nope"]),
                          "pytorch")
    mon.monitor(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    model.w.grad = torch.tensor([9.3, 5.4, -1.0, -12.3])
    model.other.grad = torch.ones(3)
    opt.step()
    mon.remove()
    rows = read_summary(str(tmp_path / "rank0" / "grad_summary_0.csv"))
    assert [r["param_name"] for r in rows] == ["w"]            # frozen: grad None; other: not in param_list
    counts = [float(rows[0][c]) * 4 for c in ("(-inf, -10]", "(-10, 0]", "(0, 10]", "(10, inf)")]
    assert counts == [1, 1, 2, 0] and rows[0]["=0"] == "0.0"
    assert os.listdir(tmp_path / "rank0" / "step0") == ["w.npy"]


def test_main_grad_is_preferred(tmp_path):
    model = torch.nn.Linear(2, 1, bias=False)
    model.weight.main_grad = torch.tensor([[4.0, -2.0]])
    model.weight.grad = torch.tensor([[1.0, 1.0]])
    mon = GradientMonitor(config(tmp_path, "L1"), "pytorch")
    mon.monitor(model)
    torch.optim.SGD(model.parameters(), lr=0.0).step()
    mon.remove()
    row = read_summary(str(tmp_path / "rank0" / "grad_summary_0.csv"))[0]
    assert (row["max"], row["min"]) == ("4.0", "-2.0")


def test_grad_scaler_skipped_step_is_not_counted(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    mon = GradientMonitor(config(tmp_path, "L1"), "pytorch")
    mon.monitor(model)
    gen = torch.Generator().manual_seed(0)
    exported = []
    for i in range(4):
        x, y = torch.randn(8, 12, generator=gen), torch.randn(8, 3, generator=gen)
        opt.zero_grad()
        scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
        if i == 1:
            model[0].weight.grad[0, 0] = float("inf")          # overflow: the scaler skips optimizer.step
        else:
            exported.append(model[2].bias.grad.detach() / scaler.get_scale())
        scaler.step(opt)
        scaler.update()
    mon.remove()
    assert mon.step == 3
    rank0 = tmp_path / "rank0"
    assert sorted(f for f in os.listdir(rank0) if f.endswith(".csv")) == [
        "grad_summary_0.csv", "grad_summary_1.csv", "grad_summary_2.csv"]
    for step, g in enumerate(exported):                           # stats are of the unscaled gradients
        row = next(r for r in read_summary(str(rank0 / f"grad_summary_{step}.csv")) if r["param_name"] == "2.bias")
        assert float(row["max"]) == pytest.approx(float(g.max()), rel=1e-6)


def test_rerun_replaces_old_export_and_monitor_twice_counts_once(tmp_path):
    model = mlp()
    mon = GradientMonitor(config(tmp_path, "L1"), "pytorch")
    mon.monitor(model)
    train(model, 4)
    mon.remove()
    mon2 = GradientMonitor(config(tmp_path, "L1"), "pytorch")
    mon2.monitor(model)
    mon2.monitor(model)                                            # no second hook
    train(model, 2)
    mon2.remove()
    assert mon2.step == 2
    assert sorted(os.listdir(tmp_path / "rank0")) == ["grad_summary_0.csv", "grad_summary_1.csv", "step0", "step1"]


def test_monitor_needs_a_module(tmp_path):
    mon = GradientMonitor(config(tmp_path), "pytorch")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mon.monitor(torch.optim.SGD(mlp().parameters(), lr=0.1))
    with pytest.raises(ValueError, match="framework"):
        GradientMonitor(config(tmp_path), "jax")


def test_rank_filter_without_distributed(tmp_path):
    model = mlp()
    mon = GradientMonitor(config(tmp_path, "L1", rank=[1]), "pytorch")
    mon.monitor(model)
    train(model, 2)
    mon.remove()
    assert not (tmp_path / "rank0").exists()                       # not distributed = rank 0, filtered out


def test_through_precision_debugger(tmp_path):
    debugger_mod = pytest.importorskip("dumpers.torch_dump")
    cfg_file = tmp_path / "config.json"
    import json
    cfg_file.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "out"), "rank": [],
                                    "step": [1], "grad_probe": {"grad_level": "L2", "bounds": [-0.01, 0, 0.01]}}))
    debugger_mod.PrecisionDebugger.reset()
    try:
        debugger = debugger_mod.PrecisionDebugger(str(cfg_file))
        model = mlp()
        debugger.monitor(model)
        debugger.start()
        seen = train(model, 3)
        debugger.stop()
        debugger.gradient_monitor.flush()
    finally:
        debugger_mod.PrecisionDebugger.reset()
        if getattr(debugger, "gradient_monitor", None) is not None:
            debugger.gradient_monitor.remove()
    rank0 = tmp_path / "out" / "rank0"
    assert sorted(os.listdir(rank0)) == ["grad_summary_1.csv", "step1"]
    rows = read_summary(str(rank0 / "grad_summary_1.csv"))
    assert list(rows[0])[1:6] == ["(-inf, -0.01]", "(-0.01, 0]", "(0, 0.01]", "(0.01, inf)", "=0"]
    assert rows[0]["max"] == f32(seen[1]["0.weight"].max())


def test_bf16_and_non_finite_gradients(tmp_path):
    model = torch.nn.Module()
    model.h = torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.bfloat16))
    model.bad = torch.nn.Parameter(torch.zeros(5))
    gen = torch.Generator().manual_seed(4)
    model.h.grad = torch.randn(3, 4, generator=gen).to(torch.bfloat16)
    model.bad.grad = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 0.5])
    mon = GradientMonitor(config(tmp_path, "L2"), "pytorch")
    mon.monitor(model)
    torch.optim.SGD(model.parameters(), lr=0.0).step()
    mon.remove()
    h, bad = read_summary(str(tmp_path / "rank0" / "grad_summary_0.csv"))
    exp = expected_cells(model.h.grad, "L2")
    assert {k: h[k] for k in exp} == exp                            # bf16: stats in bf16, then float32
    assert (bad["max"], bad["min"], bad["norm"]) == ("nan", "nan", "nan")
    # -inf -> (-inf, -1]; 0 -> (-1, 0]; 0.5 -> (0, 1]; inf and NaN -> (1, inf)
    assert [bad[c] for c in ("(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)", "=0")] == ["0.2", "0.2", "0.2", "0.4",
                                                                                       "0.2"]
    d = np.load(tmp_path / "rank0" / "step0" / "bad.npy")
    assert d.tolist() == [False, True, False, False, True]


_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, float("nan"), float("inf"), -float("inf")]


@settings(max_examples=60, deadline=None)
@given(bounds=st.lists(st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0]) | st.floats(-4, 4, width=32),
                       min_size=1, max_size=5, unique=True).map(sorted),
       values=hnp.arrays(np.float32, st.integers(0, 30),
                         elements=st.floats(-5, 5, width=32) | st.sampled_from(_SPECIAL)))
def test_l2_counts_agree_with_bucketize_and_the_numpy_path(bounds, values):
    """Device counting (count(v <= b) differences) == torch.bucketize(right=False) == the NumPy path."""
    from dumpers.grad_probe.config import parse_config
    from dumpers.grad_probe.summary import summarise_flat
    from dumpers.grad_probe.torch_monitor import TorchGradMonitor, intervals_from_le

    mon = TorchGradMonitor(parse_config({"task": "grad_probe", "dump_path": "./unused",
                                         "grad_probe": {"grad_level": "L2", "bounds": bounds}}))
    grad = torch.from_numpy(values.copy())
    packer = mon._compute([grad], "L2")
    parts = packer.unpack(packer.to_host()[0])
    got = intervals_from_le(parts["le"], [values.size])[0].tolist()
    edges = torch.tensor(bounds, dtype=torch.float32)
    expected = torch.bincount(torch.bucketize(grad, edges), minlength=len(bounds) + 1).tolist()
    host = summarise_flat(values, [values.shape], ["x"], 0, "L2", bounds).intervals[0].tolist()
    assert got == expected == host
    assert int(parts["zeros"][0]) == int(np.count_nonzero(values == 0))
    assert parts["direction"].tolist() == (values > 0).tolist()


def test_sparse_embedding_gradient(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Embedding(10, 4, sparse=True)
    mon = GradientMonitor(config(tmp_path, "L1"), "pytorch")
    mon.monitor(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([1, 3, 3])).sum().backward()
    dense = model.weight.grad.to_dense()
    opt.step()
    mon.remove()
    row = read_summary(str(tmp_path / "rank0" / "grad_summary_0.csv"))[0]
    assert (row["max"], row["min"], row["shape"]) == (f32(dense.max()), f32(dense.min()), "[10, 4]")
    assert np.array_equal(np.load(tmp_path / "rank0" / "step0" / "weight.npy"), (dense > 0).numpy())
