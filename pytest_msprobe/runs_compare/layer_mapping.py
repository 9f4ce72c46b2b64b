"""``-lm``: msprobe 26.2's layer mapping, turned into a row mapping (``-dm``) for a MindSpore target.

Each entry of a dump is placed in a tree of scopes made from construct.json: an API call under the path of the
module/cell that called it (``fc1`` then ``dense``), a module/cell under its parent's path, parameter gradients
under their module's path; a backward entry where its forward entry is. The calls at one node are kept in their
dump order, per direction. A target entry is paired with the golden entry at the same place of the golden's tree:
the same path (each step renamed by the layer-mapping file where it has a rule for the node's class), the same
direction, the same position among the node's entries. Its rows are then paired by their position within the entry
(``.input.0``, ``.output.0``, ...); a row without a counterpart matches nothing.

The file maps, per class, child names of that class's node to the golden's: ``{DenseBlock: {dense: linear}}``,
a dotted key spanning several steps (``{TopLayer: {model.layers: decoder.layers}}``; ``Cell`` is read as
``TopLayer``), a value's ``(...)`` tail ignored. Like msprobe 26.2 the call stacks are not used (its grouped
stack.json is never consulted by the layer mapping), and ``ParallelTransformer`` layers are renumbered from 0.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .inputs import CompareInputError
from .rows import EntryError, entry_rows

TOP = "TopLayer"
LAYER_KINDS = ("Cell", "Module")
PARAMS_GRAD = "parameters_grad"
NA = "N/A"
RENUMBERED = ("ParallelTransformer", "layers")     # (class, child) whose indices restart at 0 on each side


@dataclass
class _Item:
    key: str
    type_name: str
    state: str
    scope: str


@dataclass
class _Node:
    type_name: str
    children: dict = field(default_factory=dict)
    items: dict = field(default_factory=dict)        # state -> [item, ...]


def rules_of(raw: Any, path: str) -> dict:
    """The layer-mapping file as ``{class: {first step: [(dotted origin, target, steps), ...]}}``, longest first.

    Raises:
        CompareInputError: not a mapping of class names to mappings of names.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and all(isinstance(a, str) and isinstance(b, str)
                                                               for a, b in v.items()) for k, v in raw.items()):
        raise CompareInputError(f"-lm {path}: expected class names, each with a mapping of names to names "
                                "(`DenseBlock: {dense: linear}`); fix the file")
    raw = dict(raw)
    if "Cell" in raw:
        raw[TOP] = raw.pop("Cell")
    out: dict = {}
    for type_name, names in raw.items():
        by_first: dict = {}
        for origin, target in names.items():
            steps = origin.split(".")
            by_first.setdefault(steps[0], []).append((origin, target.split("(")[0], len(steps)))
        for rules in by_first.values():
            rules.sort(key=lambda rule: -rule[2])
        out[type_name] = by_first
    return out


def _parent(construct: dict, key: str) -> str:
    parent = construct.get(key)
    if isinstance(parent, list) and len(parent) == 2:       # Megatron's [parent, micro step]
        parent = parent[0]
    return parent if isinstance(parent, str) else ""


def _item(key: str, construct: dict) -> _Item | None:
    parts = key.split(".")
    if len(parts) < 4:
        return None
    if parts[-1] == PARAMS_GRAD:
        return _Item(key, parts[-2], PARAMS_GRAD, ".".join(parts[:-3] + [parts[-3]]))
    if parts[-2] == PARAMS_GRAD and parts[-1].isdigit():
        return _Item(key, parts[-3], PARAMS_GRAD, ".".join(parts[:-3] + [parts[-4]]))
    type_name = parts[-3]
    if parts[0] in LAYER_KINDS:
        return _Item(key, type_name, parts[-2], ".".join(parts[:-4]) + "." + parts[-4])
    parent = _parent(construct, key)
    layer = ".".join(parent.split(".")[:-3]) if parent else TOP
    return _Item(key, type_name, parts[-1], layer + "." + type_name)


def _next_index(scope: str, prefix: str) -> float:
    if not scope.startswith(prefix + "."):          # the common case, without a regular expression
        return math.inf
    found = re.search(rf"^{re.escape(prefix)}\.(\S+?)(?:\.|$)", scope)
    numbers = re.findall(r"\d+", found.group(1)) if found else []
    return int(numbers[-1]) if numbers else math.inf


