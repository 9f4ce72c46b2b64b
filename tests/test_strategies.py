"""generators.strategies: generated tensors honour dtype, shape, range and extremes; index tensors are valid."""
from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from generators.inputs import build_inputs, inputs_strategy, resolve_api
from generators.loader import load_dump
from generators.strategies import arrays_from_item, arrays_from_stats, index_arrays, tensors_from_stats

DATA = pathlib.Path(__file__).parent / "data"
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NO_SHRINK = settings(phases=[Phase.generate], max_examples=200, database=None, deadline=None)


def draw_one(strategy, condition=lambda a: True):
    """The first generated example satisfying ``condition`` (no shrinking: fast)."""
    return find(strategy, condition, settings=NO_SHRINK)


FLOAT_DTYPES = ["torch.float16", "torch.float32", "torch.float64", "torch.bfloat16"]
INT_DTYPES = ["torch.int64", "torch.int32", "torch.int16", "torch.int8", "torch.uint8"]


def _check_range(values: np.ndarray, lo, hi):
    flat = values.reshape(-1)
    assert flat.min() >= lo and flat.max() <= hi
    assert flat[-1] == hi                      # a 1-element tensor holds Max (msprobe's rule)
    assert flat.size == 1 or flat[0] == lo


@st.composite
def float_stats(draw):
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    width = 60000.0 if dtype == "torch.float16" else 2.0 ** 100
    a = draw(st.floats(-width, width, width=16 if dtype == "torch.float16" else 32))
    b = draw(st.floats(-width, width, width=16 if dtype == "torch.float16" else 32))
    if dtype == "torch.bfloat16":     # extremes recorded from a bf16 tensor are bf16 values
        a, b = (torch.tensor([a, b]).to(torch.bfloat16).float().tolist())
    return dtype, shape, min(a, b), max(a, b)


@FEW
@given(stats=float_stats(), data=st.data())
def test_float_arrays_match_dtype_shape_range_and_extremes(stats, data):
    dtype, shape, lo, hi = stats
    tensor = data.draw(tensors_from_stats(dtype=dtype, shape=shape, min_value=lo, max_value=hi))
    assert str(tensor.dtype) == dtype and tuple(tensor.shape) == shape
    _check_range(tensor.double().numpy(), lo, hi)


@FEW
@given(dtype=st.sampled_from(INT_DTYPES), lo=st.integers(-100, 100), span=st.integers(0, 100), data=st.data())
def test_int_arrays_match_range_and_extremes(dtype, lo, span, data):
    if dtype == "torch.uint8":
        lo = abs(lo)
    if dtype == "torch.int8":
        lo, span = max(lo, -100), min(span, 20)
    tensor = data.draw(tensors_from_stats(dtype=dtype, shape=(4, 5), min_value=lo, max_value=lo + span))
    assert str(tensor.dtype) == dtype
    _check_range(tensor.numpy(), lo, lo + span)


@pytest.mark.parametrize(("any_true", "all_true", "expected"), [
    (True, False, "mixed"), (False, False, "none"), (True, True, "all")])
def test_bool_statistics(any_true, all_true, expected):
    array = draw_one(arrays_from_stats(dtype="torch.bool", shape=(3, 4), min_value=all_true, max_value=any_true))
    assert array.dtype == bool and array.shape == (3, 4)
    assert {"mixed": array.any() and not array.all(), "none": not array.any(), "all": array.all()}[expected]


def test_zero_dim_and_empty_shapes():
    scalar = draw_one(arrays_from_stats(dtype="torch.float32", shape=(), min_value=2.5, max_value=2.5))
    assert scalar.shape == () and scalar == 2.5
    empty = draw_one(arrays_from_stats(dtype="torch.float32", shape=(0, 3)))
    assert empty.shape == (0, 3)


