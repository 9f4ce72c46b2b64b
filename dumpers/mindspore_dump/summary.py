"""Turning MindSpore call arguments into dump.json items: tensor statistics, non-tensor encodings, .npy files.

Statistics are computed on a host copy with numpy (bfloat16 is widened to float32 first, as the tensor files
are): Max/Min exactly in the tensor's dtype, Mean and Norm accumulated in float64. Integer tensors keep integer
Max/Min and have Mean/Norm null, bool tensors give any/all, as msprobe's recent dumps do.

(Computing them with MindSpore ops and fetching them later was tried: on the CPU backend of MindSpore 2.10 the
extra op launches cost more than the wait for the host copy.)
"""
from __future__ import annotations

import logging
import os
import zlib
from typing import Any

import numpy as np

from dumpers import atomic
from dumpers import format as fmt

log = logging.getLogger("pytest_msprobe.mindspore")

MAX_DEPTH = 10
NPY = ".npy"


def _ms():
    import mindspore
    return mindspore


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, _ms().Tensor)


def to_numpy(tensor: Any) -> tuple:
    """(host copy, MindSpore dtype string such as "Float32"); bfloat16 becomes float32 (numpy has none).

    The dtype is read once: in PyNative each read may wait for the tensor's pending operation.
    """
    ms = _ms()
    dtype = tensor.dtype
    if dtype == ms.bfloat16:
        tensor = ms.ops.cast(tensor, ms.float32)
    return tensor.asnumpy(), str(dtype)


