"""The MindSpore dumper, with real MindSpore (PyNative, CPU): a Conv/Dense net trained for 2 steps.

MindSpore takes seconds to import and each dump is a small training run, so the dumps are made once per module
(``runs`` fixture) and the tests read them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from dumpers import format as fmt

pytestmark = pytest.mark.mindspore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 2


# --- MindSpore set-up, shared by the module ------------------------------------------------------------
@pytest.fixture(scope="module")
def ms():
    mindspore = pytest.importorskip("mindspore")
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    try:                               # with some numpy builds the first scalar op leaves an error pending
        _ = mindspore.Tensor(np.ones((1,), np.float32)) * 2.0
    except SystemError:
        pass
    return mindspore


def make_net(ms, init=None):
    from mindspore import nn, ops

    class ConvDense(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, pad_mode="valid", has_bias=True)
            self.relu = nn.ReLU()
            self.flat = nn.Flatten()
            self.fc = nn.Dense(2 * 4 * 4, 3)

        def construct(self, x):
            x = self.flat(self.relu(self.conv(x)))
            return ops.tanh(self.fc(x)) * 2.0

    net = ConvDense()
    if init is not None:
        for p in net.trainable_params():
            p.set_data(ms.Tensor(init[p.name]))
    return net


def batches():
    rs = np.random.RandomState(0)
    x = rs.randn(STEPS, 4, 1, 6, 6).astype(np.float32)
    y = rs.randint(0, 3, (STEPS, 4)).astype(np.int32)
    return x, y


def write_config(path, dump_path, task="statistics", level="L1", **section):
    cfg = {"task": task, "level": level, "dump_path": str(dump_path), task: section}
    for key in ("step", "rank"):
        if key in section:
            cfg[key] = section.pop(key)
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return str(path)


def train_grad(ms, init, debugger=None, pass_model=True):
    """2 steps with value_and_grad + SGD; returns losses, first-step grads and the final parameters."""
    from mindspore import nn
    net = make_net(ms, init)
    loss_fn = nn.CrossEntropyLoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    xs, ys = batches()
    losses, first_grads = [], None
    for i in range(STEPS):
        if debugger is not None:
            debugger.start(net if pass_model else None)
        loss, grads = grad_fn(ms.Tensor(xs[i]), ms.Tensor(ys[i]))
        opt(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(float(loss.asnumpy()))
        if first_grads is None:
            first_grads = {p.name: g.asnumpy() for p, g in zip(opt.parameters, grads)}
    params = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    return losses, first_grads, params


def train_model_api(ms, init, debugger=None, pass_model=False):
    """2 steps of mindspore.train.Model.train, with MsprobeStep when a debugger is given."""
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.train import Model

    from pytest_msprobe.mindspore import MsprobeStep
    net = make_net(ms, init)
    xs, ys = batches()
    data = ds.GeneratorDataset(lambda: ((xs[i], ys[i]) for i in range(STEPS)), ["data", "label"], shuffle=False)
    model = Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=nn.SGD(net.trainable_params(), 0.1))
    callbacks = []
    if debugger is not None:
        if pass_model:
            debugger.start(net)
        callbacks = [MsprobeStep(debugger)]
    model.train(1, data, callbacks=callbacks, dataset_sink_mode=False)
    return {p.name: p.asnumpy().copy() for p in net.trainable_params()}


@pytest.fixture(scope="module")
def runs(ms, tmp_path_factory):
    """Every dump the tests read, made once: name -> (dump_path, results)."""
    from pytest_msprobe.mindspore import PrecisionDebugger
    base = tmp_path_factory.mktemp("ms_dump")
    init = {p.name: p.asnumpy().copy() for p in make_net(ms).trainable_params()}
    out = {"init": init, "bare": train_grad(ms, init), "bare_model": train_model_api(ms, init)}
    plans = {
        "l1_stat": ("statistics", "L1", train_grad, True),
        "mix_tensor": ("tensor", "mix", train_grad, True),
        "l0_model": ("statistics", "L0", train_model_api, True),
        "l1_model": ("statistics", "L1", train_model_api, False),
    }
    for name, (task, level, runner, pass_model) in plans.items():
        dump = base / name
        dbg = PrecisionDebugger(write_config(base / f"{name}.json", dump, task, level))
        try:
            out[name] = (str(dump), runner(ms, init, dbg, pass_model))
        finally:
            dbg.close()
    return out


def load(dump_path, step=0, name=fmt.DUMP_JSON):
    with open(os.path.join(dump_path, f"step{step}", "rank", name)) as fh:
        return json.load(fh)


def tensor_items(obj):
    if isinstance(obj, dict):
        if obj.get("type") == fmt.MINDSPORE_TENSOR_TYPE:
            yield obj
        else:
            for v in obj.values():
                yield from tensor_items(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from tensor_items(v)


# --- layout, names, top level ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["l1_stat", "mix_tensor", "l0_model", "l1_model"])
def test_layout_and_names(runs, name):
    dump_path, _ = runs[name]
    for step in range(STEPS):
        rank_dir = os.path.join(dump_path, f"step{step}", "rank")
        files = set(os.listdir(rank_dir))
        assert {fmt.DUMP_JSON, fmt.STACK_JSON, fmt.CONSTRUCT_JSON} <= files
        assert fmt.JOURNAL not in files                       # finished dumps leave no journal
        assert (fmt.TENSOR_DIR in files) == (name == "mix_tensor")
        doc = load(dump_path, step)
        assert list(doc) == list(fmt.TOP_LEVEL_KEYS)
        assert doc["framework"] == "mindspore"
        assert doc["data"], f"{name} step{step}: empty dump"
        for key in doc["data"]:
            parsed = fmt.parse_entry_key(key)
            if parsed.kind in ("module", "parameters_grad"):
                assert parsed.prefix == "Cell"
            else:
                assert parsed.prefix in fmt.MINDSPORE_API_PREFIXES, key
        for item in tensor_items(doc["data"]):
            assert fmt.canonical_dtype(item["dtype"]) is not None, item
    # the same calls are made in both steps, so both steps have the same names
    assert list(load(dump_path, 0)["data"]) == list(load(dump_path, 1)["data"])


def test_l1_captures_functional_tensor_primitive_and_backward(runs):
    keys = list(load(runs["l1_stat"][0])["data"])
    for expected in ("Primitive.conv2d.0.forward", "Primitive.matmul.0.forward", "Functional.tanh.0.forward",
                     "Tensor.__mul__.0.forward", "Functional.cross_entropy.0.forward"):
        assert expected in keys
    for fwd in ("Primitive.conv2d.0", "Primitive.matmul.0", "Functional.tanh.0", "Tensor.__mul__.0",
                "Functional.cross_entropy.0", "Primitive.bias_add.1"):
        assert f"{fwd}.backward" in keys
    assert not any(k.startswith("Cell.") for k in keys)
    assert load(runs["l1_stat"][0], name=fmt.CONSTRUCT_JSON) == {}


def test_l1_without_model_has_no_primitives(runs):
    keys = list(load(runs["l1_model"][0])["data"])
    assert "Functional.tanh.0.forward" in keys and "Functional.tanh.0.backward" in keys
    assert not any(k.startswith("Primitive.") for k in keys)


def test_mix_parameter_gradients_match_ms_grad(runs):
    dump_path, (_, grads, _) = runs["mix_tensor"]
    doc = load(dump_path)
    entry = doc["data"]["Cell.fc.Dense.parameters_grad.0"]
    arr = np.load(os.path.join(doc["dump_data_dir"], entry["weight"][0]["data_name"]))
    assert np.array_equal(arr, grads["fc.weight"])
    assert load(dump_path, name=fmt.CONSTRUCT_JSON)["Cell.fc.Dense.parameters_grad.0"] is None


def test_backward_gradients_are_this_calls_gradients(runs):
    """The weight gradient of fc's matmul is the parameter gradient ms.grad returned."""
    _, (_, grads, _) = runs["l1_stat"]
    entry = load(runs["l1_stat"][0])["data"]["Primitive.matmul.0.backward"]
    w_grad = entry["output"][1]
    expected = grads["fc.weight"]
    assert w_grad["shape"] == list(expected.shape)
    assert w_grad["Max"] == float(expected.max())
    assert w_grad["Norm"] == pytest.approx(float(np.linalg.norm(expected.astype(np.float64))), rel=1e-6)
    bias = load(runs["l1_stat"][0])["data"]["Primitive.bias_add.1.backward"]["output"][1]
    assert bias["Mean"] == pytest.approx(float(grads["fc.bias"].astype(np.float64).mean()), rel=1e-6, abs=1e-9)


