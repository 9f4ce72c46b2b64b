"""Claiming a new CSV pair, and the end-of-run rewrite of a pair this run wrote (:mod:`.pairs` has the rules)."""
from __future__ import annotations

import os
from typing import Any

from . import acc_csv
from .acc_csv import (FILE_MODE, MAX_TRIES, CsvWriteError, create_exclusive, csv_paths, make_dirs, next_second,
                      sort_apis, unchanged)


def claim_pair(out_dir: str, ts: str | None = None) -> tuple:
    """(timestamp, result path, details path) of a new pair in ``out_dir``, both files created here, empty
    (the writer gives them their BOM and header); the first free second from ``ts`` (default: now).

    Raises:
        OSError: the folder cannot be created or written.
    """
    try:
        make_dirs(out_dir)
    except OSError as exc:
        raise CsvWriteError(out_dir, exc) from None
    ts = ts or acc_csv.new_timestamp()
    for _ in range(MAX_TRIES):
        result, details = csv_paths(out_dir, ts)
        try:
            if create_exclusive(result, FILE_MODE):
                if create_exclusive(details, FILE_MODE):
                    return ts, result, details
                os.unlink(result)       # a details file without its result file: leave that name alone
        except OSError as exc:
            raise CsvWriteError(result, exc) from None
        ts = next_second(ts)
    raise FileExistsError(f"no free name for a result CSV in {out_dir} within {MAX_TRIES} seconds of stamps; "
                          f"give another --msprobe-out")



def sort_written(writer: Any, result: str, details: str, order: dict) -> bool:
    """Put a parallel run's rows back in dump order (``acc_csv.sort_apis``), only where both files are still
    the ones ``writer`` wrote, unchanged since; returns whether it did."""
    ids = writer.identities()
    if not (unchanged(result, ids[0]) and unchanged(details, ids[1])):
        return False
    sort_apis(result, details, order)
    return True
