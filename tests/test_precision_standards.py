"""The precision standard's tables and named versions."""
from __future__ import annotations

import dataclasses

import pytest

from pytest_msprobe.precision import standards as S


def test_list_sizes_match_the_spec():
    assert len(S.ABSOLUTE_THRESHOLD_APIS) == 30
    assert len(S.BINARY_APIS) == 61
    assert len(S.ULP_APIS) == 17
    assert S.THOUSANDTH_APIS == {"conv1d", "conv2d"}
    assert not (S.ABSOLUTE_THRESHOLD_APIS & S.BINARY_APIS) and not (S.ULP_APIS & S.BINARY_APIS)
    for api in ("__truediv__", "true_divide", "__itruediv__"):
        assert api not in S.ABSOLUTE_THRESHOLD_APIS


@pytest.mark.parametrize("api, expected", [
    ("linear", "ulp"), ("relu", "binary"), ("add", "absolute"), ("__rmul__", "absolute"),
    ("conv2d", "thousandth"), ("gelu", "benchmark"), ("true_divide", "benchmark"), ("topk", "binary"),
    ("histc", "benchmark"),
])
def test_standard_for_1_0_4(api, expected):
    assert S.standard_for(api) == expected
    assert S.standard_for(api, "1.0.4", S.BF16) == expected


@pytest.mark.parametrize("api", ["linear", "relu", "add", "conv2d", "gelu", "histc"])
def test_standard_for_26_2_is_benchmark_for_regular_floats(api):
    for dt in (S.FP16, S.BF16, S.FP32):
        assert S.standard_for(api, "26.2", dt) == "benchmark"
    assert S.standard_for("histc", "26.2", "torch.float8_e4m3fn") == "binary"
    assert S.standard_for("linear", "26.2", "torch.float8_e5m2") == "ulp"


def test_threshold_tables():
    assert S.API_PRECISION_THRESHOLDS.keys() == S.ABSOLUTE_THRESHOLD_APIS
    assert S.get_standard("1.0.4").absolute_threshold("div", S.BF16) == (4e-3, 1e-3, 1e-5)
    assert S.get_standard("26.2").absolute_threshold("div", S.FP32) == (2.0 ** -20, 2.0 ** -20, 2.0 ** -30)
    assert S.get_standard("1.0.4").small_value(S.FP32) == (1e-6, 1e-9)
    assert S.get_standard("26.2").small_value(S.FP16) == (2.0 ** -10, 1e-16)
    assert S.ULP_PARAMS[S.FP32] == (-126, 23, "float64", 32.0)
    assert S.ULP_PARAMS[S.FP16].threshold == S.ULP_PARAMS[S.BF16].threshold == 1.0
    with pytest.raises(ValueError, match="torch.float64"):
        S.get_standard("1.0.4").small_value(S.FP64)


def test_api_specific_tables():
    assert S.GRAD_INDEX == {"topk": 0, "npu_fusion_attention": 0}
    assert S.NO_RAISE_APIS == {"type_as"} and S.NO_BACKWARD_APIS == {"repeat_interleave"}
    assert S.HF32_APIS == {"conv1d", "conv2d"}
    assert len(S.NO_DETACH_APIS) == 7 and "topk" in S.TOPK_HINT


def test_versions_are_data():
    a, b = S.get_standard("1.0.4"), S.get_standard("26.2")
    assert (a.warning, b.warning) == ("Warning", "warning")
    assert not a.cosine_nan_passes and b.cosine_nan_passes
    assert not a.empty_is_skip and b.empty_is_skip
    assert a.apc_limits("gelu")["max_rel_err"] == (10, 1)
    assert b.apc_limits("layer_norm")["max_rel_err"] == (2, None)
    assert b.apc_limits("embedding")["rmse"] == (1.5, None)
    assert b.apc_ratio_floor[S.BF16] == 2.0 ** -8 and not a.apc_ratio_floor
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.warning = "WARN"


def test_section_9_fixes_in_both_versions():
    for std in S.STANDARDS.values():
        assert std.nonfinite_by_agreement and std.rollup_rule == "severity" and std.all_skip_is_skip
        assert std.int_group_any and std.builtin_mismatch_rate == 1 and std.structure_mismatch_is_error


def test_get_standard_names():
    assert S.get_standard() is S.STANDARDS[S.DEFAULT_STANDARD] is S.get_standard("1.0.4")
    assert S.get_standard("26.2.0") is S.get_standard(" 26.2 ")
    assert S.get_standard(S.STANDARDS["26.2"]) is S.STANDARDS["26.2"]
    with pytest.raises(ValueError, match="1.0.4, 26.2"):
        S.get_standard("2.0")


