"""Background writer of tensor files: the training thread hands over a copy and goes on.

The queue is bounded by bytes, so a slow disk throttles training instead of filling memory; the
training thread waits only when the budget is used up. Each file is written to a temporary name and
renamed, so a killed process leaves whole files or none. The first error (full disk, permissions) is
kept and reported once; later tensors are dropped rather than crashing the training run.

Files are written with ``torch.save``'s non-zip format: ``torch.load`` (``weights_only=True``
included) reads it, and it costs a third of the zip writer's time per file, which dominates a tensor
dump. The bytes before the data depend only on dtype and shape, so they are made once per pair and
each file is then two plain writes (:func:`legacy_parts`); tensors that do not qualify go through
``torch.save``. The same tensor seen again unchanged (one call's output is the next call's input) becomes a
hard link to the first file instead of a second copy.
"""
from __future__ import annotations

import io
import logging
import math
import mmap
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any, Optional

import torch

from dumpers import atomic
from dumpers import format as fmt
from dumpers.torch_dump import writer_proc

log = logging.getLogger("pytest_msprobe.dump")

DEFAULT_BUDGET = 512 * 1024 * 1024
_LEGACY_MAGIC = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)


_headers: dict = {}                    # (dtype, shape) -> the bytes torch.save writes before the data
_HEADER_LIMIT = 4096
_HEADER_MAX = 64 * 1024                # a torch.save header is a few hundred bytes; longer is not this format


def legacy_parts(tensor: torch.Tensor) -> Optional[tuple]:
    """``(header, data)`` whose concatenation is what ``torch.save`` (non-zip format) writes for ``tensor``.

    That format is a few pickles (magic number, protocol, system info, the tensor's metadata, the
    storage key list) followed by the storage size and its raw bytes. For a dense contiguous CPU
    tensor that owns its whole storage, everything before the raw bytes depends only on dtype and
    shape (the storage key is an arbitrary name shared by the tensor and the key list), so it is made
    once per (dtype, shape) (:func:`legacy_header`). None when the tensor does not qualify: the caller
    uses ``torch.save``.
    """
    if not tensor.is_cpu or tensor.layout != torch.strided or not tensor.is_contiguous() \
            or tensor.storage_offset() != 0 or tensor.requires_grad or type(tensor) is not torch.Tensor:
        return None
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.untyped_storage().nbytes() != nbytes or nbytes == 0:
        return None
    header = legacy_header(tensor.dtype, tensor.shape)
    if header is None:
        return None
    try:
        data = tensor.reshape(-1).view(torch.uint8).numpy()
    except (RuntimeError, TypeError):
        return None
    return header, data


def legacy_header(dtype: torch.dtype, shape: torch.Size) -> Optional[bytes]:
    """The bytes ``torch.save`` (non-zip format) writes before the data of a fresh contiguous CPU tensor
    of this dtype and shape, or None where the format cannot be reproduced (the caller then uses
    ``torch.save``). Made at the pair's first sight, at a cost that does not grow with the tensor."""
    key = (dtype, tuple(shape))
    header = _headers.get(key)
    if header is None:
        if len(_headers) >= _HEADER_LIMIT:
            _headers.clear()
        header = _headers[key] = _make_header(dtype, shape) or b""
    return header or None


class _HeadSink:
    """A file object for ``torch.save`` that keeps the first :data:`_HEADER_MAX` bytes written and only
    counts the rest: the storage's bytes, handed over as a view, are never read."""

    def __init__(self) -> None:
        self.parts: list = []
        self.kept = 0
        self.total = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = view.nbytes
        if self.kept < _HEADER_MAX:
            head = bytes(view[: _HEADER_MAX - self.kept])
            self.parts.append(head)
            self.kept += len(head)
        self.total += n
        return n

    def flush(self) -> None:
        pass


def _make_header(dtype: torch.dtype, shape: torch.Size) -> Optional[bytes]:
    """``torch.save``'s bytes before the data, from two uninitialised templates of the pair, saved into a
    :class:`_HeadSink` (no data is written, filled or read, whatever the size). The header must end with
    the storage's element count (the format's size field) and both templates must give headers of one
    length: they differ only in the storage key (a pointer value), and the first is used as it stands."""
    try:
        count = math.prod(shape)
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        if nbytes == 0:
            return None
        heads = []
        for _ in range(2):
            template = torch.empty(shape, dtype=dtype)
            sink = _HeadSink()
            torch.save(template, sink, _use_new_zipfile_serialization=False)
            size = sink.total - nbytes
            if not 8 <= size <= sink.kept:
                return None
            heads.append(b"".join(sink.parts)[:size])
        if len(heads[0]) != len(heads[1]) or not heads[0].startswith(_LEGACY_MAGIC) \
                or heads[0][-8:] != count.to_bytes(8, sys.byteorder):
            return None
        return heads[0]
    except Exception:  # noqa: BLE001 - an unusual dtype: torch.save writes it
        return None


