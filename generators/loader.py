"""dump.json -> replayable cases: one :class:`ApiCase` per captured API call, forward and backward paired.

A dump is untrusted input. A file that cannot be read as a whole raises :class:`DumpError`; every other
defect stays local to its entry and becomes that case's ``problem`` (the reason the check SKIPs), so one bad
entry never costs the rest of the dump. Module/Cell entries are not API calls and are listed in
``DumpSet.excluded``; every other entry of ``data`` ends up in exactly one case.
"""
from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dumpers import format as fmt
from generators import dumpjson
from generators.inputs import UnknownApiError, prefix_problem, resolve_api
from generators.ms_apis import check_ms_api, ms_prefix_problem
from generators.tensorfile import resolve_tensor_dir

DEFAULT_MAX_JSON_BYTES = dumpjson.DEFAULT_MAX_JSON_BYTES
FRAMEWORKS = ("pytorch", "mindspore")
SOURCE_SEPARATOR = "::"        # "step0/rank0::Functional.linear.0" when several dumps share names


class DumpError(Exception):
    """A dump that cannot be read as a whole; the message names the file and what to do."""


@dataclass
class ApiCase:
    """One captured API call: its forward entry and the backward entry of the same name."""

    name: str
    prefix: str
    api: str
    index: int
    forward: dict | None
    backward: dict | None
    framework: str
    dump_json: str
    tensor_dir: str | None
    problem: str | None
    has_tensor_files: bool
    tensor_dir_problem: str | None = None   # why the tensor files cannot be found (real mode only)
    source: str = ""                           # label of the dump file when several are loaded

    @property
    def call_name(self) -> str:
        """The dump's own name of the call (``name`` without a source label)."""
        return self.name.split(SOURCE_SEPARATOR)[-1]

    def peek(self) -> ApiCase:
        """The case with its entries, for a look that keeps nothing parsed here (a process that only measures
        calls: the controller working out their costs); this one's entries are parsed already."""
        return self


@dataclass
class DumpSet:
    """Every API call of the given dumps, in dump order."""

    cases: list
    sources: list
    excluded: list = field(default_factory=list)   # module/Cell/parameters_grad entry keys (not API calls)

    def __iter__(self):
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def by_name(self) -> dict:
        return {case.name: case for case in self.cases}


_SPACE = re.compile(r"\s")     # the characters str.isspace() calls whitespace


class _Text:
    """The text of one dump.json, which the lazy cases parse their entries from."""

    __slots__ = ("text", "path")

    def __init__(self, text: str, path: str) -> None:
        self.text, self.path = text, path

    def entry(self, span: tuple) -> Any:
        return dumpjson.loads_member(self.text, *span, what=self.path)


class _LazyCase(ApiCase):
    """An :class:`ApiCase` whose entries are parsed when it is first asked for one of them, and checked when it
    is first asked for its problem; the outcome is the one :func:`_finish` gives on the parsed entries."""

    def __init__(self, call: Any, framework: str, dump_json: str, tensor_dir: str | None,
                 dir_problem: str | None, text: _Text) -> None:
        self.name, self.prefix, self.api, self.index = call.name, call.prefix, call.api, call.index
        self.framework, self.dump_json, self.tensor_dir = framework, dump_json, tensor_dir
        self.tensor_dir_problem = dir_problem if tensor_dir is None else None
        self.source = ""
        self._call: Any = call         # entries as spans of the text until parsed
        self._text: Any = text
        self._dir_problem = dir_problem
        self._parts: dict | None = None         # forward, backward (parsed)
        self._checks: dict | None = None        # problem, has_tensor_files

    def _parsed(self) -> dict:
        if self._parts is None:
            call, text = self._call, self._text
            if call.has_forward and call.forward is not None:
                call.forward = text.entry(call.forward)
            if call.has_backward:
                call.backward = text.entry(call.backward)
            self._text = None                     # the text goes once every case has its entries
            self._parts = {"forward": call.forward if isinstance(call.forward, dict) else None,
                           "backward": call.backward if isinstance(call.backward, dict) else None}
        return self._parts

    def peek(self) -> ApiCase:
        """A copy of this case with its entries parsed, checked as :meth:`_parsed` checks them, while this
        case keeps only their spans: the parsed entries go with the copy."""
        if self._parts is not None:
            return self
        call = copy.copy(self._call)
        view = copy.copy(self)
        view._call, view._parts = call, None
        view._parsed()
        return view

    def _checked(self) -> dict:
        if self._checks is None:
            self._parsed()
            case = _finish(self._call, self.framework, self.dump_json, self.tensor_dir, self._dir_problem)
            self._checks = {"problem": case.problem, "has_tensor_files": case.has_tensor_files}
            self._call = None
        return self._checks


