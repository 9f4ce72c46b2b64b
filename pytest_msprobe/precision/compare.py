"""Per-output verdicts of the precision standard: one details row per compared output.

Implements spec precision-standard.md sections 1.5-1.7 (which outputs, dispatch, preparation),
2.8 (which cells are filled), 3.1 (status chain), 3.3 (other statuses), 3.5 (dropout) and 3.6 (roll-up).
The numbers come from the one metric pass of :mod:`dumpers.metrics_engine` (:func:`float_metrics` hands it
the standard's parameters in the types the spec prescribes, section 1.7); every threshold and list comes from
:mod:`.standards` through the chosen :class:`~.standards.StandardVersion`. torch is imported only when a tensor is met.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dumpers import metrics_engine as engine
from dumpers.metrics_engine import (  # noqa: F401 - the engine's names the tests and benchmarks read here
    CHUNK,
    MSG_BENCH_ZERO,
    MSG_BOTH_ZERO,
    MSG_COS_NAN,
    MSG_DEVICE_ZERO,
    MSG_EMPTY_MAX,
    MSG_SCALAR,
    ArraySource,
    Bf16BitsSource,
    CosineResult,
    MetricSet,
    as_source,
)

from .fields import DETAIL_METRIC_FIELDS
from .standards import (
    ABSOLUTE,
    BENCHMARK,
    BF16,
    BF16_EPS,
    BF16_MAX,
    BINARY,
    COSINE_PASS,
    DEFAULT_STANDARD,
    DROPOUT_MIN_N,
    DROPOUT_ZERO_RATIO,
    ERROR,
    FIRST_OUTPUT_ONLY_APIS,
    FP16,
    FP32,
    HUNDRED_T,
    MAX_ABS_PASS,
    NEW_STANDARD_DTYPES,
    PASS,
    SKIP,
    TEN_THOUSAND_T,
    THOUSANDTH,
    THOUSAND_T,
    ULP,
    ULP_PARAMS,
    AbsoluteThreshold,
    SmallValue,
    StandardVersion,
    UlpParams,
    get_standard,
    standard_for,
)
from .verdict import WARNING_KEY, worst_judged

MSG_TYPE = "bench and npu output type is different."
MSG_DICT_KEYS = "bench and npu output dict keys are different."
MSG_STRUCTURE = "bench and npu output structure is different."
MSG_BENCH_NONE = "Bench output is None, skip this test."
MSG_EMPTY_REL = "Relative error result list is empty."
MSG_NO_BENCH_RESULT = "There is not bench calculation result."

# 1.4 / 3.3 backward skip messages

# 3.1 verdict sentences
V_COS_ERR = "Cosine similarity is less than 0.99, consider as error, skip other check and set to SPACE.\n"
V_MAXABS_PASS = "Max abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
V_HUNDRED_ERR = "Relative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n"
V_THOUSAND_PASS = "Relative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
V_THOUSAND_WARN = ("Relative error is greater than 0.001, consider as warning, skip other check and set to "
                   "SPACE.\n")
V_THOUSAND_ERR = "Relative error is greater than 0.001, consider as error, skip other check and set to SPACE.\n"
V_TEN_THOUSAND_WARN = ("Relative error is greater than 0.0001, consider as warning, skip other check and set "
                       "to SPACE.\n")
V_TEN_THOUSAND_PASS = "Relative error is less than 0.0001, consider as pass.\n"

# 1.7 step 5: dtype groups (numpy dtype names) whose members can be compared with each other
_FLOAT_GROUP = frozenset({"float16", "float32", "float64", "longdouble", "float128"})
_BOOL_GROUP = frozenset({"bool", "uint8"})
_INT_GROUP_1_0_4 = frozenset({"int32", "int64"})
_INT_GROUP_ALL = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})

_BUILTINS = (bool, int, float, str)


def _blank_metrics() -> dict:
    return dict.fromkeys(DETAIL_METRIC_FIELDS)



# --------------------------------------------------------------------------------------------------
# the metrics: the standard's parameters handed to the one metric pass of dumpers.metrics_engine
RATIO_THRESHOLDS = {"hundred_ratio": HUNDRED_T, "thousand_ratio": THOUSAND_T, "ten_thousand_ratio": TEN_THOUSAND_T}

# finite range of the device array type used by the inf/nan error rate (2.6)
_FINITE_MAX = {FP16: 65504.0, FP32: float(np.finfo(np.float32).max), BF16: BF16_MAX}


def relative_eps(bench_dtype: Any, device_dtype: str) -> float:
    """The epsilon of the relative errors (1.7): 2^-8 for a bf16 device output, else the bench's eps."""
    if device_dtype == BF16:
        return BF16_EPS
    return float(np.finfo(np.dtype(bench_dtype)).eps)


def float_metrics(bench: Any, device: Any, *, device_dtype: str, eps: float | None = None,
                  legacy: bool = True, binary: bool = False, small_value: SmallValue | None = None,
                  absolute: AbsoluteThreshold | None = None, ulp: UlpParams | None = None,
                  agree_nonfinite: bool = True, absolute_class_match: bool = True,
                  chunk: int | None = None, figures: bool = False) -> MetricSet:
    """Compute the requested metric groups of two prepared float arrays in one chunked pass.

    Args:
        bench, device: prepared arrays (1.7) or chunk sources, same element count.
        device_dtype: the device output's torch dtype string (keys the tables, picks bf16 eps).
        eps: relative-error epsilon; default :func:`relative_eps`.
        legacy: cosine, max abs error and the double-hundred/thousand/ten-thousand ratios (2.1-2.3).
        binary: binary consistency error rate (2.4).
        small_value: benchmark metrics (2.5) with these thresholds.
        absolute: absolute-threshold metrics (2.6) with these thresholds.
        ulp: ULP metrics (2.7) with these parameters.
        agree_nonfinite: non-finite positions where both sides agree count as equal in the legacy
            metrics and the binary rate (fix of msprobe defect 9 #6); False gives msprobe 1.0.4.
        absolute_class_match: a bench +-inf needs the same device inf in the inf/nan error rate
            (fix of 9 #19); False gives msprobe's clip rule.
        chunk: elements per chunk (default: the engine's ``CHUNK``).
        figures: also measure what the Error / Expected column reads (the device's magnitudes and the observed
            error, :class:`dumpers.metrics_engine.Figures`) while the pass reads the arrays.

    Returns:
        MetricSet whose ``values`` hold the computed cells by DETAIL_METRIC_FIELDS name.
    """
    bs, ds = as_source(bench), as_source(device)
    if eps is None:
        eps = relative_eps(bs.dtype, device_dtype)
    hi = _FINITE_MAX.get(device_dtype, float(np.finfo(np.dtype(ds.dtype)).max))
    groups = engine.Groups(
        eps=eps, legacy=legacy, ratios=tuple(RATIO_THRESHOLDS.items()), binary=binary,
        small_value=None if small_value is None else (small_value.sv, small_value.atol),
        absolute=None if absolute is None else (absolute.rtol, absolute.sv, absolute.atol, hi),
        ulp=None if ulp is None else (ulp.min_eb, ulp.exponent_num, ulp.compute, ulp.threshold),
        agree_nonfinite=agree_nonfinite, class_match=absolute_class_match, cosine_pass=COSINE_PASS, figures=figures)
    return engine.run(bs, ds, groups, chunk or CHUNK)


def binary_error_rate(bench: Any, device: Any, *, agree_nonfinite: bool = False) -> Any:
    """count(B != D) / N (2.4); the string "Nan" for empty outputs. Works for every dtype."""
    return engine.binary_error_rate(bench, device, agree_nonfinite=agree_nonfinite)

@dataclass
class DetailRow:
    """One row of accuracy_checking_details: an output's dtypes, shape, metric cells and verdict."""
    name: str                      # e.g. "Functional.linear.0.forward.output.0"
    bench_dtype: str | None     # None -> blank cell; e.g. "torch.float32" or "<class 'int'>"
    device_dtype: str | None
    shape: str | None           # "(8, 32)", "()" ...
    metrics: dict = field(default_factory=_blank_metrics)  # DETAIL_METRIC_FIELDS keys; None = blank
    status: str = PASS             # "pass" | "Warning"/"warning" (per version) | "error" | "SKIP"
    message: str = ""
    standard: str = ""             # "benchmark"/"ulp"/... which standard applied (for reports)
    # what the metric pass measured for the Error / Expected column (dumpers.metrics_engine.Figures); in no CSV
    figures: Any = field(default=None, repr=False, compare=False)


def skip_row(row_name: str, message: str) -> DetailRow:
    """A SKIP details row: every dtype/shape/metric cell blank."""
    return DetailRow(row_name, None, None, None, _blank_metrics(), SKIP, message)


def _error_row(row_name: str, message: str, bench_dtype: str | None = None,
               device_dtype: str | None = None, shape: str | None = None) -> DetailRow:
    return DetailRow(row_name, bench_dtype, device_dtype, shape, _blank_metrics(), ERROR, message)


# --------------------------------------------------------------------------------------------------
# roll-up (3.6) and dropout (3.5)
def rollup(statuses: Sequence[str], *, version: str | StandardVersion = DEFAULT_STANDARD) -> str | None:
    """Roll per-output statuses up to an API's forward or backward verdict.

    Empty -> None (blank cell). With the "severity" rule: any error -> error, else any warning -> warning
    (spelled per version), else all SKIP -> SKIP (when the version says so), else pass.
    """
    std = get_standard(version)
    low = [s.lower() for s in statuses]
    if not low:
        return None
    if std.all_skip_is_skip and all(s == SKIP.lower() for s in low):
        return SKIP
    if std.rollup_rule == "last":
        verdict = PASS
        for s in low:
            if s == ERROR:
                verdict = ERROR
            elif s == WARNING_KEY:
                verdict = std.warning
        return verdict
    return std.spell(worst_judged(low) or PASS)


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        t = x.detach().cpu()
        if str(t.dtype) == BF16:
            t = t.float()
        return t.numpy()
    return np.asarray(x)


def dropout_status(bench: Any, device: Any) -> str:
    """Dropout rule (3.5): with N >= 100, pass iff |zeros(B) - zeros(D)| / N < 0.1; N < 100 passes.

    ``bench``/``device`` are tensors or arrays; a list/tuple (gradient list) contributes its element 0.
    """
    if isinstance(bench, (list, tuple)):
        bench = bench[0] if bench else None
    if isinstance(device, (list, tuple)):
        device = device[0] if device else None
    if bench is None or device is None:
        return PASS
    b, d = _to_numpy(bench).reshape(-1), _to_numpy(device).reshape(-1)
    n = b.size
    if n < DROPOUT_MIN_N:
        return PASS
    diff = abs(int(np.count_nonzero(b == 0)) - int(np.count_nonzero(d == 0)))
    return PASS if diff / n < DROPOUT_ZERO_RATIO else ERROR


# --------------------------------------------------------------------------------------------------
# tensor preparation (1.7)
def _np_dtype_of(tensor: Any, device_is_bf16: bool) -> np.dtype:
    name = str(tensor.dtype).replace("torch.", "")
    if device_is_bf16 or name == "bfloat16":
        return np.dtype("float32") if name in ("bfloat16", "float16", "float32") else np.dtype(name)
    if name == "bool":
        return np.dtype("bool")
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype("O")


def _source(tensor: Any, np_dtype: np.dtype) -> Any:
    """The metric pass's view of a tensor, with no converted copy of it: the numpy view of its CPU values (read
    as ``np_dtype``, chunk by chunk, where that is wider), or for bfloat16 its int16 bits, which the kernel
    widens to float32 itself (1.7)."""
    import torch

    t = tensor.detach().cpu().reshape(-1)
    if t.dtype == torch.bfloat16:              # compared as float32 (_np_dtype_of)
        return Bf16BitsSource(bits=t.view(torch.int16).numpy())
    return ArraySource(t.numpy(), np_dtype)


def _comparable(b: np.dtype, d: np.dtype, std: StandardVersion) -> bool:
    ints = _INT_GROUP_ALL if std.int_group_any else _INT_GROUP_1_0_4
    for group in (_FLOAT_GROUP, _BOOL_GROUP, ints):
        if b.name in group and d.name in group:
            return True
    return False


def _shape_str(shape: Any) -> str:
    return str(tuple(int(s) for s in shape))


def _compare_tensor(api_name: str, row_name: str, bench: Any, device: Any, std: StandardVersion) -> DetailRow:
    bench_dtype, device_dtype = str(bench.dtype), str(device.dtype)
    shape = _shape_str(device.shape)
    row = DetailRow(row_name, bench_dtype, device_dtype, shape, _blank_metrics(), PASS, "")
    if tuple(bench.shape) != tuple(device.shape):
        row.status = ERROR
        row.message = f"The shape of bench{bench.shape} and npu{device.shape} not equal."
        return row
    n = int(device.numel())
    if n == 0 and std.empty_is_skip:
        row.status, row.message = SKIP, std.empty_skip_message
        return row
    is_bf16 = device_dtype == BF16
    tb, td = _np_dtype_of(bench, is_bf16), _np_dtype_of(device, is_bf16)
    if not _comparable(tb, td, std):
        row.status = ERROR
        row.message = f"Bench out dtype is {tb.name} but npu output dtype is {td.name}, cannot compare."
        return row
    bs, ds = _source(bench, tb), _source(device, td)
    if td.kind != "f":
        return _compare_integers(api_name, row, bs, ds, std)
    return _compare_floats(api_name, row, bs, ds, std)


