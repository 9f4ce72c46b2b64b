"""Name mappings for comparing runs whose names differ: msprobe's ``-am`` (MindSpore API names to PyTorch ones,
with an optional table of the user's), ``-cm`` (cell/module names), ``-dm`` (row names), and the dtype pairing of
a MindSpore target against a PyTorch golden.

Each mapping gives every target row the name it is matched under (its ``cmp``); the golden rows keep theirs. As in
msprobe 26.2, a mapped target name is made from the row's own name, so a backward call keeps its call index
(the golden side's backward entries are numbered by their order, as without a mapping). Precedence: ``-am``, else
``-cm``, else ``-dm``; with ``-dm`` the dtypes are not checked. Mapping files are YAML, read as plain data with a
size limit; a file that is not the expected shape is refused in one line.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from .inputs import CompareInputError
from .ms_api_names import torch_api
from .rows import NA
from .xframework import MINDSPORE_FRAMEWORKS, PYTORCH

MAX_FILE_BYTES = 16 << 20
ABANDONED = "abandoned"          # appended to a row name of a user-mapped API whose position is not mapped
CALL = re.compile(r"\.(forward|backward)\.")
CELL_PART = re.compile(r"\.(?:forward|backward|parameters_grad)\.")

# a dtype of either framework -> its kind, for pairing a MindSpore row with a PyTorch one
_KINDS = {"int": ("Int8", "UInt8", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64"),
          "float": ("Float16", "Float32", "Float64", "BFloat16"), "bool": ("Bool",),
          "complex": ("Complex64", "Complex128")}
CROSS_KIND = {}
for _kind, _names in _KINDS.items():
    for _name in _names:
        CROSS_KIND[_name] = _kind
        CROSS_KIND["torch." + _name.lower()] = _kind
# user table keys: (MindSpore side, PyTorch side) of the lists that must have equal lengths
_LENGTH_KEYS = (("ms_args", "pt_args"), ("ms_outputs", "pt_outputs"), ("ms_parameters", "pt_parameters"),
                ("ms_parameters_grad", "pt_parameters_grad"))


@dataclass
class UserApi:
    """One entry of a user's ``-am`` table: which argument/output/parameter positions correspond."""

    ms_api: str
    pt_api: str
    positions: dict = field(default_factory=dict)     # "args"/"output"/"parameters"/"parameters_grad" -> (ms, pt)


@dataclass
class Mapping:
    """The mapping options of one compare (all empty: none)."""

    api: bool = False
    api_table: list = field(default_factory=list)     # UserApi entries (``-am FILE``)
    cell: bool = False
    cells: dict = field(default_factory=dict)         # target cell name (or part) -> golden
    data: dict = field(default_factory=dict)          # target row name -> golden row name
    layer: bool = False
    layers: dict = field(default_factory=dict)        # -lm rules (layer_mapping.rules_of)
    notes: list = field(default_factory=list)         # user-table entries skipped, said once

    @property
    def active(self) -> bool:
        return self.api or self.cell or bool(self.data) or self.layer


def _load_yaml(path: str, flag: str) -> Any:
    import yaml

    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise CompareInputError(f"{flag} {path}: {size} bytes, over the {MAX_FILE_BYTES >> 20} MiB a mapping "
                                    "file may have; pass a smaller file")
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)           # plain data only: object tags are refused
    except OSError as exc:
        raise CompareInputError(f"{flag} {path}: cannot be read ({exc.strerror or exc}); pass an existing "
                                "YAML file") from exc
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise CompareInputError(f"{flag} {path}: not a YAML file ({first}); fix the file") from None


