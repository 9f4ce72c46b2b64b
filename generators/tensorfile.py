"""Reading a dump's tensor file safely: where the files are, a name joined inside them, metadata first, then data.

A dumped tensor file is untrusted input, read in three steps, each refusing with one line that names the file:

* where: :func:`resolve_tensor_dir` finds the dump's tensor directory and :func:`safe_join` joins an untrusted
  file name to it so that it stays inside (no absolute name, ``..``, separator, or link that leads outside);
* what it says it holds: :func:`read_meta` reads the file's dtype, shape and the bytes its data takes from its
  metadata alone, nothing inflated, allocated or run, so that a file that would take more memory than the
  budget, or that lies about its size, is refused before a byte of its data is read:

  - ``.pt``, zip format (``torch.save``'s default): the zip's central directory (entry names, declared sizes,
    compression) and ``data.pkl``, read by a restricted unpickler that builds no storage and runs nothing: the
    storage's dtype and element count come from its persistent id, the tensor's shape, strides and offset from
    the arguments of ``torch._utils._rebuild_tensor_v2``. ``torch.save`` stores every entry uncompressed, so a
    compressed entry is refused (a few MB of deflate stream can claim gigabytes), and each storage's entry
    must hold exactly the bytes its persistent id declares.
  - ``.pt``, legacy format (``_use_new_zipfile_serialization=False``, what the project's dumper writes): the
    same pickle, read from the head of the file, then the element count written before the raw data; the
    file must end exactly where that data ends.
  - ``.npy``: the header (dtype, shape, order); the file must end exactly where the data ends.

* the tensor: :func:`load_tensor_file` checks that metadata against the budget and dump.json's entry, then
  reads the data (torch is imported there only).

:func:`read_meta` returns a :class:`TensorMeta` or raises :class:`TensorMetaError`; :func:`load_tensor_file`
raises :class:`TensorFileError`, :func:`safe_join` :class:`PathRefused`.
"""
from __future__ import annotations

import collections
import functools
import io
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any

from dumpers import format as fmt
from generators.dumpjson import tensor_file_name

PICKLE_LIMIT = 1 << 20          # a tensor's data.pkl is a few hundred bytes; more is not a plain tensor file
LEGACY_HEAD = 1 << 12           # what is read first of a legacy file: its records, and the start of its data
CENTRAL_DIRECTORY_LIMIT = 1 << 20
MAX_ENTRIES = 64                # torch writes about seven entries per file
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

# torch.<Name>Storage -> (dtype name, bytes per element)
STORAGE_TYPES = {
    "FloatStorage": ("float32", 4), "DoubleStorage": ("float64", 8), "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2), "LongStorage": ("int64", 8), "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2), "CharStorage": ("int8", 1), "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1), "ComplexFloatStorage": ("complex64", 8), "ComplexDoubleStorage": ("complex128", 16),
}


class TensorMetaError(ValueError):
    """The file's metadata is unreadable, not one plain tensor, or inconsistent with the file."""


@dataclass(frozen=True)
class TensorMeta:
    """dtype (torch name without ``torch.``), shape, and the bytes loading the file allocates."""

    dtype: str
    shape: tuple
    data_bytes: int              # the storage (or array) the loader allocates
    tensor_bytes: int            # elements of ``shape`` times the element size
    # where a ``.pt`` file's storage bytes start (little-endian, stored as written), with the tensor's strides and
    # offset on that storage; None when the file must go through ``torch.load``
    data_offset: int | None = field(default=None, compare=False)
    stride: tuple = field(default=(), compare=False)
    storage_offset: int = field(default=0, compare=False)
    requires_grad: bool = field(default=False, compare=False)

    @property
    def elements(self) -> int:
        return _product(self.shape)