def _py(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def statistics(arr: np.ndarray) -> dict:
    """Max/Min/Mean/Norm of a host array (the rules of the module docstring)."""
    if arr.size == 0:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    if arr.dtype == np.bool_:
        return {"Max": bool(arr.any()), "Min": bool(arr.all()), "Mean": None, "Norm": None}
    if np.issubdtype(arr.dtype, np.complexfloating):
        mag = np.abs(arr).astype(np.float64)
        return {"Max": float(mag.max()), "Min": float(mag.min()), "Mean": float(mag.mean()),
                "Norm": float(np.sqrt(np.sum(mag * mag)))}
    if not np.issubdtype(arr.dtype, np.floating):
        return {"Max": int(arr.max()), "Min": int(arr.min()), "Mean": None, "Norm": None}
    if arr.ndim == 0:
        v = float(arr)
        return {"Max": v, "Min": v, "Mean": v, "Norm": v}
    wide = arr.astype(np.float64)
    with np.errstate(all="ignore"):
        return {"Max": float(arr.max()), "Min": float(arr.min()), "Mean": float(wide.mean()),
                "Norm": float(np.sqrt(np.sum(wide * wide)))}


def crc32_hex(arr: np.ndarray) -> str:
    """The dump's ``md5`` field: CRC32 of the raw bytes, 8 lowercase hex digits."""
    return f"{zlib.crc32(np.ascontiguousarray(arr).tobytes()) & 0xFFFFFFFF:08x}"


class Summariser:
    """Encodes nested call values; saves tensors as .npy when ``tensor_dir`` is set.

    Args:
        summary_mode: "statistics" or "md5".
        tensor_dir: directory for tensor files (task "tensor"), or None.
        on_error: called with the first OSError writing a tensor file and its path (the dump is then switched
            off); without it the error is raised.
    """

    def __init__(self, summary_mode: str = "statistics", tensor_dir: str | None = None,
                 on_error: Any = None) -> None:
        self.md5 = summary_mode == "md5"
        self.tensor_dir = tensor_dir
        self.on_error = on_error
        # Without tensor files, a tensor met again (one call's output is the next call's input) reuses its item:
        # each host copy waits for MindSpore's asynchronous pipeline, so this halves the waits of a chain of
        # calls. The cache holds the tensor itself, so its id cannot be reused while cached.
        self._seen: dict = {}                # id(tensor) -> (tensor, item)

    def forget(self) -> None:
        """Drop remembered items (after in-place or jit calls, which may change tensors, and at stop)."""
        self._seen.clear()

    def tensor_item(self, tensor: Any, name: str | None) -> dict:
        if self.tensor_dir is None:
            seen = self._seen.get(id(tensor))
            if seen is not None and seen[0] is tensor:
                return seen[1]
            item = self._tensor_item(tensor, None)
            self._seen[id(tensor)] = (tensor, item)
            return item
        return self._tensor_item(tensor, name)

    def _tensor_item(self, tensor: Any, name: str | None) -> dict:
        arr, dtype = to_numpy(tensor)
        item = {"type": fmt.MINDSPORE_TENSOR_TYPE, "dtype": dtype, "shape": list(arr.shape)}
        item.update(statistics(arr))
        if self.md5:
            item["md5"] = crc32_hex(arr)
        if self.tensor_dir is not None and name is not None and self._save(arr, name):
            item[fmt.DATA_NAME] = name
        return item

    def _save(self, arr: np.ndarray, name: str) -> bool:
        path = os.path.join(self.tensor_dir, name)
        if len(path) > 4096 or len(name) > 255:
            log.warning("tensor file %s skipped: the path is longer than the file system allows", name)
            return False
        try:
            with atomic.atomic_open(path, binary=True, mode=fmt.FILE_MODE) as fh:
                np.save(fh, arr, allow_pickle=False)
        except OSError as exc:
            if self.on_error is None:
                raise
            self.tensor_dir = None           # no further tensor files
            self.on_error(exc, path)
            return False
        return True

    def encode(self, value: Any, entry_key: str, category: str, path: tuple = (), depth: int = 0) -> Any:
        """Encode one value (tensor, scalar, nested list/tuple/dict) as a dump.json item."""
        ms = _ms()
        if depth > MAX_DEPTH:
            return None
        if isinstance(value, ms.Tensor):
            name = fmt.data_name(entry_key, category, path, NPY) if self.tensor_dir else None
            try:
                return self.tensor_item(value, name)
            except Exception as exc:  # noqa: BLE001 - never fail the training step over one summary
                log.warning("msprobe: %s.%s%s not summarised: %s", entry_key, category,
                            "".join(f".{p}" for p in path), exc)
                return unreadable_item(value)
        if value is None:
            return None
        if isinstance(value, bool):
            return {"type": "bool", "value": value}
        if isinstance(value, (int, float, str)):
            return {"type": type(value).__name__, "value": value}
        if isinstance(value, slice):
            return {"type": "slice", "value": [_slice_part(value.start), _slice_part(value.stop),
                                               _slice_part(value.step)]}
        if value is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        if isinstance(value, np.generic):
            return {"type": type(value).__name__, "value": value.item()}
        if isinstance(value, ms.dtype.Type):
            return {"type": "mindspore.dtype", "value": str(value)}
        if isinstance(value, (list, tuple)):
            return [self.encode(v, entry_key, category, (*path, i), depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.encode(v, entry_key, category, (*path, k), depth + 1) for k, v in value.items()}
        return None

    def encode_list(self, values: Any, entry_key: str, category: str) -> list:
        """Encode a positional sequence item-wise; a single value becomes a one-item list."""
        if not isinstance(values, (list, tuple)):
            values = (values,)
        return [self.encode(v, entry_key, category, (i,), 1) for i, v in enumerate(values)]

    def encode_kwargs(self, kwargs: dict, entry_key: str) -> dict:
        return {str(k): self.encode(v, entry_key, fmt.CAT_KWARGS, (k,), 1) for k, v in kwargs.items()}


def unreadable_item(tensor: Any) -> dict:
    """The item of a tensor whose values could not be read: what is known, statistics null."""
    item: dict = {"type": fmt.MINDSPORE_TENSOR_TYPE, "dtype": None, "shape": None}
    for key, read in (("dtype", lambda: str(tensor.dtype)), ("shape", lambda: list(tensor.shape))):
        try:
            item[key] = read()
        except Exception:  # noqa: BLE001, S112 - best effort for an already failing tensor
            continue
    item.update({k: None for k in fmt.STAT_KEYS})
    return item


def _slice_part(x: Any) -> Any:
    return _py(x) if isinstance(x, (int, np.integer)) or x is None else None
