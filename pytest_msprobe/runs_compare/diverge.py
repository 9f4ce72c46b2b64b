"""The first divergence of two runs: the first call, in execution order and across ranks, whose outputs differ
beyond what its inputs' difference and its dtype explain (docs/compare.md, "The first divergence").

For each call (a forward or a backward entry, in dump.json order, which is the order they ran), each matched
floating output gets the error two correct runs may show: :func:`pytest_msprobe.precision.expected_error.
expected_error_from_stats` of the API, its dtype and the golden statistics, told how far the call's inputs
already differ (``input_rel_error``), then :meth:`~pytest_msprobe.precision.expected_error.Expected.pair`. The
observed difference divided by that is the call's multiple; the first call whose multiple is beyond
:data:`~pytest_msprobe.precision.expected_error.WITHIN` is the divergence. The observed difference comes from the
tensors when the dumps hold them (exact), from the statistics otherwise (a lower bound: the call is named only
when even the bound is beyond), from the CRC32 values in md5 mode (a call whose inputs are bit-equal and whose
outputs are not). Printed Means and Norms are rounded to the tensor's dtype: their differences count only beyond
that rounding (:func:`stat_rounding`); inputs that differ at all differ by at least one rounding of the run's
narrowest dtype (:func:`running_unit_roundoff`).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dumpers import format as fmt

from .columnar import StatLines
from .stat_rounding import stat_rounding, stat_rounding_columns
from .table import MD5, TENSOR

COMM_PREFIXES = ("Distributed.", "MintDistributed.")
SKIPPED_APIS = ("Torch.empty.", "Torch.fill.", "Tensor.__setitem__.")


@dataclass
class Finding:
    """What the walk found on one rank."""

    rank: int
    label: str
    node: dict | None                   # the diff_analyze node of the first divergence, None: none
    position: tuple = (0, 0)             # (communication calls before it, position in the dump)
    source: str = ""
    checked: int = 0                     # calls whose outputs were judged
    notes: list = field(default_factory=list)


def _float_dtype(dtype: str) -> bool:
    return bool(dtype) and any(word in dtype.lower() for word in ("float", "bf16", "half", "double"))


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _scale(stats: list) -> float:
    return max(abs(_num(stats[0])), abs(_num(stats[1]))) if stats else math.nan


def _stat_gap(a: float, b: float) -> float:
    """|a - b| of one statistic: 0 when equal (infinities included) or unknown on a side; inf when one side is
    finite and the other not."""
    if a == b or math.isnan(a) and math.isnan(b):
        return 0.0
    if math.isfinite(a) and math.isfinite(b):
        return abs(a - b)
    if math.isnan(a) or math.isnan(b):
        return math.inf if (math.isnan(a) != math.isnan(b)) else 0.0
    return math.inf


def _units(dtype: str) -> float:
    from ..precision.expected_error import unit_roundoff
    try:
        return unit_roundoff(dtype)
    except ValueError:
        return 0.0


def _rounded_gap(a: float, b: float, u: float) -> float:
    """``|a - b|`` of two printed statistics less what their own rounding to the dtype explains (never below 0):
    the smallest difference the tensors' statistics may have had before the dump printed them."""
    gap = _stat_gap(a, b)
    if not math.isfinite(gap) or gap == 0:
        return gap
    return max(0.0, gap - stat_rounding(a, u) - stat_rounding(b, u))


def stats_observed(target: list, golden: list, numel: int, u: float = 0.0) -> tuple:
    """(max-abs lower bound, mean-abs lower bound) of a difference from the four statistics of each side:
    ``|dMax|``, ``|dMin|`` and ``|dMean|`` never exceed the largest element difference, ``|dMean|`` never
    exceeds the mean absolute difference, ``|dNorm| / sqrt(N)`` never exceeds the root mean square one. Mean and
    Norm are printed in the tensor's dtype (unit roundoff ``u``): their differences count only beyond the two
    values' own rounding (:func:`stat_rounding`)."""
    t, g = [_num(v) for v in target], [_num(v) for v in golden]
    if len(t) < 4 or len(g) < 4:
        return 0.0, 0.0
    d_max, d_min = _stat_gap(t[0], g[0]), _stat_gap(t[1], g[1])
    d_mean, d_norm = _rounded_gap(t[2], g[2], u), _rounded_gap(t[3], g[3], u)
    return max(d_max, d_min, d_mean, d_norm / math.sqrt(max(numel, 1))), d_mean


