"""The one atomic write: whole files or none, and no temporary file left behind on any failure."""
from __future__ import annotations

import errno
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from dumpers import atomic

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _leftovers(directory) -> list:
    return sorted(name for name in os.listdir(directory) if atomic.is_temp_name(name))


def test_writes_replace_the_file_whole(tmp_path):
    target = str(tmp_path / "f.json")
    atomic.write_text(target, "old", mode=0o600)
    atomic.write_bytes(target, [b"ne", memoryview(b"w!")], fsync=True)
    assert open(target, "rb").read() == b"new!"
    with atomic.atomic_open(target, newline="") as fh:
        fh.write("a\r\nb")
    assert open(target, "rb").read() == b"a\r\nb"
    assert _leftovers(tmp_path) == []


def test_a_failing_block_keeps_the_old_file_and_removes_its_temporary_file(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="half-way"):
        with atomic.atomic_open(str(target)) as fh:
            fh.write("new content")
            fh.flush()
            assert _leftovers(tmp_path) == [f"f.txt.tmp{os.getpid()}"]
            raise RuntimeError("half-way")
    assert target.read_text() == "old" and _leftovers(tmp_path) == []


def test_a_failing_rename_removes_the_temporary_file(tmp_path):
    target = tmp_path / "d"
    target.mkdir()
    (target / "x").write_text("a non-empty directory cannot be replaced by a file")
    with pytest.raises(OSError):
        atomic.write_bytes(str(target), b"data")
    assert _leftovers(tmp_path) == []


def test_a_link_to_a_missing_source_leaves_nothing(tmp_path):
    with pytest.raises(OSError):
        atomic.link_or_copy(str(tmp_path / "missing"), str(tmp_path / "b"))
    assert os.listdir(tmp_path) == []
    (tmp_path / "a").write_bytes(b"x")
    atomic.link_or_copy(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b").read_bytes() == b"x" and _leftovers(tmp_path) == []


def test_file_size_limit_is_an_oserror_and_leaves_no_temporary_file(tmp_path):
    """A real write failure (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC) in every write path."""
    script = textwrap.dedent(f"""
        import errno, os, resource, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from dumpers import atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        d = {str(tmp_path)!r}
        codes = []
        for write in (lambda p: atomic.write_bytes(p, b"x" * 10000),
                      lambda p: atomic.write_text(p, "x" * 10000, fsync=True)):
            try:
                write(os.path.join(d, "big"))
            except OSError as exc:
                codes.append(exc.errno)
        try:
            with atomic.atomic_open(os.path.join(d, "big"), binary=True) as fh:
                fh.write(b"x" * 10000)
        except OSError as exc:
            codes.append(exc.errno)
        print(codes, sorted(os.listdir(d)))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[{errno.EFBIG}, {errno.EFBIG}, {errno.EFBIG}] []"


def test_temporary_names_are_recognised():
    assert atomic.is_temp_name("dump.json.tmp123")
    assert atomic.is_temp_name(os.path.basename(atomic.temp_name("/x/Torch.add.0.forward.input.0.pt")))
    assert not atomic.is_temp_name("Torch.tmp.0.forward.input.0.pt")
    assert not atomic.is_temp_name("dump.json")


def test_no_other_module_renames_files_into_place_by_itself():
    """Every temporary-file-then-rename goes through dumpers.atomic (one place removes temporary files)."""
    offenders = []
    for package in ("dumpers", "generators", "pytest_msprobe"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "atomic.py":
                continue
            text = path.read_text(encoding="utf-8")
            if re.search(r"\.tmp\{|os\.rename\(", text) or (
                    "os.replace(" in text and "staging" not in text):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
