"""Which result/details CSV pair a check writes, so that two checks never share or replace one.

A new pair is claimed (:mod:`.claim`) by creating both files exclusively (``O_EXCL``): of two checks started
in the same second into one ``--msprobe-out``, one gets ``..._{ts}.csv`` and the other the next free second, and neither
writes into the other's files. While a check writes its pair it holds an exclusive advisory lock on the result
file (a second check continuing the same pair, ``--lf`` or ``--msprobe-result-csv``, stops with one line), and
its end-of-run rewrite (rows back in dump order after ``-n``) replaces only the file it wrote, unchanged since.
"""
from __future__ import annotations

import datetime
import errno
import os
from typing import Any

try:
    import fcntl
except ImportError:         # no advisory locks on this platform: exclusive creation still keeps pairs apart
    fcntl = None  # type: ignore[assignment]

MAX_TRIES = 3600            # one free name within the next hour of one-second stamps


class PairBusy(OSError):
    """Another check is writing this CSV pair."""


_ADVICE = {
    errno.ENOSPC: "free space on its disk or give another --msprobe-out, then run the same command with --lf to "
                  "finish the pair",
    errno.EFBIG: "the file-size limit (ulimit -f) is reached; raise it or give another --msprobe-out, then run "
                 "the same command with --lf to finish the pair",
    errno.EACCES: "give a folder you can write with --msprobe-out",
    errno.EPERM: "give a folder you can write with --msprobe-out",
    errno.EROFS: "the file system is read-only; give a writable folder with --msprobe-out",
    errno.ENOTDIR: "a part of the path is a file; give a folder with --msprobe-out",
}
_ADVICE[getattr(errno, "EDQUOT", errno.ENOSPC)] = _ADVICE[errno.ENOSPC]


class CsvWriteError(OSError):
    """A result or details CSV that cannot be written: one line naming the file and what to do."""

    def __init__(self, path: str, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        advice = _ADVICE.get(exc.errno or 0, "check the disk and the folder, then run the same command with --lf "
                                              "to finish the pair")
        path = os.path.abspath(path)
        super().__init__(exc.errno, f"cannot write {path}: {reason}; {advice}")
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


def stop_run(exc: OSError) -> Any:
    """End the pytest run with one line for a CSV that cannot be written (``pytest.exit``: the session still
    finishes, and the rows written so far stay whole)."""
    import pytest
    pytest.exit(f"pytest-msprobe: {exc}", returncode=pytest.ExitCode.INTERRUPTED)


def next_second(ts: str) -> str:
    """``YYYYmmddHHMMSS`` one second later (file names keep msprobe's pattern)."""
    t = datetime.datetime.strptime(ts, "%Y%m%d%H%M%S") + datetime.timedelta(seconds=1)
    return t.strftime("%Y%m%d%H%M%S")


def create_exclusive(path: str, mode: int) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def lock(fd: int, path: str) -> None:
    """Take the exclusive advisory lock of the pair whose result file is open as ``fd`` (held until closed).

    Raises:
        PairBusy: another check holds it.
    """
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise PairBusy(f"{path} is being written by another check; wait for that check to end, or leave out "
                       f"--lf / --msprobe-result-csv to write a new pair") from None


def identity(fd: int) -> tuple:
    """(device, inode, size) of an open file."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size


def unchanged(path: str, ident: Any) -> bool:
    """Whether ``path`` is still the file of ``ident`` (:func:`identity`), with nothing written since."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino, st.st_size) == tuple(ident)


class held:
    """``with held(path):`` the pair's lock on the result file as it is now (for a rewrite before writing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh: Any = None

    def __enter__(self) -> held:
        if os.path.exists(self.path):
            self.fh = open(self.path, "rb")     # noqa: SIM115 - closed on exit
            try:
                lock(self.fh.fileno(), self.path)
            except OSError:
                self.fh.close()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()
