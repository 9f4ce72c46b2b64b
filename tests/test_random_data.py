"""Random-data mode: deterministic, statistics-honouring inputs built from a dump without tensor files."""
from __future__ import annotations

import hashlib
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from generators.inputs import InputError, build_inputs, required_bytes
from generators.loader import load_dump
from generators.random_data import GenParams, TensorSpec, describe, generate

DATA = pathlib.Path(__file__).parent / "data"
STATS = DATA / "mlp_fp32_statistics_L1" / "step0" / "rank" / "dump.json"


def digest(inputs) -> str:
    h = hashlib.sha256()
    for x in [*inputs.args, *inputs.kwargs.values(), inputs.grad_output]:
        if isinstance(x, torch.Tensor):
            h.update(x.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def one_call_dump(tmp_path, key, args, kwargs=None, backward=None):
    data = {f"{key}.forward": {"input_args": args, "input_kwargs": kwargs or {}}}
    if backward:
        data[f"{key}.backward"] = backward
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                "dump_data_dir": None, "data": data}))
    case = load_dump(path).cases[0]
    assert case.problem is None, case.problem
    return case


def t(dtype="torch.float32", shape=(4, 5), lo=-1.0, hi=1.0, mean=None, norm=None):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": hi, "Min": lo, "Mean": mean,
            "Norm": norm, "requires_grad": True}


def test_every_sample_case_builds_and_runs():
    from generators.inputs import resolve_api

    for case in load_dump(STATS):
        inputs = build_inputs(case, seed=1)
        assert inputs.mode == "random" and inputs.seed == 1 and "random data, seed 1" in inputs.summary
        out = resolve_api(case)(*inputs.args, **inputs.kwargs)
        assert isinstance(out, torch.Tensor)
        if case.backward:
            assert inputs.grad_output is not None and inputs.grad_output.shape == out.shape


def test_same_seed_same_tensors_in_another_process():
    """The per-tensor stream depends only on (seed, case name, place): a fresh process reproduces it."""
    case = load_dump(STATS).by_name()["Functional.linear.0"]
    here = build_inputs(case, seed=42).args[0].numpy().tobytes()
    code = ("import sys, hashlib, json; sys.path.insert(0, %r); "
            "from generators.inputs import _seed_for; from generators.random_data import TensorSpec, generate; "
            "item = json.load(open(%r))['data']['Functional.linear.0.forward']['input_args'][0]; "
            "a = generate(TensorSpec.from_item(item), _seed_for(42, 'Functional.linear.0', 'args[0]')); "
            "print(hashlib.sha256(a.tobytes()).hexdigest())" % (str(pathlib.Path(__file__).parent.parent), str(STATS)))
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert hashlib.sha256(here).hexdigest() == there
    assert build_inputs(case, seed=43).args[0].numpy().tobytes() != here


def test_streams_are_independent_of_build_order():
    cases = load_dump(STATS).by_name()
    first = digest(build_inputs(cases["Torch.relu.0"], seed=5))
    for case in cases.values():                     # generating other cases in between changes nothing
        build_inputs(case, seed=5)
    assert digest(build_inputs(cases["Torch.relu.0"], seed=5)) == first
    # two calls with identical statistics still get different data (the name is part of the seed)
    assert digest(build_inputs(cases["Tensor.add_.0"], seed=5)) != digest(build_inputs(cases["Tensor.add_.4"], seed=5))


def test_random_mode_is_the_strategies_generator_and_conversion():
    """Random-data mode makes each tensor as generators.strategies does: the item read by TensorSpec.from_item,
    the values from generate, the tensor from to_tensor; only the seed comes from the case, not from Hypothesis."""
    from generators import inputs as inputs_module
    from generators.random_data import to_tensor

    case = load_dump(STATS).by_name()["Torch.relu.0"]
    params = GenParams(0.5, False, True)
    built = build_inputs(case, random=True, seed=11, params=params)
    item = case.forward["input_args"][0]
    spec = TensorSpec.from_item(item)
    expected = to_tensor(generate(spec, inputs_module._seed_for(11, case.name, "args[0]"), params), spec.dtype)
    assert built.args[0].dtype == expected.dtype and torch.equal(built.args[0], expected)


