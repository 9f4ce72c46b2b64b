"""The dumper never stops training on its own I/O errors: full disk, file size limit, vanished directory.

The first error is reported once (path, errno, what was kept), dumping is switched off for the rest of the run,
the steps written before stay checkable and no temporary file stays behind (after ``repair-dump`` included).
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

from dumpers import atomic
from dumpers import format as fmt
from dumpers.repair import repair
from dumpers.torch_dump import PrecisionDebugger

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "data" / "train_with_dump.py"
MESSAGE = "dumping is switched off for the rest of the run, training goes on"


def _train(dump_path, task: str, limit: str, writer: str = "process", apis: tuple = ()) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MSPROBE_DUMP_WRITER=writer)
    return subprocess.run([sys.executable, str(SCRIPT), str(dump_path), task, limit, *apis], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def normal_losses() -> list:
    out = _train("unused", "statistics", "off")
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _temp_files(root) -> list:
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if atomic.is_temp_name(n)]


def _assert_contract(out: subprocess.CompletedProcess, losses: list, dump) -> None:
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == losses              # training ran as without the dumper
    assert "Traceback" not in out.stderr
    assert out.stderr.count("msprobe dump:") == 1, out.stderr   # one message, about the disk
    assert out.stderr.count(MESSAGE) == 1
    # what was kept: the steps before the failing one, or (an error first seen by the tensor writer process,
    # whose step is not known when it is reported) the files written before
    assert re.search(r"Kept: (steps finished before step \d+|files written before) stay readable", out.stderr), \
        out.stderr
    step0 = pathlib.Path(dump) / "step0" / "rank"
    doc = json.loads((step0 / fmt.DUMP_JSON).read_text())
    assert doc["data"] and not (step0 / fmt.JOURNAL).exists()


def _check_step0(pytester, dump, task: str) -> None:
    """The checker runs every call of the step written before the error."""
    shutil.copytree(pathlib.Path(dump) / "step0", pytester.path / "step0")
    res = pytester.runpytest("--msprobe-api-info", "step0", "-q", "-p", "no:randomly")
    outcomes = res.parseoutcomes()
    assert res.ret == 0 and outcomes.get("passed", 0) > 0 and "error" not in outcomes, res.stdout.str()


def _repair_leaves_no_temp_files(dump) -> None:
    try:
        repair(str(dump))
    except OSError:
        pass                                                 # the disk may still be full: see the message
    assert _temp_files(dump) == []


@pytest.mark.parametrize("task,writer", [("statistics", "process"), ("tensor", "process"), ("tensor", "thread")])
def test_file_size_limit_mid_run_switches_the_dump_off(tmp_path, normal_losses, pytester, task, writer):
    """RLIMIT_FSIZE (EFBIG on every write past 20000 bytes): step 0 fits, step 1's journal does not."""
    dump = tmp_path / "dump"
    out = _train(dump, task, "20000", writer)
    _assert_contract(out, normal_losses, dump)
    assert f"[Errno {errno.EFBIG}] EFBIG" in out.stderr
    assert not (dump / "step2").exists()                  # no start() after the error touched the disk
    _repair_leaves_no_temp_files(dump)
    _check_step0(pytester, dump, task)


