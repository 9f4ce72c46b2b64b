"""Replaying MindSpore API calls in the accuracy check, with real MindSpore (PyNative, CPU).

A small Dense/ReLU/softmax net is dumped once per module with our MindSpore dumper (L1, tensor and statistics)
and checked with ``pytest --msprobe-api-info`` through pytester (in-process). A conftest registers an
``ms-skewed`` MindSpore backend that perturbs the device result of ``mindspore.ops.softmax``.
"""
from __future__ import annotations

import csv
import glob
import json

import numpy as np
import pytest
import torch  # noqa: F401 - imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
from dumpers import format as fmt
from generators.inputs import UnknownApiError
from generators.loader import load_dump
from generators.ms_apis import check_ms_api, ms_prefix_problem

pytestmark = pytest.mark.mindspore

ms = pytest.importorskip("mindspore")
from pytest_msprobe.replay import RunOptions, run_case  # noqa: E402 - after the MindSpore check
from pytest_msprobe.devices import MsCpuBackend  # noqa: E402
from pytest_msprobe.replay import mindspore_adapter as ms_replay  # noqa: E402

SKEWED = '''
import mindspore
from pytest_msprobe.devices import MsCpuBackend


class Skewed(MsCpuBackend):
    name = "ms-skewed"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        return out * 1.01 if func is mindspore.ops.softmax else out


def pytest_msprobe_register_devices(registry):
    registry.register(Skewed())
'''

# every replayable call the net makes, and the APIs whose backward is checked
REPLAYED = {"Functional.softmax.0", "Functional.relu6.0", "Functional.cast.0", "Functional.tanh.0",
            "Mint.exp.0", "MintFunctional.sigmoid.0", "Tensor.__mul__.0", "Tensor.__add__.0", "Tensor.__add__.1",
            "Functional.sum.0"}


def _net():
    from mindspore import mint, nn, ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(8, 4)
            self.relu = nn.ReLU()

        def construct(self, x):
            h = ops.softmax(self.relu(self.fc(x)), axis=-1)
            h = ops.relu6(h * 4.0) + mint.exp(h)
            t = ops.tanh(ops.cast(h, ms.float16))              # a float16 call: bench in float32
            return ops.sum(mint.nn.functional.sigmoid(h) + t.astype(ms.float32))

    return Net()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """task -> dump.json of one training step of the net (forward and backward), made once."""
    from pytest_msprobe.mindspore import PrecisionDebugger
    ms.set_context(mode=ms.PYNATIVE_MODE)
    base = tmp_path_factory.mktemp("ms_replay")
    x = ms.Tensor(np.random.RandomState(0).randn(3, 8).astype(np.float32))
    out = {}
    for task in ("tensor", "statistics"):
        cfg = base / f"{task}.json"
        cfg.write_text(json.dumps({"task": task, "level": "L1", "dump_path": str(base / task), task: {}}))
        dbg = PrecisionDebugger(str(cfg))
        net = _net()
        grad_fn = ms.value_and_grad(net, None, net.trainable_params())
        try:
            dbg.start(net)
            grad_fn(x)
            dbg.stop()
            dbg.step()
        finally:
            dbg.close()
        out[task] = base / task / "step0" / "rank" / fmt.DUMP_JSON
    return out


def _rows(pattern):
    (path,) = glob.glob(pattern)
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))[1:]


def _check(pytester, dump, *extra):
    result = pytester.runpytest_inprocess(f"--msprobe-api-info={dump}", "-p", "no:cacheprovider", "-rs", *extra)
    results = {r[0]: r for r in _rows(str(pytester.path / "accuracy_checking_result_*.csv"))}
    details = {r[0]: r for r in _rows(str(pytester.path / "accuracy_checking_details_*.csv"))}
    return result, results, details


