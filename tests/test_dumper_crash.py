"""Crash safety: a dumping process killed with SIGKILL mid-step loses no captured call; repair-dump finalises."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

from dumpers import format as fmt
from dumpers.repair import find_unfinished, repair

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCRIPT = r"""
import os, signal, sys
import torch
from dumpers.torch_dump import PrecisionDebugger

dbg = PrecisionDebugger(dump_path=sys.argv[1], task=sys.argv[2])
x = torch.randn(4, 4, requires_grad=True)
for step in range(2):
    dbg.start()
    y = torch.relu(x)
    z = torch.exp(y)
    if step == 1:
        w = torch.sin(z) * 3
        w.sum().backward()
        print("captured", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    z.sum().backward()
    dbg.stop()
    dbg.step()
"""

EXPECTED_STEP1 = ["Torch.relu.0.forward", "Torch.exp.0.forward", "Torch.sin.0.forward", "Tensor.__mul__.0.forward",
                  "Tensor.sum.0.forward", "Tensor.sum.0.backward", "Tensor.__mul__.0.backward",
                  "Torch.sin.0.backward", "Torch.exp.0.backward", "Torch.relu.0.backward"]


@pytest.fixture(scope="module")
def killed_dumps(tmp_path_factory):
    """One killed training process per task, run side by side (each costs a Python + torch start-up)."""
    root = tmp_path_factory.mktemp("killed")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = {task: subprocess.Popen([sys.executable, "-c", SCRIPT, str(root / task), task], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for task in ("statistics", "tensor")}
    for proc in procs.values():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == -signal.SIGKILL, err
        assert "captured" in out
    return {task: root / task for task in procs}


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_sigkill_mid_step_loses_nothing(tmp_path, killed_dumps, task):
    dump = tmp_path / "dump"
    shutil.copytree(killed_dumps[task], dump)
    step0, step1 = dump / "step0" / "rank", dump / "step1" / "rank"
    assert not (step0 / fmt.JOURNAL).exists()                 # step 0 was finalised by stop()
    assert (step1 / fmt.JOURNAL).exists()
    assert json.loads((step1 / "dump.json").read_text())["data"] == {}   # the initial file, never rewritten
    assert find_unfinished(str(dump)) == [str(step1)]
    results = repair(str(dump))
    assert len(results) == 1 and results[0].new_entries == len(EXPECTED_STEP1)
    dump_json = json.loads((step1 / "dump.json").read_text())
    assert list(dump_json) == list(fmt.TOP_LEVEL_KEYS) and dump_json["task"] == task
    assert list(dump_json["data"]) == EXPECTED_STEP1
    stack = json.loads((step1 / "stack.json").read_text())
    assert sorted(k for group in stack.values() for k in group[0]) == sorted(
        k for k in EXPECTED_STEP1 if k.endswith("forward"))
    assert not (step1 / fmt.JOURNAL).exists()
    if task == "tensor":
        files = set(os.listdir(step1 / fmt.TENSOR_DIR))
        assert not any(".tmp" in name for name in files)
        # every file not written before the kill is reported, every reported one is really absent
        assert all(name not in files for name in results[0].missing_tensor_files)


def test_repair_cli(tmp_path, killed_dumps, capsys):
    from pytest_msprobe.cli import main

    dump = tmp_path / "dump"
    shutil.copytree(killed_dumps["statistics"], dump)
    assert main(["repair-dump", str(dump), "--keep-journal"]) == 0
    out = capsys.readouterr().out
    assert "10 entries (10 recovered from the journal)" in out
    assert main(["repair-dump", str(dump / "step1" / "rank")]) == 0   # idempotent: merges file + journal
    assert len(json.loads((dump / "step1" / "rank" / "dump.json").read_text())["data"]) == 10
    assert main(["repair-dump", str(dump)]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def test_truncated_last_line_is_skipped(tmp_path):
    from dumpers.journal import JournalWriter

    d = tmp_path / "step0" / "rank"
    d.mkdir(parents=True)
    writer = JournalWriter(str(d / fmt.JOURNAL))
    writer.header("statistics", "L1", "pytorch", None)
    writer.entry("Torch.exp.0.forward", {"input_args": [], "input_kwargs": {}, "output": []})
    writer.close()
    with open(d / fmt.JOURNAL, "ab") as fh:
        fh.write(b'{"t":"e","k":"Torch.sin.0.forward","v":{"inp')
    result = repair(str(tmp_path))[0]
    assert result.truncated and result.entries == 1
    assert list(json.loads((d / "dump.json").read_text())["data"]) == ["Torch.exp.0.forward"]


@pytest.mark.parametrize("named", ["file", "step", "dump"])
def test_the_checker_refuses_an_unrepaired_dump_then_checks_every_call(pytester, killed_dumps, named):
    """A real SIGKILLed dump: the checker names the step and the repair-dump command; after it every call runs."""
    dump = pytester.path / "dump"
    shutil.copytree(killed_dumps["statistics"], dump)
    step1 = "dump/step1/rank"                           # as the user named it: the command works from here
    arg = {"file": "dump/step1/rank/dump.json", "step": "dump/step1", "dump": "dump"}[named]
    res = pytester.runpytest("--msprobe-api-info", arg, "-p", "no:randomly")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert f"{step1}: the dump of this step was never finished" in err
    assert f"`pytest-msprobe repair-dump {step1}`" in err
    repair(str(dump))
    res = pytester.runpytest("--msprobe-api-info", arg, "-p", "no:randomly", "-q")
    outcomes = res.parseoutcomes()
    checked = outcomes.get("passed", 0) + outcomes.get("failed", 0) + outcomes.get("skipped", 0)
    calls = {k.rsplit(".", 1)[0] for k in EXPECTED_STEP1}
    step0_calls = 3 if named == "dump" else 0          # relu, exp, sum of step 0
    assert checked == len(calls) + step0_calls, res.stdout.str()


def test_a_step_with_a_journal_and_no_dump_json_is_refused(tmp_path):
    from generators.loader import DumpError, find_dump_files

    rank = tmp_path / "step0" / "rank"
    rank.mkdir(parents=True)
    (rank / fmt.JOURNAL).write_text('{"t":"m","task":"statistics"}\n')
    with pytest.raises(DumpError, match=r"repair-dump .*step0/rank`"):
        find_dump_files(str(tmp_path))
    with pytest.raises(DumpError, match="never finished"):
        find_dump_files(str(rank / fmt.DUMP_JSON))
