"""The one atomic file write: a temporary file beside the target, then a rename; nothing is left behind on failure.

Every file the project renames into place (dump.json and its companions, tensor files, result CSVs) goes
through this module, so a reader (or a process killed half-way) sees the old file or the new one, never half
of one, and a failed write (full disk, quota, a vanished directory, a file size limit) removes its temporary
file before the error goes on to the caller.

The temporary name is the target's name plus ``.tmp`` and the writer's process id (:func:`temp_name`);
:func:`is_temp_name` recognises such names for clean-up (``repair-dump``). ``fsync=True`` also flushes the
file to the device before the rename (survives a power loss); without it the rename is still atomic for
every reader and for a killed process.

Standard library only: the tensor writer process (:mod:`dumpers.torch_dump.writer_proc`, run as a script)
loads this file directly.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from typing import IO, Any, Iterable, Iterator, Optional, Union

TEMP_MARK = ".tmp"
_TEMP_RE = re.compile(r"\.tmp\d+$")
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

Buffer = Union[bytes, bytearray, memoryview, Any]


def temp_name(path: str) -> str:
    """The temporary name a write of ``path`` uses until its rename."""
    return f"{path}{TEMP_MARK}{os.getpid()}"


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a temporary file of :mod:`dumpers.atomic` (``NAME.tmpPID``)."""
    return _TEMP_RE.search(name) is not None


def discard(tmp: str) -> None:
    """Remove a temporary file if it exists; errors are ignored (the write's own error is what matters)."""
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _create(tmp: str, mode: int) -> int:
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), mode)


@contextlib.contextmanager
def atomic_open(path: str, binary: bool = False, *, mode: int = 0o640, fsync: bool = False,
                encoding: Optional[str] = "utf-8", newline: Optional[str] = None) -> Iterator[IO]:
    """A file object for writing ``path``: renamed into place when the block ends, removed if it raises."""
    tmp = temp_name(path)
    fd = _create(tmp, mode)
    try:
        if binary:
            fh = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding=encoding, newline=newline)
    except BaseException:
        os.close(fd)
        discard(tmp)
        raise
    try:
        with fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def write_bytes(path: str, parts: Union[Buffer, Iterable[Buffer]], *, mode: int = 0o640, fsync: bool = False) -> None:
    """``parts`` (one buffer, or several written in order) as the file ``path``, with plain ``os.write`` calls."""
    if isinstance(parts, (bytes, bytearray, memoryview)):
        parts = (parts,)
    tmp = temp_name(path)
    fd = _create(tmp, mode)
    try:
        try:
            for part in parts:
                view = memoryview(part).cast("B")
                while view:
                    view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def write_text(path: str, text: str, *, mode: int = 0o640, fsync: bool = False) -> None:
    """``text`` (UTF-8) as the file ``path``."""
    write_bytes(path, text.encode("utf-8"), mode=mode, fsync=fsync)


def link_or_copy(source: str, path: str, *, mode: int = 0o640) -> None:
    """``path`` as a hard link of ``source`` (a copy where the file system has no hard links)."""
    tmp = temp_name(path)
    discard(tmp)                       # a leftover of an earlier process with the same id
    try:
        try:
            os.link(source, tmp)
        except OSError as exc:
            if exc.errno in _FULL:     # a copy would fail the same way
                raise
            shutil.copyfile(source, tmp)   # file systems without hard links: copy the bytes
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise


