"""Small C kernels compiled once per user into a private cache directory and loaded with ctypes.

A kernel is a C source and a tuple of compiler flags. :func:`build` compiles it with the system C
compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) into ``$MSPROBE_CACHE_DIR`` (default
``$XDG_CACHE_HOME/pytest-msprobe`` or ``~/.cache/pytest-msprobe``), under a name derived from the
source, the flags and the machine, so every later process only loads it. Concurrent first uses (xdist
workers) each compile into their own temporary directory and install a whole file through the one
atomic write. The directory and the file must belong to the user and be writable by nobody else;
otherwise, or without a compiler, :func:`build` returns None and the caller falls back.
Standard library only (nothing here imports numpy, torch or pytest).
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from typing import Optional, Sequence

from dumpers import atomic

log = logging.getLogger("pytest_msprobe.dump")


def cache_dir() -> str:
    """Where compiled kernels are kept (created on first use, private to the user)."""
    explicit = os.environ.get("MSPROBE_CACHE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pytest-msprobe")


def private(path: str) -> bool:
    """``path`` belongs to this user and nobody else may write it (so loading it runs only our code)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (not hasattr(os, "getuid") or st.st_uid == os.getuid()) and not st.st_mode & 0o022


def compiler() -> Optional[str]:
    """The C compiler to use: ``$CC``, else the first of cc, gcc, clang on PATH; None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def library_path(stem: str, source: str, flags: Sequence[str], directory: Optional[str] = None) -> str:
    """The file name of a compiled kernel for this source, these flags and this machine."""
    digest = hashlib.sha256("\0".join((source, *flags, platform.machine(), platform.system())).encode())
    return os.path.join(directory or cache_dir(), f"{stem}-{digest.hexdigest()[:16]}.so")


def compile_into(target: str, source: str, flags: Sequence[str], variants: Sequence[Sequence[str]] = ((),),
                 what: str = "kernel") -> bool:
    """Compile ``source`` into ``target`` (tried with each extra flag set of ``variants`` in turn)."""
    cc = compiler()
    if cc is None:
        log.debug("no C compiler found: the %s is unavailable", what)
        return False
    with tempfile.TemporaryDirectory(dir=os.path.dirname(target)) as tmp:
        src = os.path.join(tmp, "kernel.c")
        with open(src, "w") as fh:
            fh.write(source)
        out = os.path.join(tmp, "kernel.so")
        for extra in variants:
            try:
                res = subprocess.run([cc, *flags, *extra, "-o", out, src, "-lm"], capture_output=True, text=True,
                                     timeout=300)
            except (OSError, subprocess.SubprocessError) as exc:
                log.debug("compiling the %s failed: %s", what, exc)
                return False
            if res.returncode == 0:
                with open(out, "rb") as fh:       # installed through the one atomic write: concurrent
                    atomic.write_bytes(target, fh.read(), mode=0o755)   # processes each install a whole file
                return True
            log.debug("compiling the %s failed (%s): %s", what, " ".join(extra) or "default", res.stderr[-2000:])
    return False


def build(stem: str, source: str, flags: Sequence[str], variants: Sequence[Sequence[str]] = ((),),
          what: str = "kernel") -> Optional[str]:
    """Path of the compiled kernel in the cache (compiled now if missing), or None when unavailable."""
    directory = cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        log.debug("no cache directory for the %s (%s)", what, exc)
        return None
    if not private(directory):
        log.debug("%s is writable by other users: the compiled %s is not used", directory, what)
        return None
    path = library_path(stem, source, flags, directory)
    if not os.path.exists(path) and not compile_into(path, source, flags, variants, what):
        return None
    if not private(path):
        log.debug("%s is writable by other users: the compiled %s is not used", path, what)
        return None
    return path
