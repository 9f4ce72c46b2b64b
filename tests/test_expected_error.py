"""The expected-error model: dtype parsing, reduction lengths, and its figures against correct kernels.

The checks hold observed errors of real torch kernels (against float64) to the model's own bound; the planted
faults are sized from the dtype (several times its unit roundoff), so nothing here depends on this machine.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_msprobe.precision import expected_error as ee

ROOT = Path(__file__).resolve().parent.parent


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


@pytest.mark.parametrize("spelling, u", [
    (torch.bfloat16, 2.0 ** -8), ("bfloat16", 2.0 ** -8), ("BF16", 2.0 ** -8), ("torch.bfloat16", 2.0 ** -8),
    (np.float32, 2.0 ** -24), (np.dtype("float16"), 2.0 ** -11), ("hf32", 2.0 ** -12), ("fp32", 2.0 ** -24),
    ("torch.float64", 2.0 ** -53), (torch.int64, 0.0), ("bool", 0.0),
])
def test_unit_roundoff_spellings(spelling, u):
    assert ee.unit_roundoff(spelling) == u


def test_unit_roundoff_unknown_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown dtype 'float7'.*bfloat16"):
        ee.unit_roundoff("float7")


def test_unit_roundoff_is_half_the_gap_above_one():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert ee.unit_roundoff(dtype) == torch.finfo(dtype).eps / 2


def test_hf32_is_the_rounding_the_checker_applies():
    """generators.inputs rounds fp32 conv inputs to 11 stored mantissa bits: relative error <= u(hf32)."""
    from generators.inputs import _hf32
    x = torch.randn(10000, generator=torch.Generator().manual_seed(1))
    rel = ((_hf32(x).double() - x.double()).abs() / x.double().abs()).max().item()
    assert 0.5 * ee.unit_roundoff("hf32") < rel <= ee.unit_roundoff("hf32")


@pytest.mark.parametrize("api, shapes, kwargs, out, direction, index, n", [
    ("linear", [(4, 16), (8, 16)], {}, (4, 8), "forward", 0, 16),
    ("Functional.linear.0", [(2, 4, 16), (8, 16), (8,)], {}, None, "backward", 0, 8),
    ("linear", [(2, 4, 16), (8, 16), (8,)], {}, None, "backward", 1, 8),
    ("matmul", [(3, 5, 7), (7, 2)], {}, None, "forward", 0, 7),
    ("addmm", [(5, 2), (5, 9), (9, 2)], {}, None, "forward", 0, 9),
    ("conv2d", [(1, 3, 8, 8), (8, 3, 3, 3)], {}, None, "forward", 0, 27),
    ("sum", [(6, 100)], {}, (6,), "forward", 0, 100),
    ("mean", [(6, 10, 4)], {"dim": (1, 2)}, None, "forward", 0, 40),
    ("softmax", [(6, 10, 4)], {"dim": 1}, None, "forward", 0, 10),
    ("layer_norm", [(6, 32), (32,), (32,)], {"normalized_shape": (32,)}, None, "forward", 0, 32),
    ("layer_norm", [(6, 32), (32,), (32,)], {"normalized_shape": (32,)}, None, "backward", 1, 6),
    ("gelu", [(6, 32)], {}, None, "forward", 0, 1),
])
def test_reduction_length(api, shapes, kwargs, out, direction, index, n):
    assert ee.reduction_length(api, shapes, kwargs, output_shape=out, direction=direction, index=index) == n


def test_op_family_from_dump_names():
    assert ee.op_family("Functional.conv2d.3") == "gemm"
    assert ee.op_family("Torch.softmax.0") == "softmax"
    assert ee.op_family("Tensor.__add__.1") == "elementwise"
    assert ee.op_family("Functional.gelu.0") == "transcendental"


def _gemm(dtype: torch.dtype, n: int, seed: int) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(32, n, generator=gen).to(dtype)
    b = torch.randn(n, 16, generator=gen).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [16, 1024])
def test_correct_gemm_is_within_and_a_planted_fault_beyond(dtype, n):
    a, b = _gemm(dtype, n, n)
    exact = _np(a) @ _np(b)
    out = a @ b
    expected = ee.expected_error("matmul", dtype, [_np(a), _np(b)], _np(out))
    observed = ee.observe(_np(out), exact)
    assert observed.max_abs <= expected.max_abs
    assert ee.classify(ee.multiple(observed, expected)) == ee.WITHIN_ROUNDING
    # 0.5% on every element (8 unit roundoffs where that is more: 3% in bf16) is beyond rounding
    faulty = (out.double() * (1 + max(0.005, 8 * ee.unit_roundoff(dtype)))).to(dtype)
    assert ee.classify(ee.multiple(ee.observe(_np(faulty), exact), expected)) == ee.BEYOND_ROUNDING


def test_two_correct_bf16_runs_are_within_and_half_a_percent_is_beyond():
    """A replay against a recording: both rounded to bf16, so a 0.5% fault (under one bf16 ulp on some
    elements) hides in the max-abs difference and shows in the mean, which the final rounding does not move."""
    a, b = _gemm(torch.bfloat16, 2048, 7)
    native = a @ b
    widened = (a.float() @ b.float()).to(torch.bfloat16)           # float32 accumulation, rounded once
    pair = ee.expected_error("matmul", torch.bfloat16, [_np(a), _np(b)], _np(native)).pair()
    assert ee.classify(ee.multiple(ee.observe(_np(native), _np(widened)), pair)) != ee.BEYOND_ROUNDING
    faulty = (native.float() * 1.005).to(torch.bfloat16)
    m = ee.multiple(ee.observe(_np(faulty), _np(native)), pair)
    assert ee.classify(m) == ee.BEYOND_ROUNDING and m > 10 * ee.WITHIN


def test_hf32_inputs_are_within_rounding_of_the_unrounded_recording():
    from generators.inputs import _hf32
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(2, 16, 10, 10, generator=gen), torch.randn(8, 16, 3, 3, generator=gen)
    recorded = torch.nn.functional.conv2d(x, w)
    replayed = torch.nn.functional.conv2d(_hf32(x), _hf32(w))
    expected = ee.expected_error("conv2d", torch.float32, [_np(x), _np(w)], _np(replayed), input_dtype="hf32")
    m = ee.multiple(ee.observe(_np(replayed), _np(recorded)), expected.pair())
    assert 0 < m <= ee.WITHIN
    # without the HF32 term the same difference is far beyond fp32 rounding
    plain = ee.expected_error("conv2d", torch.float32, [_np(x), _np(w)], _np(replayed))
    assert ee.multiple(ee.observe(_np(replayed), _np(recorded)), plain.pair()) > 10 * ee.WITHIN


def test_inputs_are_measured_only_where_the_figures_need_them():
    """Tensors as inputs: an element-wise call's figures come from its output alone, so its inputs are never
    measured (nor converted); a GEMM measures both operands once for all its rows; both figures equal those of
    the inputs as numpy arrays (bf16 through float32), bit for bit."""
    a, b = _gemm(torch.bfloat16, 64, 9)
    out = a @ b
    cache: dict = {}
    total = a + a
    add = ee.expected_error("add", torch.bfloat16, [a, a], _np(total), cache=cache)
    assert cache == {}
    assert add == ee.expected_error("add", torch.bfloat16, [a.float().numpy()] * 2, _np(total))
    matmul = ee.expected_error("matmul", torch.bfloat16, [a, b], _np(out), cache=cache)
    assert set(cache) == {id(a), id(b)}
    assert matmul == ee.expected_error("matmul", torch.bfloat16, [a.float().numpy(), b.float().numpy()], _np(out))


def test_statistics_give_the_figures_of_the_tensors():
    """A compare of two statistics dumps gets about what the full tensors give (same magnitudes)."""
    a, b = _gemm(torch.float32, 512, 5)
    out = a @ b

    def stat(t):
        return {"dtype": "torch.float32", "shape": list(t.shape), "Max": t.max().item(), "Min": t.min().item(),
                "Mean": t.mean().item(), "Norm": t.norm().item()}
    full = ee.expected_error("matmul", "float32", [_np(a), _np(b)], _np(out))
    stats = ee.expected_error_from_stats("matmul", "torch.float32", [stat(a), stat(b)], stat(out))
    assert stats.reduction_length == full.reduction_length == 512
    assert 0.5 < stats.max_abs / full.max_abs < 2.0
    assert "statistics" in stats.basis and "tensors" in full.basis


def test_input_error_raises_the_expectation():
    a, b = _gemm(torch.float32, 256, 9)
    base = ee.expected_error("matmul", "float32", [_np(a), _np(b)], _np(a @ b))
    off = ee.expected_error("matmul", "float32", [_np(a), _np(b)], _np(a @ b), input_rel_error=1e-3)
    assert off.max_abs > 100 * base.max_abs


def test_loss_and_gradient_tolerances_for_attribution():
    """A bf16 loss (mean of per-token losses) from statistics: rounding-sized, relative ~ u."""
    loss = ee.expected_error_from_stats("cross_entropy", "bfloat16",
                                        [ee.TensorStat("torch.bfloat16", (512, 1000), 9.0, -9.0, 0.0, 2263.0)],
                                        ee.TensorStat("torch.bfloat16", (), 7.1, 7.1, 7.1, 7.1))
    assert ee.unit_roundoff("bfloat16") <= loss.relative < 100 * ee.unit_roundoff("bfloat16")


def test_multiple_and_classify_edges():
    e = ee.expected_error("add", "float32", [np.ones(4)], np.ones(4))
    assert ee.multiple(0.0, e) == 0.0 and ee.classify(0.0) == ee.EXACT
    assert ee.multiple(float("nan"), e) == math.inf
    assert ee.classify(ee.WITHIN) == ee.WITHIN_ROUNDING and ee.classify(ee.WITHIN * 1.01) == ee.BEYOND_ROUNDING
    exact = ee.expected_error("add", torch.int64, [np.ones(4)], np.ones(4))
    assert exact.max_abs == 0.0 and ee.multiple(1.0, exact) == math.inf and ee.multiple(0.0, exact) == 0.0


def test_observe_treats_matching_nonfinite_as_equal():
    a = np.array([1.0, np.nan, np.inf, 2.0])
    assert ee.observe(a, a.copy()) == ee.Observed(0.0, 0.0, 0)
    b = a.copy()
    b[2] = 5.0
    assert ee.observe(a, b).mismatched_nonfinite == 1 and ee.observe(a, b).max_abs == math.inf


def test_with_measurement_only_raises():
    e = ee.expected_error("gelu", "float32", [np.ones(8)], np.ones(8))
    assert ee.with_measurement(e, ee.Observed(0.0, 0.0), "x") is e
    raised = ee.with_measurement(e, ee.Observed(1.0, 0.5), "float32 path")
    assert raised.measured and raised.max_abs == 1.0 and "float32 path" in raised.basis


def test_quick_validation_meets_the_bar():
    """The benchmark's quick version: >= 99% of correct outputs bounded, median estimate within 10x."""
    spec = importlib.util.spec_from_file_location("eev", ROOT / "benchmarks" / "expected_error_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.set_num_threads(1)
    rows = mod.summarise(mod.validate((16, 256), trials=1, seed=1))
    assert rows
    for fam, dname, count, coverage, median, _p99, within, _skipped in rows:
        assert count and coverage >= 99.0, (fam, dname, coverage)
        assert median <= 10.0, (fam, dname, median)
        assert within >= 99.0, (fam, dname, within)