def _numel(row: Any) -> int:
    shape = (row.item or {}).get("shape") if row is not None else None
    n = 1
    for s in shape or ():
        n *= int(s) if isinstance(s, int) else 1
    return n


def _stat_dict(row: Any) -> dict:
    item = row.item or {}
    return {"dtype": item.get("dtype", ""), "shape": item.get("shape") or [], "Max": item.get("Max"),
            "Min": item.get("Min"), "Mean": item.get("Mean"), "Norm": item.get("Norm")}


def _module_path(construct: dict, key: str) -> list:
    chain, seen = [key], {key}
    parent = construct.get(key)
    while isinstance(parent, str) and parent not in seen and len(chain) < 256:
        chain.append(parent)
        seen.add(parent)
        parent = construct.get(parent)
    return list(reversed(chain))


def _call_name(key: str) -> str:
    return key.rsplit(".", 1)[0] if key.endswith((".forward", ".backward")) else key


def _input_divergence(lines: list, mode: str) -> float:
    """The largest relative difference among a call's matched floating inputs (0 when they agree)."""
    worst = 0.0
    for line in lines:
        t, g = line.target, line.golden
        if g is None or not _float_dtype(t.dtype):
            continue
        scale = _scale(g.stats)
        if mode == TENSOR and getattr(line, "observed", None) is not None:
            peak, spread = line.observed[0], 0.0
        else:
            u = _units(g.dtype)
            peak = stats_observed(t.stats, g.stats, _numel(g), u)[0]
            spread = _norm_spread(t.stats, g.stats, _numel(g), u)
        if peak == 0 and spread == 0:
            continue
        if not scale or math.isnan(scale) or math.isinf(peak):
            return math.inf
        worst = max(worst, peak / scale, spread)
    return worst


def _input_spread(lines: list) -> float:
    """The largest relative rms difference among a call's matched floating inputs as their norms suggest
    (:func:`_norm_spread`)."""
    worst = 0.0
    for line in lines:
        g = line.golden
        if g is None or not _float_dtype(line.target.dtype):
            continue
        worst = max(worst, _norm_spread(line.target.stats, g.stats, _numel(g), _units(g.dtype)))
    return worst


def _inputs_differ(lines: list, mode: str) -> bool:
    """Whether any matched floating input differs at all: its tensors in tensor mode, else any printed statistic
    (the same tensor always prints the same statistics)."""
    for line in lines:
        t, g = line.target, line.golden
        if g is None or not _float_dtype(t.dtype):
            continue
        if mode == TENSOR and getattr(line, "observed", None) is not None:
            if line.observed[0] != 0 or line.observed[1] != 0:
                return True
        elif any(_stat_gap(_num(a), _num(b)) != 0 for a, b in zip(t.stats, g.stats)):
            return True
    return False


def running_unit_roundoff(result: Any, keys: list, groups: Any) -> np.ndarray:
    """For each call in execution order, the unit roundoff of the narrowest floating dtype among the tensors of
    the calls up to and including it (0 before any). Two devices part by rounding: an element of a run computed
    in that dtype that differs at all differs by at least one of its roundings (bf16 values one ulp apart are
    2^-8 to 2^-7 of each other), and tensors computed from such elements in a wider dtype (a float32 sum of bf16
    squares) inherit it. So inputs that differ are taken to differ by at least that ``u``, relative: the
    statistics alone may show less (a Norm that moved by less than the elements did, by cancellation)."""
    units: dict = {}

    def unit(dtype: str) -> float:
        if dtype not in units:
            units[dtype] = _units(dtype) if _float_dtype(dtype) else 0.0
        return units[dtype]
    if isinstance(result.lines, StatLines):
        tab = result.lines.table
        dtypes = tab.t.cols.dtype
        if not len(tab):
            return np.zeros(len(keys))
        per_row = np.fromiter((unit(dtypes[i]) for i in tab.ti.tolist()), float, len(tab))
        per_call = np.maximum.reduceat(per_row, tab.group_starts)
    else:
        per_call = np.array([max((unit(line.target.dtype) for line in groups[key]), default=0.0)
                             for key in keys], dtype=float)
    return np.maximum.accumulate(per_call) if len(per_call) else per_call


