"""One side's rows as columns (:class:`SideColumns`), the form the statistics table reads, and the rows seen again
as :class:`.rows.Row` objects made when asked for (:class:`LazyRows`).

The columns are plain lists of texts (one object per distinct text where the rows share it) and numpy arrays, so
that a side listed in another process crosses to the parent as a compact pickle (:mod:`.sideproc`): the parent
never holds the parsed dump.json. A row made again from the columns is the row :func:`.rows.dump_rows` listed:
the same texts and statistics, and an ``item`` with the same values for the keys a statistics row is read by.
"""
from __future__ import annotations

import math
from itertools import chain, repeat
from operator import attrgetter, is_, is_not, itemgetter
from typing import Any, Iterator

import numpy as np

from dumpers.format import FORMULA_LEAD

from .rows import Row

QUOTED = (",", '"', "\n", "\r")          # characters that make the csv module quote a field
_LEADS = frozenset(FORMULA_LEAD)
_FIRST = itemgetter(slice(0, 1))

_STATS, _ITEM, _DTYPE = attrgetter("stats"), attrgetter("item"), attrgetter("dtype")


class SideColumns:
    """The rows of one side as columns.

    ``vals`` holds each row's four statistics as floats (NaN where a statistic is not a float), ``isfloat`` which
    are floats, ``other`` the statistics that are not (flat index ``4 * row + k`` -> the value). ``items`` is
    None when ``rows`` holds the listed rows themselves; otherwise it holds what a row needs to be made again: the
    item of each row not made by the common rule (row -> item), ``kind`` and ``shape_raw`` the ``type`` and
    ``shape`` of the others' items (a tensor row's item made again holds its type, dtype, shape and the four
    statistics, the keys a statistics row is read by).
    """

    def __init__(self, rows: list, *, keep_items: bool = False) -> None:
        self.name = [row.name for row in rows]
        self.cmp = [row.cmp for row in rows]
        self.key = [row.key for row in rows]
        self.state = [row.state for row in rows]
        self.dtype = [row.dtype for row in rows]
        self.shape = [row.shape for row in rows]
        self.grad = [row.grad for row in rows]
        self.data_name = [row.data_name for row in rows]
        self.md5 = [row._md5 for row in rows]
        flat = list(chain.from_iterable(map(_STATS, rows)))
        n = len(flat)
        if set(map(type, flat)) <= {float}:                  # the common case: every statistic a float
            self.isfloat = np.ones((n // 4, 4), bool)
            self.vals = np.array(flat, dtype=float).reshape(-1, 4)
            self.other: dict = {}
        else:
            self.isfloat = np.fromiter((type(v) is float for v in flat), bool, n).reshape(-1, 4)
            self.vals = np.fromiter((v if type(v) is float else math.nan for v in flat), float, n).reshape(-1, 4)
            self.other = {int(i): flat[i] for i in np.nonzero(~self.isfloat.reshape(-1))[0].tolist()}
        rows_n = len(self.name)
        self.out = np.fromiter(map(str.__contains__, self.name, repeat(".output.")), bool, rows_n)
        same_key = np.fromiter(map(id, self.key), np.int64, rows_n)        # an entry's rows share its key object
        self.key_index = np.concatenate(([0], np.cumsum(same_key[1:] != same_key[:-1]))) if rows_n else same_key
        joined = "\0".join(self.name)
        # one scan of all names for the characters that need quoting, one set of their first characters
        self.names_plain = not any(ch in joined for ch in QUOTED) and _LEADS.isdisjoint(map(_FIRST, self.name))
        self.items: dict | None = None
        self.kind: list = []
        self.shape_raw: list = []
        self.rows: Any = rows
        if keep_items:
            self._keep_items(rows)
        self.dtype = _shared(self.dtype)
        self.coded = {column: _local_codes(getattr(self, column)) for column in ("dtype", "shape", "grad")}

    def __len__(self) -> int:
        return len(self.name)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["rows"] = None                    # made again on the other side
        # texts sent as one text each (a tenth of the time to send): the names, the exact-mode names where they
        # differ (with their rows), each entry's key once (the rows' keys are its key_index)
        renamed = np.fromiter(map(is_not, self.cmp, self.name), bool, len(self.name)).nonzero()[0]
        starts = np.flatnonzero(np.diff(self.key_index, prepend=-1)) if len(self.key_index) else self.key_index
        texts = {"name": self.name, "cmp": [self.cmp[i] for i in renamed.tolist()],
                 "key": [self.key[i] for i in starts.tolist()]}
        joined = {field: "\0".join(values) for field, values in texts.items()}
        if self.name and all(text.count("\0") == len(values) - 1 for values, text in zip(texts.values(),
                                                                                         joined.values())
                             if values):
            state.update(joined)
            state["renamed"] = renamed
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if isinstance(self.name, str):
            self.name = self.name.split("\0")
            cmp = list(self.name)
            renamed = self.__dict__.pop("renamed").tolist()
            for i, text in zip(renamed, self.cmp.split("\0") if renamed else ()):
                cmp[i] = text
            self.cmp = cmp
            self.key = list(map(self.key.split("\0").__getitem__, self.key_index.tolist()))
        self.rows = LazyRows(self)

    def _keep_items(self, rows: list) -> None:
        """What makes each row again without its dump.json: the item of a tensor row (its dtype the row's,
        a list shape, four float statistics) from the columns, any other item kept as it is."""
        n = len(rows)
        items = list(map(_ITEM, rows))
        dicts = np.fromiter(map(isinstance, items, repeat(dict)), bool, n)
        plain = items if dicts.all() else [item if type(item) is dict else {} for item in items]
        shapes = list(map(dict.get, plain, repeat("shape")))
        ok = (dicts & self.isfloat.all(axis=1)
              & np.fromiter(map(is_, map(dict.get, plain, repeat("dtype")), map(_DTYPE, rows)), bool, n)
              & np.fromiter(map(isinstance, shapes, repeat(list)), bool, n))
        seen: dict = {}
        if ok.all():
            self.shape_raw = list(map(seen.setdefault, self.shape, shapes))
        else:
            self.shape_raw = [seen.setdefault(text, shape) if good else None
                              for text, shape, good in zip(self.shape, shapes, ok.tolist())]
        self.kind = _shared(list(map(dict.get, plain, repeat("type"))))
        self.items = {i: items[i] for i in np.nonzero(~ok)[0].tolist()}

    def stat(self, i: int, k: int) -> Any:
        """Statistic ``k`` of row ``i`` as the row holds it."""
        flat = 4 * i + k
        if self.isfloat[i, k]:
            return float(self.vals[i, k])
        return self.other[flat]

    def stats(self, i: int) -> list:
        if self.isfloat[i].all():
            return self.vals[i].tolist()
        return [self.stat(i, k) for k in range(4)]

    def row(self, i: int) -> Row:
        """Row ``i`` made from the columns."""
        stats = self.stats(i)
        items = self.items or {}
        if i in items:
            item = items[i]
        else:
            item = {"dtype": self.dtype[i], "shape": self.shape_raw[i], "Max": stats[0], "Min": stats[1],
                    "Mean": stats[2], "Norm": stats[3]}
            if self.kind[i] is not None:
                item["type"] = self.kind[i]
        row = Row(self.name[i], self.key[i], self.state[i], self.dtype[i], self.shape[i], self.grad[i], stats,
                  self.md5[i], self.data_name[i], item)
        row.cmp = self.cmp[i]
        return row


class Flat:
    """A side's statistics as one flat sequence (index ``4 * row + k``), read one value at a time."""

    def __init__(self, cols: SideColumns) -> None:
        self.cols = cols

    def __getitem__(self, flat: int) -> Any:
        return self.cols.stat(flat // 4, flat % 4)


class LazyRows:
    """The rows of a :class:`SideColumns` listed elsewhere, each made when first asked for (then the same
    object each time: rows are paired by identity)."""

    def __init__(self, cols: SideColumns) -> None:
        self.cols = cols
        self.made: dict = {}

    def __len__(self) -> int:
        return len(self.cols)

    def __getitem__(self, i: int) -> Row:
        row = self.made.get(i)
        if row is None:
            n = len(self.cols)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(i)
            row = self.made.get(i)
            if row is None:
                row = self.made[i] = self.cols.row(i)
        return row

    def __iter__(self) -> Iterator:
        return (self[i] for i in range(len(self.cols)))


def _local_codes(texts: list) -> tuple:
    """(distinct texts in order of first use, the index of each text among them)."""
    distinct = list(dict.fromkeys(texts))
    index = {text: i for i, text in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, texts), np.int64, len(texts))


def _shared(texts: list) -> list:
    """``texts`` with equal texts made one object (smaller to send, faster to compare)."""
    seen: dict = {}
    return list(map(seen.setdefault, texts, texts))


def columns_of(rows: Any) -> SideColumns:
    """The columns of a side whose rows are listed here."""
    if isinstance(rows, SideColumns):
        return rows
    if isinstance(rows, LazyRows):
        return rows.cols
    return SideColumns(rows)