def test_statistics_match_numpy_on_the_input(runs):
    xs, _ = batches()
    for step in range(STEPS):
        item = load(runs["l1_stat"][0], step)["data"]["Primitive.conv2d.0.forward"]["input_args"][0]
        x = xs[step]
        assert item["dtype"] == "Float32" and item["shape"] == list(x.shape)
        assert item["Max"] == float(x.max()) and item["Min"] == float(x.min())
        assert item["Mean"] == pytest.approx(float(x.astype(np.float64).mean()), rel=1e-12)
        assert item["Norm"] == pytest.approx(float(np.linalg.norm(x.astype(np.float64))), rel=1e-12)


def test_tensor_files_match_their_statistics(runs):
    dump_path, _ = runs["mix_tensor"]
    doc = load(dump_path)
    tensor_dir = doc["dump_data_dir"]
    assert tensor_dir == os.path.join(dump_path, "step0", "rank", fmt.TENSOR_DIR)
    items = list(tensor_items(doc["data"]))
    assert items and all("data_name" in it for it in items)
    for it in items:
        arr = np.load(os.path.join(tensor_dir, it["data_name"]))
        assert list(arr.shape) == it["shape"]
        assert str(arr.dtype) == fmt.canonical_dtype(it["dtype"])
        if arr.dtype.kind == "f" and arr.size:
            assert it["Max"] == float(arr.max()) and it["Min"] == float(arr.min())
            assert it["Mean"] == pytest.approx(float(arr.astype(np.float64).mean()), rel=1e-12, abs=1e-15)
        elif arr.dtype.kind == "i":
            assert it["Max"] == int(arr.max()) and it["Mean"] is None
    names = {it["data_name"] for it in items}
    assert "Primitive.conv2d.0.forward.input.0.npy" in names
    assert "Cell.conv.Conv2d.forward.0.input.0.npy" in names
    assert "Primitive.matmul.0.backward.output.1.npy" in names


