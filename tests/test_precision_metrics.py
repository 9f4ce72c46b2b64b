"""Metrics of the precision standard against hand-computed values, special cases and properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dumpers import metrics_engine as engine
from pytest_msprobe.precision import compare as M
from pytest_msprobe.precision import standards as S

SV104 = S.BENCHMARK_SMALL_VALUE_1_0_4
EPS64 = 2.0 ** -52


def fm(bench, device, dt, **kw):
    return M.float_metrics(np.asarray(bench), np.asarray(device), device_dtype=dt, **kw)


_DT = {"float16": S.FP16, "float32": S.FP32, "float64": "torch.float64"}


def cosine_similarity(bench, device):
    """The cosine cell of the legacy group (msprobe 1.0.4: non-finite values not matched up)."""
    return fm(bench, device, _DT[np.asarray(device).dtype.name], agree_nonfinite=False).cosine


def ulp_error(bench, device, params) -> float:
    """The ULP error (2.7) of one element."""
    return fm(np.asarray(bench).reshape(1), np.asarray(device).reshape(1), S.FP32, legacy=False,
              ulp=params).values["ulp_max"]


# ---------------------------------------------------------------------------------------------- fp32
class TestFp32HandComputed:
    """B = [1, 2, 4, 8] (float64), D = [1, 2, 4, 8.5] (float32): one element off by 0.5."""

    B = np.array([1.0, 2.0, 4.0, 8.0])
    D = np.array([1.0, 2.0, 4.0, 8.5], np.float32)

    def test_legacy(self):
        ms = fm(self.B, self.D, S.FP32)
        v = ms.values
        expected_cos = 89 / (math.sqrt(1 + 4 + 16 + 72.25) * math.sqrt(85))
        assert v["cosine"] == pytest.approx(expected_cos, abs=1e-15)
        assert ms.cosine.passed and ms.cosine.message == ""
        assert v["max_abs_err"] == 0.5 and type(v["max_abs_err"]) is np.float64
        assert v["hundred_ratio"] == v["thousand_ratio"] == v["ten_thousand_ratio"] == 0.75

    def test_benchmark(self):
        v = fm(self.B, self.D, S.FP32, legacy=False, small_value=SV104[S.FP32]).values
        assert v["small_value_err_ratio"] == 0 and type(v["small_value_err_ratio"]) is int
        assert v["rmse"] == math.sqrt(0.25 / 4 * (4 / (4 + 0.0001) + 0.0001))
        assert v["error_balance"] == 0.25
        assert v["max_rel_err"] == 0.0625 and type(v["max_rel_err"]) is np.float64
        assert v["mean_rel_err"] == 0.015625

    def test_ulp(self):
        v = fm(self.B, self.D, S.FP32, legacy=False, ulp=S.ULP_PARAMS[S.FP32]).values
        # eb = floor(log2 8) = 3, scale 2^(23-3): 0.5 * 2^20
        assert v["ulp_max"] == 524288.0 and type(v["ulp_max"]) is np.float64
        assert v["ulp_mean"] == 131072.0
        assert v["ulp_above_threshold_ratio"] == 0.25

    def test_absolute(self):
        v = fm(self.B, self.D, S.FP32, legacy=False, absolute=S.API_PRECISION_THRESHOLDS["add"][S.FP32]).values
        assert v == {"inf_nan_error_rate": 0, "rel_err_error_rate": 0.25, "abs_err_error_rate": 0}
        assert type(v["inf_nan_error_rate"]) is int and type(v["abs_err_error_rate"]) is int

    def test_binary(self):
        assert fm(self.B, self.D, S.FP32, binary=True).values["binary_error_rate"] == 0.25
        assert M.binary_error_rate(self.B, self.D) == 0.25


# ---------------------------------------------------------------------------------------------- fp16
def test_fp16_small_value_mask_and_float32_types():
    # positions 0, 1, 3 are small (|B| <= 1e-3); position 0 is off by more than atol 1e-5
    b = np.array([0.0005, 0.0001, 1.0, 0.0], np.float32)
    d = np.array([2.0 ** -11, 0.0001, 1.0 + 2.0 ** -10, 0.0], np.float16)
    v = fm(b, d, S.FP16, legacy=False, small_value=SV104[S.FP16]).values
    assert v["small_value_err_ratio"] == pytest.approx(1 / 3)
    # only position 2 is unmasked: Z^2 = 2^-20 there
    assert v["rmse"] == pytest.approx(math.sqrt(2.0 ** -20 / 4 * (4 / (4 - 3 + 0.0001) + 0.0001)), rel=1e-7)
    re = np.float32(2.0 ** -10) / (np.float32(1.0) + np.float32(2.0 ** -23))
    assert v["max_rel_err"] == re and type(v["max_rel_err"]) is np.float32
    assert v["mean_rel_err"] == re and type(v["mean_rel_err"]) is np.float32
    # delta in fp16: position 0 below, position 2 above -> balanced
    assert v["error_balance"] == 0.0


def test_fp16_ulp_subnormal_neighbour_is_one():
    # fp16 subnormal spacing is 2^-24; eb is clamped to min_eb = -14 so the scale is 2^24
    b = np.array([2.0 ** -20, 2.0 ** -20], np.float32)
    d = np.array([2.0 ** -20 + 2.0 ** -24, 2.0 ** -20], np.float16)
    v = fm(b, d, S.FP16, legacy=False, ulp=S.ULP_PARAMS[S.FP16]).values
    assert v["ulp_max"] == 1.0 and type(v["ulp_max"]) is np.float32
    assert v["ulp_mean"] == 0.5
    assert v["ulp_above_threshold_ratio"] == 0.0


def test_ulp_zero_bench_uses_eb_zero():
    # B = 0 -> eb = 0 (not min_eb): scale 2^10 for fp16
    v = fm(np.zeros(2, np.float32), np.array([2.0 ** -12, 0], np.float16), S.FP16, legacy=False,
           ulp=S.ULP_PARAMS[S.FP16]).values
    assert v["ulp_max"] == 0.25


def test_bf16_eps_is_two_to_minus_eight():
    assert M.relative_eps(np.float32, S.BF16) == 2.0 ** -8
    assert M.relative_eps(np.float32, S.FP16) == 2.0 ** -23
    assert M.relative_eps(np.float64, S.FP32) == 2.0 ** -52
    assert M.relative_eps(np.float16, S.FP16) == 2.0 ** -10
    b = np.array([1.0, 2.0], np.float32)
    d = np.array([1.0 + 2.0 ** -7, 2.0], np.float32)
    v = fm(b, d, S.BF16, legacy=False, small_value=SV104[S.BF16]).values
    assert v["max_rel_err"] == np.float32(2.0 ** -7) / np.float32(1 + 2.0 ** -8)


def test_fp16_eb_rounds_bench_to_fp16_first():
    # bench 1 + 2^-13 rounds to 1.0 in fp16, so a device 1.0 is neither above nor below
    b = np.array([1.0 + 2.0 ** -13, 3.0], np.float32)
    d = np.array([1.0, 3.0], np.float16)
    assert fm(b, d, S.FP16, legacy=False, small_value=SV104[S.FP16]).values["error_balance"] == 0.0
    assert fm(b, d.astype(np.float32), S.BF16, legacy=False,
              small_value=SV104[S.BF16]).values["error_balance"] == 0.5


# ---------------------------------------------------------------------------------------------- cosine
@pytest.mark.parametrize("b, d, value, passed, msg", [
    ([3.0], [3.0], None, True, M.MSG_SCALAR),
    ([0.0, 0.0], [0.0, 0.0], None, True, M.MSG_BOTH_ZERO),
    ([1.0, 0.0], [0.0, 0.0], None, False, M.MSG_DEVICE_ZERO),
    ([0.0, 0.0], [1.0, 0.0], None, False, M.MSG_BENCH_ZERO),
    ([1.0, 0.0], [0.0, 1.0], 0.0, False, ""),
    ([1.0, 1.0], [-1.0, -1.0], -1.0, False, ""),
    ([1.0, 2.0], [2.0, 4.0], 1.0, True, ""),
])
def test_cosine_cases(b, d, value, passed, msg):
    res = cosine_similarity(np.array(b), np.array(d, np.float32))
    assert res == (value, passed, msg) or (res.value == pytest.approx(value) and res[1:] == (passed, msg))


def test_cosine_zero_test_uses_eps64():
    tiny = np.array([1e-17, 0.0])
    assert cosine_similarity(tiny, tiny).message == M.MSG_BOTH_ZERO


def test_different_lengths_are_refused():
    with pytest.raises(ValueError, match="compare shapes first"):
        cosine_similarity(np.ones(3), np.ones(2))


def test_cosine_empty_raises_like_numpy():
    with pytest.raises(ValueError, match="zero-size array"):
        cosine_similarity(np.zeros(0), np.zeros(0, np.float32))


def test_plain_helpers_of_the_engine_return_python_floats():
    """What online dispatch asks the engine: a plain cosine and max abs error."""
    b, d = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.5], np.float32)
    assert type(engine.cosine(b, d)) is float and 0.99 < engine.cosine(b, d) < 1
    assert engine.max_abs_error(b, d) == 0.5 and type(engine.max_abs_error(b, d)) is float
    assert engine.cosine(np.zeros(2), np.zeros(2)) == 1.0
    assert math.isnan(engine.cosine(np.zeros(2), np.ones(2)))
    assert engine.max_abs_error(np.zeros(0), np.zeros(0)) == 0.0
    assert math.isnan(engine.cosine(np.zeros(0), np.zeros(0)))


# ---------------------------------------------------------------------------------------------- inf / nan
def test_nan_one_side_is_nan_cosine():
    b, d = np.array([1.0, 2.0, 3.0]), np.array([1.0, np.nan, 3.0], np.float32)
    for agree in (True, False):
        ms = fm(b, d, S.FP32, agree_nonfinite=agree)
        assert math.isnan(ms.values["cosine"]) and not ms.cosine.passed
        assert ms.cosine.message == M.MSG_COS_NAN
        assert math.isnan(ms.values["max_abs_err"])
    assert fm(b, d, S.FP32).nonfinite_mismatch == 1


def test_both_nan_agree_only_with_the_fix():
    b, d = np.array([1.0, np.nan, 3.0]), np.array([1.0, np.nan, 3.0], np.float32)
    fixed = fm(b, d, S.FP32, binary=True)
    assert fixed.values["cosine"] == 1.0 and fixed.values["max_abs_err"] == 0.0
    assert fixed.values["thousand_ratio"] == 1.0 and fixed.values["binary_error_rate"] == 0.0
    assert fixed.nonfinite_agreed == 1
    raw = fm(b, d, S.FP32, binary=True, agree_nonfinite=False)
    assert math.isnan(raw.values["cosine"]) and raw.values["binary_error_rate"] == pytest.approx(1 / 3)
    assert raw.values["thousand_ratio"] == pytest.approx(2 / 3)


def test_fp16_overflow_agrees_with_bench_beyond_range():
    b = np.array([70000.0, 1.0, 2.0], np.float32)       # 70000 -> inf in fp16
    d = np.array([np.inf, 1.0, 2.0], np.float16)
    ms = fm(b, d, S.FP16)
    assert ms.nonfinite_agreed == 1 and ms.cosine.passed and ms.values["max_abs_err"] == 0
    opposite = fm(b, np.array([-np.inf, 1.0, 2.0], np.float16), S.FP16)
    assert opposite.nonfinite_mismatch == 1 and not opposite.cosine.passed


def test_benchmark_masks_inf_nan_and_small_values():
    b = np.array([np.inf, 1e-7, 1.0, 2.0])
    d = np.array([np.inf, 5e-7, 1.5, 2.0], np.float32)
    v = fm(b, d, S.FP32, legacy=False, small_value=SV104[S.FP32]).values
    # masked: inf (position 0) and the small value (position 1)
    assert v["rmse"] == pytest.approx(math.sqrt(0.25 / 4 * (4 / (4 - 2 + 0.0001) + 0.0001)))
    assert v["max_rel_err"] == pytest.approx(0.5)
    assert v["mean_rel_err"] == pytest.approx(0.25)
    assert v["small_value_err_ratio"] == 1.0      # |5e-7 - 1e-7| > 1e-9


def test_absolute_inf_nan_error_rate_and_class_match():
    thr = S.API_PRECISION_THRESHOLDS["mul"][S.FP16]
    b = np.array([np.inf, np.nan, 1e6, 1.0], np.float32)     # 1e6 overflows fp16 -> inf
    d = np.array([100.0, np.nan, np.inf, 1.0], np.float16)
    fixed = fm(b, d, S.FP16, legacy=False, absolute=thr).values
    raw = fm(b, d, S.FP16, legacy=False, absolute=thr, absolute_class_match=False).values
    # msprobe: a bench inf divides by inf -> any finite device value is accepted
    assert raw["inf_nan_error_rate"] == 0.0
    # fixed: position 0 (bench inf, device finite) fails; 1 (both nan) and 2 (both inf) pass
    assert fixed["inf_nan_error_rate"] == pytest.approx(1 / 3)
    assert fixed["rel_err_error_rate"] == 0.0


def test_absolute_small_and_normal_rates():
    thr = S.AbsoluteThreshold(rtol=1e-3, sv=1e-3, atol=1e-5)
    b = np.array([1e-4, 5e-4, 1.0, 2.0], np.float32)
    d = np.array([1.5e-4, 5e-4, 1.01, 2.0], np.float16)
    v = fm(b, d, S.FP16, legacy=False, absolute=thr).values
    assert v["abs_err_error_rate"] == 0.5       # 1e-4 vs ~1.5e-4 fails, 5e-4 within 1e-5
    assert v["rel_err_error_rate"] == 0.5       # 1.01 vs 1 fails, 2 vs 2 passes
    assert v["inf_nan_error_rate"] == 0


# ---------------------------------------------------------------------------------------------- empty, scalar, ints
def test_empty_outputs():
    b, d = np.zeros(0), np.zeros(0, np.float32)
    v = fm(b, d, S.FP32, legacy=False, small_value=SV104[S.FP32], ulp=S.ULP_PARAMS[S.FP32]).values
    assert math.isnan(v["rmse"]) and v["error_balance"] == 0
    assert v["ulp_max"] == v["ulp_mean"] == v["ulp_above_threshold_ratio"] == 0
    assert M.binary_error_rate(b, d) == "Nan"


def test_zero_dim_arrays():
    ms = fm(np.array(2.0), np.array(2.5, np.float32), S.FP32)
    assert ms.cosine.message == M.MSG_SCALAR and ms.values["max_abs_err"] == 0.5


def test_binary_rate_on_ints_and_bools():
    assert M.binary_error_rate(np.array([1, 2, 3, 4]), np.array([1, 2, 3, 5])) == 0.25
    assert M.binary_error_rate(np.array([True, False]), np.array([True, True])) == 0.5
    assert M.binary_error_rate(np.array(7, np.int8), np.array(7, np.int8)) == 0.0


# ---------------------------------------------------------------------------------------------- chunking
def test_chunked_equals_single_pass():
    rng = np.random.default_rng(0)
    b = rng.standard_normal(10_000).astype(np.float32)
    b[::97] = 1e-5
    d = (b + rng.standard_normal(10_000).astype(np.float32) * 1e-3).astype(np.float16)
    d[5] = np.inf
    b[5] = 1e6
    kw = {"small_value": SV104[S.FP16], "ulp": S.ULP_PARAMS[S.FP16], "binary": True,
              "absolute": S.API_PRECISION_THRESHOLDS["add"][S.FP16]}
    one = fm(b, d, S.FP16, chunk=1 << 20, **kw).values
    many = fm(b, d, S.FP16, chunk=777, **kw).values
    assert one.keys() == many.keys()
    for k in one:
        assert many[k] == pytest.approx(one[k], rel=1e-6), k
        assert type(many[k]) is type(one[k]), k


def test_sources_are_read_in_chunks():
    class Counting(M.ArraySource):
        reads = 0

        def read(self, start, stop):
            Counting.reads += 1
            assert stop - start <= 1000
            return super().read(start, stop)

    b = Counting(np.linspace(1, 2, 5000))
    d = Counting(np.linspace(1, 2, 5000).astype(np.float32))
    v = M.float_metrics(b, d, device_dtype=S.FP32, chunk=1000, small_value=SV104[S.FP32]).values
    assert v["cosine"] == pytest.approx(1.0) and Counting.reads == 10   # 2 sources x 5 chunks, one pass


# ---------------------------------------------------------------------------------------------- properties
finite32 = hnp.arrays(np.float32, st.integers(2, 64),
                      elements=st.floats(-1e6, 1e6, allow_nan=False, width=32))


@settings(max_examples=60, deadline=None)
@given(finite32)
def test_identical_inputs_give_zero_errors(x):
    b = x.astype(np.float64)
    ms = fm(b, x, S.FP32, binary=True, small_value=SV104[S.FP32])
    v = ms.values
    assert v["max_abs_err"] == 0 and v["binary_error_rate"] == 0
    assert v["hundred_ratio"] == v["thousand_ratio"] == v["ten_thousand_ratio"] == 1.0
    assert v["rmse"] == 0 and v["error_balance"] == 0 and v["max_rel_err"] == 0
    assert v["small_value_err_ratio"] == 0
    if np.abs(x).max() > EPS64:
        assert v["cosine"] == pytest.approx(1.0) and ms.cosine.passed
    u = fm(b, x, S.FP32, legacy=False, ulp=S.ULP_PARAMS[S.FP32]).values
    assert u["ulp_max"] == 0 and u["ulp_above_threshold_ratio"] == 0


@pytest.mark.parametrize("dt, np_type, compute", [(S.FP16, np.float16, np.float32),
                                                   (S.FP32, np.float32, np.float64)])
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_ulp_of_adjacent_floats_is_one(dt, np_type, compute, data):
    info = np.finfo(np_type)
    x = np_type(data.draw(st.floats(-float(info.max) / 2, float(info.max) / 2, width=np.dtype(np_type).itemsize * 8,
                                    allow_nan=False, allow_infinity=False).filter(lambda v: v != 0)))
    away = np.nextafter(x, np_type(np.copysign(np.inf, x)))
    assert ulp_error(np.array([x], compute), np.array([away]), S.ULP_PARAMS[dt]) == 1.0


@settings(max_examples=60, deadline=None)
@given(st.integers(-120, 126), st.integers(0, 127), st.booleans())
def test_ulp_of_adjacent_bf16_is_one(exp, mant, neg):
    # below 2^-120 the float32 scale 2^(7 - eb) overflows (see test_bf16_ulp_scale_overflows)
    bits = np.uint32((exp + 127) << 23 | mant << 16 | (1 << 31 if neg else 0))
    x = bits.view(np.float32)
    nxt = (bits + np.uint32(1 << 16)).view(np.float32)   # next bf16 away from zero
    assert ulp_error(np.array([x]), np.array([nxt]), S.ULP_PARAMS[S.BF16]) == 1.0


@settings(max_examples=40, deadline=None)
@given(finite32, finite32)
def test_symmetry(x, y):
    n = min(x.size, y.size)
    x, y = x[:n], y[:n]
    # cosine and binary rate are symmetric; max abs error is symmetric
    c1 = cosine_similarity(x.astype(np.float64), y)
    c2 = cosine_similarity(y.astype(np.float64), x)
    assert (c1.value is None and c2.value is None) or c1.value == pytest.approx(c2.value, abs=1e-12)
    assert M.binary_error_rate(x, y) == M.binary_error_rate(y, x)
    assert engine.max_abs_error(x, y) == engine.max_abs_error(y, x)


def test_relative_errors_are_not_symmetric():
    # relative errors divide by the bench, so swapping sides changes them
    a, b = np.array([1.0, 1.0]), np.array([2.0, 1.0])
    r1 = fm(a, b.astype(np.float32), S.FP32).values
    v1 = fm(a, b.astype(np.float32), S.FP32, legacy=False, small_value=SV104[S.FP32]).values
    v2 = fm(b, a.astype(np.float32), S.FP32, legacy=False, small_value=SV104[S.FP32]).values
    assert v1["max_rel_err"] == pytest.approx(1.0) and v2["max_rel_err"] == pytest.approx(0.5)
    assert r1["hundred_ratio"] == 0.5


def test_bf16_ulp_scale_overflows_below_two_to_minus_120():
    # the spec computes the scale 2^(7 - eb) in float32: eb = -121 gives 2^128 = inf
    x = np.array([2.0 ** -121], np.float32)
    assert np.isinf(ulp_error(x, x * np.float32(1 + 2.0 ** -7), S.ULP_PARAMS[S.BF16]))
