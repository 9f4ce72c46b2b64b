"""The dump format: entry names, data file names, dump.json layout and JSON style.

This module is the single definition of msprobe's dump layout. The PyTorch and MindSpore dumpers
write with it and the reader in :mod:`generators` parses with it. It imports only the standard library
and :mod:`dumpers.atomic` (its files are written through that one atomic write).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Optional

from dumpers import atomic

# --- directory layout ------------------------------------------------------------------------------
DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_DIR = "dump_tensor_data"
JOURNAL = "dump.journal"          # our crash-safe append-only log beside dump.json (see repair)

DIR_MODE = 0o750
FILE_MODE = 0o640

TOP_LEVEL_KEYS = ("task", "level", "framework", "dump_data_dir", "data")

# --- names -----------------------------------------------------------------------------------------
FORWARD = "forward"
BACKWARD = "backward"
DIRECTIONS = (FORWARD, BACKWARD)
PARAMETERS_GRAD = "parameters_grad"

TORCH_API_PREFIXES = ("Functional", "Tensor", "Torch", "NPU", "Aten", "VF", "Distributed")
MINDSPORE_API_PREFIXES = ("Functional", "Tensor", "Primitive", "Mint", "MintFunctional", "Jit", "Distributed")
MODULE_PREFIXES = ("Module", "Cell")
COMMUNICATION_PREFIXES = ("Distributed",)

# data_name categories
CAT_INPUT = "input"
CAT_KWARGS = "kwargs"
CAT_OUTPUT = "output"


@dataclass(frozen=True)
class EntryName:
    """A parsed dump.json entry key.

    kind is "api", "module" (Module/Cell), "parameters_grad" or "jit".
    For APIs, ``api`` may contain dots (``linalg.vector_norm``, ``add.Tensor``).
    """

    key: str
    kind: str
    prefix: str
    api: str            # API name, or "{attr_path}.{ClassName}" for modules
    index: Optional[int]
    direction: Optional[str]

    @property
    def api_call(self) -> str:
        """``{Prefix}.{api}.{index}``: the name shared by a call's forward and backward entries."""
        if self.kind in ("api", "jit"):
            return f"{self.prefix}.{self.api}" if self.index is None else f"{self.prefix}.{self.api}.{self.index}"
        return self.key.rsplit(".", 2)[0] if self.kind == "module" else self.key


class NameError_(ValueError):
    """An entry key that does not follow the naming grammar."""


_INT = re.compile(r"^(0|[1-9][0-9]*)$")


def parse_entry_key(key: str) -> EntryName:
    """Parse a dump.json key, splitting from the right (API names may contain dots).

    Raises:
        ValueError: the key does not follow any form of the grammar; the message says which forms exist.
    """
    if not isinstance(key, str) or not key:
        raise NameError_(f"entry key must be a non-empty string, got {key!r}")
    parts = key.split(".")
    prefix = parts[0]
    if prefix in MODULE_PREFIXES:
        # Module.{path}.{Class}.{direction}.{idx} or Module.{path}.{Class}.parameters_grad[.{idx}]
        if len(parts) >= 4 and parts[-1] == PARAMETERS_GRAD:
            return EntryName(key, "parameters_grad", prefix, ".".join(parts[1:-1]), None, None)
        if len(parts) >= 5 and parts[-2] == PARAMETERS_GRAD and _INT.match(parts[-1]):
            return EntryName(key, "parameters_grad", prefix, ".".join(parts[1:-2]), int(parts[-1]), None)
        if len(parts) >= 5 and parts[-2] in DIRECTIONS and _INT.match(parts[-1]):
            return EntryName(key, "module", prefix, ".".join(parts[1:-2]), int(parts[-1]), parts[-2])
        raise NameError_(
            f"module entry {key!r} must look like '{prefix}.<path>.<Class>.<forward|backward>.<index>'")
    if prefix == "Jit" and len(parts) == 3 and parts[-1] in DIRECTIONS:
        return EntryName(key, "jit", prefix, parts[1], None, parts[-1])
    if len(parts) < 4 or parts[-1] not in DIRECTIONS or not _INT.match(parts[-2]):
        raise NameError_(
            f"API entry {key!r} must look like '<Prefix>.<api>.<index>.<forward|backward>'")
    kind = "jit" if prefix == "Jit" else "api"
    return EntryName(key, kind, prefix, ".".join(parts[1:-2]), int(parts[-2]), parts[-1])


def api_call_name(prefix: str, api: str, index: int) -> str:
    return f"{prefix}.{api}.{index}"


def api_entry_key(prefix: str, api: str, index: int, direction: str) -> str:
    return f"{prefix}.{api}.{index}.{direction}"


