"""The statistics compare over whole columns: the pairs as two index arrays, each side's four statistics as one
float array, the difference cells, Result and Err_message computed with numpy per column, and the CSV written in
chunks of lines with one formatting pass each (spec compare.md sections 3-5; the same texts as :mod:`.table`).

A statistic that is not a finite float (a string, an int, a bool, an infinity) takes the per-cell rules of
:func:`.cells.stat_diff`; everything else is vectorised. :class:`StatLines` is the table seen as a sequence of
:class:`.table.Line` objects, made on demand, for the pytest items and the first-divergence walk.
"""
from __future__ import annotations

import json
import math
from itertools import repeat
from typing import Any, Iterator

import numpy as np

from dumpers.format import FORMULA_LEAD

from ..precision.verdict import ERROR, PASS, WARNING
from . import cells, floattext, table, xframework
from .rows import NA
from .sidecols import Flat, SideColumns, columns_of

CHUNK = 32768                       # lines formatted per pass
_SPECIAL = (",", '"', "\n", "\r")

# Result/Err_message rules of a statistics compare, as bits in the order table.check_api applies them
_RULES = ((ERROR, table.MSG_INF_NAN), (ERROR, table.MSG_NORM_REL), (ERROR, table.MSG_GRAD),
          (ERROR, table.MSG_PARAM), (ERROR, table.MSG_DTYPE), (ERROR, table.MSG_SHAPE),
          (WARNING, table.MSG_NORM_WARN))
_LEVEL = {PASS: 0, WARNING: 1, ERROR: 2}


def quote(text: str) -> str:
    """A CSV field as the csv module's minimal quoting writes it."""
    for ch in _SPECIAL:
        if ch in text:
            return '"' + text.replace('"', '""') + '"'
    return text


def _guarded(text: str) -> str:
    if text[:1] in FORMULA_LEAD:
        return cells.guard(text)
    return text


class _Codes:
    """Distinct raw texts of a column (both sides) numbered, with the id of each one's CSV text."""

    def __init__(self, texts: floattext.TextTable, guard: bool) -> None:
        self.texts, self.guard = texts, guard
        self.code: dict = {}
        self.raw: list = []
        self.text_id: list = []

    def of(self, values: list) -> np.ndarray:
        """The code of each value (new values numbered as they come)."""
        code = self.code
        for v in set(values).difference(code):
            code[v] = len(self.raw)
            self.raw.append(v)
            self.text_id.append(self.texts.id(quote(_guarded(v) if self.guard else v)))
        return np.fromiter(map(code.__getitem__, values), np.int64, len(values))

    def of_coded(self, coded: tuple) -> np.ndarray:
        """The code of each value of a side's own coding (distinct values, each value's index among them)."""
        distinct, local = coded
        self.of(distinct)
        return np.array([self.code[v] for v in distinct], np.int64)[local]

    def ids(self, codes: np.ndarray) -> np.ndarray:
        return np.array(self.text_id, np.int64)[codes]

    def flags(self, test: Any) -> np.ndarray:
        """``test(raw)`` of every code."""
        return np.fromiter(map(test, self.raw), bool, len(self.raw))