def _norm_spread(target: list, golden: list, numel: int, u: float = 0.0) -> float:
    """The relative root-mean-square difference of a tensor suggested by its norms: for a difference ``d``
    uncorrelated with the tensor ``x``, ``|Norm(x + d) - Norm(x)|`` is about ``rms(d)``, so ``sqrt(N) |dNorm| /
    Norm`` is about ``rms(d) / rms(x)``. An estimate, not a bound; it keeps the statistics' lower bounds from
    understating how far a call's inputs already differ. Only the part of ``|dNorm|`` beyond the two norms' own
    rounding to the dtype counts (:func:`stat_rounding`): ``sqrt(N)`` would turn a printed ulp into a large
    spread the tensors need not have."""
    t, g = _num(target[3]) if len(target) > 3 else math.nan, _num(golden[3]) if len(golden) > 3 else math.nan
    if not (math.isfinite(t) and math.isfinite(g)) or g <= 0:
        return 0.0
    root_n = math.sqrt(max(numel, 1))
    peak = _scale(golden)
    tails = max(1.0, peak * root_n / g) if math.isfinite(peak) else 1.0
    return root_n * _rounded_gap(t, g, u) / g / math.sqrt(tails)


def _node(key: str, lines: list, stack: Any, construct: dict, mode: str) -> dict:
    def info(rows: list) -> dict:
        out = {}
        for line in rows:
            t = line.target
            if mode == MD5:
                out[t.name] = {"NPU MD5": t.md5}
            else:
                out[t.name] = dict(zip(("NPU max", "NPU min", "NPU mean", "NPU l2norm"), t.stats))
        return out
    inputs = [line for line in lines if not line.is_output]
    outputs = [line for line in lines if line.is_output]
    return {"op_name": key, "data_info": {"input": info(inputs), "output": info(outputs)},
            "stack_info": stack, "module_path": _module_path(construct, key)}


def _forward_lines(groups: dict, key: str) -> list:
    if not key.endswith(".backward"):
        return []
    return groups.get(key[: -len("backward")] + "forward", [])


