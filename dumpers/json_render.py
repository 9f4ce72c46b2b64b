"""msprobe's JSON style, fast: exactly the text of :func:`dumpers.format.dumps_json`, several times sooner.

``json.dumps(indent=1)`` runs its indented encoder in pure Python; the dumpers write dump.json, stack.json and
construct.json at every step, so they render with :func:`dumps_json_fast`. Tensor items (the eight usual keys)
and ``{"type": ..., "value": scalar}`` items take a shorter path whose fixed texts are made once per
(dtype, shape, level). Tests hold every text byte-identical to ``json.dumps``. Standard library only.
"""
from __future__ import annotations

import json
import math
from typing import Any

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


SCALAR_TEXT = {str: _ESCAPE_ASCII, int: _INT_REPR, float: _float_fast, type(None): lambda _: "null",
                bool: lambda b: "true" if b else "false"}


INDENTS = tuple("\n" + " " * n for n in range(72))
_MAX_FAST_LEVEL = len(INDENTS) - 3


def _int_list(values: list, level: int) -> Any:
    """Text of a list of plain ints (a tensor shape), or None."""
    for v in values:
        if type(v) is not int:
            return None
    inner = INDENTS[level + 1] if level <= _MAX_FAST_LEVEL else "\n" + " " * (level + 1)
    return "[" + inner + ("," + inner).join(map(_INT_REPR, values)) + inner[:-1] + "]"


def _number_text(x: Any) -> str:
    """Text of a statistic (float, int, bool or None); KeyError for anything else."""
    if type(x) is float and x - x == 0.0:
        return _FLOAT_REPR(x)
    return SCALAR_TEXT[type(x)](x)


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
    i = INDENTS[level + 1]
    parts = (f'{{{i}"type": {_ESCAPED.get(kind) or _escaped(kind)},{i}"dtype": '
             f'{_ESCAPED.get(dtype) or _escaped(dtype)},{i}"shape": {shape_text},{i}"Max": ',
             f',{i}"Min": ', f',{i}"Mean": ', f',{i}"Norm": ',
             f',{i}"requires_grad": {"true" if requires_grad else "false"}{INDENTS[level]}}}')
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


# the repr of nonzero finite floats rendered before: a step renders four statistics per tensor, and the
# same values come back (a tensor's statistics reused from call to call, low-precision values from step to
# step), while repr() of a float costs about a microsecond. Zeros are never kept: 0.0 and -0.0 are one key.
_float_texts: dict = {}


def _float_repr_kept(x: float) -> str:
    text = _FLOAT_REPR(x)
    if x:
        if len(_float_texts) >= 65536:
            _float_texts.clear()
        _float_texts[x] = text
    return text


def finite_tensor_text(dtype: str, shape: tuple, mx: float, mn: float, mean: float, norm: float,
                       requires_grad: bool, level: int) -> Any:
    """:func:`tensor_text` of a ``torch.Tensor`` item whose four statistics are finite Python floats
    (what the one-pass statistics give: never ints, which would share keys with equal floats) and whose
    shape is a ``torch.Size`` (plain ints), without the checks: one look-up and one format."""
    parts = _item_parts.get(("torch.Tensor", dtype, shape, requires_grad, level))
    if parts is None:
        if level > _MAX_FAST_LEVEL:
            return None
        parts = _parts("torch.Tensor", dtype, shape, requires_grad, level)
        if parts is None:
            return None
    head, after_max, after_min, after_mean, tail = parts
    known = _float_texts.get
    return (f"{head}{known(mx) or _float_repr_kept(mx)}{after_max}{known(mn) or _float_repr_kept(mn)}"
            f"{after_min}{known(mean) or _float_repr_kept(mean)}{after_mean}"
            f"{known(norm) or _float_repr_kept(norm)}{tail}")


def tensor_item_text(obj: dict, level: int) -> Any:
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
    i = INDENTS[level + 1]
    out = [text[: -len(INDENTS[level]) - 1]]
    for key in keys[8:]:
        out.append(f",{i}{_ESCAPE_ASCII(key if type(key) is str else _key_text(key))}: ")
        _encode_into(obj[key], level + 1, out)
    out.append(INDENTS[level] + "}")
    return "".join(out)


def _dict_text(obj: dict, level: int) -> Any:
    """Fast text of the two common argument items: tensors and ``{"type": ..., "value": scalar}``; or None."""
    n = len(obj)
    if n >= 8:
        return tensor_item_text(obj, level) if "requires_grad" in obj else None
    if n == 2 and level <= _MAX_FAST_LEVEL and tuple(obj) == _VALUE_ITEM_KEYS:
        kind, value = obj.values()
        text = SCALAR_TEXT.get(type(value))
        if type(kind) is str and text is not None:
            i = INDENTS[level + 1]
            return f'{{{i}"type": {_ESCAPE_ASCII(kind)},{i}"value": {text(value)}{INDENTS[level]}}}'
    return None


def _encode_into(obj: Any, level: int, out: list) -> None:
    text = SCALAR_TEXT.get(type(obj))
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
        inner = INDENTS[level + 1] if level <= _MAX_FAST_LEVEL else "\n" + " " * (level + 1)
        sep = "{" + inner
        for key, value in obj.items():
            if type(key) is not str:
                key = _key_text(key)
            vt = type(value)
            text = SCALAR_TEXT.get(vt)
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
        inner = INDENTS[level + 1] if level <= _MAX_FAST_LEVEL else "\n" + " " * (level + 1)
        sep = "[" + inner
        for value in obj:
            text = SCALAR_TEXT.get(type(value))
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