def _name_table(raw: Any, path: str, flag: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise CompareInputError(f"{flag} {path}: expected a mapping of names to names (`target: golden` lines); "
                                "fix the file")
    return raw


def _positions(entry: dict, term: str, plural: str) -> tuple:
    ms = entry.get(f"ms_{term}", entry.get(f"ms_{plural}", [])) if plural else entry.get(f"ms_{term}", [])
    pt = entry.get(f"pt_{term}", entry.get(f"pt_{plural}", [])) if plural else entry.get(f"pt_{term}", [])
    return [str(v) for v in ms or []], [str(v) for v in pt or []]


def _api_table(raw: Any, path: str) -> tuple:
    if raw is None:
        return [], []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise CompareInputError(f"-am {path}: expected a list of entries (`- ms_api: ...`, `pt_api: ...`, "
                                "`ms_args: [...]`, `pt_args: [...]`, ...); fix the file")
    table, notes = [], []
    for i, entry in enumerate(raw):
        ms_api, pt_api = entry.get("ms_api"), entry.get("pt_api")
        lists = [entry.get(k) for pair in _LENGTH_KEYS for k in pair] + [entry.get(k) for k in (
            "ms_output", "pt_output")]
        if not isinstance(ms_api, str) or not isinstance(pt_api, str) or not all(
                v is None or (isinstance(v, list) and all(isinstance(x, (int, str)) for x in v)) for v in lists):
            raise CompareInputError(f"-am {path}: entry {i} needs ms_api and pt_api names and lists of positions; "
                                    "fix the file")
        positions = {"args": _positions(entry, "args", ""), "output": _positions(entry, "output", "outputs"),
                     "parameters": _positions(entry, "parameters", ""),
                     "parameters_grad": _positions(entry, "parameters_grad", "")}
        if any(len(entry.get(a) or []) != len(entry.get(b) or []) for a, b in _LENGTH_KEYS) or any(
                len(ms) != len(pt) for ms, pt in positions.values()):
            notes.append(f"-am {path}: entry {i} ({ms_api}) lists a different number of MindSpore and PyTorch "
                         "positions; it is not used")
            continue
        table.append(UserApi(ms_api, pt_api, positions))
    return table, notes


def load(api_mapping: Any = None, cell_mapping: Any = None, data_mapping: Any = None,
         layer_mapping: Any = None) -> Mapping:
    """The mapping options as the command line gives them: ``True`` for a flag without a file, a path, or None.

    Raises:
        CompareInputError: a mapping file that cannot be read or is not the expected shape.
    """
    out = Mapping()
    if api_mapping:
        out.api = True
        if isinstance(api_mapping, str):
            out.api_table, out.notes = _api_table(_load_yaml(api_mapping, "-am"), api_mapping)
    if cell_mapping:
        out.cell = True
        if isinstance(cell_mapping, str):
            out.cells = _name_table(_load_yaml(cell_mapping, "-cm"), cell_mapping, "-cm")
    if data_mapping:
        out.data = _name_table(_load_yaml(data_mapping, "-dm"), data_mapping, "-dm")
        if not out.data:
            raise CompareInputError(f"-dm {data_mapping}: the file maps no names; fix the file")
    if layer_mapping:
        from .layer_mapping import rules_of
        out.layer = True
        if isinstance(layer_mapping, str):
            out.layers = rules_of(_load_yaml(layer_mapping, "-lm"), layer_mapping)
    return out


def api_of(name: str) -> str:
    """The API of a row name: its first two parts (``Functional.dense``)."""
    return ".".join(name.split(".", 2)[:2])


def internal_api_name(name: str) -> str:
    """A MindSpore row name with its API renamed to PyTorch's, where the table has it."""
    api = api_of(name)
    kind = api.split(".", 1)[0]
    if kind == "Mint":
        return name.replace("Mint", "Torch")
    if kind == "MintFunctional":
        return name.replace("MintFunctional", "Functional")
    other = torch_api(api)
    return name.replace(api, other) if other else name


def cell_name(name: str, cells: dict) -> str:
    """A row name under ``-cm``: ``Cell`` becomes ``Module`` and the cell path is renamed by the table (the
    whole path when it is a key, else each key found in it, in table order); names of no call are ``N/A``."""
    if not name:
        return NA
    if "parameters_grad" not in name.split(".") and not CALL.search(name):
        return NA
    name = name.replace("Cell", "Module", 1)
    if not cells:
        return name
    path = CELL_PART.split(name.split(".", 1)[-1])[0]
    if path in cells:
        renamed = cells[path]
    else:
        renamed = path
        for old, new in cells.items():
            if old in renamed:
                renamed = renamed.replace(old, new, 1)
    return name.replace(path, renamed, 1) if renamed != path else name


def _state_of(row: Any, data: dict) -> str:
    """msprobe's state of a row for the user table: ``kwargs`` for a keyword input of a forward entry."""
    if row.state != "input":
        return row.state
    entry = data.get(row.key)
    kwargs = entry.get("input_kwargs") if isinstance(entry, dict) else None
    if isinstance(kwargs, dict) and kwargs:
        head = row.name[len(row.key) + len(".input."):].split(".", 1)[0] if row.name.startswith(
            row.key + ".input.") else ""
        if head in kwargs:
            return "kwargs"
    return "input"


def _user_api_names(target: list, golden: list, table: list, data: dict) -> None:
    """Rows of the APIs in the user's table get the PyTorch API and position; a position the entry does not list
    gets a name that matches nothing."""
    ms_apis = {api_of(row.name) for row in target}
    pt_apis = {api_of(row.name) for row in golden}
    for entry in table:
        if entry.ms_api not in ms_apis or entry.pt_api not in pt_apis:
            continue
        for row in target:
            if api_of(row.name) != entry.ms_api:
                continue
            name = row.name.replace(entry.ms_api, entry.pt_api, 1)
            origin = row.key.replace(entry.ms_api, entry.pt_api, 1)
            state = _state_of(row, data)
            term = "args" if state in ("input", "kwargs") else state
            pattern = f".{state}."
            ms_pos, pt_pos = entry.positions.get(term, ([], []))
            rest = name[len(origin + pattern):] if name.startswith(origin + pattern) else name
            key = name + ABANDONED
            for i, pos in enumerate(ms_pos):
                if rest == pos:
                    key = name.replace(pattern + pos, pattern + pt_pos[i])
            row.cmp = key


def _dtype_kind(dtype: str, cross: bool) -> str:
    return CROSS_KIND.get(dtype, dtype) if cross else dtype


def pairs(target: list, golden: list, mapping: Mapping, t_side: Any, g_side: Any, notes: list) -> list:
    """(target row, golden row or None) for every target row under ``mapping`` (and the cross-framework dtype
    pairing of a MindSpore target against a PyTorch golden); golden rows keep their exact-mode names.
    ``t_side``/``g_side``: the two :class:`.inputs.Side`."""
    from .match import dtypes_pair

    ms_target = t_side.framework in MINDSPORE_FRAMEWORKS
    cross = ms_target and g_side.framework == PYTORCH
    rows_map = mapping.data
    if mapping.layer and not ms_target:
        notes.append("-lm is msprobe's MindSpore layer mapping, but the target is a PyTorch dump; its names are "
                     "matched without it")
    elif mapping.layer:
        from .layer_mapping import data_mapping
        rows_map = data_mapping(t_side, g_side, mapping.layers)
    if mapping.api and not ms_target:
        notes.append("-am maps MindSpore API names to PyTorch ones, but the target is a PyTorch dump; its names "
                     "are matched without it")
    if mapping.api and ms_target:
        for row in target:
            row.cmp = internal_api_name(row.name)
        if mapping.api_table:
            _user_api_names(target, golden, mapping.api_table, t_side.data)
    elif mapping.cell:
        for row in target:
            row.cmp = cell_name(row.name, mapping.cells)
    elif rows_map:
        for row in target:
            row.cmp = rows_map.get(row.name, row.name)
    by_name: dict = {}
    for row in golden:
        by_name.setdefault(row.cmp, []).append(row)
    out = []
    check = not rows_map
    for row in target:
        found = by_name.get(row.cmp)
        if not found:
            out.append((row, None))
            continue
        for other in found:
            ok = True
            if check:
                a, b = _dtype_kind(row.dtype, cross), _dtype_kind(other.dtype, cross)
                ok = dtypes_pair(a, b)
            out.append((row, other if ok else None))
    return out


def needed(mapping: Mapping | None, target_framework: str, golden_framework: str) -> bool:
    """Whether a pair is matched here rather than by the plain exact match."""
    return bool(mapping and mapping.active) or (target_framework in MINDSPORE_FRAMEWORKS
                                                and golden_framework == PYTORCH)