def _judge_call(key: str, lines: list, groups: dict, mode: str, floor: float = 0.0) -> dict | None:
    """The figures of one call when an output diverges beyond its expected error, else None (or the figures of
    its worst output with ``diverged`` False). ``floor``: the least relative difference of inputs that differ at
    all (:func:`running_unit_roundoff`)."""
    from ..precision import expected_error as ee

    inputs = [line for line in lines if not line.is_output]
    outputs = [line for line in lines if line.is_output and line.golden is not None and _float_dtype(line.target.dtype)]
    if not outputs:
        return None
    backward = key.endswith(".backward")
    forward_inputs = [line for line in _forward_lines(groups, key) if not line.is_output] if backward else inputs
    if mode == MD5:
        if any(line.golden is None or line.target.md5 != line.golden.md5 for line in inputs + forward_inputs):
            return None
        bad = [line for line in outputs if line.target.md5 != line.golden.md5]
        if not bad:
            return None
        return {"diverged": True, "multiple": math.inf, "output": bad[0].target.name, "source": "md5",
                "confidence": "high where the runs are otherwise bit-exact: a call whose inputs are bit-equal "
                              "gave different outputs"}
    rel_in = max(_input_divergence(inputs, mode), _input_divergence(forward_inputs, mode))
    if math.isinf(rel_in):
        return None
    differ = _inputs_differ(inputs + forward_inputs, mode)
    if floor and differ:
        rel_in = max(rel_in, floor)
    tensor_stats = [_stat_dict(line.golden) for line in forward_inputs
                    if line.golden is not None and (line.golden.item or {}).get("type") in fmt.TENSOR_TYPES]
    grad_stat = None
    if backward:
        grads = [line for line in inputs if line.golden is not None and _float_dtype(line.golden.dtype)]
        grad_stat = _stat_dict(grads[0].golden) if grads else None
    api = _call_name(key)
    worst: dict | None = None
    for index, line in enumerate(outputs):
        g = line.golden
        numel = _numel(g)
        if mode == TENSOR and getattr(line, "observed", None) is not None:
            observed = ee.Observed(*line.observed)
            source = "tensors"
        else:
            observed = ee.Observed(*stats_observed(line.target.stats, g.stats, numel, _units(g.dtype)))
            source = "statistics"
        if observed.max_abs == 0 and observed.mean_abs == 0 or _surely_within(ee, observed, g):
            continue
        position = _output_position(line.target.name)
        try:
            expected = two_devices(ee.expected_error_from_stats(
                api, g.dtype, tensor_stats, _stat_dict(g), direction="backward" if backward else "forward",
                index=position if backward else index, grad_output_stat=grad_stat, input_rel_error=rel_in))
        except (ValueError, ZeroDivisionError):
            continue
        multiple = ee.multiple(observed, expected)
        conserved = _conserved_mean(api, line, grad_stat, numel, backward, position) if backward else None
        basis, confidence = expected.basis, (
            "exact: the difference measured on the tensors" if source == "tensors" else
            "lower bound: the statistics' differences bound the tensors' from below, so a call named from them "
            "diverges at least this much; a smaller divergence can pass unseen")
        if conserved is not None and conserved[0] > multiple:
            multiple, basis, confidence = conserved
        if source == "statistics" and expected.reduction_length <= 1:
            norm_rule = _norm_moved(line, max(_input_spread(inputs + forward_inputs), floor if differ else 0.0))
            if norm_rule is not None and norm_rule[0] > multiple:
                multiple, basis, confidence = norm_rule
        if worst is None or multiple > worst["multiple"]:
            worst = {"diverged": multiple > ee.WITHIN, "multiple": multiple, "output": line.target.name,
                     "observed_max_abs": observed.max_abs, "observed_mean_abs": observed.mean_abs,
                     "expected_max_abs": expected.max_abs, "expected_mean_abs": expected.mean_abs,
                     "input_relative_divergence": rel_in, "basis": basis, "family": expected.family,
                     "reduction_length": expected.reduction_length, "source": source,
                     "confidence": confidence}
    return worst


def _conserved_mean(api: str, line: Any, grad_stat: dict | None, numel: int, backward: bool,
                    position: int) -> tuple | None:
    """(multiple, basis, confidence) of an output whose Mean the API fixes whatever its inputs (a softmax's input
    gradient sums to zero: :func:`pytest_msprobe.precision.expected_error_stats.conserved_mean`): the two printed
    Means' difference beyond their rounding against twice what one correct run may miss that value by. None when
    the API fixes no Mean of this output."""
    from ..precision.expected_error_stats import conserved_mean

    g = line.golden
    if grad_stat is None or len(g.stats) < 3 or len(line.target.stats) < 3:
        return None
    grad_max = max(abs(_num(grad_stat["Max"])), abs(_num(grad_stat["Min"])))
    fixed = conserved_mean(api, g.dtype, direction="backward" if backward else "forward", index=position,
                           grad_max_abs=grad_max, output_max_abs=_scale(g.stats), numel=numel)
    if fixed is None:
        return None
    gap = _rounded_gap(_num(line.target.stats[2]), _num(g.stats[2]), _units(g.dtype))
    if not gap:
        return None
    allowed = 2.0 * fixed[1]
    multiple = gap / allowed if allowed > 0 else math.inf
    return multiple, (f"conserved: the Mean is {fixed[0]:g} by construction whatever the inputs; |dMean| "
                      f"{gap:.3g} against two devices' {allowed:.3g}"), (
        "bound: the API fixes this Mean whatever its inputs; a correct kernel misses it only by its own and the "
        "dump's rounding")