def test_mix_construct_links_apis_to_cells(runs):
    construct = load(runs["mix_tensor"][0], name=fmt.CONSTRUCT_JSON)
    assert construct["Primitive.matmul.0.forward"] == "Cell.fc.Dense.forward.0"
    assert construct["Primitive.conv2d.0.forward"] == "Cell.conv.Conv2d.forward.0"
    assert construct["Cell.fc.Dense.forward.0"] is None
    stack = load(runs["mix_tensor"][0], name=fmt.STACK_JSON)
    grouped = {k for keys, _lines in stack.values() for k in keys}
    assert "Primitive.matmul.0.forward" in grouped
    assert all(not line.startswith(f"File {os.path.join(ROOT, 'dumpers')}")
               for _keys, lines in stack.values() for line in lines)


def test_l0_cells_forward_backward_and_parameters(runs):
    data = load(runs["l0_model"][0])["data"]
    for cell in ("conv.Conv2d", "relu.ReLU", "flat.Flatten", "fc.Dense"):
        assert f"Cell.{cell}.forward.0" in data
        assert f"Cell.{cell}.backward.0" in data
    fc = data["Cell.fc.Dense.forward.0"]
    assert set(fc["parameters"]) == {"weight", "bias"}
    assert fc["output"][0]["shape"] == [4, 3]
    bwd = data["Cell.fc.Dense.backward.0"]
    assert bwd["input"][0]["shape"] == [4, 3] and bwd["output"][0]["shape"] == [4, 32]
    pgrad = data["Cell.fc.Dense.parameters_grad.0"]
    assert {k: v[0]["shape"] for k, v in pgrad.items()} == {"weight": [3, 32], "bias": [3]}
    assert not any(k.startswith(("Functional.", "Primitive.", "Tensor.")) for k in data)