def _lazy_field(name: str, parts: str) -> property:
    def get(self: _LazyCase) -> Any:
        return getattr(self, parts)()[name]

    def set_(self: _LazyCase, value: Any) -> None:
        getattr(self, parts)()[name] = value

    return property(get, set_, doc=f"The case's ``{name}`` (resolved on first use).")


for _name, _parts in (("forward", "_parsed"), ("backward", "_parsed"), ("problem", "_checked"),
                      ("has_tensor_files", "_checked")):
    setattr(_LazyCase, _name, _lazy_field(_name, _parts))


def printable_name(name: str) -> str:
    """A call name safe for node ids, terminals and CSV cells: whitespace and control characters escaped."""
    if name.isprintable() and not _SPACE.search(name):
        return name
    return "".join(ch if ch.isprintable() and not ch.isspace() else ch.encode("unicode_escape").decode("ascii")
                   .replace(" ", "\\x20") for ch in name)


def _natural_key(path: str) -> list:
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", path)]


def unfinished_error(path: str, directories: list) -> DumpError:
    """The error for rank directories that still hold a journal (``path``: what the user named)."""
    named = ", ".join(directories[:5]) + (f" and {len(directories) - 5} more" if len(directories) > 5 else "")
    target = directories[0] if len(directories) == 1 else path
    return DumpError(f"{named}: the dump of this step was never finished (a {fmt.JOURNAL} is still there: the "
                     "dumping process died, ran out of disk, or is still running), so its dump.json lacks calls "
                     f"the journal holds; run `pytest-msprobe repair-dump {target}` first, then check again")


