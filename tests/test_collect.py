"""Collection of large dumps: what it leaves out (torch in ``--collect-only``, garbage collections of the run's
long-lived objects) and what stays exactly as before (node ids, order, SKIP reasons, ``-k``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_msprobe.api_items import SETTLE_AT

pytest_plugins = ["pytester"]

APIS = ("Functional.linear", "Tensor.add", "Torch.matmul", "Functional.gelu", "Tensor.__mul__")

WATCH = '''
import gc, os, sys


def pytest_unconfigure(config):
    with open(os.path.join(os.path.dirname(__file__), "watch.json"), "w") as fh:
        fh.write('{"torch": %s, "frozen": %d}' % ("true" if "torch" in sys.modules else "false",
                                                 gc.get_freeze_count()))
'''


def _tensor(shape: list) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": 1.5, "Min": -1.5,
            "Mean": 0.25, "Norm": 3.0, "requires_grad": True}


def write_dump(path, calls: int) -> list:
    """A statistics dump.json of ``calls`` API calls (forward and backward); the call names in dump order."""
    path.mkdir(parents=True, exist_ok=True)
    data, names = {}, []
    for i in range(calls):
        name = f"{APIS[i % len(APIS)]}.{i}"
        names.append(name)
        data[f"{name}.forward"] = {"input_args": [_tensor([2, 3]), _tensor([3, 3])], "input_kwargs": {},
                                   "output": [_tensor([2, 3])]}
        data[f"{name}.backward"] = {"input": [_tensor([2, 3])], "output": [_tensor([2, 3]), _tensor([3, 3])]}
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (path / "dump.json").write_text(json.dumps(doc, indent=1))
    return names


def _collect(pytester, *args: str) -> tuple:
    """``pytest --collect-only -q`` in a fresh process: its node id lines and what the watching conftest saw."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", *args], cwd=pytester.path, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    ids = [ln for ln in res.stdout.splitlines() if "::" in ln]
    return ids, json.loads((pytester.path / "watch.json").read_text())


def test_collect_only_imports_no_torch_and_freezes_a_large_collection(pytester):
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(WATCH)
    names = write_dump(pytester.path / "big", SETTLE_AT)
    ids, seen = _collect(pytester, "--msprobe-api-info=big/dump.json")
    assert ids == [f"big/dump.json::{n}" for n in names]
    assert seen["torch"] is False           # nothing runs: the device is checked without being taken
    assert seen["frozen"] > 2 * SETTLE_AT   # cases and items are out of the garbage collector's way

    names = write_dump(pytester.path / "small", 20)
    ids, seen = _collect(pytester, "--msprobe-api-info=small/dump.json", "-k", "Tensor.add",
                         "--msprobe-black-list", "gelu")
    assert ids == [f"small/dump.json::{n}" for n in names if n.startswith("Tensor.add.")]
    assert seen == {"torch": False, "frozen": 0}     # a small run is left to the collector as it is


def test_collect_only_still_refuses_an_unknown_device_type(pytester):
    pytester.makeini("[pytest]\n")
    write_dump(pytester.path / "small", 3)
    res = pytester.runpytest("--msprobe-api-info=small/dump.json", "--collect-only", "-q",
                             "--msprobe-device-type", "nosuch")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*unknown device type 'nosuch'*"])


def _collected(pytester, *args: str) -> list:
    """The items of an in-process ``--collect-only`` run, in the order they would run."""
    rec = pytester.inline_run("--collect-only", "-p", "no:randomly", *args)
    return list(rec.getcall("pytest_collection_finish").session.items)