def test_mean_and_norm_close_to_recorded_for_the_sample():
    case = load_dump(STATS).by_name()["Functional.linear.0"]
    inputs = build_inputs(case)
    for tensor, item in zip(inputs.args, case.forward["input_args"]):
        assert tensor.mean().item() == pytest.approx(item["Mean"], rel=0.01, abs=1e-4)
        assert tensor.norm().item() == pytest.approx(item["Norm"], rel=0.01)
        assert tensor.min().item() == pytest.approx(item["Min"]) and tensor.max().item() == pytest.approx(item["Max"])


def test_match_stats_off_is_msprobe_uniform():
    spec = TensorSpec("float32", (10000,), -2.0, 6.0, 0.0, 1.0)
    plain = generate(spec, np.random.default_rng(0), GenParams(match_stats=False))
    assert plain.mean() == pytest.approx(2.0, abs=0.1)          # uniform in [-2, 6] ignores Mean 0
    assert plain[0] == -2.0 and plain[-1] == 6.0


def test_magnitude_zero_collapses_interior_to_simplest_value():
    spec = TensorSpec("float32", (50,), 1.5, 9.0, 4.0, 30.0)
    array = generate(spec, np.random.default_rng(0), GenParams(magnitude=0.0))
    assert array[0] == 1.5 and array[-1] == 9.0 and np.all(array[1:-1] == 1.5)


def test_huge_tensor_is_generated_vectorised():
    spec = TensorSpec("float32", (10_000_000,), -3.0, 5.0, 0.1, 1000.0)
    array = generate(spec, np.random.default_rng(0))
    assert array.shape == (10_000_000,) and array.dtype == np.float32
    assert array.min() == -3.0 and array.max() == 5.0
    assert "mean=0.1 " in describe(array) and "norm=1000" in describe(array)


def test_unreachable_statistics_get_the_closest_reachable_shape():
    # a norm above what [-1, 1] allows: values pile on the bounds; reported, not assumed
    spec = TensorSpec("float32", (1000,), -1.0, 1.0, 0.0, 1e6)
    array = generate(spec, np.random.default_rng(0))
    assert np.abs(array).max() <= 1.0 and np.linalg.norm(array) > 0.9 * math.sqrt(1000)


@pytest.mark.parametrize(("lo", "hi", "extra", "first", "second", "last"), [
    (-math.inf, math.inf, {"Min_except_inf_nan": -2.0, "Max_except_inf_nan": 3.0}, -math.inf, None, math.inf),
    (math.nan, math.nan, {"Min_except_inf_nan": -2.0, "Max_except_inf_nan": 3.0}, -2.0, math.nan, 3.0),
    (math.nan, math.nan, {}, -1.0, math.nan, 1.0),                 # nothing finite known: [-1, 1]
    (0.0, math.inf, {}, 0.0, None, math.inf),
])
def test_inf_nan_statistics(lo, hi, extra, first, second, last):
    item = {**t(shape=(20,), lo=lo, hi=hi, mean=math.nan, norm=math.nan), **extra}
    array = generate(TensorSpec.from_item(item), np.random.default_rng(0))
    assert (array[0] == first) if not math.isnan(first) else math.isnan(array[0])
    assert array[-1] == last
    if second is not None and math.isnan(second):
        assert math.isnan(array[1])
    finite = array[np.isfinite(array)]
    assert finite.size >= 17


def test_low_precision_dtypes():
    for dtype, torch_dtype in (("torch.float16", torch.float16), ("torch.bfloat16", torch.bfloat16),
                               ("torch.float64", torch.float64), ("torch.complex64", torch.complex64)):
        case_item = t(dtype, (3, 3), 0.5, 8.0)
        spec = TensorSpec.from_item(case_item)
        tensor = torch.from_numpy(generate(spec, np.random.default_rng(0))).to(torch_dtype)
        values = tensor.abs() if tensor.is_complex() else tensor
        assert values.min().item() >= 0.5 - 1e-6 and values.max().item() <= 8.0 + 1e-5


