"""Models someone else wrote (transformers): one training step dumped, then checked by pytest.

For each model of :mod:`zoo` (Llama-style decoder, GPT-2, BERT, T5, ViT, ResNet), one step
(forward, loss, backward, AdamW) is dumped in statistics and in tensor mode. The step trains bit for bit as
without the dumper; the names follow the wrap lists and msprobe's numbering; a real pytest session checks
the dump (tensor files, and random data from the statistics) and reports every call exactly once, without
an internal error or a Python traceback in a message.
"""
from __future__ import annotations

import glob
import json
import re
import shutil

import pytest
import torch

import generators.inputs  # noqa: F401 - imported before pytester snapshots sys.modules
import pytest_msprobe.precision.compare  # noqa: F401
import zoo
from dumpers.torch_dump import wrap_lists
from pytest_msprobe import PrecisionDebugger
from pytest_msprobe.report import acc_csv

TASKS = ("statistics", "tensor")
LISTS = {"Functional": set(wrap_lists.FUNCTIONAL), "Tensor": set(wrap_lists.TENSOR), "Torch": set(wrap_lists.TORCH),
         "VF": set(wrap_lists.VF), "Distributed": set(wrap_lists.DISTRIBUTED)}
ENTRY = re.compile(r"^(?P<prefix>[A-Za-z]+)\.(?P<api>.+)\.(?P<index>\d+)\.(?P<direction>forward|backward)$")
_DUMPS: dict = {}


def dump(name: str, task: str, root) -> dict:
    """The dump of one training step of ``name`` (made once per session), and whether training was identical."""
    key = (name, task)
    if key not in _DUMPS:
        loss_plain, params_plain = zoo.train_step(name)
        PrecisionDebugger.reset()
        debugger = PrecisionDebugger(dump_path=str(root / f"{name}-{task}"), task=task, level="L1")
        loss, params = zoo.train_step(name, debugger)
        debugger.flush()
        PrecisionDebugger.reset()
        identical = torch.equal(loss, loss_plain) and params.keys() == params_plain.keys() and all(
            torch.equal(params[k], params_plain[k]) for k in params)
        path = root / f"{name}-{task}" / "step0" / "rank"
        data = json.loads((path / "dump.json").read_text())["data"]
        _DUMPS[key] = {"dir": path, "data": data, "identical": identical}
    return _DUMPS[key]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_training_is_bit_identical_with_the_dumper_on(name, task, root):
    assert dump(name, task, root)["identical"], f"{name}: the dumped step trained differently"


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_names_follow_the_wrap_lists_and_msprobe_numbering(name, root):
    data = dump(name, "statistics", root)["data"]
    indices: dict = {}
    for key in data:
        m = ENTRY.match(key)
        assert m, f"{key}: not an msprobe entry name"
        prefix, api = m["prefix"], m["api"]
        assert api in LISTS.get(prefix, ()), f"{key}: {prefix}.{api} is not in msprobe's wrap lists"
        if m["direction"] == "forward":
            indices.setdefault(f"{prefix}.{api}", []).append(int(m["index"]))
        else:
            assert key.replace(".backward", ".forward") in data, f"{key} has no forward entry"
    for api, seen in indices.items():                     # per name, 0, 1, 2, ... in call order
        assert seen == list(range(len(seen))), f"{api}: indices {seen}"
    assert list(dump(name, "tensor", root)["data"]) == list(data)   # both tasks name the same calls
    # Python scalars on the left are reflected operators (GPT-2's 0.5 * x, Llama's 1 / x is not one)
    for key, entry in data.items():
        if key.startswith(("Tensor.__mul__.", "Tensor.__add__.")) and key.endswith("forward"):
            args = entry["input_args"]
            assert args and args[0].get("type") == "torch.Tensor", key


CHECKS = [("statistics", ()), ("tensor", ())]


@pytest.mark.parametrize("task, extra", CHECKS, ids=["statistics-random", "tensor-real"])
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_pytest_checks_every_call_once(name, task, extra, root, pytester):
    made = dump(name, task, root)
    shutil.copytree(made["dir"], pytester.path / "dump")
    pytester.makeini("[pytest]\n")
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "-p", "no:randomly", *extra)
    text = res.stdout.str() + res.stderr.str()
    assert "INTERNALERROR" not in text and res.ret in (0, 1), text[-3000:]
    assert "Traceback (most recent call last)" not in text, text[-3000:]
    calls = [k[: -len(".forward")] for k in made["data"] if k.endswith(".forward")]
    files = glob.glob(str(pytester.path / "accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    rows = [r.name for r in acc_csv.read_result_csv(files[0])]
    assert sorted(rows) == sorted(calls)                  # every call once, none twice, none missing
    outcomes = res.parseoutcomes()
    assert sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped", "xfailed")) == len(calls)
    assert not outcomes.get("error"), text[-3000:]
    for line in res.outlines:                              # SKIP reasons and failures are one-line messages
        assert not re.search(r'File "[^"]+", line \d+', line), line
