"""Budgets hold before memory is spent: a tensor file's size is read from its metadata and checked first.

A compressed ``.pt`` that inflates to gigabytes, a file whose metadata lies about its size, or one whose shape
differs from dump.json is a SKIP with the reason, without inflating or allocating its data.
"""
from __future__ import annotations

import collections
import io
import json
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest
import torch

from dumpers import format as fmt
from generators.tensorfile import TensorFileError, TensorMetaError, load_tensor_file, read_meta

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "mlp_fp32_tensor_L1" / "step0" / "rank" / fmt.TENSOR_DIR
BOMB_ELEMENTS = 1 << 29                       # float32: 2 GiB
MiB = 1 << 20


# --- crafting files as torch.save lays them out, without the data ---------------------------------------------
class _StorageRef:
    def __init__(self, numel: int, key: str = "0", legacy: bool = False) -> None:
        self.numel, self.key, self.legacy = numel, key, legacy


class _TensorRef:
    def __init__(self, storage: _StorageRef, shape: tuple) -> None:
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        stride, acc = [], 1
        for n in reversed(self.shape):
            stride.insert(0, acc)
            acc *= n
        return torch._utils._rebuild_tensor_v2, (self.storage, 0, tuple(self.shape), tuple(stride), False,
                                                  collections.OrderedDict())


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            pid = ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
            return pid + (None,) if obj.legacy else pid
        return None


def tensor_record(numel: int, shape: tuple, legacy: bool = False) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(_TensorRef(_StorageRef(numel, legacy=legacy), shape))
    return buf.getvalue()


def write_zip(path, entries: list) -> None:
    """A zip written by hand: ``entries`` = (name, method, stored bytes, crc, uncompressed size)."""
    central, offset = [], 0
    with open(path, "wb") as fh:
        for name, method, payload, crc, size in entries:
            raw = name.encode()
            fh.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(payload), size,
                                 len(raw), 0) + raw)
            fh.write(payload)
            central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc, len(payload),
                                       size, len(raw), 0, 0, 0, 0, 0, offset) + raw)
            offset += 30 + len(raw) + len(payload)
        cd = b"".join(central)
        fh.write(cd)
        fh.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(cd), offset, 0))


def _stored(name: str, data: bytes) -> tuple:
    return name, zipfile.ZIP_STORED, data, zlib.crc32(data), len(data)


def deflated_zeros(nbytes: int) -> tuple:
    """(raw deflate stream of ``nbytes`` zero bytes, its CRC-32), made from one repeated flushed block."""
    chunk = bytes(MiB)
    assert nbytes % MiB == 0
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    assert co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH) == block   # a full flush resets the window
    count = nbytes // MiB
    stream = first + block * (count - 2) + co.compress(chunk) + co.flush()
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(chunk, crc)
    return stream, crc


def zip_pt(path, numel: int, shape: tuple, data=None) -> None:
    """A zip-format .pt for a float32 tensor; ``data``: (payload, method, crc, declared size) of data/0."""
    record = tensor_record(numel, shape)
    if data is None:
        raw = bytes(4 * numel)
        data = (raw, zipfile.ZIP_STORED, zlib.crc32(raw), len(raw))
    payload, method, crc, size = data
    write_zip(path, [_stored("t/data.pkl", record), _stored("t/byteorder", b"little"),
                     ("t/data/0", method, payload, crc, size), _stored("t/version", b"3\n")])


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict:
    """2 MB zip .pt files whose storage entry inflates to 2 GiB (valid files: torch.load inflates them all).

    ``full``: a tensor of 2**29 float32 elements, as dump.json records it; ``view``: a [2, 3] tensor on that
    storage, so that dump.json's shape (and the case budget computed from it) is small.
    """
    base = tmp_path_factory.mktemp("bomb")
    stream, crc = deflated_zeros(4 * BOMB_ELEMENTS)
    data = (stream, zipfile.ZIP_DEFLATED, crc, 4 * BOMB_ELEMENTS)
    out = {"full": (base / "full.pt", (BOMB_ELEMENTS,)), "view": (base / "view.pt", (2, 3))}
    for path, shape in out.values():
        zip_pt(path, BOMB_ELEMENTS, shape, data)
        assert os.path.getsize(path) < 3 * MiB
    return out


