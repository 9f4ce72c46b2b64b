"""One case end to end without pytest: bench set-up (spec section 1), backward rules, roll-up, error data."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from generators.loader import load_dump
from pytest_msprobe import replay as runner
from pytest_msprobe.devices import CpuBackend

CPU = CpuBackend()


def case(name: str, *, args_info=(), backward: bool = True) -> SimpleNamespace:
    prefix, *mid, index = name.split(".")
    return SimpleNamespace(name=name, prefix=prefix, api=".".join(mid), index=int(index),
                           forward={"input_args": [dict(a) for a in args_info], "input_kwargs": {}},
                           backward={"input": [{}]} if backward else None, problem=None, has_tensor_files=True)


def inputs(args, kwargs=None, grad=None) -> SimpleNamespace:
    return SimpleNamespace(args=list(args), kwargs=dict(kwargs or {}), grad_output=grad, summary="")


def run(c, i, **opts) -> runner.CaseResult:
    return runner.run_with_inputs(c, i, CPU, 0, runner.RunOptions(**opts), mode=runner.REAL_DATA, seed=1)


@pytest.mark.parametrize("dtypes, api, expected", [
    ((), "add", None), ((torch.float16,), "add", torch.float32), ((torch.bfloat16,), "add", torch.float32),
    ((torch.float32,), "add", torch.float64), ((torch.float16, torch.float32), "add", torch.float32),
    ((torch.float64, torch.int64), "add", None), ((torch.float32,), "conv2d", None),
    ((torch.float16,), "type_as", None),
])
def test_raise_target_table(dtypes, api, expected):
    args = [torch.zeros(2, dtype=d) for d in dtypes]
    assert runner.raise_target([args], {}, api) == expected


def test_item_seed_is_stable_and_distinct():
    assert runner.item_seed("Functional.linear.0", 1234) == runner.item_seed("Functional.linear.0", 1234)
    assert runner.item_seed("Functional.linear.0", 1234) != runner.item_seed("Functional.linear.1", 1234)
    assert runner.item_seed("Functional.linear.0", 1234) != runner.item_seed("Functional.linear.0", 1)


def test_sample_linear_real_data(data_dir):
    cases = load_dump(str(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank" / "dump.json")).by_name()
    r = runner.run_case(cases["Functional.linear.0"], CPU, 0, runner.RunOptions())
    assert (r.forward, r.backward, r.message, r.data_mode) == ("pass", "pass", None, runner.REAL_DATA)
    names = [d.name for d in r.details]
    assert names == ["Functional.linear.0.forward.output.0"] + [f"Functional.linear.0.backward.output.{i}"
                                                                 for i in range(3)]
    assert r.details[0].bench_dtype == "torch.float64" and r.details[0].device_dtype == "torch.float32"
    assert r.details[1].status == "SKIP"            # x does not require grad: "Bench output is None"
    add = runner.run_case(cases["Tensor.add_.0"], CPU, 0, runner.RunOptions())
    assert (add.forward, add.backward) == ("pass", None)


def test_bench_is_raised_and_device_keeps_dtype():
    seen = []

    class Spy(CpuBackend):
        def call(self, func, args, kwargs):
            seen.append(args[0].dtype)
            return func(*args, **kwargs)

    c = case("Functional.gelu.0", args_info=[{"requires_grad": True}])
    x = torch.linspace(-2, 2, 64, dtype=torch.float16).reshape(8, 8)
    r = runner.run_with_inputs(c, inputs([x], grad=torch.ones(8, 8, dtype=torch.float16)), Spy(), 0,
                               runner.RunOptions(), mode=runner.REAL_DATA, seed=1)
    assert seen == [torch.float16]
    assert r.details[0].bench_dtype == "torch.float32" and r.details[0].device_dtype == "torch.float16"
    assert [d.name for d in r.details] == ["Functional.gelu.0.forward.output.0", "Functional.gelu.0.backward.output.0"]
    assert r.forward in ("pass", "Warning") and r.backward in ("pass", "Warning")


class _Scaled(CpuBackend):
    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        return out.mul_(1.5)


def test_out_kwarg_and_repeat_interleave_skip_backward_with_message():
    a, b = torch.ones(4), torch.ones(4)
    c = case("Torch.add.0", args_info=[{"requires_grad": True}, {}])
    r = run(c, inputs([a, b], {"out": torch.empty(4)}, grad=torch.ones(4)))
    assert r.forward == "pass" and r.backward == "SKIP" and r.message == runner.OUT_KWARG_MESSAGE
    assert r.details[-1].name == "Torch.add.0.backward.output.0" and r.details[-1].status == "SKIP"
    out = torch.zeros(4)
    r = runner.run_with_inputs(c, inputs([a, b], {"out": out}), _Scaled(), 0, runner.RunOptions(),
                               mode=runner.REAL_DATA, seed=1)
    assert r.forward == "error" and out.abs().sum() == 0       # each side wrote its own copy of out
    c = case("Torch.repeat_interleave.0", args_info=[{"requires_grad": True}], backward=False)
    r = run(c, inputs([torch.arange(4.0), 2]))
    assert r.message == runner.NO_BACKWARD_MESSAGE and r.details[-1].message == runner.NO_BACKWARD_MESSAGE


def test_grad_index_and_multi_output_backward():
    x = torch.randn(16, dtype=torch.float32)
    topk = run(case("Torch.topk.0", args_info=[{"requires_grad": True}]), inputs([x, 3], grad=torch.ones(3)))
    assert topk.backward == "pass" and topk.details[-1].name == "Torch.topk.0.backward.output.0"
    srt = run(case("Torch.sort.0", args_info=[{"requires_grad": True}]), inputs([x], grad=torch.ones(16)))
    assert srt.message == runner.MULTI_BACKWARD_MESSAGE and srt.backward == "SKIP"


def test_dropout_rule_writes_no_rows():
    x = torch.ones(200, 10)
    r = run(case("Functional.dropout.0", args_info=[{"requires_grad": True}]),
            inputs([x], {"p": 0.5, "training": True}, grad=torch.ones(200, 10)))
    assert r.details == [] and r.forward == "pass" and r.backward == "pass"


def test_exception_becomes_api_skip_with_text():
    r = run(case("Torch.matmul.0", backward=False), inputs([torch.ones(2, 3), torch.ones(2, 3)]))
    assert r.forward == "SKIP" and "shapes cannot be multiplied" in r.message
    assert r.details[0].name == "Torch.matmul.0.forward.output.0" and r.details[0].status == "SKIP"
    bad = runner.run_case(SimpleNamespace(name="VF.lstm.0", prefix="VF", api="lstm", index=0, forward={},
                                          backward=None, problem="prefix 'VF' is not replayable",
                                          has_tensor_files=True), CPU, 0, runner.RunOptions())
    assert bad.skipped and bad.message == "prefix 'VF' is not replayable"


def test_error_result_and_failing_levels():
    r = runner.error_result("Torch.add.0", "timeout: 1 s")
    assert r.failing() and r.details[0].status == "error" and r.worst()[0] == "Torch.add.0.forward.output.0"
    w = runner.CaseResult("A.a.0", "Warning", None, None)
    assert not w.failing("error") and w.failing("warning")


@pytest.mark.filterwarnings("ignore:This overload of add is deprecated")
def test_save_error_data_numbers_args_then_kwargs(tmp_path):
    x = torch.linspace(-2, 2, 64, dtype=torch.float16).reshape(8, 8)

    class Wrong(CpuBackend):
        def call(self, func, args, kwargs):
            return func(*args, **kwargs) * 1.5

    c = case("Torch.add.0", args_info=[{"requires_grad": True}, {}])
    opts = runner.RunOptions(error_data_dir=str(tmp_path / "err"))
    r = runner.run_with_inputs(c, inputs([x, 1.0], {"other": x}, grad=torch.ones(8, 8, dtype=torch.float16)),
                               Wrong(), 0, opts, mode=runner.REAL_DATA, seed=1)
    assert r.failing()
    files = sorted(os.listdir(tmp_path / "err"))
    assert "Torch.add.0.forward.input.0.pt" in files and "Torch.add.0.forward.input.2.pt" in files
    assert "Torch.add.0.forward.input.1.pt" not in files        # the float arg takes an index, writes nothing
    bench = torch.load(tmp_path / "err" / "Torch.add.0.forward.output.bench.0.pt", weights_only=True)
    device = torch.load(tmp_path / "err" / "Torch.add.0.forward.output.device.0.pt", weights_only=True)
    assert bench.dtype == torch.float32 and device.dtype == torch.float16
    assert "Torch.add.0.backward.input.0.pt" in files


@pytest.mark.parametrize("copies", [False, True])
def test_device_inputs_copied_once(copies):
    """The device side copies the inputs unless the backend's to_device makes new tensors anyway; either way an
    in-place call leaves the caller's inputs as they were."""
    given = []

    class Moving(CpuBackend):
        copies_inputs = copies

        def to_device(self, obj, index):
            if isinstance(obj, dict):
                return obj
            given.extend(x for x in obj if isinstance(x, torch.Tensor))
            return [x.clone() if isinstance(x, torch.Tensor) else x for x in obj] if copies else obj

    x = torch.linspace(-1, 1, 16, dtype=torch.float32)
    keep = x.clone()
    r = runner.run_with_inputs(case("Tensor.mul_.0", backward=False), inputs([x, 3.0]), Moving(), 0,
                               runner.RunOptions(), mode=runner.REAL_DATA, seed=1)
    assert r.forward in ("pass", "Warning")
    assert torch.equal(x, keep)
    shares = given[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert shares is copies


@pytest.mark.parametrize("error_data", [False, True])
def test_inputs_built_for_the_call_are_not_copied_for_the_device(error_data, tmp_path):
    """Inputs built for one call alone (run_case) go to the device side as they are, the last to use them;
    with error data to save they are copied, so the saved inputs are the ones both sides saw."""
    given = []

    class Watching(CpuBackend):
        def to_device(self, obj, index):
            if not isinstance(obj, dict):
                given.extend(x for x in obj if isinstance(x, torch.Tensor))
            return obj

    x = torch.linspace(-1, 1, 16, dtype=torch.float32)
    keep = x.clone()
    opts = runner.RunOptions(error_data_dir=str(tmp_path) if error_data else None)
    r = runner.run_with_inputs(case("Tensor.mul_.0", backward=False), inputs([x, 3.0]), Watching(), 0, opts,
                               mode=runner.REAL_DATA, seed=1, owned=True)
    assert r.forward in ("pass", "Warning")
    shares = given[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert shares is not error_data
    assert torch.equal(x, keep) is error_data        # changed in place only where nobody reads it after
