"""One dump.json entry -> the rows msprobe's compare lists for it (spec compare.md section 2).

A row is one item of an entry (a tensor, a scalar argument, a ``null``), named the way msprobe 26.2 names it:
the item's ``data_name`` without its extension when there is one, else the entry key followed by
``.input``/``.output``/``.parameters`` and the item's position (``.0`` per list level, ``.key`` per object
level). Rows keep the raw statistics of dump.json; the table turns them into cells.
"""
from __future__ import annotations

import zlib
from typing import Any

from dumpers import format as fmt

INPUT, OUTPUT, PARAMETERS, PARAMS_GRAD = "input", "output", "parameters", fmt.PARAMETERS_GRAD
NA = "N/A"
NO_FILE = "-1"
P2P_OP = "torch.distributed.P2POp"
MAX_DEPTH = 50          # nesting of one entry's items (msprobe refuses deeper entries)

# body key -> (name suffix, state), in the order msprobe walks an entry
BODY_KEYS = ((fmt.INPUT_ARGS, ".input", INPUT), (fmt.INPUT_KWARGS, ".input", INPUT), (fmt.INPUT, ".input", INPUT),
             (fmt.OUTPUT, ".output", OUTPUT), ("parameters", ".parameters", PARAMETERS))
STATE_ORDER = {INPUT: 0, PARAMETERS: 1, OUTPUT: 2, PARAMS_GRAD: 3}


class EntryError(ValueError):
    """An entry whose items cannot be listed (too deep); the message names the entry."""


class Row:
    """One compared item of one side."""

    __slots__ = ("name", "key", "state", "dtype", "shape", "grad", "stats", "_md5", "data_name", "item", "cmp")

    def __init__(self, name: str, key: str, state: str, dtype: str, shape: str, grad: str, stats: list,
                 md5: str | None, data_name: str, item: Any) -> None:
        self.name, self.key, self.state = name, key, state
        self.dtype, self.shape, self.grad, self.stats = dtype, shape, grad, stats
        self._md5, self.data_name, self.item = md5, data_name, item
        self.cmp = name           # the name matched against the other side

    @property
    def md5(self) -> str:
        """The item's CRC32 text: dump.json's ``md5``, else the CRC32 of ``str(value)`` (msprobe's rule)."""
        if self._md5 is None:
            self._md5 = _crc((self.item or {}).get("value", ""))
        return self._md5

    @property
    def is_output(self) -> bool:
        return ".output." in self.name