def _norm_moved(line: Any, rel_in: float) -> tuple | None:
    """(multiple, basis, confidence) of an element-wise output's Norm (one input element per output element, ``n = 1``):
    its relative movement beyond the printed values' rounding against what unbiased element differences allow.

    Two runs' outputs differ element by element by each device's rounding to nearest (``|delta_i| <= u``, zero
    mean, independent) and by what the inputs' difference brings, relative differences of root mean square
    ``rel_in`` (the inputs' norm-based spread, :func:`_input_spread`, at least the ``u`` floor where they differ),
    zero mean and independent too. The Norm's relative change is their weighted mean ``sum y_i^2 delta_i / sum
    y_i^2``, of standard deviation at most ``(u / sqrt 3 + rel_in) sqrt(sum y^4) / sum y^2 <= (u / sqrt 3 +
    rel_in) max|y| / Norm``; at ``lambda(1)`` standard deviations and for two devices: ``2 lambda (u / sqrt 3 +
    rel_in) max|y| / Norm``. A kernel that scales elements moves the Norm by a mean, not a random walk: a 6% fault
    on half the elements moves it 3%, far beyond."""
    g, t = line.golden, line.target
    if len(g.stats) < 4 or len(t.stats) < 4:
        return None
    n_g, n_t = _num(g.stats[3]), _num(t.stats[3])
    u = _units(g.dtype)
    if not (math.isfinite(n_g) and math.isfinite(n_t)) or n_g <= 0 or not u:
        return None
    moved = _rounded_gap(n_t, n_g, u) / n_g
    if not moved:
        return None
    lam = math.sqrt(2.0 * math.log(2.0)) + 1.0            # the model's lambda(N) for one statistic
    peak = _scale(g.stats)
    allowed = 2.0 * lam * (u / math.sqrt(3.0) + rel_in) * peak / n_g
    return moved / allowed, (f"the Norm moved {moved:.3g} relative, against {allowed:.3g} for unbiased element "
                             f"differences (the inputs' rms spread {rel_in:.3g}, two devices)"), (
        "estimate: the Norm's movement against unbiased, independent element differences (rounding to nearest); "
        "a kernel that scales elements moves it by a mean")


def _surely_within(ee: Any, observed: Any, golden: Any) -> bool:
    """Whether the final rounding alone covers the observed difference, without asking the model: each device
    rounds every element by up to ``u |y|`` (``u`` the dtype's unit roundoff) and by about ``u |y| / 2`` on
    average, so two devices may differ by ``2 u max|y|`` at most and ``u mean|y|`` on average (``|Mean|`` is below
    ``mean|y|``). The model's figures always include that rounding, so such a call is within them."""
    try:
        u = ee.unit_roundoff(golden.dtype)
    except ValueError:
        return False
    scale = _scale(golden.stats)
    mean = abs(_num(golden.stats[2]))
    if not (math.isfinite(scale) and math.isfinite(mean)):
        return False
    return observed.max_abs <= 2 * u * scale and observed.mean_abs <= u * mean


def two_devices(expected: Any) -> Any:
    """What two correct runs on two devices may differ by: each is within ``expected`` of the exact result, so
    their difference is within the sum of both (the triangle inequality): twice the max-abs and twice the mean-abs
    figure. (``Expected.pair`` assumes the same final rounding on both sides, which two devices need not share.)"""
    return replace(expected, max_abs=2.0 * expected.max_abs, mean_abs=2.0 * expected.mean_abs,
                   compute_mean_abs=2.0 * expected.compute_mean_abs,
                   basis=expected.basis + "; two devices: twice each figure")


def _output_position(name: str) -> int:
    tail = name.rsplit(".output.", 1)[-1]
    head = tail.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


