"""What ``-tp``/``-gp`` name (spec compare.md section 1): two dump.json files, or two step directories whose
``rank*`` subdirectories are paired by sorted rank; and reading one side's files as untrusted input."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from dumpers import format as fmt
from generators import dumpjson
from generators.loader import unfinished_error
from generators.tensorfile import resolve_tensor_dir

RANK_DIR = re.compile(r"^rank(0|[1-9][0-9]*)?$")
PROC_DIR = re.compile(r"^proc[0-9]+$")


class CompareInputError(ValueError):
    """Inputs that cannot be compared at all; the message says what to pass instead."""


@dataclass
class Side:
    """One rank of one run: its dump.json, stack.json and construct.json."""

    dump_json: str
    data: dict
    task: str
    framework: str
    stack: dict | None                  # entry key -> frames (None: no stack.json)
    construct: dict
    tensor_dir: str | None
    tensor_problem: str | None
    problems: list = field(default_factory=list)
    has_md5: bool = False

    @property
    def mode(self) -> str:
        from .table import MD5, STATISTICS, TENSOR
        if self.task == "tensor":
            return TENSOR
        return MD5 if self.has_md5 else STATISTICS


@dataclass
class Pair:
    """The target and golden dump.json of one rank (``label``: the target's rank directory name)."""

    label: str
    target: str
    golden: str
    rank: int


def _rank_of(name: str) -> int:
    digits = name[4:] if name.startswith("rank") else ""
    return int(digits) if digits.isdigit() else -1


def _rank_dirs(step: str) -> list:
    names = sorted((n for n in os.listdir(step) if RANK_DIR.match(n) and os.path.isdir(os.path.join(step, n))),
                   key=_rank_of)
    if names:
        return names
    procs = [n for n in os.listdir(step) if PROC_DIR.match(n) and os.path.isdir(os.path.join(step, n))]
    if len(procs) == 1:
        return procs
    raise CompareInputError(f"{step}: no rank* directories and {'several' if procs else 'no'} proc* directories; "
                            "pass a step directory (step0, holding rank0, rank1, ... or rank), a rank directory, "
                            "or a dump.json file")


def pairs_of(target: str, golden: str) -> tuple:
    """(pairs, notes): the dump.json pairs to compare and one line per rank left out.

    A rank directory (holding dump.json itself) is accepted on both sides as one pair.

    Raises:
        CompareInputError: a path missing, a file against a directory, different rank counts.
    """
    for path, flag in ((target, "-tp"), (golden, "-gp")):
        if not os.path.exists(path):
            raise CompareInputError(f"{flag} {path} does not exist; pass a dump.json, a rank or a step directory")
    t_file, g_file = os.path.isfile(target), os.path.isfile(golden)
    if t_file != g_file:
        raise CompareInputError(f"-tp {target} and -gp {golden}: one is a file and the other a directory; pass "
                                "two dump.json files or two directories of the same level")
    if t_file:
        return [Pair("", target, golden, 0)], []
    t_dump, g_dump = (os.path.isfile(os.path.join(p, fmt.DUMP_JSON)) for p in (target, golden))
    if t_dump and g_dump:
        name = os.path.basename(os.path.normpath(target))
        return [Pair(name, os.path.join(target, fmt.DUMP_JSON), os.path.join(golden, fmt.DUMP_JSON),
                     max(_rank_of(name), 0))], []
    if t_dump != g_dump:
        raise CompareInputError(f"-tp {target} and -gp {golden} are not the same level: one is a rank directory "
                                "(holds dump.json), the other is not")
    t_ranks, g_ranks = _rank_dirs(target), _rank_dirs(golden)
    if len(t_ranks) != len(g_ranks):
        raise CompareInputError(f"-tp {target} has {len(t_ranks)} rank directories ({', '.join(t_ranks)}) but -gp "
                                f"{golden} has {len(g_ranks)} ({', '.join(g_ranks)}); compare dumps of the same "
                                "world size, or name one rank directory on each side")
    pairs, notes = [], []
    for t_name, g_name in zip(t_ranks, g_ranks):
        t_json, g_json = os.path.join(target, t_name, fmt.DUMP_JSON), os.path.join(golden, g_name, fmt.DUMP_JSON)
        missing = [p for p in (t_json, g_json) if not os.path.isfile(p)]
        if missing:
            notes.append(f"{t_name}: SKIP, {missing[0]} does not exist (nothing dumped on this rank?)")
            continue
        if _rank_of(t_name) != _rank_of(g_name):
            notes.append(f"{t_name}: compared with {g_name} of -gp (ranks are paired by sorted position)")
        pairs.append(Pair(t_name, t_json, g_json, max(_rank_of(t_name), 0)))
    return pairs, notes


def _stack_map(raw: Any) -> dict:
    """Entry key -> frames, from msprobe 26's grouped stack.json or the older key -> frames form."""
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
                and all(isinstance(k, str) for k in value[0])):
            for name in value[0]:
                out[name] = value[1]
        else:
            out[key] = value
    return out


def _load_json(path: str, max_bytes: int, text: str | None = None) -> Any:
    if text is None:
        text = dumpjson.read_text(path, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise dumpjson.JSONFileError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column "
                                     f"{exc.colno}); re-copy it, or rebuild it with 'pytest-msprobe repair-dump'"
                                     ) from None
    except RecursionError:
        raise dumpjson.JSONFileError(f"{path} nests JSON too deeply to be a dump file") from None


def read_side(dump_json: str, *, max_bytes: int = dumpjson.DEFAULT_MAX_JSON_BYTES) -> Side:
    """One side of a pair, read and checked as a whole.

    Raises:
        CompareInputError: an unfinished dump (journal left), an unreadable or malformed dump.json.
    """
    rank_dir = os.path.dirname(os.path.abspath(dump_json))
    if os.path.isfile(os.path.join(rank_dir, fmt.JOURNAL)):
        raise CompareInputError(str(unfinished_error(rank_dir, [rank_dir])))
    try:
        text = dumpjson.read_text(dump_json, max_bytes=max_bytes)
        doc = _load_json(dump_json, max_bytes, text)
    except dumpjson.JSONFileError as exc:
        raise CompareInputError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise CompareInputError(f"{dump_json}: not a dump.json (the top level must be an object with a 'data' "
                                "object of entries)")
    data = doc["data"]
    problems: list = []
    stack = None
    stack_path = os.path.join(rank_dir, fmt.STACK_JSON)
    if os.path.isfile(stack_path):
        try:
            stack = _stack_map(_load_json(stack_path, max_bytes))
        except dumpjson.JSONFileError as exc:
            problems.append(f"{exc}; the call stacks are left out")
            stack = {}
    construct: dict = {}
    construct_path = os.path.join(rank_dir, fmt.CONSTRUCT_JSON)
    if os.path.isfile(construct_path):
        try:
            loaded = _load_json(construct_path, max_bytes)
            construct = loaded if isinstance(loaded, dict) else {}
        except dumpjson.JSONFileError as exc:
            problems.append(f"{exc}; the module paths are left out")
    task = doc.get("task")
    framework = doc.get("framework") if doc.get("framework") in ("pytorch", "mindspore") else "pytorch"
    tensor_dir, tensor_problem = resolve_tensor_dir(dump_json, doc.get("dump_data_dir"))
    side = Side(dump_json, data, str(task), framework, stack, construct, tensor_dir, tensor_problem, problems)
    if side.task != "tensor":
        side.has_md5 = '"md5"' in text
    return side