def test_training_is_identical_with_and_without_the_dumper(runs):
    """Parameters bit-identical. (MindSpore's CPU loss reduction itself varies in the last bit from run to run,
    with or without the dumper, so losses are compared to 1e-6.)"""
    bare_losses, _, bare_params = runs["bare"]
    for name in ("l1_stat", "mix_tensor"):
        losses, _, params = runs[name][1]
        assert losses == pytest.approx(bare_losses, rel=1e-6)
        for k, v in bare_params.items():
            assert np.array_equal(params[k], v), f"{name}: parameter {k} differs"
    for name in ("l0_model", "l1_model"):
        for k, v in runs["bare_model"].items():
            assert np.array_equal(runs[name][1][k], v), f"{name}: parameter {k} differs"


def test_loader_reads_the_dumps_and_marks_what_cannot_be_replayed(runs):
    loader = pytest.importorskip("generators.loader")
    for name in ("l1_stat", "mix_tensor"):
        dump_path, _ = runs[name]
        dumpset = loader.load_dump(os.path.join(dump_path, "step0", "rank", fmt.DUMP_JSON))
        names = [case.name for case in dumpset]
        assert "Primitive.matmul.0" in names and "Functional.tanh.0" in names
        for case in dumpset:
            assert case.framework == "mindspore"
            assert case.forward is not None
            if case.prefix in ("Primitive", "Jit"):       # listed, and SKIPped with the reason
                assert case.prefix in case.problem
            else:                                         # replayed (tests/test_ms_replay.py)
                assert case.problem is None, case.problem
        assert dumpset.by_name()["Functional.tanh.0"].backward is not None
        if name == "mix_tensor":
            assert "Cell.fc.Dense.forward.0" in dumpset.excluded


# --- small direct dumps: filters, encodings, dtypes ------------------------------------------------------
def dump_calls(ms, tmp_path, calls, steps=1, **cfg_kwargs):
    from pytest_msprobe.mindspore import PrecisionDebugger
    tmp_path.mkdir(parents=True, exist_ok=True)
    dump = tmp_path / "dump"
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", dump, **cfg_kwargs))
    try:
        for _ in range(steps):
            dbg.start()
            calls(ms)
            dbg.stop()
            dbg.step()
    finally:
        dbg.close()
    return str(dump)


def _some_calls(ms):
    from mindspore import ops
    x = ms.Tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    ops.relu(x)
    ops.tanh(x)
    ops.sigmoid(x)
    ops.clamp(x, -0.5, max=0.5)
    ops.cast(x, ms.float16)
    x.sum(axis=1)


def test_list_filter_and_data_mode(ms, tmp_path):
    dump = dump_calls(ms, tmp_path, _some_calls, list=["tanh", "clamp"], data_mode=["input"])
    data = load(dump)["data"]
    assert list(data) == ["Functional.tanh.0.forward", "Functional.clamp.0.forward"]
    assert all("output" not in e and "input_args" in e for e in data.values())
    clamp = data["Functional.clamp.0.forward"]
    assert clamp["input_args"][1] == {"type": "float", "value": -0.5}
    assert clamp["input_kwargs"] == {"max": {"type": "float", "value": 0.5}}


def test_scope_range_and_encodings(ms, tmp_path):
    dump = dump_calls(ms, tmp_path, _some_calls, scope=["Functional.tanh.0.forward", "Functional.cast.0.forward"])
    data = load(dump)["data"]
    assert list(data) == ["Functional.tanh.0.forward", "Functional.sigmoid.0.forward",
                          "Functional.clamp.0.forward", "Functional.cast.0.forward"]
    assert data["Functional.cast.0.forward"]["input_args"][1] == {"type": "mindspore.dtype", "value": "Float16"}
    assert data["Functional.cast.0.forward"]["output"][0]["dtype"] == "Float16"