class TensorWriter:
    """A daemon thread that ``torch.save``s queued tensors, bounded by ``budget`` bytes in flight.

    ``report=False``: the first error is kept (:meth:`failure`) but not logged; the dump session reports it.
    """

    def __init__(self, budget: int = DEFAULT_BUDGET, report: bool = True) -> None:
        self.budget = budget
        self.report = report
        self._queue: deque = deque()
        self._pending_bytes = 0
        self._cond = threading.Condition()
        self._closed = False
        self.error: Optional[BaseException] = None
        self.written = 0
        self.dropped = 0
        self._free: dict = {}              # nbytes -> idle uint8 buffers (see submit_copy)
        self._pooled = 0
        self._thread = threading.Thread(target=self._run, name="msprobe-tensor-writer", daemon=True)
        self._thread.start()

    def submit(self, path: str, tensor: Optional[torch.Tensor], link_to: Optional[str] = None,
               buffer: Optional[torch.Tensor] = None) -> None:
        """Queue ``tensor`` (already a private copy) for ``path``, or a hard link of ``link_to``.

        ``buffer``: the recycled buffer ``tensor`` lives in, taken back once the file is written.
        Blocks only while the byte budget is full.
        """
        nbytes = 0 if tensor is None else tensor.numel() * tensor.element_size()
        with self._cond:
            if self.error is not None or self._closed:
                self.dropped += 1
                return
            while self._pending_bytes and self._pending_bytes + nbytes > self.budget and self.error is None:
                self._cond.wait()
            self._queue.append((path, tensor, nbytes, link_to, buffer))
            self._pending_bytes += nbytes
            self._cond.notify_all()

    def submit_file(self, path: str, data: bytes) -> bool:
        """Queue ``data`` as the whole file ``path``, written after every file queued before it.

        False when this writer takes no more files (after an error or :meth:`close`): the caller writes it.
        """
        return self._enqueue(path, bytes(data), len(data))

    def submit_remove(self, path: str) -> bool:
        """Queue the removal of ``path``, done after every file queued before it (False: not queued)."""
        return self._enqueue(path, None, 0)

    def _enqueue(self, path: str, payload: Optional[bytes], nbytes: int) -> bool:
        with self._cond:
            if self.error is not None or self._closed:
                return False
            while self._pending_bytes and self._pending_bytes + nbytes > self.budget and self.error is None:
                self._cond.wait()
            self._queue.append((path, payload, nbytes, None, None))
            self._pending_bytes += nbytes
            self._cond.notify_all()
        return True

    def submit_copy(self, path: str, tensor: torch.Tensor) -> None:
        """Queue a private copy of ``tensor`` for ``path``.

        CPU tensors are copied into a buffer recycled from earlier files of the same size: a fresh
        allocation per tensor costs a page fault per 4 KiB, more than the copy itself, and a step
        dumps the same sizes again and again.
        """
        data = tensor.detach()
        nbytes = data.numel() * data.element_size()
        if not data.is_cpu or data.layout != torch.strided or nbytes == 0:
            self.submit(path, data.clone(memory_format=torch.contiguous_format))
            return
        with self._cond:
            free = self._free.get(nbytes)
            buffer = free.pop() if free else None
            if buffer is not None:
                self._pooled -= nbytes
        if buffer is None:
            buffer = torch.empty(nbytes, dtype=torch.uint8)
        try:
            copy = buffer.view(data.dtype).view(data.shape)
            copy.copy_(data)
        except RuntimeError:          # a dtype a byte buffer cannot be viewed as
            self.submit(path, data.clone(memory_format=torch.contiguous_format))
            return
        self.submit(path, copy, buffer=buffer)

    def _recycle(self, buffer: torch.Tensor) -> None:
        nbytes = buffer.numel()
        with self._cond:
            if self._pooled + nbytes <= self.budget:
                self._free.setdefault(nbytes, []).append(buffer)
                self._pooled += nbytes

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                path, tensor, nbytes, link_to, buffer = self._queue[0]
            try:
                if self.error is None:
                    if link_to is not None:
                        self._link(link_to, path)
                    elif isinstance(tensor, bytes):
                        writer_proc.write(memoryview(tensor), path, fmt.FILE_MODE)
                    elif tensor is None:
                        writer_proc.remove(path)
                    else:
                        self._save(path, tensor)
                    self.written += 1
                else:
                    self.dropped += 1
            except BaseException as exc:  # noqa: BLE001 - any failure must not kill training
                self.error = _with_path(exc, path)
                if self.report:
                    _log_error(self.error)
            tensor = None
            if buffer is not None:
                self._recycle(buffer)
            with self._cond:
                self._queue.popleft()
                self._pending_bytes -= nbytes
                self._cond.notify_all()

    def failure(self) -> Optional[BaseException]:
        """The first error writing a file (later files are dropped), or None; the dump session reports it."""
        return self.error

    @staticmethod
    def _save(path: str, tensor: torch.Tensor) -> None:
        parts = legacy_parts(tensor)
        if parts is not None:
            atomic.write_bytes(path, parts, mode=fmt.FILE_MODE)
            return
        with atomic.atomic_open(path, binary=True, mode=fmt.FILE_MODE) as fh:
            torch.save(tensor, fh, _use_new_zipfile_serialization=False)   # a real file: storage bytes go straight

    @staticmethod
    def _link(source: str, path: str) -> None:
        writer_proc.link(source, path, fmt.FILE_MODE)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued tensor is on disk; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue, timeout)

    def close(self, timeout: Optional[float] = None) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)