@contextlib.contextmanager
def _small_tmpfs(path: pathlib.Path, size: str = "64k"):
    path.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {res.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_full_disk_switches_the_dump_off(tmp_path, normal_losses, pytester, task):
    """A small tmpfs: the run goes on with its normal losses, one message, step 0 checkable."""
    # every file takes at least one 4 KiB page of the tmpfs. The tensor task dumps the ReLU calls only: step 0
    # is 9 pages (4 tensor files), step 1 needs 12 more for its tensor files alone. The tensor writer may run
    # behind training, so the JSON files and journals of steps 1 and 2 (about 11 pages) can be written before
    # step 0's tensor files: 96 KiB holds step 0 in either order and never step 1 as well.
    with _small_tmpfs(tmp_path / "disk", "96k" if task == "tensor" else "64k") as disk:
        dump = disk / "dump"
        out = _train(dump, task, "0", apis=("relu",) if task == "tensor" else ())
        _assert_contract(out, normal_losses, dump)
        _check_step0(pytester, dump, task)
        assert f"[Errno {errno.ENOSPC}] ENOSPC" in out.stderr
        res = subprocess.run([sys.executable, "-m", "pytest_msprobe.cli", "repair-dump", str(dump)],
                             env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
        assert "Traceback" not in res.stderr
        if res.returncode != 0:                            # the disk is still full: the path is named
            assert str(dump) in res.stderr and "No space left on device" in res.stderr, res.stderr
        assert _temp_files(dump) == []


@pytest.fixture
def fresh_debugger():
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_a_vanished_tensor_directory_switches_the_dump_off(tmp_path, monkeypatch, caplog, fresh_debugger, writer):
    """The tensor writer's first error (thread or process) is reported once by the session; later calls no-ops."""
    monkeypatch.setenv("MSPROBE_DUMP_WRITER", writer)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "d"), task="tensor")
    x = torch.ones(3, requires_grad=True)
    with caplog.at_level(logging.ERROR, logger="pytest_msprobe.dump"):
        dbg.start()
        torch.exp(x).sum().backward()
        dbg.stop()
        dbg.step()
        dbg.flush()
        dbg.start()
        tensor_dir = tmp_path / "d" / "step1" / "rank" / fmt.TENSOR_DIR
        shutil.rmtree(tensor_dir)                          # vanished under the running dump
        torch.exp(x).sum().backward()
        dbg.stop()
        dbg.flush()
        for _ in range(2):                                 # after the error: every call is a no-op
            dbg.step()
            dbg.start()
            torch.exp(x).sum().backward()
            dbg.stop()
        dbg.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert str(tensor_dir) in errors[0] and f"[Errno {errno.ENOENT}] ENOENT" in errors[0]
    assert dbg.session.failed is not None and not dbg.session.on
    assert not (tmp_path / "d" / "step2").exists()
    step0 = tmp_path / "d" / "step0" / "rank"
    doc = json.loads((step0 / fmt.DUMP_JSON).read_text())
    names = [item["data_name"] for entry in doc["data"].values() for part in entry.values()
             if isinstance(part, list) for item in part if isinstance(item, dict) and "data_name" in item]
    assert names and all((step0 / fmt.TENSOR_DIR / n).is_file() for n in names)
    # step 1's dump.json, queued behind its failed tensor files, was never written: the one of its start stays
    # (no entries), beside the journal repair-dump finishes it from
    step1 = tmp_path / "d" / "step1" / "rank"
    assert json.loads((step1 / fmt.DUMP_JSON).read_text())["data"] == {} and (step1 / fmt.JOURNAL).is_file()
    assert _temp_files(tmp_path) == []


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_step_json_file_lands_after_the_tensor_files_queued_before_it(tmp_path, kind):
    """Files queued with submit_file (and removals) are carried out after every tensor file queued before."""
    from dumpers.torch_dump.writer import ProcessWriter, TensorWriter
    writer = ProcessWriter() if kind == "process" else TensorWriter()
    big = [tmp_path / f"t{i}.pt" for i in range(4)]
    journal = tmp_path / fmt.JOURNAL
    journal.write_text("{}\n")
    try:
        for path in big:
            writer.submit_copy(str(path), torch.ones(4 << 20))        # 16 MiB each
        assert writer.submit_file(str(tmp_path / fmt.DUMP_JSON), b'{"data": {}}')
        assert writer.submit_remove(str(journal))
        seen = []
        while not writer.flush(timeout=0.001):
            if (tmp_path / fmt.DUMP_JSON).exists():
                seen.append(all(p.exists() for p in big))
        assert all(seen)
    finally:
        writer.close()
    assert all(p.stat().st_size > 16 << 20 for p in big)
    assert (tmp_path / fmt.DUMP_JSON).read_bytes() == b'{"data": {}}' and not journal.exists()
    assert writer.failure() is None


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_after_a_failed_tensor_file_the_json_files_behind_it_are_not_written(tmp_path, kind):
    """A tensor file that cannot be written: the dump.json and journal removal queued after it are skipped."""
    from dumpers.torch_dump.writer import ProcessWriter, TensorWriter
    writer = ProcessWriter(report=False) if kind == "process" else TensorWriter(report=False)
    journal = tmp_path / fmt.JOURNAL
    journal.write_text("{}\n")
    try:
        writer.submit_copy(str(tmp_path / "gone" / "t.pt"), torch.ones(8))   # no such directory
        writer.submit_file(str(tmp_path / fmt.DUMP_JSON), b"{}")
        writer.submit_remove(str(journal))
        writer.flush()
    finally:
        writer.close()
    assert isinstance(writer.failure(), OSError) and writer.failure().errno == errno.ENOENT
    assert not (tmp_path / fmt.DUMP_JSON).exists() and journal.exists()


