"""Compare one rank pair and write its ``compare_result_{rank}_{timestamp}.csv``; compare every pair of a run."""
from __future__ import annotations

import contextlib
import csv
import gc
import io
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from dumpers import atomic

from . import columnar, floattext, mapping, match, sideproc, table, xframework
from .cells import cell_text, guard
from .columnar import StatLines
from .inputs import CompareInputError, Pair, Side, pairs_of, read_side
from .rows import dump_rows
from .sideproc import Listed

MAX_TENSOR_BYTES = 1 << 32
PREFIX = "compare_result"


@dataclass
class PairResult:
    """What one rank pair gave: its lines (target order), the mode, the file written, and notes."""

    pair: Pair
    mode: str
    lines: list
    target: Side
    golden: Side
    path: str | None = None
    notes: list = field(default_factory=list)


def _tensor_loader(side: Side) -> Callable:
    def load(row: Any) -> Any:
        import numpy as np
        import torch

        from generators.tensorfile import load_tensor_file
        if side.tensor_dir is None:
            raise FileNotFoundError(side.tensor_problem or "no tensor directory")
        tensor = load_tensor_file(side.tensor_dir, row.item, max_bytes=MAX_TENSOR_BYTES).detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return np.squeeze(tensor.numpy())
    return load


def build_lines(target: Side, golden: Side, *, fuzzy: bool = False, tensors: bool = True,
                names: mapping.Mapping | None = None, listed: Listed | None = None) -> tuple:
    """(mode, lines, notes) of one pair: rows listed, paired, their metric cells and the checkers' verdicts.
    ``listed``: the two sides' rows listed already (:func:`.sideproc.read_listed`).

    Raises:
        CompareInputError: the two dumps were taken in different modes.
    """
    if target.mode != golden.mode:
        raise CompareInputError(f"{target.dump_json} is a {target.mode} dump but {golden.dump_json} is a "
                                f"{golden.mode} dump; compare dumps taken with the same task and summary_mode")
    mode = target.mode
    notes = list(target.problems) + list(golden.problems)
    if listed is not None:
        t_rows, g_rows = listed.t_cols.rows, listed.g_cols.rows
        notes += listed.problems
    else:
        t_rows, g_rows = dump_rows(target.data, notes), dump_rows(golden.data, notes)
    mapped = None
    if mapping.needed(names, target.framework, golden.framework):      # -am/-cm/-dm, or MindSpore vs PyTorch
        mapped = mapping.pairs(t_rows, g_rows, names or mapping.Mapping(), target, golden, notes)
    rules = xframework.rules_of(target.framework, golden.framework)
    if mode == table.STATISTICS:
        return mode, _statistics_lines(target, t_rows, g_rows, notes, fuzzy, mapped, rules), notes
    pairs = mapped if mapped is not None else match.fuzzy(t_rows, g_rows) if fuzzy else match.exact(t_rows, g_rows)
    unmatched = sum(1 for _, g in pairs if g is None)
    if unmatched:
        notes.append(f"{unmatched} of {len(pairs)} rows of {target.dump_json} have no golden row (Bench Name N/A)")
    lines = [table.Line(t, g) for t, g in pairs]
    first_of: set = set()
    if target.stack is not None:
        for line in lines:
            key = line.target.key
            if key not in first_of:
                first_of.add(key)
                frames = target.stack.get(key)
                line.stack = str(frames) if frames is not None else None
    if mode == table.TENSOR:
        load_t, load_g = _tensor_loader(target), _tensor_loader(golden)
        for line in lines:
            if tensors:
                line.metrics = table.tensor_cells(line, load_t, load_g)
            else:
                line.metrics = ["unsupported"] * 6
    groups: dict = {}
    for line in lines:
        groups.setdefault(line.target.key, []).append(line)
    for group in groups.values():
        table.check_api(group, mode, rules)
    return mode, lines, notes


def _statistics_lines(target: Side, t_rows: list, g_rows: list, notes: list, fuzzy: bool,
                      mapped: list | None = None, rules: xframework.Rules = xframework.SAME) -> StatLines:
    """The statistics compare over whole columns (:mod:`.columnar`), seen as a sequence of lines."""
    if mapped is not None:
        ti, gi = columnar.indices_of(mapped, t_rows, g_rows)
    elif fuzzy:
        ti, gi = columnar.indices_of(match.fuzzy(t_rows, g_rows), t_rows, g_rows)
    else:
        ti, gi = columnar.exact_indices(columnar.columns_of(t_rows), columnar.columns_of(g_rows))
    unmatched = int((gi < 0).sum())
    if unmatched:
        notes.append(f"{unmatched} of {len(gi)} rows of {target.dump_json} have no golden row (Bench Name N/A)")
    stacks = None
    t_cols, g_cols = columnar.columns_of(t_rows), columnar.columns_of(g_rows)
    if target.stack is not None:
        stacks, seen = {}, set()
        keys = t_cols.key
        for j, i in enumerate(ti.tolist()):
            key = keys[i]
            if key not in seen:
                seen.add(key)
                frames = target.stack.get(key)
                if frames is not None:
                    stacks[j] = str(frames)
    return StatLines(columnar.StatTable(t_cols, g_cols, ti, gi, stacks, rules))