def _stat(value: Any) -> Any:
    """A statistic as msprobe keeps it: bools as their text, ``None`` as ``'None'``, NaN as ``'Nan'``."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value != value:
        return "Nan"
    if isinstance(value, str) and value.lower() == "nan":
        return "Nan"
    return value


def _crc(value: Any) -> str:
    return f"{zlib.crc32(str(value).encode()):08x}"


_SHAPES: dict = {}


def _shape_text(shape: list) -> str:
    """``str(shape)`` of a list of ints, remembered (a dump has few distinct shapes)."""
    try:
        key = tuple(shape)
        text = _SHAPES.get(key)
    except TypeError:
        return str(shape)
    if text is None:
        text = str(shape)
        if len(_SHAPES) < 65536:
            _SHAPES[key] = text
    return text


def _null_row(name: str, key: str, state: str) -> Row:
    return Row(name, key, state, NA, NA, NA, ["None"] * 4, NA, NO_FILE, None)


def _leaf(item: dict, name: str, key: str, state: str, _data_name: str = fmt.DATA_NAME) -> Row:
    get = item.get
    data_name = get(_data_name) or NO_FILE
    if type(data_name) is not str:
        data_name = str(data_name)
    full = data_name.rsplit(".", 1)[0] if data_name != NO_FILE else name
    grad = get("requires_grad")
    grad = "True" if grad is True else "False" if grad is False else NA if grad is None else str(grad)
    md5 = get("md5")
    kind = get("type")
    dtype = get("dtype")
    if dtype:
        stats = [get("Max"), get("Min"), get("Mean"), get("Norm")]
        a, b, c, d = stats
        if not (type(a) is float and type(b) is float and type(c) is float and type(d) is float
                and a == a and b == b and c == c and d == d):     # the common case, finite floats, as they are
            stats = [v if type(v) is float and v == v else _stat(v) for v in stats]
        shape = get("shape")
        shape = _shape_text(shape) if type(shape) is list else str(shape)
        if type(dtype) is not str:
            dtype = str(dtype)
    else:
        value = item.get("value")
        stats = ["None"] * 4
        if kind == "torch.Size":
            dtype, shape = kind, str(value)
        elif kind == "slice":
            dtype, shape = kind, f"({len(value)},)" if isinstance(value, list) else "()"
        elif kind == "ellipsis":
            dtype, shape = kind, "[]"
            stats = [_stat(value)] * 4
        elif name.rsplit(".", 1)[-1] in ("src", "dst", "group_src", "group_dst"):
            dtype, shape = str(kind), "[]"
            stats = [str(value)] * 4
            md5 = md5 or str(value)
        elif kind == "torch.ProcessGroup":
            ranks = str(item.get("group_ranks"))
            dtype, shape, stats = kind, "[]", [ranks] * 4
            md5 = md5 or ranks
        else:
            dtype, shape = str(type(value)), "[]"
            stats = [_stat(value) if not isinstance(value, bool) else value] * 4
    return Row(full, key, state, dtype, shape, grad, stats, str(md5) if md5 else None, data_name, item)


def _walk(value: Any, name: str, key: str, state: str, out: list, depth: int, grads: bool) -> None:
    if depth > MAX_DEPTH:
        raise EntryError(f"{key}: items nest deeper than {MAX_DEPTH} levels; the entry is not a dump entry")
    if value is None:
        out.append(_null_row(name, key, state))
        return
    if not value:
        return
    if isinstance(value, list):
        leaf_ok = depth < MAX_DEPTH
        for i, sub in enumerate(value):
            sub_name = name if grads else f"{name}.{i}"
            if (leaf_ok and type(sub) is dict and sub and isinstance(sub.get("type"), str)
                    and sub.get("class_type") != P2P_OP):          # a plain item: its row at once
                out.append(_leaf(sub, sub_name, key, state))
            else:
                _walk(sub, sub_name, key, state, out, depth + 1, grads)
    elif isinstance(value, dict):
        if value.get("class_type") == P2P_OP:
            tensor = value.get("tensor")
            row = _leaf(tensor, name, key, state) if isinstance(tensor, dict) else _null_row(name, key, state)
            out.append(row)
        elif isinstance(value.get("type"), str):
            out.append(_leaf(value, name, key, state))
        else:
            for sub_key, sub in value.items():
                _walk(sub, f"{name}.{sub_key}", key, state, out, depth + 1, grads)


def entry_rows(key: str, entry: Any) -> list:
    """The rows of one entry in msprobe's order: inputs, parameters, outputs, parameter gradients.

    Raises:
        EntryError: an entry that is not an object, or nests too deeply.
    """
    if not isinstance(entry, dict):
        raise EntryError(f"{key}: the entry must be an object, got {type(entry).__name__}")
    parts = key.split(".")
    if parts[-1] == PARAMS_GRAD or (len(parts) >= 2 and parts[-2] == PARAMS_GRAD):
        out: list = []
        _walk(entry, key, key, PARAMS_GRAD, out, 0, True)
        return out
    return _body_rows(key, entry)


def _body_rows(key: str, entry: dict) -> list:
    """The rows of an entry that is not parameter gradients."""
    out: list = []
    for body, suffix, state in BODY_KEYS:
        if body in entry:
            _walk(entry[body], key + suffix, key, state, out, 0, False)
    if "parameters" in entry and any(row.state == PARAMETERS for row in out):     # only that body gives them
        out.sort(key=lambda row: STATE_ORDER[row.state])      # stable: parameters before outputs
    return out


def split_key(key: str) -> tuple:
    """(name without the call index, ``index.direction`` or ``direction.index``, direction) of an entry key,
    or ('', '', '') when it names neither a direction nor parameter gradients."""
    parts = key.split(".")
    last = parts[-1]
    second = parts[-2] if len(parts) >= 2 else ""
    if PARAMS_GRAD in (last, second):
        return ".".join(parts[:-1]) if len(parts) > 1 else "", PARAMS_GRAD, PARAMS_GRAD
    for direction in (fmt.FORWARD, fmt.BACKWARD):
        if direction in (last, second):
            return (".".join(parts[:-2]) if len(parts) > 2 else "", f"{second}.{last}", direction)
    return "", "", ""


def dump_rows(data: dict, problems: list) -> list:
    """Every row of a dump's ``data``, in key order, with the names matched in exact mode (a backward entry's
    call index replaced by the position of that entry among the API's backward entries). An entry that
    cannot be listed is left out and its reason appended to ``problems``."""
    rows: list = []
    extend = rows.extend
    backward_seen: dict = {}
    for key, entry in data.items():
        head, _, direction = key.rpartition(".")
        stem, _, index = head.rpartition(".")
        if ((direction == fmt.FORWARD or direction == fmt.BACKWARD) and stem and index.isdigit()
                and type(entry) is dict):
            # the common key, ``{stem}.{index}.{direction}``: what split_key gives, without its general walk
            try:
                listed = _body_rows(key, entry)
            except EntryError as exc:
                problems.append(str(exc))
                continue
            if direction == fmt.BACKWARD:
                order = backward_seen.get(stem, 0)
                backward_seen[stem] = order + 1
                if str(order) != index:
                    _rename(listed, key, f"{stem}.{order}.{direction}")
            extend(listed)
            continue
        try:
            listed = entry_rows(key, entry)
        except EntryError as exc:
            problems.append(str(exc))
            continue
        stem, call_dir, direction = split_key(key)
        if not stem:
            continue
        if direction == fmt.BACKWARD:
            order = backward_seen.get(stem, 0)
            backward_seen[stem] = order + 1
            head, _, tail = call_dir.rpartition(".")
            if head.isdigit():
                head = str(order)
            if tail.isdigit():
                tail = str(order)
            renamed = f"{stem}.{head}.{tail}"
            if renamed != key:
                _rename(listed, key, renamed)
        extend(listed)
    return rows


def _rename(listed: list, key: str, renamed: str) -> None:
    """The names matched in exact mode of an entry's rows whose key is matched as ``renamed``."""
    size = len(key)
    for row in listed:
        name = row.name
        if name.startswith(key):
            row.cmp = renamed + name[size:]