# --- the dumps, checked end to end -------------------------------------------------------------------------
def test_real_data_dump_every_call_checked(pytester, dumps):
    result, results, details = _check(pytester, dumps["tensor"])
    calls = {c.name for c in load_dump(str(dumps["tensor"]))}
    assert set(results) == calls                      # one result row per captured call, none lost
    assert REPLAYED <= calls
    for name, row in results.items():
        if name in REPLAYED:
            assert row[1:3] == ["pass", "pass"], row
        else:
            assert name.startswith("Primitive."), name
            assert row[1] == "SKIP" and "Primitive" in row[3]
    outcome = result.parseoutcomes()
    assert outcome["passed"] == len(REPLAYED) and outcome["skipped"] == len(calls) - len(REPLAYED)
    assert "failed" not in outcome
    # same row form as PyTorch cases: raised bench dtype, dumped device dtype, real data
    assert details["Functional.softmax.0.forward.output.0"][1:3] == ["torch.float64", "torch.float32"]
    assert details["Functional.tanh.0.forward.output.0"][1:3] == ["torch.float32", "torch.float16"]
    assert details["Functional.softmax.0.forward.output.0"][-3] == "real_data"          # Data Mode
    assert details["Functional.softmax.0.forward.output.0"][-2] == "exact"              # Replay Fidelity
    # backward: gradients of the positional tensors, fed the dumped output gradient
    assert details["Tensor.__add__.0.backward.output.1"][-4] != ""          # Message
    assert "Tensor.__mul__.0.backward.output.0" in details
    assert "Tensor.__mul__.0.backward.output.1" not in details      # the scalar factor has no gradient row
    # MindSpore's CPU ReLU6 has no float64 kernel: the bench falls back to float32 and the rows say so
    relu6 = details["Functional.relu6.0.forward.output.0"]
    assert relu6[1] == "torch.float32" and "float32, not float64" in relu6[-4]


def test_statistics_dump_replays_with_random_data(pytester, dumps):
    # two Hypothesis examples per call (--msprobe-examples goes through the same MindSpore replay)
    result, results, details = _check(pytester, dumps["statistics"], "--msprobe-examples", "2")
    for name in REPLAYED:
        assert results[name][1:3] == ["pass", "pass"], results[name]
    assert details["Mint.exp.0.forward.output.0"][-3:-1] == ["random_data", ""]    # Data Mode; nothing recorded
    assert "failed" not in result.parseoutcomes()


def test_planted_inaccuracy_fails_exactly_that_api(pytester, dumps):
    pytester.makeconftest(SKEWED)
    result, results, details = _check(pytester, dumps["tensor"], "--msprobe-device-type", "ms-skewed")
    failing = {name for name, row in results.items() if "error" in (row[1], row[2])}
    assert failing == {"Functional.softmax.0"}
    assert results["Functional.softmax.0"][1] == "error"
    assert result.parseoutcomes()["failed"] == 1
    result.stdout.fnmatch_lines(["*Functional.softmax.0: forward error*"])


def test_a_pytorch_device_type_on_a_mindspore_dump_skips_every_call_with_the_reason(pytester, dumps):
    result, results, _ = _check(pytester, dumps["tensor"], "--msprobe-device-type", "cpu")
    outcome = result.parseoutcomes()
    assert "passed" not in outcome and "failed" not in outcome
    for name in REPLAYED:
        assert results[name][1] == "SKIP" and "device type 'cpu' runs PyTorch calls" in results[name][3]
    result.stdout.fnmatch_lines(["*device type 'cpu' runs PyTorch calls*"])


# --- pieces -------------------------------------------------------------------------------------------------
def test_names_are_checked_against_the_wrap_lists_without_mindspore():
    check_ms_api("Functional", "softmax")
    check_ms_api("Tensor", "__mul__")
    check_ms_api("MintFunctional", "relu")
    for prefix, api in (("Functional", "load_checkpoint"), ("Tensor", "_private"), ("Mint", "save")):
        with pytest.raises(UnknownApiError, match="not in the MindSpore API lists"):
            check_ms_api(prefix, api)
    assert "Primitive" in ms_prefix_problem("Primitive")
    assert "Jit" in ms_prefix_problem("Jit") and "communication" in ms_prefix_problem("Distributed")
    assert ms_prefix_problem("Mint") is None


def test_msprobe_mindspore_fixture_loads_replayable_calls(data_dir):
    by = load_dump(data_dir / "msprobe_repo_fixtures" / "npu_megatron_mindspore").by_name()
    assert by["Mint.cos.0"].problem is None and by["Mint.cos.0"].framework == "mindspore"
    assert "Primitive" in by["Primitive.norm.RmsNorm.0"].problem
    assert "communication" in by["Distributed.all_reduce.0"].problem


def test_conversions_keep_dtypes():
    t = torch.tensor([[1.5, -2.25]], dtype=torch.bfloat16)
    m = ms_replay.to_ms([t, {"k": (t.float(), 3)}])
    assert m[0].dtype == ms.bfloat16 and m[1]["k"][0].dtype == ms.float32 and m[1]["k"][1] == 3
    back = ms_replay.to_torch(m)
    assert back[0].dtype == torch.bfloat16 and torch.equal(back[0], t)
    from generators.dumpjson import MindSporeDtype
    assert ms_replay.to_ms(MindSporeDtype("Float16")) == ms.float16


