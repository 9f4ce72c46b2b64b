"""The first inf/nan of a run (msprobe's ``overflow_check``): per rank, the first call that turns finite inputs into
an inf or nan output, and across ranks the first of those (fewest communication calls before it, then earliest).

A tensor's Max and Min in dump.json hold an inf or nan whenever an element is inf or nan (statistics and tensor
dumps alike), so the dump.json alone answers. Unlike msprobe, nested input items (a list of tensors) are inspected
too, so a call fed an inf inside a list is not blamed for it.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

from dumpers import format as fmt

from .diverge import COMM_PREFIXES, _module_path
from .inputs import CompareInputError, read_side

SKIPPED = ("Torch.empty.", "Torch.fill.")


def _bad(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    return isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity")


def _items(value: Any, depth: int = 0) -> Any:
    if depth > 50:
        return
    if isinstance(value, dict):
        if isinstance(value.get("type"), str):
            yield value
        else:
            for sub in value.values():
                yield from _items(sub, depth + 1)
    elif isinstance(value, list):
        for sub in value:
            yield from _items(sub, depth + 1)


def has_inf_nan(value: Any) -> bool:
    """Whether any item below ``value`` records an inf or nan Max or Min."""
    return any(_bad(item.get("Max")) or _bad(item.get("Min")) for item in _items(value))


@dataclass
class Origin:
    rank: int
    key: str
    position: tuple
    node: dict


def _rank_dirs(step_dir: str) -> list:
    from .inputs import PROC_DIR, RANK_DIR, _rank_of
    names = sorted((n for n in os.listdir(step_dir) if RANK_DIR.match(n)), key=_rank_of)
    if not names:
        procs = [n for n in os.listdir(step_dir) if PROC_DIR.match(n)]
        names = procs[:1] if len(procs) == 1 else []
    if not names and os.path.isfile(os.path.join(step_dir, fmt.DUMP_JSON)):
        return [("", step_dir, 0)]
    return [(n, os.path.join(step_dir, n), max(_rank_of(n), 0)) for n in names]


def first_origin(side: Any, rank: int) -> Origin | None:
    """The first call of one rank's dump whose inputs are finite and whose outputs are not."""
    comm = 0
    for position, (key, entry) in enumerate(side.data.items()):
        if not isinstance(entry, dict) or key.startswith(SKIPPED) or key.split(".", 1)[0] in fmt.MODULE_PREFIXES:
            continue
        inputs = [entry.get(k) for k in (fmt.INPUT_ARGS, fmt.INPUT_KWARGS, fmt.INPUT)]
        if not has_inf_nan(inputs) and has_inf_nan(entry.get(fmt.OUTPUT)):
            stack = (side.stack or {}).get(key)
            if stack is None and key.endswith(".backward"):
                stack = (side.stack or {}).get(key[: -len("backward")] + "forward")
            data_info = {k: entry[k] for k in (fmt.INPUT_ARGS, fmt.INPUT_KWARGS, fmt.INPUT, fmt.OUTPUT)
                         if k in entry}
            node = {"op_name": key, "data_info": data_info,
                    "construct_info": _module_path(side.construct, key), "stack_info": stack or {},
                    "rank": rank, "execution_index": position}
            return Origin(rank, key, (comm, position), node)
        if key.startswith(COMM_PREFIXES):
            comm += 1
    return None


def check(step_dir: str, report: Any = print) -> tuple:
    """(document, origins) of a step directory (or one rank directory); the first origin across ranks first.

    Raises:
        CompareInputError: no rank directory with a dump.json under ``step_dir``.
    """
    if not os.path.isdir(step_dir):
        raise CompareInputError(f"-i {step_dir} is not a directory; pass a step directory (step0) or a rank "
                                "directory")
    ranks = _rank_dirs(step_dir)
    origins = []
    for name, path, rank in ranks:
        dump_json = os.path.join(path, fmt.DUMP_JSON)
        if not os.path.isfile(dump_json):
            report(f"{name or path}: SKIP, no {fmt.DUMP_JSON}")
            continue
        try:
            side = read_side(dump_json)
        except CompareInputError as exc:
            report(f"{name or path}: SKIP, {exc}")
            continue
        origin = first_origin(side, rank)
        if origin is not None:
            origins.append(origin)
    if not ranks:
        raise CompareInputError(f"{step_dir}: no rank directories (rank, rank0, ...) and no dump.json; pass a step "
                                "or rank directory")
    origins.sort(key=lambda o: (o.position, o.rank))
    doc = {}
    for i, origin in enumerate(origins):
        node = dict(origin.node)
        node["first_across_ranks"] = i == 0
        doc[f"rank_{origin.rank}"] = [node]
    return doc, origins


def check_and_write(step_dir: str, out_dir: str, report: Any = print) -> tuple:
    """Write ``anomaly_analyze_{time_ns}.json`` when a call turns finite inputs into inf/nan; (path, summary)."""
    doc, origins = check(step_dir, report)
    if not doc:
        return None, "overflow check: no call turns finite inputs into inf/nan"
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"anomaly_analyze_{time.time_ns()}.json")
    fmt.write_json_atomic(path, doc, fsync=False)
    first = origins[0]
    path_text = " > ".join(p for p in first.node["construct_info"][:-1] if p)
    return path, (f"overflow check: first inf/nan from finite inputs: rank_{first.rank} {first.key}"
                  + (f" in {path_text}" if path_text else "")
                  + (f" ({len(origins)} rank(s) have one)" if len(origins) > 1 else ""))