@pytest.fixture
def bomb(bombs) -> pathlib.Path:
    return bombs["full"][0]


def item(name: str, shape, dtype: str = "torch.float32") -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 0.0, "Min": 0.0, "Mean": 0.0,
            "Norm": 0.0, "requires_grad": False, "data_name": name}


# --- the file's metadata is what is checked ---------------------------------------------------------------------
def test_crafted_files_are_real_torch_files(tmp_path):
    """The crafting helpers write what torch.load reads: the refusals below are about the content alone."""
    zip_pt(tmp_path / "a.pt", 6, (2, 3))
    assert torch.equal(torch.load(tmp_path / "a.pt", weights_only=True), torch.zeros(2, 3))
    meta = read_meta(str(tmp_path / "a.pt"))
    assert (meta.dtype, meta.shape, meta.data_bytes, meta.tensor_bytes) == ("float32", (2, 3), 24, 24)


def test_real_files_of_both_dumpers_and_msprobe_read_their_metadata(tmp_path):
    name = sorted(os.listdir(SAMPLE))[0]                       # msprobe: zip format
    meta = read_meta(str(SAMPLE / name))
    assert list(meta.shape) == list(torch.load(SAMPLE / name, weights_only=True).shape)
    x = torch.randn(5, 7, dtype=torch.float64)
    torch.save(x, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)   # the project's dumper
    assert read_meta(str(tmp_path / "legacy.pt")) == type(meta)("float64", (5, 7), 280, 280)
    np.save(tmp_path / "m.npy", np.zeros((3, 4), np.float16))                        # MindSpore
    assert read_meta(str(tmp_path / "m.npy")) == type(meta)("float16", (3, 4), 24, 24)


def test_compressed_bomb_is_refused_from_its_directory(bomb):
    with pytest.raises(TensorFileError, match=r"compressed .* declared to inflate to 2147483648"):
        load_tensor_file(str(bomb.parent), item(bomb.name, (BOMB_ELEMENTS,)), max_bytes=1 << 40)


def test_storage_entry_smaller_than_its_record_is_a_lie(tmp_path):
    # data.pkl says a billion elements, the stored entry holds 24 bytes
    raw = bytes(24)
    zip_pt(tmp_path / "a.pt", 10 ** 9, (2, 3), (raw, zipfile.ZIP_STORED, zlib.crc32(raw), 24))
    with pytest.raises(TensorFileError, match=r"holds 24 bytes but data.pkl declares 1000000000 .* lies"):
        load_tensor_file(str(tmp_path), item("a.pt", (2, 3)), max_bytes=1 << 40)


def test_zip_entry_declaring_another_size_than_it_stores_is_a_lie(tmp_path):
    raw = bytes(24)
    zip_pt(tmp_path / "a.pt", 6, (2, 3), (raw, zipfile.ZIP_STORED, zlib.crc32(raw), 4 * 10 ** 9))
    with pytest.raises(TensorFileError, match="lies about its size"):
        load_tensor_file(str(tmp_path), item("a.pt", (2, 3)), max_bytes=1 << 40)


def test_legacy_file_declaring_more_than_it_holds_is_refused_without_allocating(tmp_path):
    path = tmp_path / "a.pt"
    head = b"".join(pickle.dumps(v, protocol=2) for v in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}))
    numel = 10 ** 12                                        # 4 TB: allocating it would fail or swap
    keys = pickle.dumps(["0"], protocol=2)
    path.write_bytes(head + tensor_record(numel, (numel,), legacy=True) + keys + numel.to_bytes(8, "little")
                     + bytes(64))
    with pytest.raises(TensorFileError, match="lies about its size"):
        load_tensor_file(str(tmp_path), item("a.pt", (numel,)), max_bytes=1 << 50)


def test_storage_larger_than_its_tensor_is_refused(tmp_path):
    torch.save(torch.arange(1000.0)[:3], tmp_path / "view.pt")     # torch.save writes the whole storage
    with pytest.raises(TensorFileError, match="storage of 4000 bytes for a tensor of 12 bytes"):
        load_tensor_file(str(tmp_path), item("view.pt", (3,)), max_bytes=1 << 20)


