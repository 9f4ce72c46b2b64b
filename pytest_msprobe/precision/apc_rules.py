"""NPU-vs-GPU verdicts of api_precision_compare as pure functions over numbers.

Spec: precision-standard.md section 5 (1.0.4 rules), section 8 (26.2.0 revisions), section 9 #7-#11 (fixes).
Every number a verdict depends on is data: the ratio floors, ratio limits and API levels live in
:class:`~pytest_msprobe.precision.standards.StandardVersion` (``apc_*`` fields); the few numbers only this
compare needs (ULP pass rules, the thousandth pass mark, how blank cells read) live in :data:`APC_RULES`,
keyed by the same version names. Nothing here reads files; :mod:`pytest_msprobe.report.apc` does that.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from .standards import (
    BF16,
    DEFAULT_STANDARD,
    ERROR,
    FP16,
    FP32,
    PASS,
    SKIP,
    TOPK_HINT,
    StandardVersion,
    get_standard,
)
from .verdict import worst_judged

# 比对算法 cell values (section 5.3)
ALGO_BENCHMARK = "标杆比对法"
ALGO_BINARY = "二进制一致法"
ALGO_ABSOLUTE = "绝对阈值法"
ALGO_ULP = "ULP误差比对法"
ALGO_THOUSANDTH = "双千指标法"

# dtypes for which 1.0.4 picks an algorithm by float rules (5.3 rule 3); others are judged binary
FLOAT_LIKE_DTYPES = frozenset({FP16, BF16, FP32, "torch.float64", "torch.complex64", "torch.complex128"})
# float dtypes the new standard does not judge: such rows are SKIP (section 9 #8 fix)
UNSUPPORTED_DTYPES = frozenset({"torch.float64", "torch.complex64", "torch.complex128"})
UNSUPPORTED_DTYPE_MESSAGE = "This data type does not support benchmark compare."


class BenchmarkMetric(NamedTuple):
    """One statistic of the benchmark algorithm (5.4): where it is read and where its ratio is written."""
    key: str            # StandardVersion.apc_levels key (DETAIL_METRIC_FIELDS name)
    source: str         # input column of the details CSV
    ratio_column: str   # output ratio column
    status_column: str  # output verdict column
    counted: bool       # counts towards 比对结果


# in message order (5.4)
BENCHMARK_METRICS: tuple[BenchmarkMetric, ...] = (
    BenchmarkMetric("small_value_err_ratio", "小值域错误占比", "小值域错误比值", "小值域判定结果", True),
    BenchmarkMetric("rmse", "均方根误差", "均方根误差比值", "均方根误差判定结果", True),
    BenchmarkMetric("max_rel_err", "相对误差最大值", "相对误差最大值比值", "相对误差最大值判定结果", True),
    BenchmarkMetric("mean_rel_err", "相对误差平均值", "相对误差平均值比值", "相对误差平均值判定结果", True),
    BenchmarkMetric("error_balance", "误差均衡性", "误差均衡性比值", "误差均衡性判定结果", False),
)

# absolute-threshold statistics: (input column = output column, verdict column, failure message)
ABSOLUTE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("inf/nan错误率", "inf/nan判定结果", "ERROR: inf/nan错误率超过阈值"),
    ("相对误差错误率", "相对误差判定结果", "ERROR: 相对误差错误率超过阈值"),
    ("绝对误差错误率", "绝对误差判定结果", "ERROR: 绝对误差错误率超过阈值"),
)


class UlpRule(NamedTuple):
    """ULP pass rule of one dtype (5.5): pass iff any listed test holds (a None test is not used)."""
    mean_below: float | None   # NPU mean ULP < this
    proportion_below: float       # NPU above-threshold proportion < this
    ratio_below: float            # NPU/GPU proportion ratio < this


@dataclass(frozen=True)
class ApcRules:
    """Numbers of the compare that are not in StandardVersion, for one version."""
    ulp_rules: Mapping[str, UlpRule]     # by device dtype string
    ulp_default: UlpRule                 # other dtypes; fp32 too when std.apc_ulp_fp32_rule is off
    thousandth_pass_at: float            # 双千指标 passes iff value >= this
    blank_reads_as_zero: bool            # 26.2: blank benchmark/ULP cells read as 0.0 (others still SKIP)
    ulp_inconsistency_line: bool         # 26.2: inf/nan-inconsistent ULP adds the ULP failure line


_FP16_ULP = UlpRule(None, 0.001, 1.0)
_FP32_ULP = UlpRule(64.0, 0.05, 1.0)

APC_RULES: Mapping[str, ApcRules] = MappingProxyType({
    "1.0.4": ApcRules(
        ulp_rules=MappingProxyType({FP16: _FP16_ULP, BF16: _FP16_ULP, FP32: _FP32_ULP}),
        ulp_default=_FP16_ULP,
        thousandth_pass_at=0.999,
        blank_reads_as_zero=False,
        ulp_inconsistency_line=False,
    ),
    "26.2": ApcRules(
        ulp_rules=MappingProxyType({FP16: _FP16_ULP, BF16: _FP16_ULP, FP32: _FP32_ULP}),
        ulp_default=_FP16_ULP,
        thousandth_pass_at=0.999,
        blank_reads_as_zero=True,
        ulp_inconsistency_line=True,
    ),
})

MSG_ULP_FAIL = "ERROR: ULP误差不满足标准\n"
MSG_BINARY_FAIL = "ERROR: 二进制一致错误率超过阈值\n"
MSG_THOUSANDTH_FAIL = "ERROR: 双千指标不达标\n"


def get_rules(version: str | StandardVersion = DEFAULT_STANDARD) -> tuple[StandardVersion, ApcRules]:
    """The StandardVersion and the compare's own rules of a version name.

    Raises:
        ValueError: unknown version (the message lists the valid names).
    """
    std = get_standard(version)
    try:
        return std, APC_RULES[std.name]
    except KeyError:
        raise ValueError(f"api_precision_compare has no rules for standard {std.name!r}; "
                         f"add an entry to APC_RULES (known: {', '.join(sorted(APC_RULES))})") from None


@dataclass
class RowVerdict:
    """The verdict of one output row: the details cells it fills, its 比对结果, 比对算法 and Message."""
    status: str
    algorithm: str = ""
    message: str = ""
    cells: dict = field(default_factory=dict)   # APC details column -> number or string (absent = blank)


def skip_verdict(message: str) -> RowVerdict:
    """A SKIP row: every cell blank, no algorithm, the reason as message."""
    return RowVerdict(SKIP, "", message)


# ------------------------------------------------------------------------------------------------
# ratios (5.4 steps 1-3; section 8 floor)
def nonfinite_consistency(npu: float, gpu: float) -> bool | None:
    """None when both values are finite; else whether they agree (both the same inf, or both NaN)."""
    if math.isfinite(npu) and math.isfinite(gpu):
        return None
    if math.isinf(npu) or math.isinf(gpu):
        return math.isinf(npu) and math.isinf(gpu) and npu == gpu
    return math.isnan(npu) and math.isnan(gpu)


def nonfinite_message(column: str, consistent: bool | None) -> str:
    """The message fragment of an inf/nan pair of values of ``column`` ('' when both were finite)."""
    if consistent is None:
        return ""
    return f"{column}同为同号inf或nan\n" if consistent else f"{column}inf或nan不一致\n"


def ratio(npu: float, gpu: float, std: StandardVersion, dtype: str = FP32) -> float:
    """NPU/GPU ratio of one statistic.

    Non-finite operand -> NaN. With a floor (26.2): ``|npu| / max(|gpu|, floor[dtype])``. Without (1.0.4):
    GPU zero -> ``apc_both_zero_ratio`` (1.0) when NPU is zero too, else ``apc_zero_gpu_ratio`` (10000.0);
    otherwise ``|npu / gpu|``.
    """
    if not (math.isfinite(npu) and math.isfinite(gpu)):
        return math.nan
    floor = std.apc_ratio_floor.get(dtype, std.apc_ratio_floor_default)
    if floor is not None:
        if npu == 0:
            return float(std.apc_both_zero_ratio) if gpu == 0 else 0.0
        return abs(npu) / max(abs(gpu), floor)
    if gpu == 0:
        return float(std.apc_both_zero_ratio) if npu == 0 else float(std.apc_zero_gpu_ratio)
    return abs(npu / gpu)


def limit_status(value: float, error: float, warning: float | None, std: StandardVersion) -> str:
    """Status of one ratio against its limits: NaN/inf pass, > error error, > warning warning, else pass."""
    if not math.isfinite(value):
        return PASS
    if value > error:
        return ERROR
    if warning is not None and value > warning:
        return std.warning
    return PASS


def worst(statuses: Sequence[str], std: StandardVersion) -> str:
    """error if any error, else the warning spelling if any warning, else pass (:func:`.verdict.worst_judged`)."""
    return std.spell(worst_judged(statuses) or PASS)


# ------------------------------------------------------------------------------------------------
# per-algorithm verdicts (5.4, 5.5)
def benchmark_verdict(npu: Mapping[str, float], gpu: Mapping[str, float], *, api: str, dtype: str,
                      std: StandardVersion) -> RowVerdict:
    """标杆比对法: ratios of the five statistics (keys: BenchmarkMetric.source column names)."""
    limits = std.apc_limits(api)
    cells: dict = {}
    fragments, lines, counted = [], [], []
    for m in BENCHMARK_METRICS:
        x, y = npu[m.source], gpu[m.source]
        consistent = nonfinite_consistency(x, y)
        fragments.append(nonfinite_message(m.source, consistent))
        r = ratio(x, y, std, dtype)
        lim = limits[m.key]
        status = limit_status(r, lim.error, lim.warning, std)
        if consistent is False and m.counted:
            status = ERROR
        cells[m.ratio_column] = r
        cells[m.status_column] = status
        if m.counted:
            counted.append(status)
            if status == ERROR:
                lines.append(f"ERROR: {m.ratio_column}超过阈值\n")
            elif status == std.warning:
                lines.append(f"WARNING: {m.ratio_column}超过阈值\n")
    return RowVerdict(worst(counted, std), ALGO_BENCHMARK, "".join(fragments) + "".join(lines), cells)


def binary_verdict(npu_rate: float, *, api: str) -> RowVerdict:
    """二进制一致法: pass iff the NPU binary error rate is 0 (topk adds its hint on failure)."""
    status = PASS if npu_rate == 0 else ERROR
    message = "" if status == PASS else MSG_BINARY_FAIL + (TOPK_HINT if api == "topk" else "")
    return RowVerdict(status, ALGO_BINARY, message,
                      {"二进制一致错误率": npu_rate, "二进制一致错误率判定结果": status})


def absolute_verdict(npu: Mapping[str, float], std: StandardVersion) -> RowVerdict:
    """绝对阈值法: each of the three NPU error rates passes iff it is 0."""
    end = "\n" if std.apc_absolute_message_newline else ""
    cells: dict = {}
    statuses, lines = [], []
    for column, status_column, failure in ABSOLUTE_METRICS:
        value = npu[column]
        status = PASS if value == 0 else ERROR
        cells[column] = value
        cells[status_column] = status
        statuses.append(status)
        if status == ERROR:
            lines.append(failure + end)
    return RowVerdict(worst(statuses, std), ALGO_ABSOLUTE, "".join(lines), cells)


def thousandth_verdict(npu_value: float, rules: ApcRules) -> RowVerdict:
    """双千指标法: pass iff the NPU 双千指标 is at least ``rules.thousandth_pass_at`` (0.999)."""
    status = PASS if npu_value >= rules.thousandth_pass_at else ERROR
    return RowVerdict(status, ALGO_THOUSANDTH, "" if status == PASS else MSG_THOUSANDTH_FAIL,
                      {"双千指标": npu_value, "双千指标判定结果": status})


def ulp_rule(dtype: str, std: StandardVersion, rules: ApcRules) -> UlpRule:
    """The ULP pass rule of a device dtype (fp32's documented rule unless the version turns it off)."""
    if dtype == FP32 and not std.apc_ulp_fp32_rule:
        return rules.ulp_default
    return rules.ulp_rules.get(dtype, rules.ulp_default)


def ulp_verdict(npu_mean: float, npu_prop: float, gpu_mean: float, gpu_prop: float, *, dtype: str,
                std: StandardVersion, rules: ApcRules) -> RowVerdict:
    """ULP误差比对法: inf/nan agreement first, then pass iff any test of the dtype's UlpRule holds."""
    c_mean = nonfinite_consistency(npu_mean, gpu_mean)
    c_prop = nonfinite_consistency(npu_prop, gpu_prop)
    message = nonfinite_message("ULP误差平均值", c_mean) + nonfinite_message("ULP误差大于阈值占比", c_prop)
    r = ratio(npu_prop, gpu_prop, std, dtype)
    cells = {"ULP误差平均值": npu_mean, "ULP误差大于阈值占比": npu_prop, "ULP误差大于阈值占比比值": r}
    if c_mean is False or c_prop is False:
        status = ERROR
        if rules.ulp_inconsistency_line:
            message += MSG_ULP_FAIL
    else:
        rule = ulp_rule(dtype, std, rules)
        ok = ((rule.mean_below is not None and npu_mean < rule.mean_below)
              or npu_prop < rule.proportion_below or r < rule.ratio_below)
        status = PASS if ok else ERROR
        if not ok:
            message += MSG_ULP_FAIL
    cells["ULP误差判定结果"] = status
    return RowVerdict(status, ALGO_ULP, message, cells)


# ------------------------------------------------------------------------------------------------
# algorithm choice (5.3; section 8) and roll-up (5.6)
def select_algorithm(api: str, dtype: str, std: StandardVersion, *, has_rel_err_cell: bool = False) -> str:
    """The 比对算法 of a row with a non-blank DEVICE Dtype; '' when its dtype cannot be judged (SKIP).

    The API lists decide for dtypes in ``std.list_dtypes`` (1.0.4: every float; 26.2: fp8 only, where the
    absolute algorithm is told apart by a filled 相对误差错误率 cell). Other float rows use the benchmark;
    non-float rows (ints, bool, builtins) are binary. fp64/complex rows are SKIP unless the thousandth
    standard applies (run_ut fills 双千指标 for them).
    """
    listed = dtype in std.list_dtypes
    if dtype in UNSUPPORTED_DTYPES:
        return ALGO_THOUSANDTH if listed and api in std.thousandth_apis else ""
    if dtype not in FLOAT_LIKE_DTYPES:
        if listed:     # fp8 (26.2): absolute when run_ut filled its cells, else ULP
            return ALGO_ABSOLUTE if has_rel_err_cell else ALGO_ULP
        return ALGO_BINARY
    if listed:
        for apis, algorithm in ((std.thousandth_apis, ALGO_THOUSANDTH), (std.binary_apis, ALGO_BINARY),
                                (std.absolute_apis, ALGO_ABSOLUTE)):
            if api in apis:
                return algorithm
        if api in std.ulp_apis:
            return ALGO_ULP
    return ALGO_BENCHMARK


def rollup(statuses: Sequence[str], std: StandardVersion) -> str | None:
    """Forward/backward cell of a result row: None (blank) if empty, SKIP if all SKIP, else the worst
    of the judged rows (SKIP rows do not count)."""
    if not statuses:
        return None
    judged = [s for s in statuses if s != SKIP]
    if not judged:
        return SKIP
    return worst(judged, std)