def test_non_tensor_arguments_and_device_kwarg(tmp_path):
    args = [t(shape=(2, 3, 4)), [{"type": "slice", "value": [0, None, 1]}, {"type": "ellipsis", "value": "..."}]]
    case = one_call_dump(tmp_path, "Tensor.__getitem__.0", args)
    inputs = build_inputs(case)
    assert inputs.args[1] == [slice(0, None, 1), ...]
    assert inputs.args[0][tuple(inputs.args[1])].shape == (2, 3, 4)
    kwargs = {"dtype": {"type": "torch.dtype", "value": "torch.float64"},
              "device": {"type": "torch.device", "value": "npu:0"}}
    case = one_call_dump(tmp_path, "Torch.sum.0", [t()], kwargs)
    inputs = build_inputs(case)
    assert inputs.kwargs == {"dtype": torch.float64}
    case = one_call_dump(tmp_path, "Tensor.reshape.0", [t(shape=(2, 6)), {"type": "torch.Size", "value": [3, 4]}])
    assert build_inputs(case).args[1] == torch.Size([3, 4])


def test_cross_entropy_int32_target_becomes_int64(tmp_path):
    case = one_call_dump(tmp_path, "Functional.cross_entropy.0", [t(shape=(4, 3)), t("torch.int32", (4,), 0, 2)])
    inputs = build_inputs(case)
    assert inputs.args[1].dtype == torch.int64
    torch.nn.functional.cross_entropy(*inputs.args)


def test_conv2d_fp32_inputs_rounded_to_hf32(tmp_path):
    case = one_call_dump(tmp_path, "Functional.conv2d.0", [t(shape=(1, 2, 5, 5)), t(shape=(3, 2, 3, 3))])
    inputs = build_inputs(case)
    bits = inputs.args[0].view(torch.int32)
    assert torch.all(bits & 0xFFF == 0)            # 11 explicit mantissa bits kept


def test_budget_counts_every_input_and_the_gradient(tmp_path):
    case = one_call_dump(tmp_path, "Torch.relu.0", [t(shape=(10, 10))],
                         backward={"input": [t(shape=(10, 10))], "output": [t(shape=(10, 10))]})
    assert required_bytes(case) == (200, 800)
    with pytest.raises(InputError, match="800 bytes"):
        build_inputs(case, max_bytes=799)
    assert build_inputs(case, max_bytes=800).grad_output.shape == (10, 10)


def test_case_problem_is_the_input_error(data_dir):
    case = load_dump(data_dir / "msprobe_repo_fixtures" / "npu_megatron_pytorch").by_name()["Distributed.all_reduce.0"]
    with pytest.raises(InputError, match="communication op"):
        build_inputs(case)


def test_summary_stays_short_for_many_tensors(tmp_path):
    case = one_call_dump(tmp_path, "Torch.cat.0", [[t(shape=(2,)) for _ in range(20)]])
    inputs = build_inputs(case)
    assert torch.cat(inputs.args[0]).shape == (40,)
    assert inputs.summary.count("float32[2]") == 8 and inputs.summary.endswith("... 12 more tensors")


@pytest.mark.parametrize(("value", "match"), [
    ({"type": "int8", "value": 1000}, "int8"),
    ({"type": "torch.Size", "value": [2 ** 70]}, "torch.Size"),
    ({"type": "float16", "value": "abc"}, "float16"),
])
def test_undecodable_values_are_input_errors(tmp_path, value, match):
    case = one_call_dump(tmp_path, "Torch.sum.0", [t(), value])
    with pytest.raises(InputError, match=rf"argument\[1\].*{match}.*cannot be decoded"):
        build_inputs(case)


def test_statistics_beyond_the_dtype_range_are_clamped():
    with np.errstate(over="raise"):
        array = generate(TensorSpec("float16", (10,), -1e10, 1e10), np.random.default_rng(0))
    assert array[0] == -65504.0 and array[-1] == 65504.0 and np.all(np.isfinite(array))


def test_all_infinite_tensor():
    array = generate(TensorSpec("float32", (5,), math.inf, math.inf), np.random.default_rng(0))
    assert np.all(array == math.inf)
