"""MindSpore (PyNative, CPU) gradient monitor: a Dense net trained with monitor(optimizer)."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from dumpers.grad_probe import GradComparator, GradientMonitor
from dumpers.grad_probe.summary import read_summary

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def ms():
    return pytest.importorskip("mindspore")


def train(ms, path, level="L2", steps=4, change_at=None, **top):
    """Train a Dense net; return the gradients handed to the optimizer at each step (as NumPy)."""
    from mindspore import nn
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(6, 10), nn.ReLU(), nn.Dense(10, 3)])
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    mon = GradientMonitor({"task": "grad_probe", "dump_path": str(path), **top,
                           "grad_probe": {"grad_level": level, "bounds": [-0.1, 0, 0.1]}}, "mindspore")
    mon.monitor(opt)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    rng, other = np.random.default_rng(1), np.random.default_rng(7)
    seen = []
    for i in range(steps):
        r = other if change_at is not None and i >= change_at else rng
        x = ms.Tensor(r.standard_normal((12, 6)).astype(np.float32))
        y = ms.Tensor(r.standard_normal((12, 3)).astype(np.float32))
        _, grads = grad_fn(x, y)
        seen.append({p.name: g.asnumpy().copy() for p, g in zip(opt.parameters, grads)})
        opt(grads)
    mon.remove()
    return seen


def f32(x) -> str:
    return repr(float(np.float32(x)))


@pytest.mark.parametrize("level", ["L0", "L2"])
def test_dense_net_csv_matches_direct_computation(ms, tmp_path, level):
    seen = train(ms, tmp_path, level)
    rank0 = tmp_path / "rank0"
    assert sorted(f for f in os.listdir(rank0) if f.endswith(".csv")) == [f"grad_summary_{i}.csv" for i in range(4)]
    assert sorted(d for d in os.listdir(rank0) if d.startswith("step")) == (
        [] if level == "L0" else ["step0", "step1", "step2", "step3"])
    for step, grads in enumerate(seen):
        rows = read_summary(str(rank0 / f"grad_summary_{step}.csv"))
        assert [r["param_name"] for r in rows] == list(grads) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        for row in rows:
            g = grads[row["param_name"]]
            assert (row["max"], row["min"], row["shape"]) == (f32(g.max()), f32(g.min()), str(list(g.shape)))
            assert float(row["norm"]) == pytest.approx(float(np.linalg.norm(g.astype(np.float64))), rel=1e-6)
            if level == "L0":
                assert row["MD5"] == hashlib.md5(g.astype(np.float32).tobytes()).hexdigest()
                continue
            v = g.reshape(-1)
            counts = [np.sum(v <= -0.1), np.sum((v > -0.1) & (v <= 0)), np.sum((v > 0) & (v <= 0.1)),
                      np.sum(v > 0.1)]
            names = ["(-inf, -0.1]", "(-0.1, 0]", "(0, 0.1]", "(0.1, inf)"]
            assert [row[n] for n in names] == [repr(int(c) / v.size) for c in counts]
            assert row["=0"] == repr(int(np.sum(v == 0)) / v.size)
            d = np.load(rank0 / f"step{step}" / f"{row['param_name']}.npy")
            assert d.dtype == np.bool_ and np.array_equal(d, g > 0)


def test_identical_and_changed_runs_compare(ms, tmp_path):
    train(ms, tmp_path / "a", "L1", steps=5)
    train(ms, tmp_path / "b", "L1", steps=5)
    train(ms, tmp_path / "c", "L1", steps=5, change_at=3)
    (same,) = GradComparator.compare_distributed(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "o1"),
                                                 plot=False, verbose=False)
    assert same.summary == [1.0] * 5 and same.first_suspicious_step is None
    (diff,) = GradComparator.compare_distributed(str(tmp_path / "a"), str(tmp_path / "c"), str(tmp_path / "o2"),
                                                 plot=False, verbose=False)
    assert diff.first_suspicious_step == 3


def test_step_filter_and_old_export_removed(ms, tmp_path):
    stale = tmp_path / "rank0" / "step9"
    stale.mkdir(parents=True)
    train(ms, tmp_path, "L1", steps=4, step=[1, 2])
    assert sorted(os.listdir(tmp_path / "rank0")) == ["grad_summary_1.csv", "grad_summary_2.csv", "step1", "step2"]


def test_monitor_needs_an_optimizer(ms, tmp_path):
    mon = GradientMonitor({"task": "grad_probe", "dump_path": str(tmp_path)}, "mindspore")
    with pytest.raises(TypeError, match="mindspore.nn.Optimizer"):
        mon.monitor(object())


def test_through_precision_debugger(ms, tmp_path):
    import json

    from mindspore import nn
    debugger_mod = pytest.importorskip("dumpers.mindspore_dump")
    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "out"), "rank": [],
                                    "step": [], "grad_probe": {"grad_level": "L1"}}))
    debugger = debugger_mod.PrecisionDebugger(str(cfg_file))
    net = nn.Dense(4, 2)
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    debugger.monitor(opt)
    grad_fn = ms.value_and_grad(lambda x: net(x).sum(), None, opt.parameters)
    for _ in range(2):
        _, grads = grad_fn(ms.Tensor(np.ones((3, 4), np.float32)))
        opt(grads)
    debugger.monitor_impl.remove()
    rank0 = tmp_path / "out" / "rank0"
    assert sorted(os.listdir(rank0)) == ["grad_summary_0.csv", "grad_summary_1.csv", "step0", "step1"]
    assert [r["param_name"] for r in read_summary(str(rank0 / "grad_summary_0.csv"))] == ["weight", "bias"]