class _CallLines:
    """Entry key -> its lines, made from a :class:`.columnar.StatTable` when asked for."""

    def __init__(self, lines: StatLines) -> None:
        tab = lines.table
        starts = tab.group_starts.tolist()
        ends = starts[1:] + [len(tab)]
        keys = tab.t.cols.key
        self.lines = lines
        self.spans = {keys[int(tab.ti[lo])]: (lo, hi) for lo, hi in zip(starts, ends)}
        self.made: dict = {}

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.spans:
            return default
        if key not in self.made:
            self.made[key] = self.lines.range(*self.spans[key])
        return self.made[key]

    def __getitem__(self, key: str) -> list:
        return self.get(key)


def statistics_candidates(tab: Any) -> np.ndarray:
    """Which calls of a statistics table hold an output that :func:`_judge_call` would not pass over at once: a
    matched floating output whose statistics differ and whose difference is beyond its final rounding
    (:func:`stats_observed` and :func:`_surely_within` over whole columns). Every other call is judged None."""
    from ..precision import expected_error as ee

    t_side, g_side = tab.t, tab.g
    t_dtypes, g_dtypes = t_side.cols.dtype, g_side.cols.dtype
    floats: dict = {}
    t_float = np.fromiter((floats.setdefault(d, _float_dtype(d)) if d not in floats else floats[d]
                           for d in (t_dtypes[i] for i in tab.ti.tolist())), bool, len(tab))
    look = tab.out & tab.matched & t_float
    idx = np.nonzero(look)[0]
    ti, gi = tab.ti[idx], tab.gi[idx]
    tv, gv = _numeric(t_side, ti), _numeric(g_side, gi)
    units: dict = {}
    for g in set(g_dtypes[g] for g in gi.tolist()):
        try:
            units[g] = ee.unit_roundoff(g)
        except ValueError:
            units[g] = math.nan
    u = np.array([units[g_dtypes[g]] for g in gi.tolist()], dtype=float).reshape(-1)
    with np.errstate(all="ignore"):
        both_nan = np.isnan(tv) & np.isnan(gv)
        gap = np.where(np.isfinite(tv) & np.isfinite(gv), np.abs(tv - gv), np.inf)
        gap = np.where((tv == gv) | both_nan, 0.0, gap)
        for k in (2, 3):           # Mean and Norm: beyond their own rounding (stat_rounding), as _rounded_gap
            less = stat_rounding_columns(tv[:, k], u) + stat_rounding_columns(gv[:, k], u)
            gap[:, k] = np.where(np.isfinite(gap[:, k]) & (gap[:, k] > 0), np.maximum(gap[:, k] - less, 0.0),
                                 gap[:, k])
        numel: dict = {}
        shapes, g_rows = g_side.cols.shape, g_side.rows
        counts = np.array([numel.setdefault(shapes[g], _numel(g_rows[g])) if shapes[g] not in numel
                           else numel[shapes[g]] for g in gi.tolist()], dtype=float).reshape(-1)
        max_abs = np.maximum(np.maximum(gap[:, 0], gap[:, 1]),
                             np.maximum(gap[:, 2], gap[:, 3] / np.sqrt(np.maximum(counts, 1))))
        mean_abs = gap[:, 2]
        a, b = np.abs(gv[:, 0]), np.abs(gv[:, 1])
        scale = np.where(b > a, b, a)
        mean = np.abs(gv[:, 2])
        within = (np.isfinite(u) & np.isfinite(scale) & np.isfinite(mean) & (max_abs <= 2 * u * scale)
                  & (mean_abs <= u * mean))
    judged = ~((max_abs == 0) & (mean_abs == 0)) & ~within
    group = np.searchsorted(tab.group_starts, idx[judged], side="right") - 1
    out = np.zeros(len(tab.group_starts), bool)
    out[group] = True
    return out