def test_journal_write_error_is_reported_once_with_its_path(tmp_path, monkeypatch, caplog, fresh_debugger):
    """ENOSPC injected at the journal's write: one message naming dump.journal, the step is left for repair."""
    from dumpers import journal

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "d"))
    x = torch.ones(3)
    dbg.start()
    torch.exp(x)
    calls = []

    def full(self, *args, **kwargs):
        calls.append(1)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal.JournalWriter, "entry_text", full)
    with caplog.at_level(logging.ERROR, logger="pytest_msprobe.dump"):
        torch.sin(x)
        torch.cos(x)
        dbg.stop()
        dbg.step()
        dbg.start()
        torch.sin(x)
        dbg.stop()
    monkeypatch.undo()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and len(calls) == 1
    rank = tmp_path / "d" / "step0" / "rank"
    assert str(rank / fmt.JOURNAL) in errors[0] and "[Errno 28] ENOSPC" in errors[0]
    assert f"pytest-msprobe repair-dump {rank}" in errors[0]
    assert repair(str(tmp_path / "d"))[0].entries == 1     # the call journalled before the error


MS_SCRIPT = ROOT / "tests" / "data" / "ms_train_with_dump.py"


def _largest_file(folder) -> int:
    return max(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def _ms_train(dump_path, task: str, limit: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(MS_SCRIPT), str(dump_path), task, limit],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)


@pytest.mark.mindspore
def test_mindspore_file_size_limit_mid_run_switches_the_dump_off(tmp_path):
    """MindSpore, statistics and tensor: a file-size limit that step 0's files fit under and step 1's do not.

    The limit is measured from a dump of the same run without one (stack.json holds paths, so the sizes depend
    on where the checkout lies)."""
    pytest.importorskip("mindspore")
    normal = _ms_train("unused", "statistics", "off")
    assert normal.returncode == 0, normal.stderr
    for task in ("statistics", "tensor"):
        probe = tmp_path / f"{task}_unlimited"
        assert _ms_train(probe, task, "0").returncode == 0
        step0, step1 = (_largest_file(probe / f"step{k}" / "rank") for k in (0, 1))
        assert step0 < step1, (step0, step1)     # step 1 makes more updates than step 0
        dump = tmp_path / task
        out = _ms_train(dump, task, str((step0 + step1) // 2))
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == normal.stdout.splitlines()
        assert "Traceback" not in out.stderr
        assert out.stderr.count(MESSAGE) == 1, out.stderr
        assert f"[Errno {errno.EFBIG}] EFBIG" in out.stderr and str(dump / "step1" / "rank") in out.stderr
        step0 = dump / "step0" / "rank"
        assert json.loads((step0 / fmt.DUMP_JSON).read_text())["data"]
        assert not (step0 / fmt.JOURNAL).exists() and not (dump / "step2").exists()
        if task == "tensor":
            assert any(name.endswith(".npy") for name in os.listdir(step0 / fmt.TENSOR_DIR))
        _repair_leaves_no_temp_files(dump)
        assert json.loads((dump / "step1" / "rank" / fmt.DUMP_JSON).read_text())["data"]   # repaired