def module_entry_key(prefix: str, path: str, cls: str, direction: str, index: int) -> str:
    return f"{prefix}.{path}.{cls}.{direction}.{index}"


def data_name(entry_key: str, category: str, path: tuple, ext: str) -> str:
    """File name of a dumped tensor: ``{entry_key}.{category}.{path}{ext}`` (0-based positions)."""
    return ".".join([entry_key, category, *(str(p) for p in path)]) + ext


def output_row_name(api_call: str, direction: str, i: int) -> str:
    """Name of one compared output in the details CSV: ``{api_call}.{direction}.output.{i}``."""
    return f"{api_call}.{direction}.output.{i}"


def step_rank_dir(dump_path: str, step: int, rank: Optional[int]) -> str:
    return os.path.join(dump_path, f"step{step}", "rank" if rank is None else f"rank{rank}")


# --- tensor items ----------------------------------------------------------------------------------
TORCH_TENSOR_TYPE = "torch.Tensor"
MINDSPORE_TENSOR_TYPE = "mindspore.Tensor"
TENSOR_TYPES = (TORCH_TENSOR_TYPE, MINDSPORE_TENSOR_TYPE)
STAT_KEYS = ("Max", "Min", "Mean", "Norm")

# dtype strings as written by each framework -> canonical torch dtype name (without "torch.")
TORCH_DTYPES = {
    "torch.float32": "float32", "torch.float": "float32", "torch.float16": "float16", "torch.half": "float16",
    "torch.bfloat16": "bfloat16", "torch.float64": "float64", "torch.double": "float64",
    "torch.int64": "int64", "torch.long": "int64", "torch.int32": "int32", "torch.int": "int32",
    "torch.int16": "int16", "torch.short": "int16", "torch.int8": "int8", "torch.uint8": "uint8",
    "torch.bool": "bool", "torch.complex64": "complex64", "torch.complex128": "complex128",
    "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2",
}
MINDSPORE_DTYPES = {
    "Float32": "float32", "Float16": "float16", "BFloat16": "bfloat16", "Float64": "float64",
    "Int64": "int64", "Int32": "int32", "Int16": "int16", "Int8": "int8", "UInt8": "uint8",
    "Bool": "bool", "Complex64": "complex64", "Complex128": "complex128",
}


def canonical_dtype(dtype_str: Any) -> Optional[str]:
    """Canonical dtype name for a dumped dtype string of either framework, or None if unknown."""
    if not isinstance(dtype_str, str):
        return None
    return TORCH_DTYPES.get(dtype_str) or MINDSPORE_DTYPES.get(dtype_str)


# --- JSON style ------------------------------------------------------------------------------------
def dumps_json(obj: Any) -> str:
    """msprobe's JSON style: indent=1, ASCII-escaped, NaN/Infinity literals allowed."""
    return json.dumps(obj, indent=1, ensure_ascii=True, allow_nan=True)


_ESCAPE_ASCII = json.encoder.encode_basestring_ascii
_FLOAT_REPR = float.__repr__
_INT_REPR = int.__repr__