def _renumber(items: list) -> None:
    type_name, child = RENUMBERED
    prefixes = {f"{item.scope}.{child}": math.inf for item in items if item.type_name == type_name}
    for prefix in prefixes:
        prefixes[prefix] = min([prefixes[prefix]] + [_next_index(item.scope, prefix) for item in items])
    for prefix, lowest in prefixes.items():
        for item in items:
            index = _next_index(item.scope, prefix) - lowest
            if math.isinf(index):
                continue
            found = re.search(rf"^{re.escape(prefix)}\.(\S+?)(?:\.|$)", item.scope)
            if found:
                text = "nan" if index != index else str(int(index))
                item.scope = re.sub(rf"^{re.escape(prefix)}\.{re.escape(found.group(1))}", f"{prefix}.{text}",
                                    item.scope, count=1)


def _tree(data: dict, construct: dict) -> tuple:
    items = [it for it in (_item(key, construct) for key in data) if it is not None]
    by_key = {it.key: it for it in items}
    for it in items:
        parts = it.key.split(".")
        if "backward" in parts[-2:]:       # a backward entry sits where its forward entry does
            forward = by_key.get(".".join(parts[:-2] + [p.replace("backward", "forward") for p in parts[-2:]]))
            if forward is not None:
                it.scope = forward.scope
    _renumber(items)
    root = _Node(TOP)
    for it in items:
        node = root
        for name in it.scope.split(".")[1:]:
            node = node.children.setdefault(name, _Node(name))
        node.items.setdefault(it.state, []).append(it)
        node.type_name = it.type_name
    return items, root


def _golden_place(root: _Node, item: _Item, rules: dict) -> tuple:
    """(the golden scope, the item's state, its position at its node) of a target item."""
    scope = item.scope.split(".")
    new = TOP
    node = root
    i = 0
    while i < len(scope) - 1:
        child = scope[i + 1]
        step = 1
        for origin, target, steps in rules.get(node.type_name, {}).get(child, []) + [(child, child, 1)]:
            if ".".join(scope[i + 1:i + 1 + steps]) == origin:
                new, step = new + "." + target, steps
                break
        for _ in range(step):
            node = node.children.get(scope[i + 1]) if node is not None else None
            i += 1
        if node is None:
            return new, item.state, -1
    same = node.items.get(item.state, [])
    position = max((n for n, other in enumerate(same) if other.key == item.key), default=-1)
    return new, item.state, position


def _find(root: _Node, scope: str, state: str, position: int) -> _Item | None:
    node = root
    for name in scope.split(".")[1:]:
        node = node.children.get(name)
        if node is None:
            return None
    same = node.items.get(state, [])
    return same[position] if 0 <= position < len(same) else None


def _suffixes(key: str, entry: Any) -> dict:
    try:
        rows = entry_rows(key, entry)
    except EntryError:
        return {}
    return {row.name[len(key):]: row.name for row in rows if row.name.startswith(key)}


def data_mapping(target, golden, rules: dict) -> dict:
    """Target row name -> golden row name (``N/A`` where the golden has none), from the two sides' dump.json and
    construct.json. As msprobe, an empty construct.json or stack.json places nothing: on the target no mapping
    at all, on the golden nothing to pair with.

    Raises:
        CompareInputError: a side without construct.json or stack.json (msprobe's -lm needs both).
    """
    for side in (target, golden):
        rank_dir = os.path.dirname(os.path.abspath(side.dump_json))
        missing = [name for name in ("construct.json", "stack.json") if not os.path.isfile(os.path.join(rank_dir,
                                                                                                        name))]
        if missing:
            raise CompareInputError(f"-lm places calls by construct.json and stack.json, and {side.dump_json} has no "
                                    f"{' or '.join(missing)} beside it; dump with level mix or L0")
    if not target.stack or not target.construct:        # an empty file places nothing: no mapping
        return {}
    items, t_root = _tree(target.data, target.construct)
    _, g_root = _tree(golden.data, golden.construct) if golden.stack and golden.construct else (None, _Node(TOP))
    out: dict = {}
    for item in items:
        other = _find(g_root, *_golden_place(t_root, item, rules))
        bench = _suffixes(other.key, golden.data.get(other.key)) if other is not None else {}
        for suffix, name in _suffixes(item.key, target.data.get(item.key)).items():
            out[name] = bench.get(suffix, NA)
    return out
