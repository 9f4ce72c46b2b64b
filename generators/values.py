"""Decoding dump.json's non-tensor argument encodings back into Python objects (precision spec 7.5).

``int``/``float``/``bool``/``str`` -> the value; ``slice`` -> slice; ``ellipsis`` -> ``...``; numpy scalar
type names -> that numpy scalar; ``torch.Size`` -> ``torch.Size``; ``torch.dtype`` -> the dtype; ``torch.device``
-> kept as its dict (the checker drops a kwarg named ``device``); ``mindspore.dtype`` -> :class:`MindSporeDtype`;
any other type -> its value as is.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dumpers import format as fmt
from generators import entries

NUMPY_TYPES = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "complex64": np.complex64, "complex128": np.complex128, "bool_": np.bool_,
    "str_": np.str_, "unicode_": np.str_, "bytes_": np.bytes_, "string_": np.bytes_,
}
if hasattr(np, "longdouble"):
    NUMPY_TYPES["float128"] = np.longdouble
if hasattr(np, "clongdouble"):
    NUMPY_TYPES["complex256"] = np.clongdouble


class MindSporeDtype(str):
    """A recorded ``mindspore.dtype`` argument (``"Float16"``); the MindSpore replay turns it into the dtype."""

    __slots__ = ()


class ValueDecodeError(ValueError):
    """A non-tensor argument whose recorded value does not fit its type (e.g. int8 holding 1000)."""


def tensor_items(obj: Any, path: tuple = ()) -> list:
    """The tensor items of one argument structure as ``(path, item)`` pairs, in argument order: the caller
    makes each tensor and hands them to :func:`decode_value` by path."""
    if isinstance(obj, list):
        return [pair for i, sub in enumerate(obj) for pair in tensor_items(sub, (*path, i))]
    if not isinstance(obj, dict):
        return []
    if entries.is_tensor_item(obj):
        return [(path, obj)]
    if "type" not in obj:
        return [pair for k, v in obj.items() for pair in tensor_items(v, (*path, k))]
    return []


def decode_value(obj: Any, tensors: Mapping[tuple, Any], path: tuple = ()) -> Any:
    """Decode one argument structure; each tensor item becomes ``tensors[path]``, the tensor the caller made for
    it (:func:`tensor_items` lists them)."""
    import torch

    if obj is None:
        return None
    if isinstance(obj, list):
        return [decode_value(sub, tensors, (*path, i)) for i, sub in enumerate(obj)]
    if not isinstance(obj, dict):
        return obj
    if entries.is_tensor_item(obj):
        return tensors[path]
    if "type" not in obj:
        return {k: decode_value(v, tensors, (*path, k)) for k, v in obj.items()}
    kind, value = obj.get("type"), obj.get("value")
    try:
        return _decode_typed(torch, kind, value)
    except (ValueError, TypeError, OverflowError, RuntimeError, KeyError) as exc:
        where = "".join(f"[{p}]" for p in path)
        raise ValueDecodeError(f"argument{where} {{'type': {kind!r}, 'value': {value!r}}} cannot be decoded: "
                               f"{exc}") from None


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
    if kind in NUMPY_TYPES:
        scalar_type = NUMPY_TYPES[kind]
        if np.issubdtype(scalar_type, np.integer):
            limits = np.iinfo(scalar_type)
            if not isinstance(value, int) or not limits.min <= value <= limits.max:
                raise OverflowError(f"{value!r} is not an integer in [{limits.min}, {limits.max}]")
        return scalar_type(value)
    return value
