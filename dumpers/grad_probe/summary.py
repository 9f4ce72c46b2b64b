"""One exported step: the per-parameter statistics, the grad_summary CSV and the direction files.

Both monitors (PyTorch, MindSpore) fill a :class:`StepRecord`; :func:`write_step` writes it. Pure NumPy and the
standard library, so it runs on the background writer thread.
"""
from __future__ import annotations

import csv
import glob
import hashlib
import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dumpers.format import DIR_MODE, FILE_MODE

from .config import csv_header

log = logging.getLogger("pytest_msprobe.grad_probe")

SUMMARY_PREFIX = "grad_summary_"
STEP_PREFIX = "step"
DIRECTION_SUFFIX = ".npy"
_SAFE_NAME = re.compile(r"^[a-zA-Z0-9_.\-]+\Z")


def summary_file(step: int) -> str:
    return f"{SUMMARY_PREFIX}{step}.csv"


def rank_dir(dump_path: str, rank: int) -> str:
    return os.path.join(dump_path, f"rank{rank}")


@dataclass
class StepRecord:
    """Statistics of every exported parameter at one optimizer step (arrays are indexed by parameter).

    ``intervals`` holds element counts per bounds interval ([P, len(bounds)+1]) and ``zeros`` the count of exact
    zeros; ``direction`` is the concatenation of every gradient's ``grad > 0`` in parameter order.
    """

    step: int
    names: list[str]
    shapes: list[tuple[int, ...]]
    maxes: np.ndarray
    mins: np.ndarray
    norms: np.ndarray
    md5s: list[str] | None = None
    intervals: np.ndarray | None = None
    zeros: np.ndarray | None = None
    direction: np.ndarray | None = None

    @property
    def numels(self) -> list[int]:
        return [int(np.prod(s, dtype=np.int64)) for s in self.shapes]


def float_cell(x: float) -> str:
    """A max/min/norm cell: the float32 value widened to a Python float, as ``repr`` (``0.10000000149011612``)."""
    return repr(float(np.float32(x)))


def fraction_cell(count: float, total: int):
    """An interval / ``=0`` cell: count/total as a Python float, or the int ``0`` for an empty gradient."""
    return repr(float(count) / total) if total else "0"


def md5_float32(values: np.ndarray) -> str:
    """MD5 hex digest of ``values`` as C-ordered float32 bytes."""
    return hashlib.md5(np.ascontiguousarray(values, dtype=np.float32).tobytes()).hexdigest()


def summarise_flat(flat: np.ndarray, shapes: Sequence[tuple[int, ...]], names: Sequence[str], step: int,
                   level: str, bounds: Sequence[float]) -> StepRecord:
    """Compute a :class:`StepRecord` on the host from the float32 concatenation of all gradients."""
    flat = np.asarray(flat, dtype=np.float32).reshape(-1)
    numels = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    offsets = np.concatenate([[0], np.cumsum(numels, dtype=np.int64)])
    p = len(numels)
    maxes = np.full(p, np.nan, np.float32)
    mins = np.full(p, np.nan, np.float32)
    norms = np.zeros(p, np.float32)
    nb = len(bounds) + 1
    intervals = np.zeros((p, nb), np.int64) if level == "L2" else None
    zeros = np.zeros(p, np.int64) if level == "L2" else None
    md5s = [] if level == "L0" else None
    edges = np.asarray(bounds, np.float32)
    for i in range(p):
        seg = flat[offsets[i]:offsets[i + 1]]
        if seg.size:
            maxes[i] = seg.max()
            mins[i] = seg.min()
            norms[i] = np.float32(np.sqrt(np.dot(seg.astype(np.float64), seg.astype(np.float64))))
        if md5s is not None:
            md5s.append(md5_float32(seg))
        if intervals is not None:
            intervals[i] = np.bincount(np.searchsorted(edges, seg, side="left"), minlength=nb)[:nb]
            zeros[i] = np.count_nonzero(seg == 0)
    direction = flat > 0 if level != "L0" else None
    return StepRecord(step=step, names=list(names), shapes=[tuple(s) for s in shapes], maxes=maxes, mins=mins,
                      norms=norms, md5s=md5s, intervals=intervals, zeros=zeros, direction=direction)


def csv_rows(record: StepRecord, level: str) -> list[list]:
    """The data rows of grad_summary_{step}.csv for ``record`` (header not included)."""
    rows = []
    for i, (name, shape, n) in enumerate(zip(record.names, record.shapes, record.numels)):
        row: list = [name]
        if level == "L0":
            row.append(record.md5s[i])
        elif level == "L2":
            row.extend(fraction_cell(c, n) for c in record.intervals[i])
            row.append(fraction_cell(record.zeros[i], n))
        row.extend([float_cell(record.maxes[i]), float_cell(record.mins[i]), float_cell(record.norms[i]),
                    str(list(shape))])
        rows.append(row)
    return rows


def _open_new(path: str, mode: str, **kwargs):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    return os.fdopen(fd, mode, **kwargs)


def write_csv(path: str, header: Sequence, rows: Sequence[Sequence]) -> None:
    """msprobe's CSV style: UTF-8 with BOM, CRLF line ends, minimal quoting."""
    with _open_new(path, "w", encoding="utf-8-sig", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def clear_rank_dir(path: str) -> None:
    """Remove an earlier export's grad_summary CSVs and step directories from ``path`` (nothing else)."""
    old = glob.glob(os.path.join(path, f"{SUMMARY_PREFIX}*.csv"))
    old_dirs = [d for d in glob.glob(os.path.join(path, f"{STEP_PREFIX}*"))
                if os.path.isdir(d) and os.path.basename(d)[len(STEP_PREFIX):].isdigit()]
    if old or old_dirs:
        log.warning("grad_probe: the files in %s will be recovered (an earlier export is replaced)", path)
    for f in old:
        os.remove(f)
    for d in old_dirs:
        shutil.rmtree(d)


_warned_names: set = set()


def write_step(out_dir: str, record: StepRecord, level: str, bounds: Sequence[float]) -> None:
    """Write grad_summary_{step}.csv and, for L1/L2, step{step}/{param}.npy into the rank directory."""
    os.makedirs(out_dir, mode=DIR_MODE, exist_ok=True)
    write_csv(os.path.join(out_dir, summary_file(record.step)), csv_header(level, tuple(bounds)),
              csv_rows(record, level))
    if record.direction is None:
        return
    step_dir = os.path.join(out_dir, f"{STEP_PREFIX}{record.step}")
    os.makedirs(step_dir, mode=DIR_MODE, exist_ok=True)
    offset = 0
    for name, shape, n in zip(record.names, record.shapes, record.numels):
        part = record.direction[offset:offset + n].reshape(shape)
        offset += n
        if not _SAFE_NAME.match(name):
            if name not in _warned_names:
                _warned_names.add(name)
                log.warning("grad_probe: the parameter name %r contains special characters; its direction file "
                            "is not written (rename it to letters, digits, '_', '.', '-')", name)
            continue
        with _open_new(os.path.join(step_dir, name + DIRECTION_SUFFIX), "wb") as fh:
            np.save(fh, np.ascontiguousarray(part, dtype=np.bool_))


def read_summary(path: str) -> list[dict]:
    """Read a grad_summary CSV back as one dict per parameter row (cells as written, header as keys)."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))
