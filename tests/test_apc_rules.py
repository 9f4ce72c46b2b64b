"""Ratio rules and per-algorithm verdicts of api_precision_compare (spec sections 5.3-5.6, 8, 9)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_msprobe.precision import apc_rules as R
from pytest_msprobe.precision.standards import TOPK_HINT, get_standard

V104 = get_standard("1.0.4")
V262 = get_standard("26.2")
RULES104 = R.APC_RULES["1.0.4"]
RULES262 = R.APC_RULES["26.2"]
FP16, BF16, FP32 = "torch.float16", "torch.bfloat16", "torch.float32"
SOURCES = [m.source for m in R.BENCHMARK_METRICS]


def bench(api="gelu", dtype=FP32, std=V104, **ratios):
    """benchmark_verdict with GPU values 1.0 and NPU values = the wanted ratio (by metric key)."""
    npu = {m.source: float(ratios.get(m.key, 1.0)) for m in R.BENCHMARK_METRICS}
    gpu = {m.source: 1.0 for m in R.BENCHMARK_METRICS}
    return R.benchmark_verdict(npu, gpu, api=api, dtype=dtype, std=std)


# ---------------------------------------------------------------------------------------------- ratio
class TestRatio104:
    def test_plain_ratio_is_absolute_quotient(self):
        assert R.ratio(3.0, -2.0, V104) == 1.5
        assert R.ratio(-3.0, 2.0, V104) == 1.5

    def test_both_zero_is_one(self):
        assert R.ratio(0.0, 0.0, V104) == 1.0

    def test_gpu_zero_npu_nonzero_is_10000(self):
        assert R.ratio(1e-12, 0.0, V104) == 10000.0
        assert R.ratio(-5.0, -0.0, V104) == 10000.0

    def test_no_floor_for_tiny_gpu_values(self):
        assert R.ratio(2e-9, 1e-9, V104, FP16) == pytest.approx(2.0)

    @pytest.mark.parametrize("x,y", [(math.nan, 1.0), (1.0, math.inf), (math.inf, math.inf), (math.nan, math.nan)])
    def test_nonfinite_gives_nan(self, x, y):
        assert math.isnan(R.ratio(x, y, V104))


class TestRatio262:
    @pytest.mark.parametrize("dtype,floor", [(FP16, 2.0 ** -11), (BF16, 2.0 ** -8), (FP32, 2.0 ** -14),
                                             ("torch.float8_e4m3fn", 2.0 ** -14)])
    def test_zero_gpu_uses_dtype_floor(self, dtype, floor):
        assert R.ratio(1.0, 0.0, V262, dtype) == 1.0 / floor

    def test_both_zero_is_zero(self):
        assert R.ratio(0.0, 0.0, V262, FP16) == 0.0

    def test_floor_applies_below_it(self):
        assert R.ratio(2.0 ** -12, 2.0 ** -20, V262, FP16) == 0.5    # |x| / max(|y|, 2^-11)

    def test_above_floor_plain_ratio(self):
        assert R.ratio(3.0, 2.0, V262, FP32) == 1.5

    def test_nonfinite_gives_nan(self):
        assert math.isnan(R.ratio(math.inf, 0.0, V262, FP32))


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False))
def test_ratio_is_never_negative(x, y):
    for std in (V104, V262):
        r = R.ratio(x, y, std, FP16)
        assert r >= 0 or math.isinf(r)


@given(st.floats(min_value=0, max_value=1e6), st.floats(min_value=1e-300, max_value=1e6))
def test_npu_not_worse_than_gpu_never_warns_104(x, y):
    if x <= y:
        assert R.limit_status(R.ratio(x, y, V104), 2, 1, V104) == "pass"


# ------------------------------------------------------------------------------------ nonfinite pairs
@pytest.mark.parametrize("x,y,expected", [
    (1.0, 2.0, None), (math.inf, math.inf, True), (-math.inf, -math.inf, True), (math.inf, -math.inf, False),
    (math.inf, 1.0, False), (math.nan, math.nan, True), (math.nan, 1.0, False), (math.nan, math.inf, False),
])
def test_nonfinite_consistency(x, y, expected):
    assert R.nonfinite_consistency(x, y) is expected


def test_nonfinite_messages():
    assert R.nonfinite_message("均方根误差", True) == "均方根误差同为同号inf或nan\n"
    assert R.nonfinite_message("均方根误差", False) == "均方根误差inf或nan不一致\n"
    assert R.nonfinite_message("均方根误差", None) == ""


# --------------------------------------------------------------------------- benchmark limits (1.0.4)
class TestBenchmark104:
    @pytest.mark.parametrize("key", ["small_value_err_ratio", "rmse", "mean_rel_err"])
    @pytest.mark.parametrize("value,status", [(0.5, "pass"), (1.0, "pass"), (1.000001, "Warning"),
                                              (2.0, "Warning"), (2.000001, "error"), (10.0, "error")])
    def test_limit_2_metrics(self, key, value, status):
        v = bench(**{key: value})
        column = next(m.status_column for m in R.BENCHMARK_METRICS if m.key == key)
        assert v.cells[column] == status
        assert v.status == status

    @pytest.mark.parametrize("value,status", [(1.0, "pass"), (2.0, "Warning"), (2.5, "Warning"),
                                              (10.0, "Warning"), (10.000001, "error")])
    def test_max_rel_limit_10(self, value, status):
        v = bench(max_rel_err=value)
        assert v.cells["相对误差最大值判定结果"] == status
        assert v.status == status

    def test_error_balance_is_reported_not_counted(self):
        v = bench(error_balance=50.0)
        assert v.cells["误差均衡性判定结果"] == "error"
        assert v.cells["误差均衡性比值"] == 50.0
        assert v.status == "pass"
        assert v.message == ""

    def test_messages_in_metric_order_with_prefixes(self):
        v = bench(small_value_err_ratio=1.5, rmse=3.0, max_rel_err=11.0, mean_rel_err=1.2)
        assert v.status == "error"
        assert v.algorithm == "标杆比对法"
        assert v.message == ("WARNING: 小值域错误比值超过阈值\nERROR: 均方根误差比值超过阈值\n"
                             "ERROR: 相对误差最大值比值超过阈值\nWARNING: 相对误差平均值比值超过阈值\n")

    def test_all_ones_pass_with_ratio_cells(self):
        v = bench()
        assert v.status == "pass" and v.message == ""
        assert [v.cells[m.ratio_column] for m in R.BENCHMARK_METRICS] == [1.0] * 5

    def test_zero_denominators(self):
        npu = dict.fromkeys(SOURCES, 0.0) | {"均方根误差": 1e-9}
        gpu = dict.fromkeys(SOURCES, 0.0)
        v = R.benchmark_verdict(npu, gpu, api="gelu", dtype=FP32, std=V104)
        assert v.cells["小值域错误比值"] == 1.0
        assert v.cells["均方根误差比值"] == 10000.0
        assert v.cells["均方根误差判定结果"] == "error"
        assert v.status == "error"

    def test_nan_ratio_consistent_passes_with_fragment(self):
        npu = dict.fromkeys(SOURCES, 1.0) | {"均方根误差": math.nan}
        gpu = dict.fromkeys(SOURCES, 1.0) | {"均方根误差": math.nan}
        v = R.benchmark_verdict(npu, gpu, api="gelu", dtype=FP32, std=V104)
        assert math.isnan(v.cells["均方根误差比值"])
        assert v.cells["均方根误差判定结果"] == "pass"
        assert v.status == "pass"
        assert v.message == "均方根误差同为同号inf或nan\n"

    def test_inconsistent_inf_is_error_but_eb_takes_ratio_rule(self):
        npu = dict.fromkeys(SOURCES, 1.0) | {"相对误差最大值": math.inf, "误差均衡性": math.inf}
        gpu = dict.fromkeys(SOURCES, 1.0)
        v = R.benchmark_verdict(npu, gpu, api="gelu", dtype=FP32, std=V104)
        assert v.cells["相对误差最大值判定结果"] == "error"
        assert v.cells["误差均衡性判定结果"] == "pass"
        assert v.status == "error"
        assert v.message == ("相对误差最大值inf或nan不一致\n误差均衡性inf或nan不一致\n"
                             "ERROR: 相对误差最大值比值超过阈值\n")


# ---------------------------------------------------------------------------- benchmark limits (26.2)
class TestBenchmark262:
    @pytest.mark.parametrize("key", ["small_value_err_ratio", "rmse", "mean_rel_err"])
    @pytest.mark.parametrize("value,status", [(1.0, "pass"), (1.5, "pass"), (2.0, "pass"), (2.01, "error")])
    def test_l0_limit_2_no_warning_tier(self, key, value, status):
        assert bench(std=V262, **{key: value}).status == status

    @pytest.mark.parametrize("value,status", [(2.0, "pass"), (10.0, "pass"), (10.01, "error")])
    def test_l0_max_rel_10(self, value, status):
        assert bench(std=V262, max_rel_err=value).status == status

    @pytest.mark.parametrize("api,max_rel,mean_rel,rmse", [("embedding", 5, 1.5, 1.5), ("matmul", 2, 1.2, 1.2),
                                                            ("layer_norm", 2, 1.2, 1.2)])
    def test_api_levels(self, api, max_rel, mean_rel, rmse):
        assert bench(api, std=V262, max_rel_err=max_rel, mean_rel_err=mean_rel, rmse=rmse).status == "pass"
        assert bench(api, std=V262, max_rel_err=max_rel * 1.01).status == "error"
        assert bench(api, std=V262, mean_rel_err=mean_rel * 1.01).status == "error"
        assert bench(api, std=V262, rmse=rmse * 1.01).status == "error"
        assert bench(api, std=V262, small_value_err_ratio=2.0).status == "pass"

    def test_levels_do_not_apply_under_104(self):
        assert bench("matmul", max_rel_err=5.0).status == "Warning"

    def test_zero_gpu_uses_floor(self):
        npu = dict.fromkeys(SOURCES, 0.0) | {"均方根误差": 2.0 ** -10}
        gpu = dict.fromkeys(SOURCES, 0.0)
        v = R.benchmark_verdict(npu, gpu, api="gelu", dtype=FP16, std=V262)
        assert v.cells["均方根误差比值"] == 2.0              # 2^-10 / 2^-11
        assert v.cells["小值域错误比值"] == 0.0
        assert v.status == "pass"                           # exactly 2 passes
        npu["均方根误差"] = 2.0 ** -9
        assert R.benchmark_verdict(npu, gpu, api="gelu", dtype=FP16, std=V262).status == "error"


# ------------------------------------------------------------------------------------ other algorithms
def test_binary():
    assert R.binary_verdict(0.0, api="relu").status == "pass"
    v = R.binary_verdict(0.25, api="relu")
    assert (v.status, v.algorithm, v.message) == ("error", "二进制一致法", "ERROR: 二进制一致错误率超过阈值\n")
    assert v.cells == {"二进制一致错误率": 0.25, "二进制一致错误率判定结果": "error"}
    assert R.binary_verdict(0.25, api="topk").message == "ERROR: 二进制一致错误率超过阈值\n" + TOPK_HINT


@pytest.mark.parametrize("std,end", [(V104, "\n"), (V262, "")])
def test_absolute(std, end):
    ok = R.absolute_verdict({"inf/nan错误率": 0.0, "相对误差错误率": 0.0, "绝对误差错误率": 0.0}, std)
    assert (ok.status, ok.message, ok.algorithm) == ("pass", "", "绝对阈值法")
    bad = R.absolute_verdict({"inf/nan错误率": 0.5, "相对误差错误率": 0.0, "绝对误差错误率": 1e-9}, std)
    assert bad.status == "error"
    assert bad.cells["inf/nan判定结果"] == "error" and bad.cells["相对误差判定结果"] == "pass"
    assert bad.message == f"ERROR: inf/nan错误率超过阈值{end}ERROR: 绝对误差错误率超过阈值{end}"


@pytest.mark.parametrize("value,status", [(1.0, "pass"), (0.999, "pass"), (0.9989999, "error"), (0.0, "error")])
def test_thousandth_boundary_is_inclusive(value, status):
    v = R.thousandth_verdict(value, RULES104)
    assert v.status == status
    assert v.message == ("" if status == "pass" else "ERROR: 双千指标不达标\n")


class TestUlp:
    def ulp(self, mean, prop, gmean, gprop, dtype=FP32, std=V104, rules=RULES104):
        return R.ulp_verdict(mean, prop, gmean, gprop, dtype=dtype, std=std, rules=rules)

    def test_fp32_documented_rule_applied(self):
        # 1.0.4 code judged this error with the fp16 rule (section 9 #7); the documented rule passes it
        assert self.ulp(10.0, 0.02, 5.0, 0.01).status == "pass"

    @pytest.mark.parametrize("mean,prop,gprop,status", [
        (63.9, 0.9, 0.1, "pass"), (64.0, 0.9, 0.1, "error"), (100.0, 0.0499, 0.01, "pass"),
        (100.0, 0.05, 0.01, "error"), (100.0, 0.5, 0.51, "pass"), (100.0, 0.5, 0.5, "error"),
    ])
    def test_fp32_boundaries(self, mean, prop, gprop, status):
        v = self.ulp(mean, prop, 1.0, gprop)
        assert v.status == status
        assert v.message == ("" if status == "pass" else "ERROR: ULP误差不满足标准\n")

    @pytest.mark.parametrize("dtype", [FP16, BF16])
    @pytest.mark.parametrize("prop,gprop,status", [(0.0009, 0.0001, "pass"), (0.001, 0.0001, "error"),
                                                   (0.02, 0.03, "pass"), (0.02, 0.02, "error")])
    def test_fp16_bf16_boundaries(self, dtype, prop, gprop, status):
        assert self.ulp(0.1, prop, 0.1, gprop, dtype).status == status

    def test_fp16_ignores_mean(self):
        assert self.ulp(0.0, 0.02, 0.0, 0.01, FP16).status == "error"

    def test_zero_gpu_proportion(self):
        v = self.ulp(1.0, 0.5, 1.0, 0.0, FP16)
        assert v.cells["ULP误差大于阈值占比比值"] == 10000.0 and v.status == "error"
        both = self.ulp(1.0, 0.0, 1.0, 0.0, FP16)
        assert both.cells["ULP误差大于阈值占比比值"] == 1.0 and both.status == "pass"
        floor = self.ulp(1.0, 0.5, 1.0, 0.0, FP16, V262, RULES262)
        assert floor.cells["ULP误差大于阈值占比比值"] == 0.5 * 2 ** 11

    def test_inconsistent_nan(self):
        v = self.ulp(math.nan, 0.0, 1.0, 0.0)
        assert v.status == "error" and v.message == "ULP误差平均值inf或nan不一致\n"
        v262 = self.ulp(math.nan, 0.0, 1.0, 0.0, std=V262, rules=RULES262)
        assert v262.message == "ULP误差平均值inf或nan不一致\nERROR: ULP误差不满足标准\n"

    def test_cells(self):
        v = self.ulp(3.0, 0.2, 1.0, 0.4)
        assert v.cells == {"ULP误差平均值": 3.0, "ULP误差大于阈值占比": 0.2, "ULP误差大于阈值占比比值": 0.5,
                           "ULP误差判定结果": "pass"}
        assert v.algorithm == "ULP误差比对法"


# ------------------------------------------------------------------------------- algorithm selection
@pytest.mark.parametrize("api,dtype,algo104,algo262", [
    ("gelu", FP32, "标杆比对法", "标杆比对法"),
    ("gelu", FP16, "标杆比对法", "标杆比对法"),
    ("linear", FP32, "ULP误差比对法", "标杆比对法"),
    ("linear", BF16, "ULP误差比对法", "标杆比对法"),
    ("__add__", FP32, "绝对阈值法", "标杆比对法"),
    ("relu", FP16, "二进制一致法", "标杆比对法"),
    ("topk", FP32, "二进制一致法", "标杆比对法"),
    ("conv2d", FP32, "双千指标法", "标杆比对法"),
    ("conv2d", "torch.float64", "双千指标法", ""),
    ("gelu", "torch.float64", "", ""),
    ("linear", "torch.float64", "", ""),
    ("relu", "torch.float64", "", ""),
    ("gelu", "torch.complex64", "", ""),
    ("argmax", "torch.int64", "二进制一致法", "二进制一致法"),
    ("eq", "torch.bool", "二进制一致法", "二进制一致法"),
    ("size", "<class 'int'>", "二进制一致法", "二进制一致法"),
])
def test_select_algorithm(api, dtype, algo104, algo262):
    assert R.select_algorithm(api, dtype, V104) == algo104
    assert R.select_algorithm(api, dtype, V262) == algo262


def test_fp8_rows_26_2():
    assert R.select_algorithm("matmul", "torch.float8_e4m3fn", V262) == "ULP误差比对法"
    assert R.select_algorithm("matmul", "torch.float8_e4m3fn", V262, has_rel_err_cell=True) == "绝对阈值法"


# ---------------------------------------------------------------------------------------- roll-up
@pytest.mark.parametrize("statuses,expected", [
    ([], None), (["SKIP"], "SKIP"), (["SKIP", "SKIP"], "SKIP"), (["pass", "SKIP"], "pass"),
    (["error", "Warning"], "error"), (["Warning", "error"], "error"), (["pass", "Warning"], "Warning"),
    (["pass", "warning"], "Warning"), (["pass", "pass"], "pass"),
])
def test_rollup(statuses, expected):
    assert R.rollup(statuses, V104) == expected


def test_get_rules_unknown_version_lists_names():
    with pytest.raises(ValueError, match="1.0.4"):
        R.get_rules("9.9")
    assert R.get_rules("26.2.0")[0].name == "26.2"