class _Side:
    """One side's rows as columns: the raw statistics (flat, four per row), their float values where they are
    floats (NaN elsewhere), which are finite floats; the codes of the dtype, shape and requires_grad texts, and
    the ids in the text table of the CSV texts of the name, dtype, shape and requires_grad cells and of the
    statistics that are not finite floats (-1: a float)."""

    def __init__(self, cols: SideColumns, texts: floattext.TextTable, columns: tuple) -> None:
        self.cols, self.rows = cols, cols.rows
        self.flat = Flat(cols)
        self.isfloat, self.vals = cols.isfloat, cols.vals
        n = 4 * len(cols)
        self.fin = self.isfloat & np.isfinite(self.vals)
        self.fin_row = self.fin.all(axis=1)
        self.stat_id = None                 # the text id of each statistic that is not a finite float
        if not self.fin.all():
            self.stat_id = np.full((n // 4, 4), floattext.FLOAT, np.int64)
            for i, k in zip(*np.nonzero(~self.fin)):
                v = cols.stat(int(i), int(k))
                self.stat_id[i, k] = texts.id(quote(v if type(v) is str else cells.cell_text(v)))
        names = cols.name
        self.out = cols.out
        if not cols.names_plain:
            names = [quote(_guarded(name)) if name[:1] in FORMULA_LEAD or _needs_quote(name) else name
                     for name in names]
        self.name_base = texts.extend(names)
        dtypes, shapes, grads = columns
        self.dtype_code = dtypes.of_coded(cols.coded["dtype"])
        self.shape_code = shapes.of_coded(cols.coded["shape"])
        self.grad_code = grads.of_coded(cols.coded["grad"])
        self.dtype, self.shape, self.grad = (dtypes.ids(self.dtype_code), shapes.ids(self.shape_code),
                                             grads.ids(self.grad_code))




def _rows_at(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]``, without the copy where ``idx`` takes every row in order (the common pairing)."""
    if len(idx) == len(values) and (len(idx) == 0 or (idx[0] == 0 and (np.diff(idx) == 1).all())):
        return values
    return values[idx]


def _needs_quote(text: str) -> bool:
    return any(ch in text for ch in _SPECIAL)


def _numeric_percent(text: str) -> float:
    """``table._percent`` of a relative-error cell."""
    try:
        return float(text.strip("%")) / 100
    except ValueError:
        return 0.0


class StatTable:
    """A statistics compare of one pair: ``ti`` and ``gi`` (-1: no golden row) index the two sides' rows."""

    def __init__(self, t_rows: Any, g_rows: Any, ti: np.ndarray, gi: np.ndarray, stacks: dict | None,
                 rules: xframework.Rules = xframework.SAME) -> None:
        self.rules = rules                  # how the dtype and requires_grad rules read this pair
        self.texts = floattext.TextTable()
        self.codes = (_Codes(self.texts, True), _Codes(self.texts, False), _Codes(self.texts, False))
        self.t = _Side(columns_of(t_rows), self.texts, self.codes)
        self.g = _Side(columns_of(g_rows), self.texts, self.codes)
        self.ti, self.gi = ti, gi
        self.stacks = stacks                # line index -> stack text (first line of each call), None: no stack
        n = len(ti)
        self.matched = gi >= 0
        gsafe = np.where(self.matched, gi, 0)
        self.gsafe = gsafe
        tv, gv = _rows_at(self.t.vals, ti), _rows_at(self.g.vals, gsafe)
        self.fast = self.t.fin_row[ti] & self.g.fin_row[gsafe] & self.matched
        with np.errstate(all="ignore"):
            diff = tv - gv
            rel = np.divide(diff, gv)
            rel *= 100
            np.abs(rel, out=rel)
        same = (tv == gv) & ((tv != 0) | (np.signbit(tv) == np.signbit(gv)))
        self.diff, self.rel, self.same, self.gzero = diff, rel, same, gv == 0
        self.rel7 = np.zeros(n)              # NormRelativeErr as table._percent reads it
        self.ext7 = np.zeros(n)              # ... and as table._extreme reads it (0: skipped)
        fast_rel7 = np.where(self.same[:, 3], 0.0, np.where(self.gzero[:, 3], math.inf, rel[:, 3] / 100))
        self.rel7[self.fast] = fast_rel7[self.fast]
        self.ext7[self.fast] = np.where(self.gzero[:, 3], 0.0, np.where(self.same[:, 3], 0.0,
                                                                         rel[:, 3] / 100))[self.fast]
        self._slow: dict = {}
        for j in np.nonzero(~self.fast)[0].tolist():
            metrics = self._slow_metrics(j)
            self._slow[j] = metrics
            self.rel7[j] = _numeric_percent(metrics[7])
            value = metrics[7]
            if value in (cells.NAN_TEXT, NA) or not value.endswith("%"):
                continue
            self.ext7[j] = _numeric_percent(value)
        self.ext7 = np.where(np.isnan(self.ext7), 0.0, self.ext7)
        self.flags = self._check()
        self.ids: dict | None = None            # the CSV's fixed text ids, once it is written

    def __len__(self) -> int:
        return len(self.ti)

    def _slow_metrics(self, j: int) -> list:
        g_idx = self.gi[j]
        return table.statistics_metrics(table.Line(self.t.rows[self.ti[j]], self.g.rows[g_idx] if g_idx >= 0 else None))

    # ---------------------------------------------------------------- Result and Err_message
    def _check(self) -> np.ndarray:
        """Bit ``k`` of a line: rule ``_RULES[k]`` flagged it (table.check_api over every call at once)."""
        n = len(self.ti)
        flags = np.zeros(n, np.int64)
        self.out, self.group_starts = np.zeros(0, bool), np.zeros(0, np.int64)
        if n == 0:
            return flags
        t, g = self.t, self.g
        ti, gs = self.ti, self.gsafe
        out = t.out[ti]
        # calls: the lines of one entry key are consecutive, and share the key's object (dict keys are unique)
        t_names, g_names = t.cols.name, g.cols.name
        keys = t.cols.key
        key_id = t.cols.key_index[ti]
        change = (np.nonzero(key_id[1:] != key_id[:-1])[0] + 1).tolist()
        starts = [0] + [j for j in change if keys[ti[j]] != keys[ti[j - 1]]]
        starts_a = np.array(starts)
        group = np.zeros(n, np.int64)
        group[starts_a[1:]] = 1
        group = np.cumsum(group)
        # the call's ignore rule, from its first input row
        ignore = np.zeros(len(starts), np.int64)          # 0 none, 1 inputs, 2 all
        inputs_at = np.nonzero(~out)[0]
        if inputs_at.size:
            firsts = np.unique(group[inputs_at], return_index=True)
            for c, j in zip(firsts[0].tolist(), inputs_at[firsts[1]].tolist()):
                parts = t_names[ti[j]].split(".", 2)
                if len(parts) >= 2:
                    api = parts[1]
                    ignore[c] = 2 if api in table.IGNORED_APIS else 1 if api in table.INPUT_IGNORED_APIS else 0
        ign = ignore[group]
        checked = (ign == 0) | ((ign == 1) & out)
        whole = ign == 0
        matched = self.matched
        t_inf = self._inf_nan(self.t, self.ti)
        g_inf = np.where(matched, self._inf_nan(self.g, self.gsafe), False)
        flags |= (checked & ~g_inf & t_inf).astype(np.int64) << 0
        # NormRelativeErr of outputs, when every input's is below 0.1
        n_groups = len(starts)
        in_ext = np.zeros(n_groups)
        np.maximum.at(in_ext, group[~out], self.ext7[~out])
        out_ext = np.zeros(n_groups)
        np.maximum.at(out_ext, group[out], self.ext7[out])
        small_in = np.abs(in_ext) < 0.1
        flags |= (whole & out & small_in[group] & (np.abs(self.rel7) > 0.5)).astype(np.int64) << 1
        # requires_grad, scalar parameters, dtype, shape: the texts compared through their codes
        dtypes, shapes, grads = self.codes
        rule = matched & checked
        t_grad, g_grad = t.grad_code[ti], g.grad_code[gs]
        filled = grads.flags(self.rules.grad_recorded)
        flags |= (rule & filled[t_grad] & filled[g_grad] & (t_grad != g_grad)).astype(np.int64) << 2
        t_dtype, g_dtype = t.dtype_code[ti], g.dtype_code[gs]
        for j in np.nonzero(rule & (t_dtype != g_dtype))[0].tolist():
            name = g_names[gs[j]]
            if "qkv" not in name and "gate_up" not in name and \
                    self.rules.dtypes_differ(dtypes.raw[t_dtype[j]], dtypes.raw[g_dtype[j]]):
                flags[j] |= 1 << 4
        flags |= (rule & (t.shape_code[ti] != g.shape_code[gs])).astype(np.int64) << 5
        is_class = dtypes.flags(lambda text: "class" in text)
        scalar = (matched & whole & ~out & is_class[t_dtype] & is_class[g_dtype]
                  & shapes.flags(lambda text: text == "[]")[t.shape_code[ti]])
        for j in np.nonzero(scalar)[0].tolist():
            if t.cols.stat(int(ti[j]), 0) != g.cols.stat(int(gs[j]), 0):
                flags[j] |= 1 << 3
        # the output's norm relative error ten times its inputs': the call's first output line
        rin, rout = np.abs(in_ext), np.abs(out_ext)
        with np.errstate(all="ignore"):
            warn = ((rin == 0) & (rout > 0.1)) | ((rin != 0) & (rout / np.where(rin == 0, 1, rin) > 10))
        has_out = np.zeros(n_groups, bool)
        has_out[group[out]] = True
        first_out = np.full(n_groups, -1)
        out_at = np.nonzero(out)[0]
        if out_at.size:
            firsts = np.unique(group[out_at], return_index=True)
            first_out[firsts[0]] = out_at[firsts[1]]
        hit = warn & has_out & (ignore == 0)
        flags[first_out[hit]] |= 1 << 6
        self.out = out
        self.group_starts = starts_a
        return flags

    @staticmethod
    def _inf_nan(side: _Side, idx: np.ndarray) -> np.ndarray:
        """``table._is_inf_nan`` of Max or Min, per row of ``idx``."""
        res = (side.isfloat[idx, :2] & ~side.fin[idx, :2]).any(axis=1)
        for j in np.nonzero(~side.isfloat[idx, :2].all(axis=1))[0].tolist():
            i = int(idx[j])
            for v in (side.cols.stat(i, 0), side.cols.stat(i, 1)):
                if isinstance(v, float) and not math.isfinite(v) or \
                        isinstance(v, str) and v.strip().lower() in ("inf", "-inf", "nan"):
                    res[j] = True
        return res

    @staticmethod
    def verdict(bits: int) -> tuple:
        """(Result, messages) of a line's rule bits."""
        result, messages = PASS, []
        for k, (level, message) in enumerate(_RULES):
            if bits >> k & 1:
                if _LEVEL[level] > _LEVEL[result]:
                    result = level
                messages.append(message)
        return result, messages

    # ---------------------------------------------------------------- cells
    def metrics(self, lo: int, hi: int) -> list:
        """The eight metric cell texts of each of lines ``lo:hi``."""
        m = hi - lo
        same, gzero = self.same[lo:hi], self.gzero[lo:hi]
        diff = np.array(floattext.float_texts(self.diff[lo:hi]), dtype=object).reshape(m, 4)
        rel = np.array([t + "%" for t in floattext.float_texts(self.rel[lo:hi])], dtype=object).reshape(m, 4)
        texts = np.concatenate([np.where(same, "0", diff), np.where(same, "0", np.where(gzero, "inf", rel))],
                               axis=1).tolist()
        for j in np.nonzero(~self.fast[lo:hi])[0].tolist():
            texts[j] = list(self._slow[lo + j])
        return texts

    def _csv_ids(self) -> None:
        """Every text the CSV needs beyond the rows' own, added to the table once: the fixed texts, the metric
        texts of the lines not computed over the columns, each line's Result and Err_message, the stacks."""
        texts = self.texts
        self.ids = {text: texts.id(text) for text in (NA, "0", "inf", "True", "False")}
        n = len(self)
        self.slow_ids = {j: [texts.id(text) for text in metrics] for j, metrics in self._slow.items()}
        codes, inverse = np.unique(self.flags, return_inverse=True)
        verdicts = [self.verdict(int(c)) for c in codes]
        self.result_ids = np.array([texts.id(v[0]) for v in verdicts], np.int64)[inverse.reshape(-1)]
        self.message_ids = np.array([texts.id(quote(json.dumps(v[1]))) for v in verdicts],
                                    np.int64)[inverse.reshape(-1)]
        self.stack_ids = np.full(n, self.ids[NA], np.int64)
        for j, text in (self.stacks or {}).items():
            self.stack_ids[j] = texts.id(quote(text))

    def csv_chunks(self, stack: bool) -> Iterator:
        """The CSV bytes of every line (each ending in a newline), a block at a time: the cells of ``CHUNK``
        lines as text ids and floats, written by :class:`.floattext.BlockWriter` (the arrays and the buffer
        used again for each chunk; a block is valid until the next one is asked for)."""
        if self.ids is None:
            self._csv_ids()
        writer = floattext.BlockWriter(self.texts)
        t, g, fixed = self.t, self.g, self.ids
        na = fixed[NA]
        size = min(CHUNK, len(self))
        id_buf = np.empty((size, 28 if stack else 27), np.int64)
        value_buf = np.zeros(id_buf.shape)
        for lo in range(0, len(self), CHUNK):
            hi = min(lo + CHUNK, len(self))
            ids, values = id_buf[:hi - lo], value_buf[:hi - lo]
            ti, gi, gs = self.ti[lo:hi], self.gi[lo:hi], self.gsafe[lo:hi]
            matched = gi >= 0
            ids[:, 0] = t.name_base + ti
            ids[:, 1] = np.where(matched, g.name_base + gs, na)
            for col, t_ids, g_ids in ((2, t.dtype, g.dtype), (4, t.shape, g.shape), (6, t.grad, g.grad)):
                ids[:, col] = t_ids[ti]
                ids[:, col + 1] = np.where(matched, g_ids[gs], na)
            same, gzero = self.same[lo:hi], self.gzero[lo:hi]
            ids[:, 8:12] = np.where(same, fixed["0"], floattext.FLOAT)
            ids[:, 12:16] = np.where(same, fixed["0"], np.where(gzero, fixed["inf"], floattext.PERCENT))
            values[:, 8:12], values[:, 12:16] = self.diff[lo:hi], self.rel[lo:hi]
            for j in np.nonzero(~self.fast[lo:hi])[0].tolist():
                ids[j, 8:16] = self.slow_ids[lo + j]
            ids[:, 16:20] = t.stat_id[ti] if t.stat_id is not None else floattext.FLOAT
            values[:, 16:20] = t.vals[ti]
            g_stats = g.stat_id[gs] if g.stat_id is not None else floattext.FLOAT
            ids[:, 20:24] = np.where(matched[:, None], g_stats, na)
            values[:, 20:24] = g.vals[gs]
            consistent = t.grad[ti] == np.where(matched, g.grad[gs], na)
            ids[:, 24] = np.where(consistent, fixed["True"], fixed["False"])
            ids[:, 25], ids[:, 26] = self.result_ids[lo:hi], self.message_ids[lo:hi]
            if stack:
                ids[:, 27] = self.stack_ids[lo:hi]
            yield from writer.blocks(ids, values)

    def lines(self, lo: int, hi: int) -> list:
        """Lines ``lo:hi`` as :class:`.table.Line` objects."""
        out = []
        stacks = self.stacks or {}
        t_rows, g_rows = self.t.rows, self.g.rows
        for j, (i, g, metrics, bits) in enumerate(zip(self.ti[lo:hi].tolist(), self.gi[lo:hi].tolist(),
                                                      self.metrics(lo, hi), self.flags[lo:hi].tolist()), lo):
            result, messages = self.verdict(bits)
            out.append(table.Line(t_rows[i], g_rows[g] if g >= 0 else None, metrics, result, messages,
                                  stacks.get(j)))
        return out


class StatLines:
    """A :class:`StatTable` seen as a sequence of :class:`.table.Line`, each made when asked for."""

    def __init__(self, tab: StatTable) -> None:
        self.table = tab

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, j: int) -> table.Line:
        if j < 0:
            j += len(self.table)
        if not 0 <= j < len(self.table):
            raise IndexError(j)
        return self.table.lines(j, j + 1)[0]

    def __iter__(self) -> Iterator:
        for lo in range(0, len(self.table), CHUNK):
            yield from self.table.lines(lo, min(lo + CHUNK, len(self.table)))

    def range(self, lo: int, hi: int) -> list:
        return self.table.lines(lo, hi)


def exact_indices(t_rows: Any, g_rows: Any) -> tuple:
    """(ti, gi) of :func:`.match.exact` as index arrays (rows or :class:`.sidecols.SideColumns`)."""
    from .match import dtypes_pair

    t, g = columns_of(t_rows), columns_of(g_rows)
    t_dtype, g_dtype = t.dtype, g.dtype
    same = t.cmp == g.cmp                   # the common pair: the same names in the same order
    first = {} if same else dict(zip(reversed(g.cmp), range(len(g) - 1, -1, -1)))   # each name's first row
    if (len(set(g.cmp)) if same else len(first)) == len(g):
        gi = np.arange(len(t)) if same else np.fromiter(map(first.get, t.cmp, repeat(-1)), np.int64, len(t))
        matched = np.nonzero(gi >= 0)[0]
        if matched.size:
            differ = np.array(t_dtype, object)[matched] != np.array(g_dtype, object)[gi[matched]]
            for j in matched[differ].tolist():
                if not dtypes_pair(t_dtype[j], g_dtype[gi[j]]):
                    gi[j] = -1
        return np.arange(len(t)), gi
    by_name: dict = {}
    for k, name in enumerate(g.cmp):
        by_name.setdefault(name, []).append(k)
    ti_l, gi_l = [], []
    for j, name in enumerate(t.cmp):
        found = by_name.get(name)
        if not found:
            ti_l.append(j)
            gi_l.append(-1)
            continue
        for k in found:
            ti_l.append(j)
            gi_l.append(k if dtypes_pair(t_dtype[j], g_dtype[k]) else -1)
    return np.array(ti_l, dtype=np.int64), np.array(gi_l, dtype=np.int64)


def indices_of(pairs: list, t_rows: list, g_rows: list) -> tuple:
    """(ti, gi) of a list of (target row, golden row or None) pairs."""
    t_pos = {id(row): i for i, row in enumerate(t_rows)}
    g_pos = {id(row): i for i, row in enumerate(g_rows)}
    ti = np.array([t_pos[id(t)] for t, _ in pairs], dtype=np.int64)
    gi = np.array([g_pos[id(g)] if g is not None else -1 for _, g in pairs], dtype=np.int64)
    return ti, gi
