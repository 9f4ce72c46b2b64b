"""Which CSV a command reads, when it is given a folder or several files (a shell glob over several runs).

Every check writes a new ``accuracy_checking_result_{ts}.csv`` / ``..._details_{ts}.csv`` pair, so a folder
of runs holds many; a command given the folder, or a glob that matched several files, takes the newest pair
(by the stamp in its name, then by the file's time) and says which on stderr.
"""
from __future__ import annotations

import glob
import os
import re
import sys
from typing import Sequence

_STAMP = re.compile(r"_(\d{14})\.csv\Z")
RESULT = "accuracy_checking_result_"
DETAILS = "accuracy_checking_details_"


def _age(path: str) -> tuple:
    m = _STAMP.search(os.path.basename(path))
    try:
        mtime = os.path.getmtime(path)
    except OSError:
        mtime = 0.0
    return (m.group(1) if m else "", mtime, path)


def pick(paths: Sequence[str], prefix: str = RESULT, *, command: str = "") -> str:
    """The one CSV to read from ``paths`` (files and folders): a single file as given; from a folder its
    ``{prefix}*.csv`` files; of several, the newest.

    Raises:
        FileNotFoundError: a path that does not exist, or a folder without such a CSV.
    """
    if len(paths) == 1 and not os.path.isdir(paths[0]):
        return paths[0]         # one file: as given (the command says if it is missing)
    found = []
    for path in paths:
        if os.path.isdir(path):
            inside = glob.glob(os.path.join(glob.escape(path), f"{prefix}*.csv"))
            if not inside:
                raise FileNotFoundError(2, f"no {prefix}*.csv in the folder", path)
            found += inside
        elif os.path.exists(path):
            found.append(path)
        else:
            raise FileNotFoundError(2, "no such file", path)
    if not found:
        raise FileNotFoundError(2, "no CSV given", "")
    chosen = max(found, key=_age)
    if len(found) > 1:
        where = paths[0] if len(paths) == 1 else "the files given"
        print(f"pytest-msprobe{' ' + command if command else ''}: reading {chosen} (the newest of {len(found)} "
              f"in {where})", file=sys.stderr)
    return chosen