def test_inf_nan_statistics_use_except_inf_nan_bounds():
    strategy = arrays_from_stats(dtype="torch.float32", shape=(50,), min_value=-math.inf, max_value=math.nan,
                                 min_finite=-3.0, max_finite=4.0)
    array = draw_one(strategy)
    assert array[0] == -math.inf and math.isnan(array[1])
    finite = array[np.isfinite(array)]
    assert finite.min() >= -3.0 and finite.max() == 4.0


@FEW
@given(data=st.data())
def test_mean_and_norm_of_a_sample_dump_are_approximated(data):
    case = load_dump(DATA / "mlp_fp32_statistics_L1" / "step0" / "rank" / "dump.json").by_name()["Tensor.__mul__.0"]
    item = case.forward["input_args"][0]
    array = data.draw(arrays_from_item(item))
    assert array.shape == tuple(item["shape"])
    _check_range(array, item["Min"], item["Max"])


def test_stats_matched_at_full_magnitude():
    from generators.random_data import GenParams, TensorSpec, generate

    spec = TensorSpec("float32", (8, 32), -0.169906, 3.821907, 0.24405, 13.7375)
    array = generate(spec, np.random.default_rng(0), GenParams())
    assert array.mean() == pytest.approx(0.24405, rel=0.01)
    assert np.linalg.norm(array) == pytest.approx(13.7375, rel=0.01)


def test_edge_values_appear_and_stay_in_range():
    strategy = arrays_from_stats(dtype="torch.float32", shape=(4000,), min_value=-1.0, max_value=1.0,
                                 edge_values=True)
    array = draw_one(strategy, lambda a: bool(np.any((a != 0) & (np.abs(a) < np.finfo(np.float32).tiny))))
    assert array.min() >= -1.0 and array.max() <= 1.0
    signed = draw_one(strategy, lambda a: bool(np.any(np.signbit(a) & (a == 0))))
    assert signed.min() == -1.0


def test_shrinking_reduces_magnitude_but_keeps_extremes():
    strategy = arrays_from_stats(dtype="torch.float32", shape=(100,), min_value=-10.0, max_value=10.0)
    smallest = find(strategy, lambda a: bool(np.any(np.abs(a[1:-1]) > 0.5)))
    assert smallest[0] == -10.0 and smallest[-1] == 10.0
    # shrunk toward the simplest values: few interior elements stray far from 0
    assert np.mean(np.abs(smallest[1:-1])) < 5.0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dtype": "torch.float99", "shape": (2,)}, "dtype="),
    ({"dtype": "torch.float32", "shape": (-1,)}, "shape="),
    ({"dtype": "torch.float32", "shape": (2,), "min_value": 3.0, "max_value": 1.0}, "swap"),
    ({"dtype": "torch.float32", "shape": (2,), "min_value": "a"}, "min_value="),
    ({"dtype": "torch.float32", "shape": (2,), "norm": -1.0}, "norm="),
])
def test_argument_validation(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        arrays_from_stats(**kwargs)


def test_index_arrays_validation():
    with pytest.raises(InvalidArgument, match="size="):
        index_arrays(shape=(3,), size=0)
    with pytest.raises(InvalidArgument, match="integer dtype"):
        index_arrays(shape=(3,), size=4, dtype="torch.float32")


# --- index tensors valid for index-taking APIs (the API is actually called) ------------------------------
def tensor(dtype, shape, lo, hi):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": hi, "Min": lo,
            "Mean": None, "Norm": None, "requires_grad": False}


def i(v):
    return {"type": "int", "value": v}