def _product(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# --- the restricted unpickler: stubs instead of storages and tensors ------------------------------------------

class _StorageType:
    def __init__(self, name: str) -> None:
        self.dtype, self.itemsize = STORAGE_TYPES[name]


class _Storage:
    def __init__(self, kind: _StorageType, key: str, numel: int) -> None:
        self.dtype, self.itemsize, self.key, self.numel = kind.dtype, kind.itemsize, key, numel


class _Tensor:
    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> None:
        self.storage, self.offset, self.size, self.stride, self.rest = storage, offset, size, stride, rest


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _Tensor:
    return _Tensor(storage, offset, size, stride, *rest)


class _MetaUnpickler(pickle.Unpickler):
    """Only a plain tensor's globals resolve, to stubs; every other global is refused (nothing runs)."""

    def __init__(self, fh: Any, storages: dict) -> None:
        super().__init__(fh)
        self.storages = storages

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch" and name in STORAGE_TYPES:
            return _StorageType(name)
        raise TensorMetaError(f"it refers to {module}.{name}, which a plain tensor file does not")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str) and _is_count(pid[4])):
            raise TensorMetaError(f"a storage record {pid!r:.120} is not the one torch.save writes")
        if len(pid) == 6 and pid[5] is not None:
            raise TensorMetaError("it holds a storage view, which the dumpers never write")
        storage = self.storages.get(pid[2])
        if storage is None:
            storage = self.storages[pid[2]] = _Storage(pid[1], pid[2], pid[4])
        elif (storage.dtype, storage.numel) != (pid[1].dtype, pid[4]):
            raise TensorMetaError(f"storage {pid[2]!r} is declared twice with different sizes")
        return storage


def _is_count(x: Any) -> bool:
    return type(x) is int and x >= 0


def _unpickle(raw: Any, what: str) -> tuple:
    """(the tensor stub, its storage) from a pickle; only one plain tensor is accepted."""
    storages: dict = {}
    try:
        obj = _MetaUnpickler(raw, storages).load()
    except TensorMetaError:
        raise
    except Exception as exc:  # noqa: BLE001 - a hostile pickle may raise anything
        raise TensorMetaError(f"its {what} is not readable as a tensor record ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    if not isinstance(obj, _Tensor):
        name = "storage" if isinstance(obj, _Storage) else type(obj).__name__
        raise TensorMetaError(f"it holds a {name}, not a tensor")
    if len(storages) != 1 or not isinstance(obj.storage, _Storage):
        raise TensorMetaError(f"its {what} does not hold one plain tensor on one storage")
    return obj, obj.storage


def _meta_of(tensor: _Tensor, storage: _Storage, data_offset: int | None = None) -> TensorMeta:
    size, stride, offset = tensor.size, tensor.stride, tensor.offset
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)
            and all(map(_is_count, size)) and all(map(_is_count, stride)) and _is_count(offset)):
        raise TensorMetaError(f"its shape {size!r:.80}, strides {stride!r:.80} or offset {offset!r:.40} are not "
                              "those of a tensor")
    elements = _product(size)
    if elements:
        span = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
        if span > storage.numel:
            raise TensorMetaError(f"its tensor of shape {list(size)} reaches element {span} of a storage of "
                                  f"{storage.numel}: the file lies about its size")
    plain = _plain_rest(tensor.rest)
    return TensorMeta(storage.dtype, tuple(size), storage.numel * storage.itemsize, elements * storage.itemsize,
                      data_offset if plain is not None else None, tuple(stride), offset, bool(plain))


def _plain_rest(rest: tuple) -> bool | None:
    """``requires_grad`` of a tensor record whose other rebuild arguments are empty (no hooks, no metadata),
    else None: only such a record is rebuilt here without ``torch.load``."""
    if not rest or type(rest[0]) is not bool:
        return None
    if any(extra for extra in rest[1:]):
        return None
    return rest[0]


# --- .pt, zip format -------------------------------------------------------------------------------------------

_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")


