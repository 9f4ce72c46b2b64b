"""Exact CSV headers of msprobe's files (code headers, spec precision-standard.md sections 5.7 and 6.2)."""
from __future__ import annotations

from dumpers.format import BLANK  # noqa: F401  (msprobe's SPACE: an unused cell holds one ASCII space)

from ..precision.fields import DETAIL_METRIC_FIELDS

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]

DETAILS_HEADER = [
    "API Name", "Bench Dtype", "DEVICE Dtype", "Shape",
    "余弦相似度", "最大绝对误差", "双百指标", "双千指标", "双万指标",
    "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比",
    "相对误差最大值", "相对误差平均值",
    "inf/nan错误率", "相对误差错误率", "绝对误差错误率",
    "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比",
    "Status", "Message",
]

# DETAILS_HEADER's metric columns (5..21) and the DetailRow metric field each one holds
METRIC_HEADERS = DETAILS_HEADER[4:4 + len(DETAIL_METRIC_FIELDS)]
FIELD_OF_HEADER = dict(zip(METRIC_HEADERS, DETAIL_METRIC_FIELDS))
HEADER_OF_FIELD = dict(zip(DETAIL_METRIC_FIELDS, METRIC_HEADERS))
__all__ = ["APC_DETAILS_HEADER", "APC_RESULT_HEADER", "BLANK", "DATA_MODE_COLUMN", "DETAILS_HEADER",
           "FIDELITY_COLUMN", "EXPECTED_COLUMN",
           "DETAIL_METRIC_FIELDS", "FIELD_OF_HEADER", "HEADER_OF_FIELD", "METRIC_HEADERS", "RESULT_HEADER"]

APC_RESULT_HEADER = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]

APC_DETAILS_HEADER = [
    "API Name", "小值域错误比值", "小值域判定结果", "均方根误差比值", "均方根误差判定结果",
    "相对误差最大值比值", "相对误差最大值判定结果", "相对误差平均值比值", "相对误差平均值判定结果",
    "误差均衡性比值", "误差均衡性判定结果", "inf/nan错误率", "inf/nan判定结果",
    "相对误差错误率", "相对误差判定结果", "绝对误差错误率", "绝对误差判定结果",
    "二进制一致错误率", "二进制一致错误率判定结果", "ULP误差平均值", "ULP误差大于阈值占比",
    "ULP误差大于阈值占比比值", "ULP误差判定结果", "双千指标", "双千指标判定结果",
    "比对结果", "比对算法", "Message",
]

# Extra trailing column we add to both acc-check CSVs: which data mode produced the row.
DATA_MODE_COLUMN = "Data Mode"
# And after it: how the replayed device output compares with the one the dump recorded (docs/recorded.md).
FIDELITY_COLUMN = "Replay Fidelity"
# And after it: the device's error against the bench as a multiple of the expected error of the call
# (docs/expected-error.md): under 2 the rounding of a correct kernel, above it a real difference.
EXPECTED_COLUMN = "Error / Expected"
