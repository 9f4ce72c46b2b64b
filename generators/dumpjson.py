"""A dump's JSON read as untrusted input: the text (size limit, duplicate keys, NaN/Infinity literals) and the
entries of dump.json checked shape-wise, every wrong type, bad shape or unknown dtype named by its key.

The text: :func:`load_file` parses a whole file. :func:`scan_object` is the lean way through a large dump.json: it
checks the text as :func:`loads` would, but keeps only where each member of one object lies, so that a member is
parsed (:func:`loads` of its span, :func:`loads_member`) only when it is needed.

The entries: each check returns ``None`` when the value is fine, else one sentence naming the key path and what
was expected. The validators never raise, whatever JSON they are given. The non-tensor arguments are decoded here
too (:func:`decode_value`, after :func:`iter_tensor_items` has told the caller which tensors to make).
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, Callable

from dumpers import format as fmt

# --- the text ----------------------------------------------------------------------------------------
DEFAULT_MAX_JSON_BYTES = 2 * 1024 ** 3   # a dump.json above 2 GiB is refused as a whole

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class JSONFileError(ValueError):
    """A JSON file that cannot be read as a whole; the message names the file and what to do."""


class DuplicateKeyDict(dict):
    """A JSON object in which at least one key occurred more than once.

    The dict holds the last value for each key, as :func:`json.loads` does; ``duplicates`` names the keys
    that were repeated, and ``pairs`` keeps every (key, value) pair in file order.
    """

    duplicates: list
    pairs: list


def _object_pairs(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set = set()
    dups: list = []
    for key, _ in pairs:
        if key in seen and key not in dups:
            dups.append(key)
        seen.add(key)
    out = DuplicateKeyDict(obj)
    out.duplicates = dups
    out.pairs = list(pairs)
    return out


def _parse_constant(name: str) -> float:
    return _CONSTANTS[name]


def loads(text: str, *, what: str = "JSON text") -> Any:
    """Parse JSON text; duplicated keys are kept visible as :class:`DuplicateKeyDict`.

    Raises:
        JSONFileError: the text is not valid JSON (message says where), or nests too deeply.
    """
    try:
        return json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise JSONFileError(
            f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "the file is truncated or damaged: re-copy it, or rebuild it with 'pytest-msprobe repair-dump'"
        ) from None
    except RecursionError:
        raise JSONFileError(f"{what} nests JSON arrays/objects too deeply to be a dump file") from None


def load_file(path: str, *, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> Any:
    """Read and parse one JSON file, refusing files above ``max_bytes`` before reading them.

    Raises:
        JSONFileError: unreadable, too large, not UTF-8 or not valid JSON; the message names ``path``.
    """
    return loads(read_text(path, max_bytes=max_bytes), what=path)


def read_text(path: str, *, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> str:
    """The text of one JSON file, refusing files above ``max_bytes`` before reading them.

    Raises:
        JSONFileError: unreadable, too large, grown while read or not UTF-8; the message names ``path``.
    """
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise JSONFileError(f"cannot read {path}: {exc.strerror}") from None
    if size > max_bytes:
        raise JSONFileError(
            f"{path} is {size} bytes, above the limit of {max_bytes} bytes for a dump file; "
            "raise the limit (max_json_bytes) if the file is genuine")
    try:
        with open(path, "rb") as fh:
            # ask only for what the file holds (+1 to notice growth): a read(max_bytes) would allocate the limit
            raw = fh.read(min(size, max_bytes) + 1)
    except OSError as exc:
        raise JSONFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > size:
        raise JSONFileError(f"{path} grew while being read (is a training process still writing it?); "
                            "run again once the dump is finished")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONFileError(f"{path} is not UTF-8 text (bad byte at offset {exc.start}); "
                            "it is not a dump.json") from None
    del raw
    return text


_WS = re.compile(r"[ \t\n\r]*")            # JSON's whitespace, as json's own scanner skips it
_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_AFTER = re.compile(r"[ \t\n\r]*(?:(\})|,[ \t\n\r]*)")   # after a member: the object's end, or the next one
# after a member, the next one's plain key (no escape: its text is its value) up to its value
_NEXT = re.compile(r'[ \t\n\r]*,[ \t\n\r]*"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
_PLAIN = json.JSONDecoder()                   # no hook: checks and measures a value, which is then dropped
_HEADROOM = 100     # frames above the scan: a value it accepts also parses in the deeper stack of a test


def loads_member(text: str, start: int, end: int, *, what: str = "JSON text") -> Any:
    """:func:`loads` of ``text[start:end]``, a value that :func:`scan_object` has checked.

    json's C scanner parses it without the hook; that is the hook's result too when no key repeats, which holds
    when every ``:`` of the text is a member of some object (a repeated key, or a ``:`` inside a string, makes
    the objects hold fewer members than the text has colons, and :func:`loads` parses it again)."""
    part = text[start:end]
    try:
        value = _PLAIN.decode(part)
    except (ValueError, RecursionError):
        return loads(part, what=what)
    return value if _members_of(value) == part.count(":") else loads(part, what=what)


def _members_of(value: Any) -> int:
    count, todo = 0, [value]
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is dict:
            count += len(item)
            todo.extend(item.values())
        elif kind is list:
            todo.extend(item)
    return count


def scan_object(text: str, pos: int, *, inner: str | None = None) -> tuple | None:
    """Where the members of the JSON object at ``text[pos]`` lie, checked as :func:`loads` would check them.

    Returns ``(members, end, inner_members)``: ``members`` is ``[(key, start, end)]`` in order, repeated keys
    included (``text[start:end]`` is the value), ``end`` the index after the object. The object value of the
    member named ``inner`` is scanned the same way (its members, the last such member's, are
    ``inner_members``; else that is None). Every other value is parsed once by json's C scanner (the check)
    and dropped, so memory stays low.

    None when the text is not valid JSON there, whatever the reason: the caller then parses it with
    :func:`loads`, whose error says what is wrong.
    """
    with paused_gc():             # JSON values hold no cycles: collecting while millions are made is waste
        try:
            return _at_depth(_HEADROOM, lambda: _members(text, pos, inner))
        except (ValueError, RecursionError, IndexError, StopIteration):     # JSONDecodeError is a ValueError
            return None


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No automatic garbage collection inside (restored after): for code that makes many long-lived objects
    and no reference cycles, where each automatic pass would walk all of them again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _at_depth(frames: int, fn: Callable[[], Any]) -> Any:
    return fn() if frames <= 0 else _at_depth(frames - 1, fn)


def _members(text: str, pos: int, inner: str | None) -> tuple | None:
    key_at, value_at, colon, after, following = (json.decoder.scanstring, _PLAIN.scan_once, _COLON.match,
                                                 _AFTER.match, _NEXT.match)
    if text[pos] != "{":
        return None
    out: list = []
    append = out.append
    nested = None
    i = _WS.match(text, pos + 1).end()
    if text[i] == "}":
        return out, i + 1, nested
    if text[i] != '"':
        return None
    key, i = key_at(text, i + 1, True)
    sep = colon(text, i)
    while True:
        if sep is None:
            return None
        start = sep.end()
        if key == inner and text[start] == "{":
            found = _members(text, start, None)
            if found is None:
                return None
            nested, end = found[0], found[1]
        else:
            end = value_at(text, start)[1]      # StopIteration where no value starts
        append((key, start, end))
        sep = following(text, end)              # the common case: a next member with a plain key
        if sep is not None:
            key = sep.group(1)
            continue
        sep = after(text, end)
        if sep is None:
            return None
        if sep.group(1):
            return out, sep.end(), nested
        i = sep.end()
        if text[i] != '"':
            return None
        key, i = key_at(text, i + 1, True)
        sep = colon(text, i)


def skip_space(text: str, pos: int) -> int:
    """The index of the first character at or after ``pos`` that is not JSON whitespace."""
    return _WS.match(text, pos).end()


def at_end(text: str, pos: int) -> bool:
    """Whether only whitespace follows ``pos`` (json refuses anything else after the document)."""
    return _WS.match(text, pos).end() == len(text)


# --- the entries -------------------------------------------------------------------------------------
MAX_DEPTH = 16                 # nesting of args deeper than this is not a real call
MAX_NDIM = 64                  # torch's own limit on tensor dimensions
MAX_ELEMENTS = 2 ** 48         # more elements than any machine holds: an absurd shape
MAX_DATA_NAME = 255            # longest file name msprobe writes

STAT_NUMBER_KEYS = ("Max", "Min", "Mean", "Norm", "Max_except_inf_nan", "Min_except_inf_nan")

# numpy scalar type names msprobe writes as {"type": name, "value": v}
NUMPY_SCALAR_TYPES = frozenset({
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "float128", "complex64", "complex128", "complex256",
    "bool_", "string_", "bytes_", "unicode_", "str_",
})


_NUMBER_TYPES = (int, float, bool)


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    """A JSON number (bool counts, as in msprobe's statistics)."""
    return isinstance(x, (int, float))


def is_tensor_item(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("type") in fmt.TENSOR_TYPES


def element_count(shape: list) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def check_data_name(name: Any, where: str) -> str | None:
    """A data_name must be a bare file name: no directory part, no '..', not absolute."""
    if not isinstance(name, str) or not name:
        return f"{where}.data_name must be a non-empty file name string, got {name!r}"
    if len(name) > MAX_DATA_NAME:
        return f"{where}.data_name is {len(name)} characters long, above the limit of {MAX_DATA_NAME}"
    if "/" in name or "\\" in name or "\x00" in name or name in (".", "..") or ".." in name.split("."):
        return (f"{where}.data_name {name!r} is refused: it must be a bare file name inside the dump's "
                "dump_tensor_data directory (no '/', '\\', '..' or absolute path)")
    return None


def check_tensor_item(item: dict, where: str) -> str | None:
    """Validate one tensor item (dtype, shape, statistics, data_name, requires_grad)."""
    dtype = item.get("dtype")
    if fmt.canonical_dtype(dtype) is None:
        return (f"{where}.dtype {dtype!r} is not a known dtype; expected one of "
                f"{', '.join(sorted(fmt.TORCH_DTYPES))} or a MindSpore name such as 'Float32'")
    shape = item.get("shape")
    if type(shape) is not list or not all(type(s) is int and s >= 0 for s in shape):  # JSON types are exact
        return f"{where}.shape must be a list of non-negative integers, got {_short(shape)}"
    if len(shape) > MAX_NDIM:
        return f"{where}.shape has {len(shape)} dimensions, more than the {MAX_NDIM} a tensor can have"
    if element_count(shape) > MAX_ELEMENTS:
        return f"{where}.shape {shape} is absurd: {element_count(shape)} elements"
    for key in STAT_NUMBER_KEYS:
        value = item.get(key)
        if value is not None and type(value) not in _NUMBER_TYPES:
            return f"{where}.{key} must be a number or null, got {_short(value)}"
    if "requires_grad" in item and not isinstance(item["requires_grad"], bool):
        return f"{where}.requires_grad must be true or false, got {_short(item['requires_grad'])}"
    if fmt.DATA_NAME in item:
        return check_data_name(item[fmt.DATA_NAME], where)
    if "datapath" in item:
        if not isinstance(item["datapath"], str):
            return f"{where}.datapath must be a string, got {_short(item['datapath'])}"
        return check_data_name(tensor_file_name(item), f"{where}.datapath")
    return None


def tensor_file_name(item: dict) -> str | None:
    """The file holding a tensor item: ``data_name``, or the file-name part of an older dump's ``datapath``
    (an absolute path on the training machine; only its last component is used, inside the tensor directory)."""
    name = item.get(fmt.DATA_NAME)
    if name is not None:
        return name
    path = item.get("datapath")
    if isinstance(path, str):
        return path.replace("\\", "/").rsplit("/", 1)[-1]
    return None


def _check_typed_value(obj: dict, where: str) -> str | None:
    kind, value = obj.get("type"), obj.get("value")
    if not isinstance(kind, str):
        return f"{where}.type must be a string, got {_short(kind)}"
    if kind == "int" and not is_int(value):
        return f"{where}.value must be an integer (type 'int'), got {_short(value)}"
    if kind == "float" and not is_number(value):
        return f"{where}.value must be a number (type 'float'), got {_short(value)}"
    if kind == "bool" and not isinstance(value, bool):
        return f"{where}.value must be true or false (type 'bool'), got {_short(value)}"
    if kind == "str" and not isinstance(value, str):
        return f"{where}.value must be a string (type 'str'), got {_short(value)}"
    if kind == "slice" and not (isinstance(value, list) and len(value) == 3
                                and all(v is None or is_int(v) for v in value)):
        return f"{where}.value must be [start, stop, step] of integers or null (type 'slice'), got {_short(value)}"
    if kind == "torch.Size" and not (isinstance(value, list) and all(is_int(v) and v >= 0 for v in value)):
        return f"{where}.value must be a list of non-negative integers (type 'torch.Size'), got {_short(value)}"
    if kind == "torch.dtype" and (not isinstance(value, str) or value not in fmt.TORCH_DTYPES):
        return f"{where}.value {_short(value)} is not a known torch dtype (type 'torch.dtype')"
    if kind in ("torch.device", "mindspore.dtype") and not isinstance(value, str):
        return f"{where}.value must be a string (type {kind!r}), got {_short(value)}"
    if kind in NUMPY_SCALAR_TYPES and not isinstance(value, (int, float, str)):
        return f"{where}.value must be a scalar (numpy type {kind!r}), got {_short(value)}"
    return None


def check_value(obj: Any, where: str, depth: int = 0) -> str | None:
    """Validate an argument structure (tensor items, typed values, lists, dicts, null) recursively."""
    if depth > MAX_DEPTH:
        return f"{where} nests deeper than {MAX_DEPTH} levels"
    if obj is None:
        return None
    if isinstance(obj, list):
        for i, sub in enumerate(obj):
            problem = check_value(sub, f"{where}[{i}]", depth + 1)
            if problem:
                return problem
        return None
    if not isinstance(obj, dict):
        return f"{where} must be an object, a list or null, got {_short(obj)}"
    dup = duplicate_problem(obj, where)
    if dup:
        return dup
    if is_tensor_item(obj):
        return check_tensor_item(obj, where)
    if "type" in obj:
        return _check_typed_value(obj, where)
    if not obj:
        return (f"{where} is an empty object: the dump could not record this argument "
                "(msprobe writes a positional torch.dtype or torch.device this way)")
    for key, sub in obj.items():
        problem = check_value(sub, f"{where}.{key}", depth + 1)
        if problem:
            return problem
    return None


def duplicate_problem(obj: Any, where: str) -> str | None:
    dups = getattr(obj, "duplicates", None)
    if dups:
        return f"{where} has the key {dups[0]!r} more than once; remove the duplicate from the dump"
    return None


def check_forward(entry: Any, key: str) -> str | None:
    """Validate a forward entry: input_args list, input_kwargs object, output list."""
    if not isinstance(entry, dict):
        return f"{key} must be an object with input_args/input_kwargs/output, got {_short(entry)}"
    dup = duplicate_problem(entry, key)
    if dup:
        return dup
    if fmt.INPUT_ARGS not in entry and fmt.INPUT_KWARGS not in entry:
        return (f"{key} has no input_args/input_kwargs (dumped with data_mode 'output'?): "
                "the call cannot be replayed without its inputs")
    args = entry.get(fmt.INPUT_ARGS, [])
    if not isinstance(args, list):
        return f"{key}.input_args must be a list, got {_short(args)}"
    kwargs = entry.get(fmt.INPUT_KWARGS, {})
    if not isinstance(kwargs, dict):
        return f"{key}.input_kwargs must be an object, got {_short(kwargs)}"
    output = entry.get(fmt.OUTPUT, [])
    if not isinstance(output, list):
        return f"{key}.output must be a list, got {_short(output)}"
    dup = duplicate_problem(kwargs, f"{key}.input_kwargs")
    if dup:
        return dup
    for name, value in kwargs.items():
        problem = check_value(value, f"{key}.input_kwargs.{name}")
        if problem:
            return problem
    return check_value(args, f"{key}.input_args") or check_value(output, f"{key}.output")


def check_backward(entry: Any, key: str) -> str | None:
    """Validate a backward entry: input list (grads of the outputs), output list."""
    if not isinstance(entry, dict):
        return f"{key} must be an object with input/output, got {_short(entry)}"
    dup = duplicate_problem(entry, key)
    if dup:
        return dup
    for part in fmt.BACKWARD_KEYS:
        value = entry.get(part, [])
        if not isinstance(value, list):
            return f"{key}.{part} must be a list, got {_short(value)}"
        problem = check_value(value, f"{key}.{part}")
        if problem:
            return problem
    grads = entry.get(fmt.INPUT, [])
    if grads and grads[0] is not None and not is_tensor_item(grads[0]):
        return f"{key}.input[0] must be a tensor item (the gradient of output 0), got {_short(grads[0])}"
    return None


def iter_tensor_items(obj: Any, path: tuple = (), depth: int = 0) -> Iterator[tuple]:
    """Yield (path, item) for every tensor item in an argument structure, in order."""
    if depth > MAX_DEPTH:
        return
    if isinstance(obj, list):
        for i, sub in enumerate(obj):
            yield from iter_tensor_items(sub, (*path, i), depth + 1)
    elif is_tensor_item(obj):
        yield path, obj
    elif isinstance(obj, dict) and "type" not in obj:
        for key, sub in obj.items():
            yield from iter_tensor_items(sub, (*path, key), depth + 1)


def finite(x: Any) -> bool:
    return is_number(x) and math.isfinite(x)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------------
# decoding the non-tensor argument encodings back into Python objects (precision spec 7.5): ``int``/``float``/
# ``bool``/``str`` -> the value; ``slice`` -> slice; ``ellipsis`` -> ``...``; numpy scalar type names -> that
# numpy scalar; ``torch.Size`` -> ``torch.Size``; ``torch.dtype`` -> the dtype; ``torch.device`` -> kept as its
# dict (the checker drops a kwarg named ``device``); ``mindspore.dtype`` -> :class:`MindSporeDtype`; any other
# type -> its value as is.
_NUMPY_ALIASES = {"unicode_": "str_", "string_": "bytes_", "float128": "longdouble", "complex256": "clongdouble"}


class MindSporeDtype(str):
    """A recorded ``mindspore.dtype`` argument (``"Float16"``); the MindSpore replay turns it into the dtype."""

    __slots__ = ()


class ValueDecodeError(ValueError):
    """A non-tensor argument whose recorded value does not fit its type (e.g. int8 holding 1000)."""


def decode_value(obj: Any, tensors: Mapping[tuple, Any], path: tuple = ()) -> Any:
    """Decode one argument structure; each tensor item becomes ``tensors[path]``, the tensor the caller made for
    it (:func:`iter_tensor_items` lists them)."""
    import torch

    if obj is None:
        return None
    if isinstance(obj, list):
        return [decode_value(sub, tensors, (*path, i)) for i, sub in enumerate(obj)]
    if not isinstance(obj, dict):
        return obj
    if is_tensor_item(obj):
        if path not in tensors:
            raise ValueDecodeError(f"argument{_where(path)} is nested deeper than {MAX_DEPTH} levels")
        return tensors[path]
    if "type" not in obj:
        return {k: decode_value(v, tensors, (*path, k)) for k, v in obj.items()}
    kind, value = obj.get("type"), obj.get("value")
    try:
        return _decode_typed(torch, kind, value)
    except (ValueError, TypeError, OverflowError, RuntimeError, KeyError) as exc:
        raise ValueDecodeError(f"argument{_where(path)} {{'type': {kind!r}, 'value': {value!r}}} cannot be decoded: "
                               f"{exc}") from None


def _where(path: tuple) -> str:
    return "".join(f"[{p}]" for p in path)


def _decode_typed(torch: Any, kind: Any, value: Any) -> Any:
    if kind == "slice":
        return slice(*value)
    if kind == "ellipsis":
        return ...
    if kind == "torch.Size":
        if any(not 0 <= v < 2 ** 63 for v in value):
            raise OverflowError("a size must lie in [0, 2**63)")
        return torch.Size(value)
    if kind == "torch.dtype":
        return getattr(torch, fmt.TORCH_DTYPES[value])
    if kind == "mindspore.dtype":
        if fmt.canonical_dtype(value) is None:
            raise KeyError(f"unknown MindSpore dtype {value!r}")
        return MindSporeDtype(value)
    if kind == "torch.device":
        return {"type": kind, "value": value}
    if kind in NUMPY_SCALAR_TYPES:
        import numpy as np

        scalar_type = getattr(np, _NUMPY_ALIASES.get(kind, kind), None)
        if scalar_type is None:
            raise KeyError(f"numpy has no scalar type {kind!r} on this machine")
        if np.issubdtype(scalar_type, np.integer):
            limits = np.iinfo(scalar_type)
            if not isinstance(value, int) or not limits.min <= value <= limits.max:
                raise OverflowError(f"{value!r} is not an integer in [{limits.min}, {limits.max}]")
        return scalar_type(value)
    return value