def test_tensor_method_and_nested_calls(ms, tmp_path):
    data = load(dump_calls(ms, tmp_path, _some_calls))["data"]
    assert "Tensor.sum.0.forward" in data
    assert data["Tensor.sum.0.forward"]["input_kwargs"] == {"axis": {"type": "int", "value": 1}}
    # forward only (no ms.grad here): no backward entries, and nothing captured from inside captured calls
    assert all(k.endswith(".forward") for k in data)
    assert len(data) == 6


def test_step_and_rank_filters(ms, tmp_path):
    dump = dump_calls(ms, tmp_path / "s", _some_calls, steps=3, step=[1])
    assert sorted(os.listdir(dump)) == ["step1"]
    dump = dump_calls(ms, tmp_path / "r", _some_calls, rank=[1])
    assert not os.path.exists(dump)           # not distributed: rank 1 never exists, nothing is written


def test_md5_and_bfloat16_tensor(ms, tmp_path):
    from mindspore import ops

    def calls(ms_):
        ops.cast(ms_.Tensor(np.array([[-1.5, 0.25], [2.0, 3.0]], np.float32)), ms_.bfloat16)

    dump = dump_calls(ms, tmp_path, calls, task="tensor", summary_mode="md5")
    doc = load(dump)
    item = doc["data"]["Functional.cast.0.forward"]["output"][0]
    assert item["dtype"] == "BFloat16"
    arr = np.load(os.path.join(doc["dump_data_dir"], item["data_name"]))
    assert arr.dtype == np.float32 and arr.tolist() == [[-1.5, 0.25], [2.0, 3.0]]
    assert item["md5"] == f"{zlib.crc32(arr.tobytes()):08x}"
    assert (item["Max"], item["Min"], item["Mean"]) == (3.0, -1.5, 0.9375)


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_journal_holds_entries_before_stop(ms, tmp_path, task):
    from mindspore import ops

    from dumpers.journal import read_journal
    from pytest_msprobe.mindspore import PrecisionDebugger, repair
    dump = tmp_path / "dump"
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", dump, task=task))
    try:
        dbg.start()
        x = ms.Tensor(np.array([[1.0, -2.0], [3.0, 0.5]], np.float32))
        ops.relu(x)
        rank_dir = os.path.join(dump, "step0", "rank")
        state = read_journal(os.path.join(rank_dir, fmt.JOURNAL))
        assert list(state.data) == ["Functional.relu.0.forward"]
        assert state.data["Functional.relu.0.forward"]["output"][0]["Max"] == 3.0
        assert load(dump)["data"] == {}                  # dump.json is written on stop()
        assert repair(rank_dir) == 1                      # what a crashed run's directory gets
        assert list(load(dump)["data"]) == ["Functional.relu.0.forward"]
    finally:
        dbg.close()


# --- configuration and usage errors -----------------------------------------------------------------------
@pytest.mark.parametrize("section, message", [
    ({"data_mode": ["forward"]}, "data_mode"),
    ({"data_mode": ["input", "output"]}, "data_mode"),
    ({"scope": ["Cell.fc.Dense.forward.0", "Functional.relu.0.forward"]}, "scope"),
])
def test_config_errors_name_the_key(tmp_path, section, message):
    from dumpers.config import ConfigError
    from pytest_msprobe.mindspore import PrecisionDebugger
    with pytest.raises(ConfigError, match=message):
        PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "d", **section))


def test_usage_errors(ms, tmp_path):
    from pytest_msprobe.mindspore import PrecisionDebugger
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "d"))
    with pytest.raises(RuntimeError, match="start"):
        dbg.stop()
    with pytest.raises(TypeError, match="nn.Cell"):
        dbg.start(model=object())
    dbg.close()
    dbg = PrecisionDebugger(write_config(tmp_path / "c0.json", tmp_path / "d0", level="L0"))
    with pytest.raises(ValueError, match="start\\(model\\)"):
        dbg.start()
    dbg.close()


