"""Which calls to consider: every call of the step, the failing APIs of a result CSV, or names and patterns.

A checker result CSV (``accuracy_checking_result_*.csv``) gives its failing APIs; a compare CSV (its first
column ``NPU Name``) gives the APIs of its rows whose ``Result`` is not a pass (every row when it has no such
column). Names are the dumper's (``Functional.silu.0``); patterns are shell globs (``Functional.silu.*``,
``*.matmul.*``).
"""
from __future__ import annotations

import csv
import fnmatch
import glob
import os
import re
from typing import Iterable, Optional

from ..precision import verdict
from ..report import acc_csv

_PASSING = ("", verdict.PASS_KEY, "n/a", "none")


def _compare_apis(path: str) -> list:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    name_i = header.index("NPU Name")
    result_i = header.index("Result") if "Result" in header else None
    apis = []
    for row in rows[1:]:
        if len(row) <= name_i or not row[name_i]:
            continue
        if result_i is not None and len(row) > result_i and row[result_i].strip().lower() in _PASSING:
            continue
        apis.append(acc_csv.api_of_output(row[name_i]))
    return list(dict.fromkeys(apis))


def read_csv_apis(path: str) -> tuple:
    """(failing API names, {API name: status text}) of a checker result CSV or a compare CSV.

    Raises:
        ValueError: the file is neither, naming it and what to pass.
    """
    with open(path, encoding="utf-8-sig", newline="") as fh:
        first = next(csv.reader(fh), [])
    if first[:1] == [acc_csv.RESULT_HEADER[0]]:
        rows = acc_csv.read_result_csv(path)
        statuses = {r.name: f"forward {r.forward or '-'}, backward {r.backward.strip() or '-'}" for r in rows}
        failing = [r.name for r in rows if verdict.is_failing(r.forward, r.backward, fail_on=verdict.WARNING_KEY)]
        return failing, statuses
    if "NPU Name" in first:
        apis = _compare_apis(path)
        return apis, {a: "differs in the compare" for a in apis}
    raise ValueError(f"{path}: neither an accuracy_checking_result CSV (first column {acc_csv.RESULT_HEADER[0]!r}) "
                     "nor a compare CSV (a column 'NPU Name'); pass one of those, or API names and patterns")


RESULT_PATTERNS = ("accuracy_checking_result_*.csv", "compare_result_*.csv")


def newest_result(folder: str) -> str:
    """The newest checker result CSV or compare CSV in ``folder`` (by the time stamp in its name, then the
    file's time): an output folder holds one pair per run.

    Raises:
        ValueError: the folder holds neither, naming it.
    """
    found = [p for pattern in RESULT_PATTERNS for p in glob.glob(os.path.join(glob.escape(folder), pattern))]
    if not found:
        raise ValueError(f"{folder}: no accuracy_checking_result_*.csv or compare_result_*.csv in the folder; "
                         "pass a result CSV, a compare CSV, or API names and patterns")

    def age(path: str) -> tuple:
        stamp = re.search(r"_(\d{14})\.csv\Z", os.path.basename(path))
        return (stamp.group(1) if stamp else "", os.path.getmtime(path), path)
    return max(found, key=age)


def select(all_names: list, spec: Optional[Iterable[str]]) -> tuple:
    """(the names of ``all_names`` chosen by ``spec``, {API: status} from a CSV in it, unmatched spec items).

    ``spec`` None chooses every name; each item is a CSV path, an output folder (its newest result or compare
    CSV), a name or a glob pattern."""
    if spec is None:
        return list(all_names), {}, []
    if isinstance(spec, str):
        spec = [spec]
    patterns: list = []
    statuses: dict = {}
    for item in spec:
        if os.path.isdir(item):
            item = newest_result(item)
        if item.endswith(".csv") and os.path.isfile(item):
            apis, found = read_csv_apis(item)
            patterns.extend(apis)
            statuses.update(found)
        else:
            patterns.append(item)
    chosen = []
    hit = set()
    for name in all_names:
        for pat in patterns:
            if name == pat or fnmatch.fnmatchcase(name, pat):
                chosen.append(name)
                hit.add(pat)
                break
    unmatched = [p for p in patterns if p not in hit]
    return chosen, statuses, unmatched