class ProcessWriter:
    """Tensor files written by a separate process (:mod:`dumpers.torch_dump.writer_proc`).

    A writer thread in the training process takes the interpreter lock after every file system call
    and competes with training for it; measured on the benchmark step, that cost a third of the
    tensor dump's overhead. Here the training thread copies each file's bytes (the ``torch.save``
    header and the tensor's data) into a shared memory ring and sends a small record down a pipe;
    the writer process, with its own interpreter, writes, renames and hard-links the files.

    The ring (``budget`` bytes) bounds what is in flight: the training thread waits only when it is
    full. The writer process reports progress and the first error through the ring's control page.
    If the training process dies, the writer process still writes every file it was sent.
    Same interface as :class:`TensorWriter`, which remains the fallback.
    """

    def __init__(self, budget: int = DEFAULT_BUDGET, report: bool = True) -> None:
        proto = self._proto = writer_proc
        self.budget = budget
        self.report = report
        self.error: Optional[BaseException] = None
        self.written = 0
        self.dropped = 0
        self._size = proto.CONTROL_BYTES + budget
        self._lock = threading.RLock()
        self._head = 0                          # bytes of the ring handed out so far (monotonic)
        self._pos = 0                           # where in the ring the next record goes
        self._sent = 0                          # records sent
        fd = os.memfd_create("msprobe-tensor-files", os.MFD_CLOEXEC)
        read_end = write_end = -1
        try:
            os.ftruncate(fd, self._size)
            self._arena = mmap.mmap(fd, self._size)
            self._bytes = torch.frombuffer(self._arena, dtype=torch.uint8)
            read_end, write_end = os.pipe()
            self._proc = subprocess.Popen(
                [sys.executable, "-S", proto.__file__, str(read_end), str(fd), str(self._size), oct(fmt.FILE_MODE)],
                pass_fds=(read_end, fd), stdin=subprocess.DEVNULL, close_fds=True)
        except BaseException:
            if write_end >= 0:
                os.close(write_end)
            raise
        finally:
            os.close(fd)
            if read_end >= 0:
                os.close(read_end)
        self._pipe: Optional[int] = write_end
        _live.add(self)

    def _forget_after_fork(self) -> None:
        """In a forked child (a DataLoader worker): drop the inherited pipe end, so the writer process
        still sees the pipe close when the training process ends, and never write into the ring."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            try:
                os.close(pipe)
            except OSError:
                pass
        self.error = OSError("a forked process does not write the parent's tensor files")

    # --- training thread -----------------------------------------------------------------------
    def submit(self, path: str, tensor: Optional[torch.Tensor], link_to: Optional[str] = None,
               buffer: Optional[torch.Tensor] = None) -> None:
        """Queue ``tensor`` for ``path``, or a hard link of ``link_to`` (written before, in order)."""
        if tensor is None:
            if link_to is not None and self._usable():
                with self._lock:
                    self._send(self._proto.OP_LINK, 0, 0, 0, path, link_to)
            return
        self.submit_copy(path, tensor)

    def submit_file(self, path: str, data: bytes) -> bool:
        """Queue ``data`` as the whole file ``path``, written after every file sent before it.

        False when this writer takes no more files (after an error, :meth:`close`, in a forked child): the
        caller writes it. A file larger than the ring is written from here once the files before it are.
        """
        if self._pipe is None or self.error is not None:
            return False
        with self._lock:
            try:
                place = self._alloc(len(data))
            except OSError as exc:              # the writer process is gone
                self._fail(exc, path)
                return False
            if place is None:
                self.flush()
                if self.error is not None:
                    return False
                try:
                    writer_proc.write(memoryview(data), path, fmt.FILE_MODE)
                except OSError as exc:
                    self._fail(exc, path)
                return True
            offset, span = place
            self._arena[offset:offset + len(data)] = data
            self._send(self._proto.OP_WRITE, offset, len(data), span, path, "")
        return True

    def submit_remove(self, path: str) -> bool:
        """Queue the removal of ``path``, done after every file sent before it (False: not queued)."""
        if self._pipe is None or self.error is not None:
            return False
        with self._lock:
            self._send(self._proto.OP_REMOVE, 0, 0, 0, path, "")
        return self.error is None

    def submit_copy(self, path: str, tensor: torch.Tensor) -> None:
        """Copy ``tensor``'s file bytes into the ring and queue them for ``path``."""
        if not self._usable():
            return
        data = tensor.detach()
        nbytes = data.numel() * data.element_size()
        header = None
        if data.layout == torch.strided and nbytes and type(data) is torch.Tensor:
            header = legacy_header(data.dtype, data.shape)
        if header is None:                      # torch.save's own bytes (a first sighting, unusual tensors)
            blob = io.BytesIO()
            torch.save(_private_cpu(data), blob, _use_new_zipfile_serialization=False)
            header, nbytes = blob.getvalue(), 0
        hlen = len(header)
        shift = -hlen % 64                      # the data starts 64-byte aligned: viewable as its dtype
        # one producer at a time (backward hooks may run on other threads): the writer process
        # releases ring space in the order of the records, so records go out in the order of the ring
        with self._lock:
            try:
                place = self._alloc(shift + hlen + nbytes)
            except OSError as exc:              # the writer process is gone
                self._fail(exc, path)
                self.dropped += 1
                return
            if place is None:                   # larger than the whole ring: written from here
                try:
                    if nbytes:
                        TensorWriter._save(path, _private_cpu(data))
                    else:
                        writer_proc.write(memoryview(header), path, fmt.FILE_MODE)
                except OSError as exc:
                    self._fail(exc, path)
                    self.dropped += 1
                return
            offset, span = place
            start = offset + shift
            self._arena[start:start + hlen] = header
            if nbytes:
                dst = self._bytes[start + hlen:start + hlen + nbytes].view(data.dtype).view(data.shape)
                dst.copy_(data)
            self._send(self._proto.OP_WRITE, start, hlen + nbytes, span, path, "")

    def _usable(self) -> bool:
        if self._pipe is not None:
            if self.error is None and not self._control()[2]:
                return True
            self._check()
        self.dropped += 1                       # after an error, after close(), in a forked child
        return False

    def _control(self) -> tuple:
        return self._proto.CONTROL.unpack_from(self._arena, 0)

    def _alloc(self, need: int) -> Optional[tuple]:
        """(arena offset, span to release) for ``need`` bytes; waits while the ring has no room.

        A record never straddles the ring's end: the tail it does not fit in is skipped (its bytes count in
        the record's span). With nothing in flight the record starts at the ring's beginning, whatever its
        size: the pages there are mapped and warm in the caches (a page touched for the first time costs
        more than copying it), and a record larger than the bytes before the head would otherwise wait
        for room that skipping the tail can never make."""
        ring = self.budget
        pad = (need + 63) // 64 * 64
        if pad > ring:
            return None
        while True:
            in_flight = self._head - self._control()[0]     # the records not written yet end at self._pos
            if not in_flight:
                self._pos = waste = 0
                break
            waste = ring - self._pos if self._pos + pad > ring else 0
            if in_flight + waste + pad <= ring:
                break
            if self._proc.poll() is not None:
                raise OSError(f"the tensor writer process exited (status {self._proc.returncode})")
            time.sleep(0.0005)
        start = (self._pos + waste) % ring
        self._pos = start + pad
        self._head += waste + pad
        return self._proto.CONTROL_BYTES + start, waste + pad

    def _send(self, op: int, offset: int, nbytes: int, span: int, path: str, link: str) -> None:
        p = path.encode("utf-8", "surrogateescape")
        q = link.encode("utf-8", "surrogateescape")
        record = memoryview(self._proto.RECORD.pack(op, offset, nbytes, span, len(p), len(q)) + p + q)
        try:
            while record:
                record = record[os.write(self._pipe, record):]
        except OSError as exc:                  # the writer process is gone
            self._fail(OSError(f"the tensor writer process is gone ({exc})"), path)
            return
        self._sent += 1

    # --- reporting and shutdown ----------------------------------------------------------------
    def _fail(self, exc: BaseException, path: str) -> None:
        if self.error is None:
            self.error = _with_path(exc, path)
            if self.report:
                _log_error(self.error)

    def _check(self) -> None:
        """Take over the writer process's first error, if it reported one."""
        if self.error is None and self._bytes is not None and self._control()[2]:
            raw = bytes(self._arena[self._proto.ERROR_AT:self._proto.CONTROL_BYTES]).split(b"\0", 1)[0]
            code, _, rest = raw.decode("utf-8", "replace").partition(" ")
            path, _, text = rest.partition("\x01") if "\x01" in rest else ("", "", rest)
            error = OSError(int(code) if code.isdigit() else 0, text)
            error.filename = path or None
            self.error = error
            if self.report:
                _log_error(error)

    def failure(self) -> Optional[BaseException]:
        """The first error writing a file (the writer process's included), or None; the dump session reports it."""
        self._check()
        return self.error

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued file is written; False if ``timeout`` passed first."""
        if self._bytes is None:                 # closed: everything was waited for then
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = self._control()[1]
            if done >= self._sent or self._proc.poll() is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        self.written = self._control()[1]
        self._check()
        return True

    def close(self, timeout: Optional[float] = None) -> None:
        if self._bytes is None:
            return
        self.flush(timeout)
        with self._lock:
            if self._pipe is not None:
                os.close(self._pipe)
                self._pipe = None
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("msprobe dump: the tensor writer process is still writing; it finishes on its own")
        self._bytes = None
        try:
            self._arena.close()
        except BufferError:                     # a view is still referenced: the mapping goes with it
            pass


_live: "weakref.WeakSet[ProcessWriter]" = weakref.WeakSet()


def _log_error(exc: BaseException) -> None:
    log.error("msprobe dump: cannot write tensor file %s (%s); further tensor files are skipped. Free disk space "
              "or choose another dump_path.", getattr(exc, "filename", None) or "", exc)


def _with_path(exc: BaseException, path: str) -> BaseException:
    """``exc`` naming the file it failed on (an OSError from os.write carries no file name)."""
    if isinstance(exc, OSError) and not exc.filename:
        try:
            exc.filename = path
        except AttributeError:
            pass
    return exc


def _after_fork_in_child() -> None:
    for writer in list(_live):
        writer._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _private_cpu(data: torch.Tensor) -> torch.Tensor:
    """A CPU copy of ``data`` that owns its storage (``torch.save`` writes a view's whole storage)."""
    if data.layout == torch.strided:
        return data.to("cpu", copy=True, memory_format=torch.contiguous_format)
    return data.cpu().clone()


def make_writer(budget: int = DEFAULT_BUDGET, report: bool = True) -> Any:
    """The tensor-file writer for a dump: a writer process where the platform allows (Linux:
    ``memfd_create``), else the in-process :class:`TensorWriter`. ``MSPROBE_DUMP_WRITER=thread``
    chooses the latter. ``report=False``: errors are kept for the caller to report, not logged."""
    if os.environ.get("MSPROBE_DUMP_WRITER", "").strip().lower() != "thread" and hasattr(os, "memfd_create"):
        try:
            return ProcessWriter(budget, report)
        except (OSError, ValueError, RuntimeError) as exc:
            log.warning("msprobe dump: no tensor writer process (%s); writing from a thread instead", exc)
    return TensorWriter(budget, report)