def test_shape_and_dtype_are_checked_against_dump_json_before_loading(tmp_path, monkeypatch):
    torch.save(torch.zeros(2, 3), tmp_path / "a.pt")
    np.save(tmp_path / "b.npy", np.zeros((2, 3), np.float32))

    def never(*args, **kwargs):
        raise AssertionError("the file was loaded")

    monkeypatch.setattr(torch, "load", never)
    monkeypatch.setattr(np, "load", never)
    with pytest.raises(TensorFileError, match=r"shape \[2, 3\] but dump.json records \[3, 2\]"):
        load_tensor_file(str(tmp_path), item("a.pt", (3, 2)), max_bytes=1 << 20)
    with pytest.raises(TensorFileError, match="holds torch.float32 but dump.json records torch.float16"):
        load_tensor_file(str(tmp_path), item("a.pt", (2, 3), "torch.float16"), max_bytes=1 << 20)
    ms_item = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [6], "data_name": "b.npy"}
    with pytest.raises(TensorFileError, match=r"shape \[2, 3\] but dump.json records \[6\]"):
        load_tensor_file(str(tmp_path), ms_item, max_bytes=1 << 20)


def test_npy_header_claiming_more_than_the_file_holds_is_refused(tmp_path):
    with open(tmp_path / "a.npy", "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12,)})
        fh.write(bytes(16))
    ms_item = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [10 ** 12], "data_name": "a.npy"}
    with pytest.raises(TensorFileError, match="lies about its size"):
        load_tensor_file(str(tmp_path), ms_item, max_bytes=1 << 50)


def test_metadata_reader_runs_no_code(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    for legacy in (False, True):
        torch.save({"x": Payload()}, tmp_path / "p.pt", _use_new_zipfile_serialization=not legacy)
        with pytest.raises(TensorMetaError, match="posix.system|os.system"):
            read_meta(str(tmp_path / "p.pt"))
    assert not marker.exists()


# --- the checker: a SKIP with the reason, and no memory spent -------------------------------------------------
def _dump(directory: pathlib.Path, file: pathlib.Path, shape) -> pathlib.Path:
    tensors = directory / fmt.TENSOR_DIR
    tensors.mkdir(parents=True)
    os.link(file, tensors / "Torch.relu.0.forward.input.0.pt")
    output = {k: v for k, v in item("x", shape).items() if k != "data_name"}
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": {
        "Torch.relu.0.forward": {"input_args": [item("Torch.relu.0.forward.input.0.pt", shape)],
                                 "input_kwargs": {}, "output": [output]}}}
    (directory / fmt.DUMP_JSON).write_text(json.dumps(doc))
    return directory / fmt.DUMP_JSON


def _check(dump_json: pathlib.Path, *options: str) -> tuple:
    """(pytest's output, peak RSS in bytes) of a checker run in its own process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-rs",
                             "-q", f"--msprobe-api-info={dump_json}", *options], cwd=dump_json.parent,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, out
    return out, usage.ru_maxrss * 1024


@pytest.mark.parametrize("kind", ["full", "view"])
def test_a_compressed_bomb_is_a_skip_and_costs_no_memory(tmp_path, bombs, kind):
    """Acceptance: 2 MB inflating to 2 GiB is a SKIP under the default budget and under 10MB; peak RSS stays
    within 100 MB of a clean run's (without the metadata check the default-budget run peaks at gigabytes and
    passes; so does the 10MB run of the view, whose dump.json shape is small)."""
    clean_file = tmp_path / "clean.pt"
    torch.save(torch.randn(2, 3), clean_file)
    clean_out, clean_rss = _check(_dump(tmp_path / "clean", clean_file, (2, 3)))
    assert "1 passed" in clean_out, clean_out
    path, shape = bombs[kind]
    bomb_json = _dump(tmp_path / "bomb", path, shape)
    for options in ((), ("--msprobe-max-bytes", "10MB")):
        out, rss = _check(bomb_json, *options)
        assert "1 skipped" in out and "passed" not in out, out
        assert "compressed" in out or "over the budget" in out, out
        assert rss <= clean_rss + 100 * MiB, (options, rss, clean_rss)