def _compare_integers(api_name: str, row: DetailRow, bs: Any, ds: Any, std: StandardVersion) -> DetailRow:
    row.standard = BINARY
    rate = binary_error_rate(bs, ds)
    row.metrics["binary_error_rate"] = rate
    msg = std.int_message.format(dtype=ds.dtype.name)
    if rate == "Nan":
        row.status = ERROR
        row.message = msg + MSG_NO_BENCH_RESULT + "\n"
        return row
    if api_name in std.quantization_apis:
        worst = max(int(np.max(np.abs(ds.read(i, j).astype(np.int64) - bs.read(i, j).astype(np.int64))))
                    for i, j in _spans(bs.size))
        row.status = PASS if worst <= std.quant_max_abs else ERROR
    else:
        row.status = PASS if rate == 0 else ERROR
    row.message = msg + "\n"
    return row


def _spans(n: int) -> list:
    return [(i, min(i + CHUNK, n)) for i in range(0, n, CHUNK)]


def _groups_for(standard: str, dt: str, std: StandardVersion, api_name: str) -> dict:
    """Which new-standard metric groups to compute (2.8)."""
    if dt not in NEW_STANDARD_DTYPES:
        return {}
    if standard in (BENCHMARK, THOUSANDTH):
        return {"small_value": std.small_value(dt)}
    if standard == BINARY:
        return {"binary": True}
    if standard == ABSOLUTE:
        return {"absolute": std.absolute_threshold(api_name, dt)}
    if standard == ULP:
        return {"ulp": ULP_PARAMS[dt]}
    return {}


def _compare_floats(api_name: str, row: DetailRow, bs: Any, ds: Any, std: StandardVersion) -> DetailRow:
    dt = row.device_dtype or ""
    standard = standard_for(api_name, std, dt)
    row.standard = standard
    groups = _groups_for(standard, dt, std, api_name)
    n = bs.size
    prefix = std.fp64_message + "\n" if (dt == "torch.float64" and std.fp64_message) else ""
    if n == 0:
        ms = float_metrics(bs, ds, device_dtype=dt, legacy=False, **groups)
        row.metrics.update(ms.values)
        if "small_value" in groups:
            for key in ("max_rel_err", "mean_rel_err"):
                row.metrics[key] = None
            row.status, row.message = ERROR, MSG_EMPTY_REL
        else:
            row.status, row.message = SKIP, MSG_EMPTY_MAX
        return row
    ms = float_metrics(bs, ds, device_dtype=dt, legacy=True, agree_nonfinite=std.nonfinite_by_agreement,
                       figures=True, **groups)
    row.figures = ms.figures
    values = dict(ms.values)
    legacy = {k: values.pop(k) for k in ("cosine", "max_abs_err", *RATIO_THRESHOLDS)}
    row.metrics.update(values)
    if standard == THOUSANDTH:
        row.metrics["thousand_ratio"] = legacy["thousand_ratio"]
    _status_chain(row, ms.cosine, legacy, dt, std, prefix)
    return row


def _status_chain(row: DetailRow, cos: CosineResult, legacy: dict, dt: str, std: StandardVersion,
                  prefix: str) -> None:
    """The run_ut status chain (3.1): cosine, max abs error, then the relative-error ratios."""
    cells = row.metrics
    cells["cosine"] = cos.value
    msg = prefix + cos.message + "\n"
    cos_passed = cos.passed or (std.cosine_nan_passes and isinstance(cos.value, float) and cos.value != cos.value)
    if not cos_passed:
        row.status, row.message = ERROR, msg + V_COS_ERR
        return
    max_abs = legacy["max_abs_err"]
    cells["max_abs_err"] = max_abs
    if max_abs < MAX_ABS_PASS:
        row.status, row.message = PASS, msg + V_MAXABS_PASS
        return
    hundred, thousand, ten_thousand = (legacy[k] for k in RATIO_THRESHOLDS)
    if dt in (FP16, BF16):
        cells["hundred_ratio"] = hundred
        if not hundred > 1 - RATIO_THRESHOLDS["hundred_ratio"]:
            row.status, row.message = ERROR, msg + V_HUNDRED_ERR
            return
        cells["thousand_ratio"] = thousand
        if thousand > 1 - RATIO_THRESHOLDS["thousand_ratio"]:
            row.status, row.message = PASS, msg + V_THOUSAND_PASS
        else:
            row.status, row.message = std.warning, msg + V_THOUSAND_WARN
        return
    cells["thousand_ratio"] = thousand
    cells["ten_thousand_ratio"] = ten_thousand
    if not thousand > 1 - RATIO_THRESHOLDS["thousand_ratio"]:
        row.status, row.message = ERROR, msg + V_THOUSAND_ERR
    elif not ten_thousand > 1 - RATIO_THRESHOLDS["ten_thousand_ratio"]:
        row.status, row.message = std.warning, msg + V_TEN_THOUSAND_WARN
    else:
        row.status, row.message = PASS, msg + V_TEN_THOUSAND_PASS