def _texts(cells: list) -> list:
    """Cell texts of one line; the names and dtypes (text from the dump) pass the formula guard."""
    out = [v if type(v) is str else cell_text(v) for v in cells]
    for i in range(4):
        out[i] = guard(out[i])
    return out


def render_csv(lines: list, mode: str, stack: bool) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.header(mode, stack))
    writer.writerows(_texts(table.cells_of(line, mode, stack)) for line in lines)
    return buf.getvalue()


def _statistics_csv(tab: columnar.StatTable, mode: str, stack: bool) -> Iterator:
    """The CSV of a statistics compare, encoded, a chunk of lines at a time."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(table.header(mode, stack))
    yield buf.getvalue().encode()
    yield from tab.csv_chunks(stack)


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime())


@contextlib.contextmanager
def without_cycle_collection() -> Iterator:
    """The cyclic garbage collector paused: a compare builds millions of acyclic objects (the parsed JSON, the
    rows), and each collection would walk all of them again (half the time of reading and listing a large dump).
    Reference counting still frees everything; the collector runs again afterwards as it did before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def compare_pair(pair: Pair, out_dir: str, *, fuzzy: bool = False, stamp: str | None = None,
                 xlsx: bool = False, names: mapping.Mapping | None = None,
                 process_min_bytes: int | None = None) -> PairResult:
    """Compare one pair and write its file into ``out_dir``. Dump.json files of at least ``process_min_bytes``
    (default :data:`.sideproc.PROCESS_MIN_BYTES`) are read in two processes at once (:mod:`.sideproc`).

    Raises:
        CompareInputError: a side cannot be read, or the modes differ.
    """
    with without_cycle_collection():
        return _compare_pair(pair, out_dir, fuzzy, stamp, xlsx, names, process_min_bytes)


def _read_pair(pair: Pair, fuzzy: bool, names: mapping.Mapping | None, min_bytes: int | None) -> tuple:
    """(target, golden, listed): the sides read in two processes where that serves, else here."""
    listed = None
    if not fuzzy and not (names and names.active):
        listed = sideproc.read_listed(pair, min_bytes=min_bytes, meanwhile=floattext.warm)
        if listed is not None and mapping.needed(names, listed.target.framework, listed.golden.framework):
            listed = None
    if listed is not None:
        return listed.target, listed.golden, listed
    return read_side(pair.target), read_side(pair.golden), None


def _compare_pair(pair: Pair, out_dir: str, fuzzy: bool, stamp: str | None, xlsx: bool,
                  names: mapping.Mapping | None = None, process_min_bytes: int | None = None) -> PairResult:
    target, golden, listed = _read_pair(pair, fuzzy, names, process_min_bytes)
    mode, lines, notes = build_lines(target, golden, fuzzy=fuzzy, names=names, listed=listed)
    stack = target.stack is not None
    suffix = f"_{pair.label}" if pair.label else ""
    name = f"{PREFIX}{suffix}_{stamp or timestamp()}"
    result = PairResult(pair, mode, lines, target, golden, notes=notes)
    if xlsx:
        result.path = _write_xlsx(os.path.join(out_dir, name + ".xlsx"), lines, mode, stack)
    else:
        path = os.path.join(out_dir, name + ".csv")
        if isinstance(lines, StatLines):
            atomic.write_bytes(path, _statistics_csv(lines.table, mode, stack), mode=0o640, fsync=False)
        else:
            atomic.write_text(path, render_csv(lines, mode, stack), mode=0o640, fsync=False)
        result.path = path
    return result


def _write_xlsx(path: str, lines: list, mode: str, stack: bool) -> str:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.append(table.header(mode, stack))
    for line in lines:
        sheet.append(_texts(table.cells_of(line, mode, stack)))
    with atomic.atomic_open(path, binary=True) as fh:
        book.save(fh)
    return path


def compare_runs(target: str, golden: str, out_dir: str, *, fuzzy: bool = False, xlsx: bool = False,
                 report: Callable[[str], None] = print, names: mapping.Mapping | None = None,
                 process_min_bytes: int | None = None) -> list:
    """Compare every rank pair named by ``target`` and ``golden``; a pair that fails is reported in one line and
    the others go on. Returns the :class:`PairResult` of each compared pair (``process_min_bytes``: as
    :func:`compare_pair`).

    Raises:
        CompareInputError: the inputs cannot be paired at all.
    """
    pairs, notes = pairs_of(target, golden)
    for note in notes + (names.notes if names else []):
        report(note)
    os.makedirs(out_dir, exist_ok=True)
    stamp = timestamp()
    results = []
    for pair in pairs:
        try:
            result = compare_pair(pair, out_dir, fuzzy=fuzzy, stamp=stamp, xlsx=xlsx, names=names,
                                  process_min_bytes=process_min_bytes)
        except CompareInputError as exc:
            report(f"{pair.label or pair.target}: SKIP, {exc}")
            continue
        for note in result.notes:
            report(f"{pair.label or 'compare'}: {note}")
        results.append(result)
    return results