F32, I64 = "torch.float32", "torch.int64"
INDEX_CASES = {   # (prefix, api, args, kwargs): index stats deliberately out of range (e.g. a dump of another size)
    "gather": ("Torch", "gather", [tensor(F32, (4, 5), -1, 1), i(1), tensor(I64, (4, 3), 0, 50)], {}),
    "Tensor.gather": ("Tensor", "gather", [tensor(F32, (4, 5), -1, 1), i(-1), tensor(I64, (4, 3), -5, 50)], {}),
    "index_select": ("Torch", "index_select", [tensor(F32, (6, 5), -1, 1), i(0), tensor(I64, (9,), 0, 90)], {}),
    "embedding": ("Functional", "embedding", [tensor(I64, (3, 7), 0, 1000), tensor(F32, (10, 4), -1, 1)], {}),
    "aten embedding": ("Aten", "embedding", [tensor(F32, (10, 4), -1, 1), tensor(I64, (3, 7), 0, 1000)], {}),
    "scatter_add": ("Torch", "scatter_add", [tensor(F32, (4, 5), -1, 1), i(1), tensor(I64, (4, 5), 0, 9),
                                            tensor(F32, (4, 5), -1, 1)], {}),
    "index_add": ("Torch", "index_add", [tensor(F32, (5, 3), -1, 1), i(0), tensor(I64, (4,), 0, 40),
                                        tensor(F32, (4, 3), -1, 1)], {}),
    "take_along_dim": ("Torch", "take_along_dim", [tensor(F32, (4, 5), -1, 1), tensor(I64, (4, 2), 0, 30)],
                       {"dim": i(1)}),
    "take": ("Torch", "take", [tensor(F32, (4, 5), -1, 1), tensor(I64, (6,), -100, 100)], {}),
    "cross_entropy": ("Functional", "cross_entropy", [tensor(F32, (8, 4), -1, 1), tensor(I64, (8,), 0, 9)], {}),
    "cross_entropy ignore": ("Functional", "cross_entropy", [tensor(F32, (8, 4), -1, 1),
                                                            tensor(I64, (8,), -100, 3)], {}),
    "nll_loss": ("Functional", "nll_loss", [tensor(F32, (8, 4, 2), -1, 0), tensor(I64, (8, 2), 0, 7)], {}),
}


def _case(tmp_path, prefix, api, args, kwargs):
    import json

    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                                "data": {f"{prefix}.{api}.0.forward": {"input_args": args, "input_kwargs": kwargs}}}))
    case = load_dump(path).cases[0]
    assert case.problem is None, case.problem
    return case


@pytest.mark.parametrize("label", sorted(INDEX_CASES))
def test_index_tensors_are_valid_for_the_api(tmp_path, label):
    prefix, api, args, kwargs = INDEX_CASES[label]
    case = _case(tmp_path, prefix, api, args, kwargs)
    func = resolve_api(case)
    for seed in range(5):
        inputs = build_inputs(case, random=True, seed=seed)
        func(*inputs.args, **inputs.kwargs)             # raises on an out-of-range index
    if label == "cross_entropy ignore":
        target = inputs.args[1]
        assert target[0].item() == -100 and target[1:].min().item() >= 0 and target.max().item() == 3


def test_inputs_strategy_draws_valid_examples(tmp_path):
    prefix, api, args, kwargs = INDEX_CASES["gather"]
    case = _case(tmp_path, prefix, api, args, kwargs)
    func = resolve_api(case)

    @settings(max_examples=15, deadline=None, database=None)
    @given(inputs=inputs_strategy(case, edge_values=True))
    def run(inputs):
        assert inputs.mode == "random" and inputs.params is not None
        func(*inputs.args, **inputs.kwargs)
        assert "seed" in repr(inputs)

    run()


def test_inputs_strategy_shrinks_a_failure_to_a_small_example():
    """A 'device' wrong only above a threshold is found, and the failing example shrinks toward seed 0."""
    case = load_dump(DATA / "mlp_fp32_statistics_L1" / "step0" / "rank" / "dump.json").by_name()["Torch.relu.0"]
    threshold = 1.0

    def fails(inputs):
        return bool((inputs.args[0][1:-1] > threshold).any())   # an interior value above the threshold

    found = find(inputs_strategy(case), fails, settings=settings(max_examples=200, database=None, deadline=None))
    assert fails(found) and found.seed is not None
    assert found.seed < 2 ** 16 and "random data, seed" in found.summary