def test_l2_statistics_on_cpu_is_refused_clearly(ms, tmp_path, monkeypatch):
    from pytest_msprobe.mindspore import PrecisionDebugger
    monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "d", level="L2"))
    with pytest.raises(ValueError, match="CPU backend cannot write a statistics kernel dump"):
        dbg.start()
    assert "MINDSPORE_DUMP_CONFIG" not in os.environ


def test_import_does_not_load_mindspore():
    code = ("import sys, pytest_msprobe, pytest_msprobe.mindspore, pytest_msprobe.plugin; "
            "from pytest_msprobe.mindspore import PrecisionDebugger, MsprobeStep; "
            "assert 'mindspore' not in sys.modules, 'mindspore imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_grad_probe_task_forwards_to_the_gradient_monitor(ms, tmp_path):
    pytest.importorskip("dumpers.grad_probe")
    from mindspore import nn

    from pytest_msprobe.mindspore import PrecisionDebugger
    path = tmp_path / "gp.json"
    path.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "gp"),
                                "grad_probe": {"grad_level": "L1"}}))
    dbg = PrecisionDebugger(str(path))
    net = make_net(ms)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    loss_fn = nn.CrossEntropyLoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    dbg.monitor(opt)
    xs, ys = batches()
    for i in range(STEPS):
        dbg.start(net)
        _, grads = grad_fn(ms.Tensor(xs[i]), ms.Tensor(ys[i]))
        opt(grads)
        dbg.stop()
        dbg.step()
    dbg.monitor_impl.flush()
    found = sorted(f for _root, _dirs, files in os.walk(tmp_path / "gp") for f in files
                   if f.startswith("grad_summary_"))
    assert found == ["grad_summary_0.csv", "grad_summary_1.csv"]


def test_jit_function_and_cell_are_one_call_each(ms, tmp_path):
    from mindspore import nn, ops

    from pytest_msprobe.mindspore import PrecisionDebugger

    @ms.jit
    def block(x, w):
        return ops.tanh(ops.matmul(x, w)) * 2

    class JitCell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.d = nn.Dense(3, 3)

        @ms.jit
        def construct(self, x):
            return self.d(x)

    cell = JitCell()
    w = ms.Parameter(ms.Tensor(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)), name="w")
    x = ms.Tensor(np.ones((2, 3), np.float32))
    grad = ms.grad(lambda x: block(x, w).sum() + cell(x).sum(), None, [w] + cell.trainable_params())
    bare = [g.asnumpy() for g in grad(x)]
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "d"))
    try:
        dbg.start()
        dumped = [g.asnumpy() for g in grad(x)]
        dbg.stop()
        dbg.step()
    finally:
        dbg.close()
    assert all(np.array_equal(a, b) for a, b in zip(bare, dumped))
    data = load(str(tmp_path / "d"))["data"]
    for key in ("Jit.JitFunction.1.forward", "Jit.JitFunction.1.backward", "Jit.JitCell.1.forward",
                "Jit.JitCell.1.backward"):
        assert key in data
        assert fmt.parse_entry_key(key).kind == "jit"
    assert not any(k.startswith(("Functional.tanh", "Functional.matmul")) for k in data)   # inside the graph
    assert data["Jit.JitFunction.1.backward"]["output"][1]["shape"] == [3, 3]              # grad of w


def test_cell_scope_range(ms, tmp_path):
    from pytest_msprobe.mindspore import PrecisionDebugger
    net = make_net(ms)
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "d", level="mix",
                                         scope=["Cell.relu.ReLU.forward.0", "Cell.flat.Flatten.forward.0"]))
    try:
        dbg.start(net)
        net(ms.Tensor(batches()[0][0]))
        dbg.stop()
    finally:
        dbg.close()
    data = load(str(tmp_path / "d"))["data"]
    assert list(data) == ["Primitive.relu.0.forward", "Cell.relu.ReLU.forward.0", "Functional.flatten.0.forward",
                          "Cell.flat.Flatten.forward.0"]
    construct = load(str(tmp_path / "d"), name=fmt.CONSTRUCT_JSON)
    assert "Cell.conv.Conv2d.forward.0" in construct          # every name seen, in scope or not