def _central_directory(fh: Any, file_size: int) -> tuple:
    """(entries, central directory bytes) from the end-of-central-directory record, before zipfile reads it."""
    tail_len = min(file_size, _EOCD.size + 65535)
    fh.seek(file_size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise TensorMetaError("its zip directory is missing or damaged")
    _, _, _, _, entries, cd_size, _, _ = _EOCD.unpack_from(tail, at)
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF:          # zip64: the real values are in the zip64 record
        loc = at - _ZIP64_LOCATOR.size
        if loc < 0 or tail[loc:loc + 4] != b"PK\x06\x07":
            raise TensorMetaError("its zip64 directory is missing or damaged")
        offset = _ZIP64_LOCATOR.unpack_from(tail, loc)[2]
        if offset + _ZIP64_EOCD.size > file_size:
            raise TensorMetaError("its zip64 directory points outside the file")
        fh.seek(offset)
        record = fh.read(_ZIP64_EOCD.size)
        if record[:4] != b"PK\x06\x06":
            raise TensorMetaError("its zip64 directory is damaged")
        entries, cd_size = _ZIP64_EOCD.unpack(record)[7:9]
    return entries, cd_size


def _zip_meta(path: str, file_size: int) -> TensorMeta:
    with open(path, "rb") as fh:
        entries, cd_size = _central_directory(fh, file_size)
        if entries > MAX_ENTRIES or cd_size > CENTRAL_DIRECTORY_LIMIT:
            raise TensorMetaError(f"its zip directory lists {entries} entries ({cd_size} bytes); a tensor file "
                                  f"has about seven")
        fh.seek(0)
        try:
            archive = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise TensorMetaError(f"its zip directory is not readable ({exc})") from None
        with archive:
            infos = archive.infolist()
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED:
                    raise TensorMetaError(f"its entry {info.filename} is compressed ({info.compress_size} bytes "
                                          f"declared to inflate to {info.file_size}); torch.save never compresses, "
                                          "so the file is refused before anything is inflated")
                if info.compress_size != info.file_size:
                    raise TensorMetaError(f"its entry {info.filename} declares {info.file_size} bytes but stores "
                                          f"{info.compress_size}: the file lies about its size")
                if info.header_offset + info.file_size > file_size:
                    raise TensorMetaError(f"its entry {info.filename} reaches past the end of the file")
            pickles = [i for i in infos if i.filename.endswith("data.pkl") and i.filename.count("/") == 1]
            if len(pickles) != 1:
                raise TensorMetaError("it has no single <name>/data.pkl entry, so it is not a torch.save file")
            record = pickles[0]
            prefix = record.filename[: -len("data.pkl")]
            if record.file_size > PICKLE_LIMIT:
                raise TensorMetaError(f"its data.pkl is {record.file_size} bytes, far more than one tensor's record")
            try:
                raw = archive.read(record)
            except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
                raise TensorMetaError(f"its data.pkl is not readable ({exc})") from None
            tensor, storage = _unpickle(io.BytesIO(raw), "data.pkl")
            sizes = {i.filename: i.file_size for i in infos}
            entry = f"{prefix}data/{storage.key}"
            if entry not in sizes:
                raise TensorMetaError(f"its storage entry {entry} is missing")
            if sizes[entry] != storage.numel * storage.itemsize:
                raise TensorMetaError(f"its storage entry {entry} holds {sizes[entry]} bytes but data.pkl declares "
                                      f"{storage.numel} {storage.dtype} elements ({storage.numel * storage.itemsize}"
                                      " bytes): the file lies about its size")
            data_offset = _payload_offset(fh, archive, f"{prefix}byteorder", archive.getinfo(entry), file_size)
    return _meta_of(tensor, storage, data_offset)


_LOCAL_HEADER = struct.Struct("<4s5H3L2H")


def _payload_offset(fh: Any, archive: Any, byteorder: str, info: Any, file_size: int) -> int | None:
    """Where a stored entry's bytes start in the file, when they are little-endian; None when unsure."""
    if byteorder in archive.namelist():
        order = archive.getinfo(byteorder)
        if order.file_size > 16 or archive.read(order) != b"little":
            return None
    fh.seek(info.header_offset)
    head = fh.read(_LOCAL_HEADER.size)
    if len(head) != _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = _LOCAL_HEADER.unpack(head)[-2:]
    start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    return start if start + info.file_size <= file_size else None


# --- .pt, legacy format ----------------------------------------------------------------------------------------

def _legacy_meta(path: str, file_size: int) -> TensorMeta:
    with open(path, "rb") as fh:
        first = fh.read(min(file_size, LEGACY_HEAD))
        if len(first) < LEGACY_HEAD:
            return _legacy_head(io.BytesIO(first), file_size)
        try:                                      # the records are a few hundred bytes: read more only when needed
            return _legacy_head(io.BytesIO(first), file_size)
        except TensorMetaError:
            pass
        fh.seek(0)
        return _legacy_head(io.BytesIO(fh.read(min(file_size, PICKLE_LIMIT))), file_size)


def _legacy_head(head: Any, file_size: int) -> TensorMeta:
    try:
        magic = _MetaUnpickler(head, {}).load()
        protocol = _MetaUnpickler(head, {}).load()
        sys_info = _MetaUnpickler(head, {}).load()                # a dict of plain values
    except Exception as exc:  # noqa: BLE001 - a hostile file may raise anything
        raise TensorMetaError(f"its header is not torch.save's ({type(exc).__name__})") from None
    if magic != LEGACY_MAGIC or protocol != LEGACY_PROTOCOL:
        raise TensorMetaError("its header is not torch.save's (magic number or protocol differ)")
    tensor, storage = _unpickle(head, "tensor record")
    try:
        keys = _MetaUnpickler(head, {}).load()
    except Exception as exc:  # noqa: BLE001
        raise TensorMetaError(f"its storage key list is not readable ({type(exc).__name__})") from None
    if keys != [storage.key]:
        raise TensorMetaError("its storage key list does not name the tensor's one storage")
    count = head.read(8)
    if len(count) != 8:
        raise TensorMetaError("it ends before its data")
    numel = int.from_bytes(count, "little")
    if numel != storage.numel:
        raise TensorMetaError(f"its data declares {numel} elements but the tensor record {storage.numel}: the file "
                              "lies about its size")
    start = head.tell()
    end = start + numel * storage.itemsize
    if end != file_size:
        raise TensorMetaError(f"it is {file_size} bytes but its metadata makes it {end}: the file lies about its size")
    little = isinstance(sys_info, dict) and sys_info.get("little_endian") is True
    return _meta_of(tensor, storage, start if little else None)


# --- .npy ------------------------------------------------------------------------------------------------------

def _npy_meta(path: str, file_size: int) -> TensorMeta:
    import numpy as np

    fmt = np.lib.format
    with open(path, "rb") as fh:
        if fh.read(2) == b"PK":
            raise TensorMetaError("it is an archive, not one .npy array")
        fh.seek(0)
        try:
            version = fmt.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = fmt.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = fmt.read_array_header_2_0(fh)
            else:
                raise ValueError(f"format version {version} is not read")
        except Exception as exc:  # noqa: BLE001 - a hostile header may raise anything
            raise TensorMetaError(f"its .npy header is not readable ({type(exc).__name__}: {exc})") from None
        start = fh.tell()
    if dtype.hasobject:
        raise TensorMetaError("it holds Python objects (a pickled array), which are never loaded")
    if not all(map(_is_count, shape)):
        raise TensorMetaError(f"its shape {shape!r} is not an array's")
    nbytes = _product(tuple(shape)) * dtype.itemsize
    if start + nbytes != file_size:
        raise TensorMetaError(f"it is {file_size} bytes but its header makes it {start + nbytes}: the file lies "
                              "about its size")
    name = "bool" if dtype.kind == "b" else dtype.name
    return TensorMeta(name, tuple(shape), nbytes, nbytes)


def read_meta(path: str) -> TensorMeta:
    """The dtype, shape and data size ``path`` declares, checked against the file itself (see module docstring).

    Raises:
        TensorMetaError: the metadata is unreadable, not one plain tensor, or inconsistent with the file.
    """
    file_size = os.stat(path).st_size
    if path.endswith(".npy"):
        return _npy_meta(path, file_size)
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic.startswith(b"PK"):
        return _zip_meta(path, file_size)
    if magic.startswith(b"\x80"):
        return _legacy_meta(path, file_size)
    raise TensorMetaError("it is neither a zip nor a legacy torch.save file")


# --- where the files are ------------------------------------------------------------------------
class PathRefused(ValueError):
    """A path from a dump that would lead outside the dump's tensor directory."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_tensor_dir(dump_json: str, dump_data_dir: Any) -> tuple:
    """The real path of the dump's tensor directory, and why there is none.

    Rule (msprobe 26.2): ``<dir of dump.json>/dump_tensor_data`` whenever it exists; ``dump_data_dir`` is
    what the training process wrote relative to *its* working directory, so it is only used when it is a
    relative path without ``..`` that resolves inside the dump's own directory.

    Returns:
        (tensor_dir or None, problem or None): problem says why the files cannot be found.
    """
    base = os.path.realpath(os.path.dirname(os.path.abspath(dump_json)))
    beside = os.path.join(base, fmt.TENSOR_DIR)
    if os.path.isdir(beside):
        real = os.path.realpath(beside)
        if not _inside(real, base):
            return None, (f"{beside} is a link to {real}, outside the dump directory {base}; "
                          "copy the tensor files into the dump instead of linking them")
        return real, None
    if dump_data_dir is None:
        return None, None
    if not isinstance(dump_data_dir, str) or not dump_data_dir:
        return None, f"{dump_json}: dump_data_dir must be a string or null, got {dump_data_dir!r}"
    if os.path.isabs(dump_data_dir) or ".." in dump_data_dir.replace("\\", "/").split("/"):
        return None, (f"{dump_json}: dump_data_dir {dump_data_dir!r} is refused (absolute or contains '..'); "
                      f"put the tensor files in {beside}")
    candidate = os.path.realpath(os.path.join(base, dump_data_dir))
    if not _inside(candidate, base):
        return None, (f"{dump_json}: dump_data_dir {dump_data_dir!r} resolves to {candidate}, outside the "
                      f"dump directory; put the tensor files in {beside}")
    if os.path.isdir(candidate):
        return candidate, None
    return None, (f"tensor files not found: neither {beside} nor dump_data_dir {dump_data_dir!r} "
                  f"(relative to {base}) exists; copy dump_tensor_data next to dump.json, "
                  "or use random data (--msprobe-random)")


@functools.lru_cache(maxsize=64)
def _real_root(root: str) -> str:
    """The real path of a tensor directory, resolved once per process (every file of a dump is joined to one
    of a few); a directory re-pointed later is not followed: its files are read where it first led."""
    return os.path.realpath(root)


def safe_join(root: str, name: str) -> str:
    """The real path of ``name`` inside ``root``; refuses names and links that lead outside.

    Raises:
        PathRefused: absolute name, '..', a separator, or a symlink that resolves outside ``root``.
    """
    if (not name or os.path.isabs(name) or "/" in name or "\\" in name or "\x00" in name
            or name in (".", "..")):
        raise PathRefused(f"file name {name!r} is refused: it must be a bare name inside {root}")
    real_root = _real_root(root)
    path = os.path.join(real_root, name)          # real already, unless the name itself is a link
    if os.path.islink(path):
        path = os.path.realpath(path)
    if not _inside(path, real_root) or path == real_root:
        raise PathRefused(f"{os.path.join(root, name)} resolves to {path}, outside the tensor directory "
                          f"{real_root}; the link is refused")
    return path


# --- loading a tensor file ----------------------------------------------------------------------
class TensorFileError(ValueError):
    """A tensor file that is missing, outside the dump, too large, or not a plain tensor."""


def load_tensor_file(tensor_dir: str, item: dict, *, max_bytes: int, where: str = "") -> Any:
    """The CPU tensor stored for a tensor item (``data_name``, or an old dump's ``datapath`` file name,
    inside ``tensor_dir``).

    Before anything is loaded, the file's metadata (:func:`read_meta`: the zip
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
