"""Background writer of tensor files: the training thread hands over a copy and goes on.

The queue is bounded by bytes, so a slow disk throttles training instead of filling memory; the
training thread waits only when the budget is used up. Each file is written to a temporary name and
renamed, so a killed process leaves whole files or none. The first error (full disk, permissions) is
kept and reported once; later tensors are dropped rather than crashing the training run.

Files are written with ``torch.save``'s non-zip format: ``torch.load`` (``weights_only=True``
included) reads it, and it costs a third of the zip writer's time per file, which dominates a tensor
dump. The same tensor seen again unchanged (one call's output is the next call's input) becomes a
hard link to the first file instead of a second copy.
"""
from __future__ import annotations

import logging
import os
import threading
from collections import deque
from typing import Optional

import torch

from dumpers import format as fmt

log = logging.getLogger("pytest_msprobe.dump")

DEFAULT_BUDGET = 512 * 1024 * 1024


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
        self._thread = threading.Thread(target=self._run, name="msprobe-tensor-writer", daemon=True)
        self._thread.start()

    def submit(self, path: str, tensor: Optional[torch.Tensor], link_to: Optional[str] = None) -> None:
        """Queue ``tensor`` (already a private copy) for ``path``, or a hard link of ``link_to``.

        Blocks only while the byte budget is full.
        """
        nbytes = 0 if tensor is None else tensor.numel() * tensor.element_size()
        with self._cond:
            if self.error is not None or self._closed:
                self.dropped += 1
                return
            while self._pending_bytes and self._pending_bytes + nbytes > self.budget and self.error is None:
                self._cond.wait()
            self._queue.append((path, tensor, nbytes, link_to))
            self._pending_bytes += nbytes
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                path, tensor, nbytes, link_to = self._queue[0]
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
            with self._cond:
                self._queue.popleft()
                self._pending_bytes -= nbytes
                self._cond.notify_all()

    @staticmethod
    def _save(path: str, tensor: torch.Tensor) -> None:
        tmp = f"{path}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fmt.FILE_MODE)
        with os.fdopen(fd, "wb") as fh:       # a real file: torch writes the storage bytes straight to it
            torch.save(tensor, fh, _use_new_zipfile_serialization=False)
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
