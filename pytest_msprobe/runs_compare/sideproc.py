"""The two sides of a large statistics pair read and listed at once, each in a process of its own.

Until they are paired the two sides are independent: reading a dump.json (``json.loads`` building a tree of
every entry) and listing its rows are most of a large compare, and run in the interpreter's one thread. So each
side is read, listed and turned into columns (:class:`.sidecols.SideColumns`) in a worker process, and only the
columns come back: the parent never parses the files nor frees their trees. The workers are started by
``spawn`` (a fresh interpreter that imports what it needs), never forked from the parent. A worker's error is
the error the same reading raises in-process, raised again here; a pair the columns do not serve (a tensor or
md5 dump, a pair whose frameworks need the api mapping) is read again in-process, as small pairs are.
"""
from __future__ import annotations

import gc
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable

from generators import dumpjson

from .inputs import Pair, Side, read_side
from .rows import dump_rows
from .sidecols import SideColumns

# the smaller of the two dump.json files from which the sides are read in two processes. Measured on 2 cores: a
# worker's start costs about 0.3 s of CPU, sending its columns and the columns' extra work about 0.5 s per 100
# MB of dump.json, while reading and listing take about 1.6 s per 100 MB; on two 34 MB and two 102 MB dumps at
# a load average of 2 to 4 the processes did not pay, on two 203 MB dumps with a core free they did
PROCESS_MIN_BYTES = 64 << 20

_HELD: list = []            # a worker's parsed trees, freed when the worker ends (after the parent has its columns)


@dataclass
class Listed:
    """Both sides of a pair read and listed elsewhere: the sides (without ``data``), their columns, and the
    entries that could not be listed (the notes :func:`.rows.dump_rows` gives), target's first."""

    target: Side
    golden: Side
    t_cols: SideColumns
    g_cols: SideColumns
    problems: list


def read_and_list(dump_json: str, max_bytes: int) -> tuple:
    """In a worker: (side, columns, problems) of a statistics dump, or (side, None, []) of another mode (its
    ``data`` left out).

    Raises:
        CompareInputError: as :func:`.inputs.read_side`.
    """
    gc.disable()                    # acyclic data only, as in the parent (runner.without_cycle_collection)
    side = read_side(dump_json, max_bytes=max_bytes)
    data, side.data = side.data, {}
    _HELD.append(data)
    if side.mode != "statistics":
        gc.freeze()
        return side, None, []
    problems: list = []
    rows = dump_rows(data, problems)
    _HELD.append(rows)
    cols = SideColumns(rows, keep_items=True)
    gc.freeze()         # what is held now is freed when the worker ends, without a last collection walking it
    return side, cols, problems


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def read_listed(pair: Pair, *, min_bytes: int | None = None, max_bytes: int = dumpjson.DEFAULT_MAX_JSON_BYTES,
                meanwhile: Callable[[], None] | None = None) -> Listed | None:
    """Both sides of ``pair`` read and listed in two processes, when the smaller dump.json has at least
    ``min_bytes`` (default :data:`PROCESS_MIN_BYTES`) and both are statistics dumps; None otherwise, or when a
    worker could not give its answer (the caller reads the pair in-process). The workers import the main module
    again, as ``spawn`` does: a script that compares at import time needs the ``if __name__ == "__main__"``
    guard, or ``min_bytes=sys.maxsize``. ``meanwhile`` runs here while the workers read.

    Raises:
        CompareInputError: a side cannot be read (the target's error first, as in-process).
    """
    limit = PROCESS_MIN_BYTES if min_bytes is None else min_bytes
    if _usable_cpus() < 2 and min_bytes is None:
        return None                 # one core: the two sides would take turns, and the start is lost
    try:
        if min(os.path.getsize(pair.target), os.path.getsize(pair.golden)) < limit:
            return None
    except OSError:
        return None                 # read in-process, which says what is wrong
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(read_and_list, path, max_bytes) for path in (pair.target, pair.golden)]
        if meanwhile is not None:
            meanwhile()
        target, t_cols, t_problems = futures[0].result()
        golden, g_cols, g_problems = futures[1].result()
    except (BrokenProcessPool, RuntimeError, OSError):
        # a worker that could not start or ended without an answer (short of memory; a main script that starts
        # a compare when imported again, without the ``if __name__ == "__main__"`` guard): read here instead
        return None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if t_cols is None or g_cols is None:
        return None
    return Listed(target, golden, t_cols, g_cols, t_problems + g_problems)
