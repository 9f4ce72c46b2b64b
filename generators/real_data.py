"""Loading a dumped tensor file without executing anything from it, and only from inside the dump."""
from __future__ import annotations

import os
from typing import Any

from dumpers import format as fmt
from generators.entries import tensor_file_name
from generators.paths import PathRefused, safe_join
from generators.tensorfile import TensorMetaError, read_meta


class TensorFileError(ValueError):
    """A tensor file that is missing, outside the dump, too large, or not a plain tensor."""


def load_tensor_file(tensor_dir: str, item: dict, *, max_bytes: int, where: str = "") -> Any:
    """The CPU tensor stored for a tensor item (``data_name``, or an old dump's ``datapath`` file name,
    inside ``tensor_dir``).

    Before anything is loaded, the file's metadata (:func:`generators.tensorfile.read_meta`: the zip
    directory and pickled record of a ``.pt``, the header of a ``.npy``) gives its dtype, shape and the
    bytes loading it allocates; a file whose data is over ``max_bytes``, whose metadata disagrees with the
    file or with dump.json's shape and dtype, or whose storage is larger than its tensor, is refused
    without reading its data. Then a ``.pt`` file's storage is read from the offset its metadata gave straight
    into the tensor's memory (one read of the data, nothing unpickled twice), or, where the metadata leaves that
    open (big-endian data, a record with hooks), loads with ``torch.load(weights_only=True,
    map_location="cpu")``; ``.npy`` files load with ``numpy.load(allow_pickle=False)``; anything else is refused.

    Raises:
        TensorFileError: with a message naming the file and what to do.
    """
    import numpy as np
    import torch

    name = tensor_file_name(item)
    label = f"{where}: " if where else ""
    try:
        path = safe_join(tensor_dir, name)
    except PathRefused as exc:
        raise TensorFileError(f"{label}{exc}") from None
    if not os.path.isfile(path):
        raise TensorFileError(f"{label}tensor file {path} is missing; copy the dump's {fmt.TENSOR_DIR} "
                              "directory completely, or use random data (--msprobe-random)")
    size = os.stat(path).st_size
    if size > max_bytes:
        raise TensorFileError(f"{label}tensor file {path} is {size} bytes, over the budget of {max_bytes} "
                              "bytes; raise --msprobe-max-bytes if the machine has the memory")
    if not path.endswith((".pt", ".npy")):
        raise TensorFileError(f"{label}The file: {path} is not a pt or numpy file.")
    meta = _check_meta(path, item, max_bytes, label)
    tensor = _read_storage(path, meta, torch) if path.endswith(".pt") else None
    if tensor is None and path.endswith(".pt"):
        try:
            tensor = torch.load(path, weights_only=True, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - a hostile file may raise anything; all mean 'refused'
            raise TensorFileError(
                f"{label}{path} was refused: it is not a plain tensor file ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}). A file holding pickled objects can "
                "run code when loaded; do not load it with weights_only=False unless you trust its origin"
            ) from None
    elif tensor is None and path.endswith(".npy"):
        try:
            array = np.load(path, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - a hostile file may raise anything; all mean 'refused'
            raise TensorFileError(f"{label}{path} was refused: not a plain .npy array "
                                  f"({type(exc).__name__}: {exc}); pickled object arrays are never loaded") from None
        if not isinstance(array, np.ndarray):
            raise TensorFileError(f"{label}{path} was refused: it is an archive, not one .npy array")
        tensor = torch.from_numpy(np.require(array, requirements="C"))
    elif tensor is None:
        raise TensorFileError(f"{label}The file: {path} is not a pt or numpy file.")
    if not isinstance(tensor, torch.Tensor):
        raise TensorFileError(f"{label}{path} holds a {type(tensor).__name__}, not a tensor")
    shape = item.get("shape")
    if list(tensor.shape) != list(shape or []):
        raise TensorFileError(f"{label}{path} holds a tensor of shape {list(tensor.shape)} but dump.json "
                              f"records {shape}; the file does not belong to this entry")
    wanted = fmt.canonical_dtype(item.get("dtype"))
    if wanted and str(tensor.dtype) != f"torch.{wanted}":
        if path.endswith(".npy"):      # MindSpore saves bf16 as fp32; restore the recorded dtype
            tensor = tensor.to(getattr(torch, wanted))
        else:
            raise TensorFileError(f"{label}{path} holds {tensor.dtype} but dump.json records "
                                  f"{item.get('dtype')}; the file does not belong to this entry")
    return tensor


def _read_storage(path: str, meta: Any, torch: Any) -> Any:
    """The tensor of a ``.pt`` file whose metadata checked out, its storage read straight from the file into the
    tensor's memory (what ``torch.load`` builds, without a second parse of the file); None when the file must go
    through ``torch.load`` (big-endian data, a record with hooks or metadata) or changed since it was checked."""
    if meta.data_offset is None:
        return None
    dtype = getattr(torch, meta.dtype, None)
    if not isinstance(dtype, torch.dtype):
        return None
    storage = torch.empty(meta.data_bytes // torch.empty((), dtype=dtype).element_size(), dtype=dtype)
    raw = storage.view(torch.uint8).numpy() if meta.data_bytes else None
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size < meta.data_offset + meta.data_bytes:
            return None
        fh.seek(meta.data_offset)
        if raw is not None and fh.readinto(memoryview(raw)) != meta.data_bytes:
            return None
    tensor = storage.as_strided(meta.shape, meta.stride, meta.storage_offset)
    if meta.requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _check_meta(path: str, item: dict, max_bytes: int, label: str) -> Any:
    """Refuse the file from its metadata alone: over budget, lying about its size, or not this entry's tensor."""
    try:
        meta = read_meta(path)
    except (TensorMetaError, OSError) as exc:
        what = f"it is not a plain tensor file ({exc})" if path.endswith(".pt") else str(exc)
        raise TensorFileError(f"{label}{path} was refused: {what}; nothing of it was loaded") from None
    if meta.data_bytes > max_bytes:
        raise TensorFileError(f"{label}tensor file {path} holds {meta.data_bytes} bytes of data ({meta.elements} "
                              f"{meta.dtype} elements), over the budget of {max_bytes} bytes; raise "
                              "--msprobe-max-bytes if the machine has the memory")
    if meta.data_bytes > meta.tensor_bytes:
        raise TensorFileError(f"{label}{path} was refused before loading: it holds a storage of {meta.data_bytes} "
                              f"bytes for a tensor of {meta.tensor_bytes} bytes (shape {list(meta.shape)}); the "
                              "dumpers save each tensor on its own storage, so the file does not match its entry")
    shape = item.get("shape")
    if list(meta.shape) != list(shape or []):
        raise TensorFileError(f"{label}{path} holds a tensor of shape {list(meta.shape)} but dump.json "
                              f"records {shape}; the file does not belong to this entry")
    wanted = fmt.canonical_dtype(item.get("dtype"))
    if wanted and path.endswith(".pt") and meta.dtype != wanted:
        raise TensorFileError(f"{label}{path} holds torch.{meta.dtype} but dump.json records "
                              f"{item.get('dtype')}; the file does not belong to this entry")
    return meta
