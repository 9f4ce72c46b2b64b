"""The precision standard as data: API lists, thresholds and the named standard versions.

Everything a verdict depends on lives in a table here (spec precision-standard.md sections 2, 3, 4, 8, 9).
Two named versions exist: ``"1.0.4"`` (the default: msprobe 1.0.4 rules with the section-9 defects fixed)
and ``"26.2"`` (msprobe 26.2.0's deliberate revisions). Versions differ only in the fields of
:class:`StandardVersion`; code reads those fields and never tests a version name.

Dtype keys are torch dtype strings (``"torch.float16"``...), as written in the details CSV.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from .verdict import ERROR, PASS, SKIP, WARNING  # noqa: F401 - re-exported: standards' users spell statuses

# --------------------------------------------------------------------------------------------------
# dtype names
FP16 = "torch.float16"
BF16 = "torch.bfloat16"
FP32 = "torch.float32"
FP64 = "torch.float64"
FP8_DTYPES = frozenset({"torch.float8_e4m3fn", "torch.float8_e5m2", "torch.hifloat8"})
NEW_STANDARD_DTYPES = frozenset({FP16, BF16, FP32})   # dtypes that get new-standard cells (2.8)
FLOAT_DTYPES = frozenset({FP16, BF16, FP32, FP64})

# standard names returned by standard_for
ABSOLUTE = "absolute"
BINARY = "binary"
ULP = "ulp"
THOUSANDTH = "thousandth"
BENCHMARK = "benchmark"

# --------------------------------------------------------------------------------------------------
# 4.1 API lists (msprobe 1.0.4)
ABSOLUTE_THRESHOLD_APIS = frozenset({
    "mul", "mul_", "__mul__", "__imul__", "__rmul__",
    "add", "add_", "__add__", "__iadd__", "__radd__",
    "div", "div_", "__div__", "__idiv__", "divide", "divide_",
    "leaky_relu", "leaky_relu_", "prelu", "reciprocal", "reciprocal_", "rsqrt", "rsqrt_",
    "square", "square_", "sub", "sub_", "rsub", "__isub__", "__sub__",
})

BINARY_APIS = frozenset({
    "abs", "abs_", "absolute", "absolute_", "argmin", "bitwise_and", "bitwise_and_", "broadcast_to",
    "ceil", "ceil_", "equal", "fill_", "flatten", "floor", "floor_", "gather", "greater", "greater_",
    "greater_equal", "greater_equal_", "isfinite", "isnan", "less", "less_", "less_equal", "less_equal_",
    "logical_and", "logical_and_", "logical_not", "logical_not_", "logical_or", "logical_or_",
    "masked_fill", "masked_fill_", "max_pool3d", "maximum", "minimum", "neg", "neg_", "nonzero",
    "not_equal", "not_equal_", "one_hot", "pad", "relu", "reshape", "round", "round_", "select",
    "sign", "sign_", "sort", "tile", "topk", "transpose", "transpose_", "tril", "tril_", "triu",
    "triu_", "type_as",
})

ULP_APIS = frozenset({
    "__matmul__", "addbmm", "addbmm_", "addmm", "addmm_", "baddbmm", "baddbmm_", "bilinear", "bmm",
    "chain_matmul", "hspmm", "linear", "matmul", "mm", "mv", "smm", "sspaddmm",
})

THOUSANDTH_APIS = frozenset({"conv1d", "conv2d"})

# 26.2.0 additions (section 8)
BINARY_APIS_26_2 = BINARY_APIS | {"histc"}
ACCUMULATIVE_ERROR_APIS_26_2 = frozenset({"test_api"})

# --------------------------------------------------------------------------------------------------
# 4.3 other API-specific behaviour
HF32_APIS = frozenset({"conv1d", "conv2d"})
NO_RAISE_APIS = frozenset({"type_as"})
NO_DETACH_APIS = frozenset({"resize_", "resize_as_", "set_", "transpose_", "t_", "squeeze_", "unsqueeze_"})
NO_BACKWARD_APIS = frozenset({"repeat_interleave"})
GRAD_INDEX: Mapping[str, int] = MappingProxyType({"topk": 0, "npu_fusion_attention": 0})
FIRST_OUTPUT_ONLY_APIS = frozenset({"npu_fusion_attention"})
TOPK_HINT = ("在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 "
             "如果topk精度不达标，请检查是否是该原因导致的。")
QUANTIZATION_APIS_26_2 = frozenset({"npu_rms_norm_dynamic_quant", "npu_dynamic_quant",
                                    "npu_quant_lightning_indexer"})


# --------------------------------------------------------------------------------------------------
# threshold records
class SmallValue(NamedTuple):
    """Benchmark-standard small-value threshold ``sv`` and its absolute tolerance ``atol`` (2.5)."""
    sv: float
    atol: float


class AbsoluteThreshold(NamedTuple):
    """Absolute-threshold standard parameters (2.6, 4.2)."""
    rtol: float
    sv: float
    atol: float


class UlpParams(NamedTuple):
    """ULP parameters (2.7): exponent floor, mantissa bits, numpy compute type, above-threshold limit."""
    min_eb: int
    exponent_num: int
    compute: str       # numpy dtype name: "float32" | "float64"
    threshold: float   # "above threshold" means ULP > threshold


# 2.5 benchmark small-value thresholds
BENCHMARK_SMALL_VALUE_1_0_4: Mapping[str, SmallValue] = MappingProxyType({
    FP16: SmallValue(1e-3, 1e-5),
    BF16: SmallValue(1e-3, 1e-5),
    FP32: SmallValue(1e-6, 1e-9),
})
BENCHMARK_SMALL_VALUE_26_2: Mapping[str, SmallValue] = MappingProxyType({
    FP16: SmallValue(2.0 ** -10, 1e-16),
    BF16: SmallValue(2.0 ** -10, 1e-16),
    FP32: SmallValue(2.0 ** -20, 2.0 ** -30),
})

# 4.2 per-API thresholds (api_precision_threshold.yaml): every absolute-threshold API has the same entry
_YAML_ENTRY: Mapping[str, AbsoluteThreshold] = MappingProxyType({
    FP32: AbsoluteThreshold(1e-6, 1e-6, 1e-9),
    FP16: AbsoluteThreshold(1e-3, 1e-3, 1e-5),
    BF16: AbsoluteThreshold(4e-3, 1e-3, 1e-5),
})
API_PRECISION_THRESHOLDS: Mapping[str, Mapping[str, AbsoluteThreshold]] = MappingProxyType(
    {api: _YAML_ENTRY for api in sorted(ABSOLUTE_THRESHOLD_APIS)})

# section 8: 26.2.0 absolute thresholds by dtype (the yaml is no longer read)
ABSOLUTE_BY_DTYPE_26_2: Mapping[str, AbsoluteThreshold] = MappingProxyType({
    FP16: AbsoluteThreshold(2.0 ** -10, 2.0 ** -10, 2.0 ** -16),
    BF16: AbsoluteThreshold(2.0 ** -8, 2.0 ** -10, 1e-16),
    FP32: AbsoluteThreshold(2.0 ** -20, 2.0 ** -20, 2.0 ** -30),
})

# 2.7 ULP parameters (same in both versions)
ULP_PARAMS: Mapping[str, UlpParams] = MappingProxyType({
    FP16: UlpParams(-14, 10, "float32", 1.0),
    BF16: UlpParams(-126, 7, "float32", 1.0),
    FP32: UlpParams(-126, 23, "float64", 32.0),
})

# 1.7 relative-error epsilon: bf16 override; otherwise the bench array's machine epsilon
BF16_EPS = 2.0 ** -8
BF16_MAX = 3.3895313892515355e38
COSINE_ZERO_EPS = 2.220446049250313e-16

# 3.1 status chain thresholds (same in both versions)
COSINE_PASS = 0.99            # passes iff cos > 0.99
MAX_ABS_PASS = 0.001          # passes iff max abs < 0.001
HUNDRED_T = 0.01              # ratio(t) passes iff ratio > 1 - t
THOUSAND_T = 0.001
TEN_THOUSAND_T = 0.0001

# 3.5 dropout rule
DROPOUT_MIN_N = 100
DROPOUT_ZERO_RATIO = 0.1



class ApcLimit(NamedTuple):
    """api_precision_compare ratio limits of one metric: error if ratio > error, warning if > warning."""
    error: float
    warning: float | None   # None: no warning tier


APC_LEVELS_1_0_4: Mapping[str, Mapping[str, ApcLimit]] = MappingProxyType({
    "L0": MappingProxyType({
        "small_value_err_ratio": ApcLimit(2, 1), "rmse": ApcLimit(2, 1), "max_rel_err": ApcLimit(10, 1),
        "mean_rel_err": ApcLimit(2, 1), "error_balance": ApcLimit(2, 1),
    }),
})


def _level(max_rel: float, mean_rel: float, rmse: float) -> Mapping[str, ApcLimit]:
    return MappingProxyType({
        "small_value_err_ratio": ApcLimit(2, None), "rmse": ApcLimit(rmse, None),
        "max_rel_err": ApcLimit(max_rel, None), "mean_rel_err": ApcLimit(mean_rel, None),
        "error_balance": ApcLimit(2, None),
    })


APC_LEVELS_26_2: Mapping[str, Mapping[str, ApcLimit]] = MappingProxyType({
    "L0": _level(10, 2, 2), "L1": _level(5, 1.5, 1.5), "L2": _level(2, 1.2, 1.2),
})
APC_API_LEVELS_26_2: Mapping[str, str] = MappingProxyType({
    **{api: "L1" for api in ("embedding", "npu_fusion_attention_grad", "npu_fusion_attention",
                             "scatter_", "scatter_add_")},
    **{api: "L2" for api in ("addmm", "npu_cross_entropy_loss", "npu_cross_entropy_loss_backward", "GELU",
                             "layer_norm", "matmul", "mm", "index", "one_hot", "sum", "npu_rms_norm",
                             "npu_rms_norm_backward", "nonzero")},
})
APC_RATIO_FLOOR_26_2: Mapping[str, float] = MappingProxyType({FP16: 2.0 ** -11, BF16: 2.0 ** -8, FP32: 2.0 ** -14})


# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StandardVersion:
    """One named precision standard. Every behaviour that differs between versions is a field here."""

    name: str
    summary: str
    warning: str                                   # status spelling of the warning tier
    # which standard an API gets (4.1 / section 8)
    binary_apis: frozenset
    absolute_apis: frozenset
    ulp_apis: frozenset
    thousandth_apis: frozenset
    list_dtypes: frozenset                         # output dtypes for which the API lists decide
    benchmark_small_value: Mapping[str, SmallValue]
    absolute_per_api: Mapping[str, Mapping[str, AbsoluteThreshold]]
    absolute_by_dtype: Mapping[str, AbsoluteThreshold]  # used when the API has no per-API entry
    # per-output rules
    cosine_nan_passes: bool                        # 26.2: NaN cosine passes step 1 and the chain goes on
    nonfinite_by_agreement: bool                   # section 9 #6 fix: agreeing inf/nan positions count as equal
    empty_is_skip: bool                            # 26.2: empty output -> SKIP before any metric
    empty_skip_message: str
    fp64_message: str                              # prefix for fp64 float outputs ("" = none)
    int_message: str                               # template with {dtype} (numpy dtype name)
    int_group_any: bool                            # section 9 #5 fix: every integer dtype is comparable
    builtin_mismatch_rate: int | None           # section 9 #11 fix: 1 (None = blank, as msprobe)
    structure_mismatch_is_error: bool              # section 9 #3 fix
    unexpected_type_message: str                   # section 9 #4 fix, with {type}
    quantization_apis: frozenset                   # int outputs pass iff max abs err <= quant_max_abs
    quant_max_abs: float
    # roll-up (3.6)
    rollup_rule: str                               # "severity" (any error > warning > pass) | "last"
    all_skip_is_skip: bool                         # section 9 #12 fix
    # api_precision_compare (section 5; rules in apc_rules.py)
    apc_ratio_floor: Mapping[str, float]           # empty = no floor (1.0.4)
    apc_ratio_floor_default: float | None
    apc_both_zero_ratio: float                     # ratio when NPU and GPU values are both 0
    apc_zero_gpu_ratio: float                      # ratio when only the GPU value is 0 (no floor)
    apc_levels: Mapping[str, Mapping[str, ApcLimit]]
    apc_api_levels: Mapping[str, str]              # api -> level; others use "L0"
    apc_ulp_fp32_rule: bool                        # section 9 #7 fix: documented fp32 ULP rule
    apc_absolute_message_newline: bool
    apc_topk_hint_in_result: bool                  # 26.2 / section 9 #9 fix
    extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    def spell(self, key: str) -> str:
        """A status key (:func:`.verdict.worst`'s) as this standard writes it (its warning spelling)."""
        return self.warning if key == WARNING else key

    def small_value(self, dtype: str) -> SmallValue:
        """Benchmark small-value thresholds for a device dtype string."""
        try:
            return self.benchmark_small_value[dtype]
        except KeyError:
            raise ValueError(f"no benchmark small-value threshold for dtype {dtype!r} in standard "
                             f"{self.name!r}; known: {sorted(self.benchmark_small_value)}") from None

    def absolute_threshold(self, api_name: str, dtype: str) -> AbsoluteThreshold:
        """Absolute-threshold parameters for an API and device dtype (per-API entry first, then by dtype)."""
        per_api = self.absolute_per_api.get(api_name)
        if per_api is not None and dtype in per_api:
            return per_api[dtype]
        try:
            return self.absolute_by_dtype[dtype]
        except KeyError:
            raise ValueError(f"no absolute threshold for API {api_name!r} and dtype {dtype!r} in standard "
                             f"{self.name!r}") from None

    def apc_limits(self, api_name: str) -> Mapping[str, ApcLimit]:
        """api_precision_compare benchmark ratio limits for an API (by its level; default L0)."""
        return self.apc_levels[self.apc_api_levels.get(api_name, "L0")]


_INT_MSG_1_0_4 = "Compare algorithm is not supported for {dtype} data. Only judged by Error Rate."

STANDARDS: Mapping[str, StandardVersion] = MappingProxyType({
    "1.0.4": StandardVersion(
        name="1.0.4",
        summary="msprobe 1.0.4 rules, with the known msprobe defects fixed (default)",
        warning="Warning",
        binary_apis=BINARY_APIS, absolute_apis=ABSOLUTE_THRESHOLD_APIS, ulp_apis=ULP_APIS,
        thousandth_apis=THOUSANDTH_APIS,
        list_dtypes=frozenset({FP16, BF16, FP32, FP64}),
        benchmark_small_value=BENCHMARK_SMALL_VALUE_1_0_4,
        absolute_per_api=API_PRECISION_THRESHOLDS,
        absolute_by_dtype=_YAML_ENTRY,
        cosine_nan_passes=False,
        nonfinite_by_agreement=True,
        empty_is_skip=False,
        empty_skip_message="There is not bench calculation result.",
        fp64_message="",
        int_message=_INT_MSG_1_0_4,
        int_group_any=True,
        builtin_mismatch_rate=1,
        structure_mismatch_is_error=True,
        unexpected_type_message="Unexpected output type in compare_core: {type}",
        quantization_apis=frozenset(),
        quant_max_abs=0.0,
        rollup_rule="severity",
        all_skip_is_skip=True,
        apc_ratio_floor=MappingProxyType({}),
        apc_ratio_floor_default=None,
        apc_both_zero_ratio=1.0,
        apc_zero_gpu_ratio=10000.0,
        apc_levels=APC_LEVELS_1_0_4,
        apc_api_levels=MappingProxyType({}),
        apc_ulp_fp32_rule=True,
        apc_absolute_message_newline=True,
        apc_topk_hint_in_result=True,
    ),
    "26.2": StandardVersion(
        name="26.2",
        summary="msprobe 26.2.0 revisions: benchmark for every float output, new small-value "
                "thresholds, API levels and ratio floors in the compare, no warning tier there",
        warning="warning",
        binary_apis=BINARY_APIS_26_2, absolute_apis=ABSOLUTE_THRESHOLD_APIS, ulp_apis=ULP_APIS,
        thousandth_apis=THOUSANDTH_APIS,
        list_dtypes=FP8_DTYPES,
        benchmark_small_value=BENCHMARK_SMALL_VALUE_26_2,
        absolute_per_api=MappingProxyType({}),
        absolute_by_dtype=ABSOLUTE_BY_DTYPE_26_2,
        cosine_nan_passes=True,
        nonfinite_by_agreement=True,
        empty_is_skip=True,
        empty_skip_message="There is not bench calculation result.",
        fp64_message="The data type torch.float64 is not supported for new precision standard.",
        int_message="Current {dtype} data, only perform binary comparison.",
        int_group_any=True,
        builtin_mismatch_rate=1,
        structure_mismatch_is_error=True,
        unexpected_type_message="Unexpected output type in compare_core: {type}",
        quantization_apis=QUANTIZATION_APIS_26_2,
        quant_max_abs=1.0,
        rollup_rule="severity",
        all_skip_is_skip=True,
        apc_ratio_floor=APC_RATIO_FLOOR_26_2,
        apc_ratio_floor_default=2.0 ** -14,
        apc_both_zero_ratio=0.0,
        apc_zero_gpu_ratio=10000.0,
        apc_levels=APC_LEVELS_26_2,
        apc_api_levels=APC_API_LEVELS_26_2,
        apc_ulp_fp32_rule=True,
        apc_absolute_message_newline=False,
        apc_topk_hint_in_result=True,
        extra=MappingProxyType({"accumulative_apis": ACCUMULATIVE_ERROR_APIS_26_2}),
    ),
})

DEFAULT_STANDARD = "1.0.4"


def get_standard(name: str | StandardVersion = DEFAULT_STANDARD) -> StandardVersion:
    """Return the named standard version (a StandardVersion passes through).

    Raises:
        ValueError: unknown name; the message lists the valid names.
    """
    if isinstance(name, StandardVersion):
        return name
    key = str(name).strip()
    if key not in STANDARDS and key.count(".") == 2 and key.endswith(".0"):
        key = key[:-2]              # accept "26.2.0" for "26.2"
    try:
        return STANDARDS[key]
    except KeyError:
        raise ValueError(f"unknown precision standard {name!r}; choose one of: "
                         f"{', '.join(sorted(STANDARDS))} (e.g. --msprobe-standard 1.0.4)") from None


def standard_for(api_name: str, version: str | StandardVersion = DEFAULT_STANDARD,
                 dtype: str = FP32) -> str:
    """Which standard judges a float output of ``api_name`` (base name, e.g. ``"linear"``).

    Returns one of "thousandth", "binary", "absolute", "ulp", "benchmark" (precedence of 4). The lists only
    apply to output dtypes in ``StandardVersion.list_dtypes`` (1.0.4: every float; 26.2: fp8 only, so every
    fp16/bf16/fp32 output is "benchmark"). ``dtype`` is the device output's torch dtype string.
    """
    std = get_standard(version)
    if dtype not in std.list_dtypes:
        return BENCHMARK
    for apis, name in ((std.thousandth_apis, THOUSANDTH), (std.binary_apis, BINARY),
                       (std.absolute_apis, ABSOLUTE), (std.ulp_apis, ULP)):
        if api_name in apis:
            return name
    return BENCHMARK