def _case(tmp_path, dtype, api="softmax", extra_args=(), backward=False):
    item = {"type": "mindspore.Tensor", "dtype": dtype, "shape": [2, 3], "Max": 1.0, "Min": -1.0,
            "Mean": 0.0, "Norm": 1.0}
    grad = dict(item, shape=[2, 2])
    data = {f"Functional.{api}.0.forward": {"input_args": [item, *extra_args], "input_kwargs": {},
                                             "output": [item]}}
    if backward:
        data[f"Functional.{api}.0.backward"] = {"input": [grad], "output": [item]}
    doc = {"task": "statistics", "level": "L1", "framework": "mindspore", "dump_data_dir": None, "data": data}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(doc))
    return load_dump(str(path)).cases[0]


def test_unsupported_device_dtype_is_a_skip_with_the_kernel_error(tmp_path):
    # MindSpore's CPU softmax has no bfloat16 kernel: the device run fails and the API is SKIP with the reason
    result = run_case(_case(tmp_path, "BFloat16"), MsCpuBackend(), 0, RunOptions(random=True))
    assert result.forward == "SKIP"
    assert "device run (ms-cpu) failed" in result.message and "Softmax" in result.message


def test_float16_case_runs_on_a_torch_default_backend(tmp_path):
    # a MindSpore case handed a PyTorch backend (the session's default) runs on ms-cpu
    from pytest_msprobe.devices import CpuBackend
    result = run_case(_case(tmp_path, "Float16"), CpuBackend(), 0, RunOptions(random=True))
    assert result.forward == "pass", result.message
    assert result.details[0].bench_dtype == "torch.float32"
    assert result.details[0].device_dtype == "torch.float16"
    assert ms_replay.ms_error_text(RuntimeError("first line\n----\n- C++ Call Stack")) == "first line"


def test_backward_uses_the_grad_index_or_says_why_not(tmp_path):
    two = {"type": "int", "value": 2}
    topk = run_case(_case(tmp_path / "a", "Float32", "topk", [two], backward=True), MsCpuBackend(), 0,
                    RunOptions(random=True))          # topk: the gradient goes to output 0 (the values)
    names = [r.name for r in topk.details]
    assert "Functional.topk.0.backward.output.0" in names and topk.backward == "pass", topk.details
    split = run_case(_case(tmp_path / "b", "Float32", "split", [two], backward=True), MsCpuBackend(), 0,
                     RunOptions(random=True))         # several outputs, no grad index: no backward
    assert split.forward == "pass" and split.backward == "SKIP"
    assert split.message == "Multiple backward is not supported."


def test_missing_mindspore_and_mismatched_backend_are_skips_with_reasons(tmp_path, monkeypatch, data_dir):
    case = _case(tmp_path, "Float32")

    def no_mindspore():
        raise ImportError("No module named 'mindspore'")

    monkeypatch.setattr(ms_replay, "mindspore", no_mindspore)
    result = run_case(case, MsCpuBackend(), 0, RunOptions(random=True))
    assert result.forward == "SKIP" and "pip install 'pytest-msprobe[mindspore]'" in result.message
    monkeypatch.undo()
    torch_case = load_dump(data_dir / "mlp_fp32_tensor_L1" / "step0").by_name()["Functional.linear.0"]
    result = run_case(torch_case, MsCpuBackend(), 0, RunOptions())
    assert result.forward == "SKIP" and "runs MindSpore calls" in result.message


def test_a_named_pytorch_backend_is_a_skip_for_a_mindspore_case_never_a_swap(tmp_path):
    # --msprobe-device-type cpu names a PyTorch backend: a MindSpore case says so instead of running on ms-cpu
    from pytest_msprobe.devices import CpuBackend
    result = run_case(_case(tmp_path, "Float16"), CpuBackend(), 0, RunOptions(random=True, device_type="cpu"))
    assert result.forward == "SKIP" and "device type 'cpu' runs PyTorch calls" in result.message
    assert "MindSpore backend (ms-cpu" in result.message
    named_ms = run_case(_case(tmp_path / "b", "Float16"), MsCpuBackend(), 0,
                        RunOptions(random=True, device_type="ms-cpu"))
    assert named_ms.forward == "pass", named_ms.message