def test_empty_kernel_dump_is_reported(ms, tmp_path, caplog):
    """PyNative L2 dumps only jit-compiled code: an empty kernel dump is said, not silent."""
    from pytest_msprobe.mindspore import PrecisionDebugger
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "k", task="tensor", level="L2"))
    dbg.kernel_config = str(tmp_path / "k" / "kernel_kbyk_dump.json")   # as start() leaves it, without the env
    with caplog.at_level("WARNING", logger="pytest_msprobe.mindspore"):
        dbg.stop()
        dbg.step()
    assert dbg.check_kernel_dump() == 0
    assert sum("kernel dump" in r.getMessage() and "empty" in r.getMessage() for r in caplog.records) == 1


def test_mint_calls_with_list_arguments_under_grad(ms, tmp_path):
    import mindspore.mint.nn.functional as F
    from mindspore import mint

    from pytest_msprobe.mindspore import PrecisionDebugger
    rs = np.random.RandomState(1)
    w = ms.Parameter(ms.Tensor(rs.randn(8, 4).astype(np.float32)), name="w")
    b = ms.Parameter(ms.Tensor(rs.randn(8).astype(np.float32)), name="b")
    x = ms.Tensor(rs.randn(3, 4).astype(np.float32))

    def f(x):
        h = F.relu(F.linear(x, w, b))
        h = mint.cat([h, h * 0.5], dim=1)
        return mint.mean(F.softmax(h, dim=-1) ** 2) + h[0, 1:3].sum()

    grad = ms.grad(f, None, [w, b])
    bare = [g.asnumpy() for g in grad(x)]
    dbg = PrecisionDebugger(write_config(tmp_path / "c.json", tmp_path / "d", task="tensor"))
    try:
        dbg.start()
        dumped = [g.asnumpy() for g in grad(x)]
        dbg.stop()
    finally:
        dbg.close()
    assert all(np.array_equal(a, c) for a, c in zip(bare, dumped))
    doc = load(str(tmp_path / "d"))
    data = doc["data"]
    for key in ("MintFunctional.linear.0", "MintFunctional.relu.0", "Mint.cat.0", "Mint.mean.0",
                "MintFunctional.softmax.0", "Tensor.__getitem__.0", "Tensor.__pow__.0"):
        assert f"{key}.forward" in data and f"{key}.backward" in data
    cat_grads = data["Mint.cat.0.backward"]["output"][0]          # one gradient per tensor of the list
    assert [g["shape"] for g in cat_grads] == [[3, 8], [3, 8]]
    assert cat_grads[1]["data_name"] == "Mint.cat.0.backward.output.0.1.npy"
    lin = data["MintFunctional.linear.0.backward"]["output"]      # x (data: no gradient), w, b
    assert lin[0] is None and lin[1]["shape"] == [8, 4] and lin[2]["shape"] == [8]
    w_grad = np.load(os.path.join(doc["dump_data_dir"], lin[1]["data_name"]))
    assert np.array_equal(w_grad, bare[0])                          # the call's own gradient of w


def test_two_debuggers_cannot_dump_at_once(ms, tmp_path):
    from pytest_msprobe.mindspore import PrecisionDebugger
    first = PrecisionDebugger(write_config(tmp_path / "a.json", tmp_path / "a"))
    second = PrecisionDebugger(write_config(tmp_path / "b.json", tmp_path / "b"))
    try:
        first.start()
        with pytest.raises(RuntimeError, match="another MindSpore PrecisionDebugger"):
            second.start()
        first.stop()
        second.start()                       # fine once the first one is stopped
        second.stop()
    finally:
        first.close()
        second.close()
