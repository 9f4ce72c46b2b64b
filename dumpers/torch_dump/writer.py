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
import os
import pickle
import threading
from collections import deque
from typing import Optional

import torch

from dumpers import format as fmt

log = logging.getLogger("pytest_msprobe.dump")

DEFAULT_BUDGET = 512 * 1024 * 1024
_LEGACY_MAGIC = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)


_headers: dict = {}                    # (dtype, shape) -> the bytes torch.save writes before the data
_seen_once: set = set()                # (dtype, shape) seen once: a header is made on the second sight
_HEADER_LIMIT = 4096


def legacy_parts(tensor: torch.Tensor) -> Optional[tuple]:
    """``(header, data)`` whose concatenation is what ``torch.save`` (non-zip format) writes for ``tensor``.

    That format is a few pickles (magic number, protocol, system info, the tensor's metadata, the
    storage key list) followed by the storage size and its raw bytes. For a dense contiguous CPU
    tensor that owns its whole storage, everything before the raw bytes depends only on dtype and
    shape (the storage key is an arbitrary name shared by the tensor and the key list), so it is made
    once per (dtype, shape) by saving a template, checked against a second template with other data.
    A shape is templated when it comes back (a training step repeats its shapes; a shape seen once
    costs nothing extra). None when the tensor does not qualify: the caller uses ``torch.save``.
    """
    if not tensor.is_cpu or tensor.layout != torch.strided or not tensor.is_contiguous() \
            or tensor.storage_offset() != 0 or tensor.requires_grad or type(tensor) is not torch.Tensor:
        return None
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.untyped_storage().nbytes() != nbytes or nbytes == 0:
        return None
    key = (tensor.dtype, tuple(tensor.shape))
    header = _headers.get(key)
    if header is None:
        if key not in _seen_once:
            if len(_seen_once) >= _HEADER_LIMIT:
                _seen_once.clear()
            _seen_once.add(key)
            return None
        if len(_headers) >= _HEADER_LIMIT:
            _headers.clear()
        header = _headers[key] = _make_header(tensor.dtype, tensor.shape) or b""
    if not header:
        return None
    try:
        data = tensor.reshape(-1).view(torch.uint8).numpy()
    except (RuntimeError, TypeError):
        return None
    return header, data


def _make_header(dtype: torch.dtype, shape: torch.Size) -> Optional[bytes]:
    try:
        blobs = []
        for fill in (0, 1):
            template = torch.full(shape, fill, dtype=dtype)
            buf = io.BytesIO()
            torch.save(template, buf, _use_new_zipfile_serialization=False)
            raw = template.reshape(-1).view(torch.uint8).numpy().tobytes()
            blob = buf.getvalue()
            if not blob.endswith(raw):
                return None
            blobs.append(blob[: len(blob) - len(raw)])
        # the two headers differ only in the storage key (a pointer value): use the first as it stands
        if len(blobs[0]) != len(blobs[1]) or not blobs[0].startswith(_LEGACY_MAGIC):
            return None
        return blobs[0]
    except Exception:  # noqa: BLE001 - an unusual dtype: torch.save writes it
        return None


class TensorWriter:
    """A daemon thread that ``torch.save``s queued tensors, bounded by ``budget`` bytes in flight."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = budget
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
                    else:
                        self._save(path, tensor)
                    self.written += 1
                else:
                    self.dropped += 1
            except BaseException as exc:  # noqa: BLE001 - any failure must not kill training
                self.error = exc
                log.error("msprobe dump: cannot write tensor file %s (%s); further tensor files are skipped. "
                          "Free disk space or choose another dump_path.", path, exc)
            tensor = None
            if buffer is not None:
                self._recycle(buffer)
            with self._cond:
                self._queue.popleft()
                self._pending_bytes -= nbytes
                self._cond.notify_all()

    @staticmethod
    def _save(path: str, tensor: torch.Tensor) -> None:
        tmp = f"{path}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fmt.FILE_MODE)
        try:
            parts = legacy_parts(tensor)
            if parts is not None:
                for part in parts:
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view):]
                os.close(fd)
            else:
                with os.fdopen(fd, "wb") as fh:   # a real file: torch writes the storage bytes straight to it
                    torch.save(tensor, fh, _use_new_zipfile_serialization=False)
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
        os.replace(tmp, path)

    @staticmethod
    def _link(source: str, path: str) -> None:
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            os.link(source, tmp)
        except OSError:               # file systems without hard links: copy the bytes
            import shutil

            shutil.copyfile(source, tmp)
            os.chmod(tmp, fmt.FILE_MODE)
        os.replace(tmp, path)

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