# --------------------------------------------------------------------------------------------------
# dispatch (1.6)
def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "dtype") and hasattr(x, "numel")


def _compare_container(api_name: str, row_name: str, bench: Any, device: Any,
                       std: StandardVersion) -> DetailRow:
    """dict / nested sequence outputs (fix of defect 9 #4): compare every value, one rolled-up row."""
    if isinstance(bench, dict):
        if set(bench) != set(device):
            return _error_row(row_name, MSG_DICT_KEYS)
        pairs = [(str(k), bench[k], device[k]) for k in bench]
    else:
        if len(bench) > len(device):
            return _error_row(row_name, MSG_STRUCTURE)
        pairs = [(str(i), b, device[i]) for i, b in enumerate(bench)]
    parts = [(k, compare_output(api_name, f"{row_name}[{k}]", b, d, version=std)) for k, b, d in pairs]
    status = rollup([r.status for _, r in parts], version=std) or SKIP
    message = "".join(f"[{k}] {r.status}: {r.message.strip()}\n" for k, r in parts
                      if r.status.lower() != PASS)
    row = DetailRow(row_name, str(type(bench)), str(type(device)), None, _blank_metrics(), status, message)
    return row


def compare_output(api_name: str, row_name: str, bench: Any, device: Any, *,
                   version: str | StandardVersion = DEFAULT_STANDARD) -> DetailRow:
    """Compare one bench output with one device output and return its details row.

    Args:
        api_name: base API name (``linear``, ``__add__``); picks the standard (4.1).
        row_name: the row's name, e.g. ``Functional.linear.0.forward.output.0``.
        bench, device: torch tensors, python bool/int/float/str, None, dicts or sequences.
        version: standard version name (see :data:`.standards.STANDARDS`).
    """
    std = get_standard(version)
    if not isinstance(bench, type(device)):
        return _error_row(row_name, MSG_TYPE)
    if isinstance(bench, (dict, list, tuple)):
        return _compare_container(api_name, row_name, bench, device, std)
    if _is_tensor(bench):
        return _compare_tensor(api_name, row_name, bench, device, std)
    if isinstance(bench, _BUILTINS):
        row = DetailRow(row_name, str(type(bench)), str(type(device)), None, _blank_metrics(), PASS, "",
                        BINARY)
        if bench == device:
            row.metrics["binary_error_rate"] = 0
        else:
            row.status = ERROR
            row.metrics["binary_error_rate"] = std.builtin_mismatch_rate
        return row
    if bench is None:
        return skip_row(row_name, MSG_BENCH_NONE)
    return _error_row(row_name, std.unexpected_type_message.format(type=type(bench)))


def compare_outputs(api_name: str, row_name: Callable[[int], str], bench_out: Any, device_out: Any, *,
                    version: str | StandardVersion = DEFAULT_STANDARD) -> list:
    """Compare all outputs of one API call in one direction (1.5); one DetailRow per bench output.

    A single tensor/builtin/None/dict gives one row, named ``row_name(0)``; a list/tuple gives one row per
    bench element, ``row_name(i)`` (extra device elements are ignored; missing ones are error rows). The
    caller names the rows (the details-CSV grammar is ``dumpers.format.output_row_name``'s).
    """
    std = get_standard(version)
    if isinstance(bench_out, (list, tuple)) and api_name in FIRST_OUTPUT_ONLY_APIS:
        bench_out = bench_out[0] if bench_out else None
        if isinstance(device_out, (list, tuple)):
            device_out = device_out[0] if device_out else None
    if not isinstance(bench_out, (list, tuple)):
        return [compare_output(api_name, row_name(0), bench_out, device_out, version=std)]
    if not isinstance(device_out, (list, tuple)):
        return [_error_row(row_name(0), MSG_TYPE)]
    rows = []
    for i, b in enumerate(bench_out):
        if i >= len(device_out):
            rows.append(_error_row(row_name(i), MSG_STRUCTURE) if std.structure_mismatch_is_error
                        else skip_row(row_name(i), "list index out of range"))
            continue
        rows.append(compare_output(api_name, row_name(i), b, device_out[i], version=std))
    return rows