def find_dump_files(paths: str | os.PathLike | Sequence) -> list:
    """The dump.json files named by ``paths``: files as given, directories searched (step*/rank*/dump.json).

    A rank directory that still holds ``dump.journal`` (a step whose dumping process died before ``stop()``)
    is refused, whether a file in it or a directory above it is named: its calls are in the journal, and
    ``repair-dump`` puts them into dump.json.

    Raises:
        DumpError: a path does not exist, a directory holds no dump.json, or a dump is unfinished.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list = []
    for raw in paths:
        path = os.fspath(raw)
        if os.path.isfile(path) or (os.path.basename(path) == fmt.DUMP_JSON and not os.path.isdir(path)):
            beside = os.path.dirname(path) or os.curdir
            if os.path.isfile(os.path.join(beside, fmt.JOURNAL)):
                raise unfinished_error(path, [beside])
            if not os.path.isfile(path):
                raise DumpError(f"{path} does not exist; pass a dump.json file or a dump directory")
            found.append(path)
        elif os.path.isdir(path):
            below, unfinished = [], []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                if fmt.JOURNAL in files:
                    unfinished.append(root)
                if fmt.DUMP_JSON in files:
                    below.append(os.path.join(root, fmt.DUMP_JSON))
            if unfinished:
                raise unfinished_error(path, sorted(unfinished, key=_natural_key))
            if not below:
                raise DumpError(f"no {fmt.DUMP_JSON} found under {path}; pass a dump.json file or the dump "
                                "directory that holds step*/rank*/dump.json")
            found.extend(sorted(below, key=_natural_key))
        else:
            raise DumpError(f"{path} does not exist; pass a dump.json file or a dump directory")
    unique, seen = [], set()
    for path in found:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            unique.append(path)
    return unique


def _infer_framework(doc: dict, data: dict) -> str:
    declared = doc.get("framework")
    if declared in FRAMEWORKS:
        return declared
    for entry in data.values():
        if isinstance(entry, dict):
            for value in entry.values():
                for _, item in dumpjson.iter_tensor_items(value):
                    return "mindspore" if item.get("type") == fmt.MINDSPORE_TENSOR_TYPE else "pytorch"
    return "pytorch"


# prefixes whose keys take fmt.parse_entry_key's way (not ``Prefix.api.index.direction`` API entries)
_NOT_PLAIN = frozenset((*fmt.MODULE_PREFIXES, "Jit"))


class _Call:
    """Collects the entries of one API call while the data object is scanned."""

    __slots__ = ("name", "prefix", "api", "index", "forward", "backward", "has_forward", "has_backward",
                 "problems")

    def __init__(self, name: str, prefix: str, api: str, index: int) -> None:
        self.name, self.prefix, self.api, self.index = name, prefix, api, index
        self.forward: Any = None
        self.backward: Any = None
        self.has_forward = False
        self.has_backward = False
        self.problems: list = []


def _tensor_items_of(forward: dict, backward: dict | None) -> list:
    items = [item for part in (fmt.INPUT_ARGS, fmt.INPUT_KWARGS)
             for _, item in dumpjson.iter_tensor_items(forward.get(part))]
    if backward:
        grads = backward.get(fmt.INPUT) or []
        if grads and dumpjson.is_tensor_item(grads[0]):
            items.append(grads[0])
    return items


def _api_problem(call: _Call, framework: str) -> str | None:
    """Why the call's API cannot be replayed (prefix not replayable, name refused or unknown), or None."""
    mindspore = framework == "mindspore"
    problem = ms_prefix_problem(call.prefix) if mindspore else prefix_problem(call.prefix)
    if problem is not None:
        return problem
    try:
        if mindspore:
            check_ms_api(call.prefix, call.api)      # resolved (MindSpore imported) only when run
        else:
            resolve_api(call.prefix, call.api)
    except UnknownApiError as exc:
        return f"unknown API {call.name}: {exc}"
    return None


def _finish(call: _Call, framework: str, dump_json: str, tensor_dir: str | None,
            dir_problem: str | None) -> ApiCase:
    problem = call.problems[0] if call.problems else None
    if problem is None and not call.has_forward:
        problem = (f"{call.name}.backward has no forward entry {call.name}.forward in the dump "
                   "(filtered by data_mode or list?): the call cannot be replayed without its inputs")
    if problem is None:
        problem = dumpjson.check_forward(call.forward, f"{call.name}.forward")
    if problem is None and call.has_backward:
        problem = dumpjson.check_backward(call.backward, f"{call.name}.backward")
    if problem is None:
        problem = _api_problem(call, framework)
    forward = call.forward if isinstance(call.forward, dict) else None
    backward = call.backward if isinstance(call.backward, dict) else None
    has_files = False
    if problem is None and forward is not None:
        items = _tensor_items_of(forward, backward)
        has_files = bool(items) and all(dumpjson.tensor_file_name(item) is not None for item in items)
    return ApiCase(name=call.name, prefix=call.prefix, api=call.api, index=call.index, forward=forward,
                   backward=backward, framework=framework, dump_json=dump_json, tensor_dir=tensor_dir,
                   problem=problem, has_tensor_files=has_files,
                   tensor_dir_problem=dir_problem if tensor_dir is None else None)