def _float_text(x: float) -> str:
    if x != x:
        return "NaN"
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    return _FLOAT_REPR(x)


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, float):
        return _float_text(key)
    if isinstance(key, int):
        return _INT_REPR(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _float_fast(x: float) -> str:
    return _FLOAT_REPR(x) if x - x == 0.0 else _float_text(x)


_SCALAR_TEXT = {str: _ESCAPE_ASCII, int: _INT_REPR, float: _float_fast, type(None): lambda _: "null",
                bool: lambda b: "true" if b else "false"}


_INDENTS = tuple("\n" + " " * n for n in range(72))
_MAX_FAST_LEVEL = len(_INDENTS) - 3


def _int_list(values: list, level: int) -> Any:
    """Text of a list of plain ints (a tensor shape), or None."""
    for v in values:
        if type(v) is not int:
            return None
    inner = _INDENTS[level + 1] if level <= _MAX_FAST_LEVEL else "\n" + " " * (level + 1)
    return "[" + inner + ("," + inner).join(map(_INT_REPR, values)) + inner[:-1] + "]"


def _number_text(x: Any) -> str:
    """Text of a statistic (float, int, bool or None); KeyError for anything else."""
    if type(x) is float and x - x == 0.0:
        return _FLOAT_REPR(x)
    return _SCALAR_TEXT[type(x)](x)


_TENSOR_ITEM_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad")
_VALUE_ITEM_KEYS = ("type", "value")


_ESCAPED: dict = {}                    # type and dtype names -> their JSON text (a handful of strings)


def _escaped(name: str) -> str:
    text = _ESCAPE_ASCII(name)
    if len(_ESCAPED) < 256:
        _ESCAPED[name] = text
    return text


_shape_texts: dict = {}                # (level, *shape) -> text, for the few shapes a model has


def _shape_text(shape: list, level: int) -> Any:
    if not shape:
        return "[]"
    for v in shape:                    # True == 1 as a dict key: only plain ints share the cache
        if type(v) is not int:
            return None
    key = (level, *shape)
    text = _shape_texts.get(key)
    if text is None:
        text = _int_list(shape, level)
        if text is not None:
            if len(_shape_texts) > 4096:
                _shape_texts.clear()
            _shape_texts[key] = text
    return text


_item_parts: dict = {}                 # (kind, dtype, shape, requires_grad, level) -> the item's fixed texts


def _parts(kind: str, dtype: str, shape: Any, requires_grad: bool, level: int) -> Any:
    """The fixed texts of a tensor item around its four statistics: ``(head, after Max, after Min,
    after Mean, tail)``, or None when the shape is not a list of ints. A model has few distinct
    (dtype, shape) pairs, so these are made once each."""
    for v in shape:                    # True == 1 as a dict key: only plain ints share the cache
        if type(v) is not int:
            return None
    key = (kind, dtype, tuple(shape), requires_grad, level)
    parts = _item_parts.get(key)
    if parts is not None:
        return parts
    shape_text = _shape_text(list(shape), level + 1)
    if shape_text is None:
        return None
    i = _INDENTS[level + 1]
    parts = (f'{{{i}"type": {_ESCAPED.get(kind) or _escaped(kind)},{i}"dtype": '
             f'{_ESCAPED.get(dtype) or _escaped(dtype)},{i}"shape": {shape_text},{i}"Max": ',
             f',{i}"Min": ', f',{i}"Mean": ', f',{i}"Norm": ',
             f',{i}"requires_grad": {"true" if requires_grad else "false"}{_INDENTS[level]}}}')
    if len(_item_parts) > 4096:
        _item_parts.clear()
    _item_parts[key] = parts
    return parts


def tensor_text(dtype: str, shape: Any, mx: Any, mn: Any, mean: Any, norm: Any, requires_grad: bool,
                level: int, kind: str = "torch.Tensor") -> Any:
    """Text of a tensor item with the usual eight keys and nothing else, at ``level``; None when a value
    is not what such an item holds (the general encoder then decides)."""
    if level > _MAX_FAST_LEVEL or type(requires_grad) is not bool:
        return None
    try:
        mx = _FLOAT_REPR(mx) if type(mx) is float and mx - mx == 0.0 else _number_text(mx)
        mn = _FLOAT_REPR(mn) if type(mn) is float and mn - mn == 0.0 else _number_text(mn)
        mean = _FLOAT_REPR(mean) if type(mean) is float and mean - mean == 0.0 else _number_text(mean)
        norm = _FLOAT_REPR(norm) if type(norm) is float and norm - norm == 0.0 else _number_text(norm)
        parts = _parts(kind, dtype, shape, requires_grad, level)
    except (KeyError, TypeError):
        return None
    if parts is None:
        return None
    head, after_max, after_min, after_mean, tail = parts
    return f"{head}{mx}{after_max}{mn}{after_min}{mean}{after_mean}{norm}{tail}"


def finite_tensor_text(dtype: str, shape: tuple, mx: float, mn: float, mean: float, norm: float,
                       requires_grad: bool, level: int) -> Any:
    """:func:`tensor_text` of a ``torch.Tensor`` item whose four statistics are finite Python floats
    (what the one-pass statistics give) and whose shape is a ``torch.Size`` (plain ints), without the
    checks: one look-up and one format."""
    parts = _item_parts.get(("torch.Tensor", dtype, shape, requires_grad, level))
    if parts is None:
        if level > _MAX_FAST_LEVEL:
            return None
        parts = _parts("torch.Tensor", dtype, shape, requires_grad, level)
        if parts is None:
            return None
    head, after_max, after_min, after_mean, tail = parts
    return f"{head}{mx!r}{after_max}{mn!r}{after_min}{mean!r}{after_mean}{norm!r}{tail}"


def _tensor_item_text(obj: dict, level: int) -> Any:
    """Text of a tensor item whose first keys are the usual eight (one format call), or None.

    Keys after the eighth (data_name, md5, Max_except_inf_nan...) go through the general encoder.
    """
    keys = tuple(obj)
    if keys[:8] != _TENSOR_ITEM_KEYS or level > _MAX_FAST_LEVEL:
        return None
    t, dtype, shape, mx, mn, mean, norm, grad = obj.values() if len(keys) == 8 else [obj[k] for k in keys[:8]]
    if type(t) is not str or type(dtype) is not str or type(shape) is not list:
        return None
    text = tensor_text(dtype, shape, mx, mn, mean, norm, grad, level, t)
    if text is None or len(keys) == 8:
        return text
    i = _INDENTS[level + 1]
    out = [text[: -len(_INDENTS[level]) - 1]]
    for key in keys[8:]:
        out.append(f",{i}{_ESCAPE_ASCII(key if type(key) is str else _key_text(key))}: ")
        _encode_into(obj[key], level + 1, out)
    out.append(_INDENTS[level] + "}")
    return "".join(out)


def _dict_text(obj: dict, level: int) -> Any:
    """Fast text of the two common argument items: tensors and ``{"type": ..., "value": scalar}``; or None."""
    n = len(obj)
    if n >= 8:
        return _tensor_item_text(obj, level) if "requires_grad" in obj else None
    if n == 2 and level <= _MAX_FAST_LEVEL and tuple(obj) == _VALUE_ITEM_KEYS:
        kind, value = obj.values()
        text = _SCALAR_TEXT.get(type(value))
        if type(kind) is str and text is not None:
            i = _INDENTS[level + 1]
            return f'{{{i}"type": {_ESCAPE_ASCII(kind)},{i}"value": {text(value)}{_INDENTS[level]}}}'
    return None


def _encode_into(obj: Any, level: int, out: list) -> None:
    text = _SCALAR_TEXT.get(type(obj))
    if text is not None:
        out.append(text(obj))
        return
    if isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        text = _dict_text(obj, level)
        if text is not None:
            out.append(text)
            return
        inner = _INDENTS[level + 1] if level <= _MAX_FAST_LEVEL else "\n" + " " * (level + 1)
        sep = "{" + inner
        for key, value in obj.items():
            if type(key) is not str:
                key = _key_text(key)
            vt = type(value)
            text = _SCALAR_TEXT.get(vt)
            if text is not None:
                out.append(f"{sep}{_ESCAPE_ASCII(key)}: {text(value)}")
            elif vt is list and value and type(value[0]) is int and (shape := _int_list(value, level + 1)) is not None:
                out.append(f"{sep}{_ESCAPE_ASCII(key)}: {shape}")
            else:
                out.append(f"{sep}{_ESCAPE_ASCII(key)}: ")
                _encode_into(value, level + 1, out)
            sep = "," + inner
        out.append(inner[: -1] + "}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        inner = _INDENTS[level + 1] if level <= _MAX_FAST_LEVEL else "\n" + " " * (level + 1)
        sep = "[" + inner
        for value in obj:
            text = _SCALAR_TEXT.get(type(value))
            if text is not None:
                out.append(sep + text(value))
            elif type(value) is dict and value and (text := _dict_text(value, level + 1)) is not None:
                out.append(sep + text)
            else:
                out.append(sep)
                _encode_into(value, level + 1, out)
            sep = "," + inner
        out.append(inner[: -1] + "]")
    elif isinstance(obj, bool):
        out.append("true" if obj else "false")
    elif isinstance(obj, int):
        out.append(_INT_REPR(obj))
    elif isinstance(obj, float):
        out.append(_float_text(obj))
    elif isinstance(obj, str):
        out.append(_ESCAPE_ASCII(obj))
    else:
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def dumps_json_fast(obj: Any, level: int = 0) -> str:
    """Exactly :func:`dumps_json`'s text, several times faster (json's indented encoder is pure Python).

    For plain JSON data (dict, list, tuple, str, int, float, bool, None); anything else is a TypeError.
    ``level``: the text of ``obj`` as it stands that many levels deep in a larger document (its first
    line unindented, every further line indented by ``level`` more).
    """
    out: list = []
    _encode_into(obj, level, out)
    return "".join(out)


def write_json_atomic(path: str, obj: Any, fsync: bool = True) -> None:
    """Write ``obj`` to ``path`` via a temporary file and rename, so readers never see half a file.

    ``fsync=False`` skips flushing to the device: the rename is still atomic for every reader and a
    killed process, only a power loss may lose the new content.
    """
    atomic.write_text(path, dumps_json_fast(obj), mode=FILE_MODE, fsync=fsync)


def json_number(x: Any) -> Any:
    """A statistic as JSON wants it: python float/int/bool, NaN and inf kept (written as NaN/Infinity)."""
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        return x
    x = float(x)
    return x if math.isfinite(x) or math.isnan(x) or math.isinf(x) else None