def _numeric(side: Any, idx: np.ndarray) -> np.ndarray:
    """The four statistics of rows ``idx`` as :func:`_num` reads them."""
    vals = side.vals[idx].copy()
    for j in np.nonzero(~side.isfloat[idx].all(axis=1))[0].tolist():
        i = int(idx[j])
        for k in range(4):
            if not side.isfloat[i, k]:
                vals[j, k] = _num(side.flat[4 * i + k])
    return vals.reshape(-1, 4)


def first_divergence(result: Any) -> Finding:
    """Walk one rank pair's compared calls in execution order for the first divergence."""
    if isinstance(result.lines, StatLines):
        groups: Any = _CallLines(result.lines)
        keys = list(groups.spans)
        candidate = statistics_candidates(result.lines.table).tolist()
    else:
        groups = {}
        for line in result.lines:
            groups.setdefault(line.target.key, []).append(line)
        keys = list(groups)
        candidate = [True] * len(keys)
    finding = Finding(result.pair.rank, result.pair.label, None)
    floors = running_unit_roundoff(result, keys, groups).tolist() if result.mode != MD5 else [0.0] * len(keys)
    comm = 0
    for position, key in enumerate(keys):
        if key.startswith(SKIPPED_APIS) or key.split(".", 1)[0] in fmt.MODULE_PREFIXES:
            continue
        judged = (_judge_call(key, groups[key], groups, result.mode, floors[position]) if candidate[position]
                  else None)
        if judged is not None:
            finding.checked += 1
        if judged is not None and judged.get("diverged"):
            stack = None
            if result.target.stack is not None:
                stack = result.target.stack.get(key) or result.target.stack.get(
                    key[: -len("backward")] + "forward" if key.endswith(".backward") else key)
            node = _node(key, groups[key], stack, result.target.construct, result.mode)
            node.update({k: v for k, v in judged.items() if k != "diverged"})
            node["rank"] = result.pair.rank
            node["execution_index"] = position
            finding.node, finding.position, finding.source = node, (comm, position), judged["source"]
            return finding
        if key.startswith(COMM_PREFIXES):
            comm += 1
    return finding


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def analyze(results: list) -> tuple:
    """(document, findings): the diff_analyze document (``{"rank_N": [node]}``, the first divergence across
    ranks first), empty when no call diverges beyond noise."""
    from .runner import without_cycle_collection

    with without_cycle_collection():
        findings = [first_divergence(result) for result in results]
    found = sorted((f for f in findings if f.node is not None), key=lambda f: (f.position, f.rank))
    doc: dict = {}
    for i, f in enumerate(found):
        node = dict(f.node)
        node["first_across_ranks"] = i == 0
        doc[f"rank_{f.rank}"] = [_jsonable(node)]
    return doc, findings


def summary_line(doc: dict, findings: list) -> str:
    if not doc:
        checked = sum(f.checked for f in findings)
        return (f"first divergence: none beyond noise ({checked} calls judged on {len(findings)} rank(s): every "
                "output within what its inputs' difference and its dtype allow)")
    rank, nodes = next(iter(doc.items()))
    node = nodes[0]
    multiple = node.get("multiple")
    path = " > ".join(p for p in node.get("module_path", [])[:-1] if p)
    if node.get("source") == "md5":
        how = f"{node.get('output')} differs while every input is bit-equal, from md5"
    else:
        times = f"{multiple:.1f}x" if isinstance(multiple, float) else str(multiple)
        how = f"{node.get('output')}: {times} the expected error of two correct runs, from {node.get('source')}"
    return f"first divergence: {rank} {node['op_name']} ({how}){' in ' + path if path else ''}"


def analyze_and_write(results: list, out_dir: str) -> tuple:
    """Write ``diff_analyze_{time_ns}.json`` into ``out_dir`` when a call diverges; (path or None, summary)."""
    doc, findings = analyze(results)
    line = summary_line(doc, findings)
    if not doc:
        return None, line
    path = os.path.join(out_dir, f"diff_analyze_{time.time_ns()}.json")
    fmt.write_json_atomic(path, doc, fsync=False)
    return path, line