def load_dump_file(path: str, *, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> tuple:
    """Cases and excluded keys of one dump.json.

    The text is checked as a whole here, but an entry is parsed, and checked, only when its case is first
    asked for its entries or its problem (see :class:`_LazyCase`); a dump that is not plain, valid JSON with
    distinct keys is parsed as a whole at once instead, with the same outcome.

    Raises:
        DumpError: unreadable, too large, not JSON, not an object with a ``data`` object.
    """
    return _load_dump_file(path, max_json_bytes)


def _load_dump_file(path: str, max_json_bytes: int) -> tuple:
    try:
        text = dumpjson.read_text(path, max_bytes=max_json_bytes)
    except dumpjson.JSONFileError as exc:
        raise DumpError(str(exc)) from None
    with dumpjson.paused_gc():
        lean = _load_lean(path, text)
    if lean is not None:
        return lean
    try:
        doc = dumpjson.loads(text, what=path)
    except dumpjson.JSONFileError as exc:
        raise DumpError(str(exc)) from None
    del text
    if not isinstance(doc, dict):
        raise DumpError(f"{path}: the top level must be an object with keys "
                        f"{', '.join(fmt.TOP_LEVEL_KEYS)}; this is not a dump.json")
    dups = getattr(doc, "duplicates", None)
    if dups:
        raise DumpError(f"{path}: top-level key {dups[0]!r} appears more than once; "
                        "keep one and remove the others")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise DumpError(f"{path}: the key 'data' must hold an object of entries, got "
                        f"{type(data).__name__}; this is not a dump.json (or it is damaged)")
    framework = _infer_framework(doc, data)
    tensor_dir, dir_problem = resolve_tensor_dir(path, doc.get("dump_data_dir"))
    pairs = data.pairs if isinstance(data, dumpjson.DuplicateKeyDict) else list(data.items())
    calls, excluded = _group_calls(path, pairs, set(getattr(data, "duplicates", ())))
    cases = [_finish(call, framework, path, tensor_dir, dir_problem) for call in calls]
    return cases, excluded


def _load_lean(path: str, text: str) -> tuple | None:
    """:func:`load_dump_file` for a plain dump (valid JSON, no repeated key at the top or in ``data``): the
    cases keep where their entries lie in ``text``; None for any other text."""
    scanned = dumpjson.scan_object(text, dumpjson.skip_space(text, 0), inner="data")
    if scanned is None or not dumpjson.at_end(text, scanned[1]) or scanned[2] is None:
        return None
    members, _, data = scanned
    keys = [key for key, _, _ in members]
    if len(set(keys)) != len(keys) or len({key for key, _, _ in data}) != len(data):
        return None
    top = {key: dumpjson.loads(text[start:end]) for key, start, end in members if key != "data"}
    declared = top.get("framework")
    framework = declared if declared in FRAMEWORKS else _first_framework(text, data)
    tensor_dir, dir_problem = resolve_tensor_dir(path, top.get("dump_data_dir"))
    calls, excluded = _group_calls(path, ((key, (start, end)) for key, start, end in data), set())
    source = _Text(text, path)
    cases = [_LazyCase(call, framework, path, tensor_dir, dir_problem, source) for call in calls]
    return cases, excluded


def _first_framework(text: str, data: list) -> str:
    """The framework of the first tensor item in the entries of ``data`` (spans of ``text``), as
    :func:`_infer_framework` finds it in a parsed dump."""
    for _, start, end in data:
        entry = dumpjson.loads_member(text, start, end)
        if isinstance(entry, dict):
            for value in entry.values():
                for _, item in dumpjson.iter_tensor_items(value):
                    return "mindspore" if item.get("type") == fmt.MINDSPORE_TENSOR_TYPE else "pytorch"
    return "pytorch"


def _group_calls(path: str, pairs: list, duplicated: set) -> tuple:
    """The :class:`_Call` of each API call in ``pairs`` (entry key, entry), in dump order, and the keys of the
    module entries, which are not API calls."""
    calls: dict = {}
    raw_names: dict = {}          # printable call name -> the call name as written in the dump
    by_raw: dict = {}             # the call name as written -> its call
    excluded: list = []
    for key, entry in pairs:
        # the common form, read as fmt.parse_entry_key reads it: ``Prefix.api.index.direction``, the API name
        # holding any dots, the index a plain decimal, the prefix not a module's nor Jit
        call_name, _, direction = key.rpartition(".")
        plain = False
        if direction == fmt.FORWARD or direction == fmt.BACKWARD:
            call = by_raw.get(call_name)
            if call is not None:        # its other direction: the call and its name are known
                raw = raw_names.get(call.name)
                if raw != call_name:
                    call.problems.append(_ambiguous(raw, call_name, call.name))
                _attach(call, key, entry, direction, key in duplicated, path)
                continue
            rest, dot, index = call_name.rpartition(".")
            prefix, dot_api, api = rest.partition(".")
            plain = bool(dot and dot_api and index.isdigit() and index.isascii()
                         and (index[0] != "0" or len(index) == 1) and prefix not in _NOT_PLAIN)
        if plain:
            kind, index = fmt.KIND_API, int(index)
        else:
            try:
                parsed = fmt.parse_entry_key(key)
            except ValueError as exc:
                name = printable_name(key) or "(empty entry key)"
                call = calls.setdefault(name, _Call(name, key.split(".")[0], "", -1))
                call.problems.append(f"{exc}; the entry is not an API call this tool knows how to replay")
                call.has_forward = True
                continue
            if parsed.kind in fmt.MODULE_KINDS:
                excluded.append(key)
                continue
            kind, prefix, api, direction, call_name = (parsed.kind, parsed.prefix, parsed.api, parsed.direction,
                                                       parsed.api_call)
            index = parsed.index if parsed.index is not None else -1
        name = printable_name(call_name)
        call = calls.get(name)
        if call is None:
            call = calls[name] = _Call(name, prefix, api, index)
            raw_names[name] = call_name
        elif raw_names.get(name) != call_name:
            call.problems.append(_ambiguous(raw_names.get(name), call_name, name))
        if plain:
            by_raw[call_name] = call
        if kind == fmt.KIND_JIT:
            call.problems.append(f"{key}: a Jit entry is a whole jitted function, which cannot be replayed "
                                 "as one API call")
        _attach(call, key, entry, direction, key in duplicated, path)
    return list(calls.values()), excluded


def _ambiguous(raw: Any, call_name: str, name: str) -> str:
    return f"entries {raw!r} and {call_name!r} both print as {name!r}; the call is ambiguous: rename one of them"


def _attach(call: Any, key: str, entry: Any, direction: str, duplicated: bool, path: str) -> None:
    """One entry of a call: its forward or backward (and the problem of a key the file holds twice)."""
    if duplicated:
        call.problems.append(f"entry {key!r} appears more than once in {path}; the entry is ambiguous: "
                             "remove the duplicate")
    if direction == fmt.BACKWARD:
        call.backward, call.has_backward = entry, True
    else:
        call.forward, call.has_forward = entry, True


def _labels(files: list) -> list:
    dirs = [os.path.dirname(os.path.abspath(f)) for f in files]
    try:
        common = os.path.commonpath(dirs)
    except ValueError:
        common = ""
    labels = []
    for i, d in enumerate(dirs):
        rel = os.path.relpath(d, common) if common else d
        labels.append(f"dump{i}" if rel in ("", ".") else rel.replace(os.sep, "/"))
    if len(set(labels)) != len(labels):
        labels = [f"dump{i}" for i in range(len(files))]
    return labels


def load_dump(paths: str | os.PathLike | Sequence, *,
              max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> DumpSet:
    """Load one or more dumps into cases, in dump order.

    Args:
        paths: a dump.json, a directory (every ``dump.json`` below it, in natural order: step2 before
            step10), or a list of those.
        max_json_bytes: refuse a dump.json larger than this before reading it.

    When several dump files are loaded and a call name occurs in more than one of them, every case is
    named ``{label}::{name}``, ``label`` being the dump.json's directory relative to the common directory
    of all files (``step0/rank0``). Without a clash names stay as in the dump.

    Raises:
        DumpError: a path does not exist, or a dump.json cannot be read as a whole.
    """
    files = find_dump_files(paths)
    loaded = [load_dump_file(f, max_json_bytes=max_json_bytes) for f in files]
    clash = False
    if len(loaded) > 1:
        first: dict = {}            # call name -> the first file that has it
        for i, (cases, _) in enumerate(loaded):
            for case in cases:
                clash = clash or first.setdefault(case.name, i) != i
    labels = _labels(files)
    out: list = []
    excluded: list = []
    for label, (cases, skipped) in zip(labels, loaded):
        for case in cases:
            case.source = label
            if clash:
                case.name = f"{label}{SOURCE_SEPARATOR}{case.name}"
            out.append(case)
        excluded.extend(f"{label}{SOURCE_SEPARATOR}{key}" if clash else key for key in skipped)
    return DumpSet(cases=out, sources=list(files), excluded=excluded)
