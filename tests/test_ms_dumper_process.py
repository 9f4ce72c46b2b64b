"""MindSpore dumper cases that need their own process: a SIGKILL mid-step, and graph mode (L2 kernel dump).

Each starts a Python process that imports MindSpore (seconds), hence ``slow``; both still run in CI.
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dumpers import format as fmt

pytestmark = [pytest.mark.mindspore, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = """
import json, sys, time
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from pytest_msprobe.mindspore import PrecisionDebugger
"""


def write_config(path, dump_path, task, level):
    with open(path, "w") as fh:
        json.dump({"task": task, "level": level, "dump_path": str(dump_path)}, fh)
    return str(path)


def script(tmp_path, body):
    path = tmp_path / "child.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return str(path)


def test_sigkill_mid_step_keeps_every_captured_call(tmp_path):
    pytest.importorskip("mindspore")
    from pytest_msprobe.mindspore import repair
    dump = tmp_path / "dump"
    cfg = write_config(tmp_path / "c.json", dump, "tensor", "L1")
    child = script(tmp_path, f"""
        ms.set_context(mode=ms.PYNATIVE_MODE)
        dbg = PrecisionDebugger({cfg!r})
        dbg.start()
        x = ms.Tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
        ops.relu(x)
        ops.tanh(x)
        x.sum()
        print("READY", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, child], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "READY":
                break
        else:
            pytest.fail(f"the dumping child process ended before dumping (exit status {proc.wait(timeout=60)})")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    rank_dir = dump / "step0" / "rank"
    assert (rank_dir / fmt.JOURNAL).exists()
    assert repair(str(rank_dir)) == 3
    doc = json.loads((rank_dir / fmt.DUMP_JSON).read_text())
    assert list(doc["data"]) == ["Functional.relu.0.forward", "Functional.tanh.0.forward", "Tensor.sum.0.forward"]
    for entry in doc["data"].values():
        for item in entry["input_args"][:1] + entry["output"]:
            assert (rank_dir / fmt.TENSOR_DIR / item["data_name"]).exists()
    assert not (rank_dir / fmt.JOURNAL).exists()


def test_graph_mode_kernel_dump(tmp_path):
    pytest.importorskip("mindspore")
    from pytest_msprobe.mindspore import kernel_statistics
    dump = tmp_path / "kernel"
    l1 = write_config(tmp_path / "l1.json", tmp_path / "unused", "statistics", "L1")
    l2 = write_config(tmp_path / "l2.json", dump, "tensor", "L2")
    child = script(tmp_path, f"""
        ms.set_context(mode=ms.GRAPH_MODE)
        try:
            PrecisionDebugger({l1!r}).start()
        except ValueError as exc:
            print("L1 ERROR:", exc)
        dbg = PrecisionDebugger({l2!r})
        dbg.start()
        ms.set_seed(0)
        net = nn.Dense(4, 2)
        out = net(ms.Tensor(np.ones((3, 4), np.float32)))
        print("OUT", out.shape, "FILES", dbg.check_kernel_dump() > 0)
    """)
    done = subprocess.run([sys.executable, child], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "L1 ERROR: Data dump is not supported in graph_kbyk mode when dump level is api" in done.stdout
    assert "FILES True" in done.stdout
    config = json.loads((dump / "kernel_kbyk_dump.json").read_text())
    assert config["common_dump_settings"]["saved_data"] == "tensor"
    assert config["common_dump_settings"]["path"] == str(dump)
    from dumpers.mindspore_dump.kernel_dump import native_dump_files
    files = native_dump_files(str(dump))
    assert any(os.path.basename(f).startswith("MatMul.") for f in files), files
    written = kernel_statistics(str(dump))
    assert written
    with open(written[0], newline="") as fh:
        rows = list(csv.DictReader(fh))
    matmul_out = [r for r in rows if r["Op Type"] == "MatMul" and r["IO"] == "output"]
    assert matmul_out and matmul_out[0]["Shape"] == "(3,2)"
