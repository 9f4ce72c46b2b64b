"""The statistics compare over whole columns against the same compare made line by line (table.Line, its cells
and table.check_api, the path of the tensor and md5 modes): the same CSV bytes and the same first divergence,
on msprobe's own statistics dumps and on a pair made of the awkward cases (NaN, infinities, signed zeros, zero
golden statistics, overflowing differences, text and integer statistics, quoting, formula leads, dtype, shape
and requires_grad mismatches, ignored APIs, unmatched and doubly matched rows, call stacks)."""
from __future__ import annotations

import glob
import json
import math
import os
from types import SimpleNamespace

import pytest

from pytest_msprobe.runs_compare import diverge, match, runner, table
from pytest_msprobe.runs_compare.columnar import StatLines
from pytest_msprobe.runs_compare.inputs import read_side
from pytest_msprobe.runs_compare.rows import dump_rows

DATA = os.path.join(os.path.dirname(__file__), "data")
STATS = os.path.join(DATA, "msprobe_26_2_compare", "llama", "statistics")


def _line_by_line(target: str, golden: str, fuzzy: bool) -> tuple:
    """(CSV text, lines) of a statistics compare made one table.Line at a time."""
    t, g = read_side(target), read_side(golden)
    notes: list = []
    t_rows, g_rows = dump_rows(t.data, notes), dump_rows(g.data, notes)
    pairs = match.fuzzy(t_rows, g_rows) if fuzzy else match.exact(t_rows, g_rows)
    lines = [table.Line(a, b) for a, b in pairs]
    seen: set = set()
    for line in lines:
        if t.stack is not None and line.target.key not in seen:
            seen.add(line.target.key)
            frames = t.stack.get(line.target.key)
            line.stack = str(frames) if frames is not None else None
        line.metrics = table.statistics_metrics(line)
    groups: dict = {}
    for line in lines:
        groups.setdefault(line.target.key, []).append(line)
    for group in groups.values():
        table.check_api(group, table.STATISTICS)
    return runner.render_csv(lines, table.STATISTICS, t.stack is not None), lines, t


def _check_same(tmp_path, target: str, golden: str, fuzzy: bool = False) -> tuple:
    expected, lines, side = _line_by_line(target, golden, fuzzy)
    os.makedirs(tmp_path, exist_ok=True)
    pair = SimpleNamespace(label="rank0", target=target, golden=golden, rank=0)
    result = runner.compare_pair(pair, str(tmp_path), fuzzy=fuzzy, stamp="0")
    assert isinstance(result.lines, StatLines)
    with open(result.path, encoding="utf-8", newline="") as fh:
        got = fh.read()
    assert got.splitlines() == expected.splitlines()
    assert got == expected
    made = list(result.lines)              # the lines made on demand carry the same cells and verdicts
    assert [(m.target.name, m.metrics, m.result, m.messages, m.stack) for m in made] == \
        [(x.target.name, x.metrics, x.result, x.messages, x.stack) for x in lines]
    reference = SimpleNamespace(pair=pair, mode=table.STATISTICS, lines=lines, target=side)
    assert diverge.analyze([result])[0] == diverge.analyze([reference])[0]
    return result, expected


@pytest.mark.parametrize("variant", sorted(os.listdir(STATS)))
def test_msprobe_llama_statistics_dumps(tmp_path, variant):
    golden = os.path.join(STATS, "golden", "step0", "rank", "dump.json")
    _check_same(tmp_path, os.path.join(STATS, variant, "step0", "rank", "dump.json"), golden)


@pytest.mark.parametrize("sample", ["mlp_fp32_statistics_L1", "mlp_fp32_statistics_mix"])
def test_msprobe_mlp_statistics_samples(tmp_path, sample):
    steps = sorted(glob.glob(os.path.join(DATA, sample, "step*", "rank*", "dump.json")))
    _check_same(tmp_path, steps[-1], steps[0])
    _check_same(tmp_path, steps[-1], steps[0], fuzzy=True)


def _tensor(**stats) -> dict:
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 8], "Max": 1.0, "Min": -1.0,
            "Mean": 0.25, "Norm": 3.0, "requires_grad": True}
    item.update(stats)
    return item


def _awkward(golden: bool) -> dict:
    """Entries each holding one awkward case; the golden side differs where the case needs it."""
    big = 1e308 if golden else -1e308
    data = {
        "Functional.linear.0.forward": {"input_args": [_tensor(), _tensor(shape=[8, 8])], "input_kwargs": {},
                                        "output": [_tensor(Max=1.5 if golden else 1.0 + 1e-9)]},
        "Torch.nan_stats.0.forward": {"input_args": [_tensor(Max=math.nan, Min=math.inf)],
                                      "output": [_tensor(Max=math.nan if golden else 2.0, Norm=-math.inf)]},
        "Torch.zeros.0.forward": {"input_args": [_tensor(Max=0.0, Min=-0.0 if golden else 0.0, Mean=0.0)],
                                  "output": [_tensor(Max=big, Min=0.0, Norm=0.0 if golden else 1e-30)]},
        "Torch.text_stats.0.forward": {"input_args": [_tensor(Max="nan", Min="inf", Mean="N/A", Norm=3)],
                                       "output": [_tensor(Max=7, Min=True, Mean=None, Norm="1,5")]},
        "Tensor.to.0.forward": {"input_args": [_tensor(dtype="torch.float16" if golden else "torch.float32")],
                                "output": [_tensor(Norm=9.0 if golden else 30.0)]},
        "Distributed._all_gather_base.0.forward": {"input_args": [_tensor(Norm=1.0 if golden else 9.0)],
                                                   "output": [_tensor(Norm=1.0 if golden else 99.0)]},
        "Functional.mismatch.0.forward": {
            "input_args": [_tensor(shape=[4, 8] if golden else [8, 4]),
                           _tensor(requires_grad=not golden),
                           {"type": "int", "value": 3 if golden else 4},
                           _tensor(dtype="torch.int64" if golden else "torch.float32")],
            "input_kwargs": {"alpha": {"type": "float", "value": 0.5}},
            "output": [_tensor(dtype="torch.bfloat16" if golden else "torch.float32", Norm=3.0 if golden else 40.0)]},
        "Functional.=cmd,x.0.forward": {"input_args": [_tensor(Norm=3.0 if golden else 3.5)], "output": [None]},
        "Tensor.add.0.forward": {"input_args": [_tensor(), {"type": "slice", "value": [0, 2, None]}],
                                 "output": [_tensor(Mean=0.25 if golden else 0.5, Norm=3.0 if golden else 5.0)]},
        "Tensor.add.0.backward": {"input": [_tensor(Norm=5.0)], "output": [_tensor(), None]},
        # names, dtypes and requires_grad texts beyond ASCII; floats at the ends of the double range and where
        # repr changes notation
        "Functional.ünï_αβ.0.forward": {
            "input_args": [_tensor(Max=5e-324, Min=-1.7976931348623157e308, Mean=1e16 if golden else 1e15,
                                   Norm=1e-05 if golden else 0.0001, dtype="torch.flöat32")],
            "output": [_tensor(requires_grad="ja" if golden else "nein", Max=123456789.0, Min=-2.5e-300)]},
    }
    if golden:
        data["Tensor.dup.0.forward"] = {"input_args": [_tensor(data_name="Tensor.same.0.forward.input.0.pt")]}
        data["Tensor.dup.1.forward"] = {"input_args": [_tensor(data_name="Tensor.same.0.forward.input.0.pt",
                                                               Max=2.0)]}
    else:
        data["Tensor.dup.0.forward"] = {"input_args": [_tensor(data_name="Tensor.same.0.forward.input.0.pt")]}
        data["Tensor.only_target.0.forward"] = {"input_args": [_tensor()], "output": [_tensor()]}
    return data


def _write(root: str, data: dict, stack: bool) -> str:
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "dump.json")
    with open(path, "w") as fh:
        json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                   "data": data}, fh)
    if stack:
        with open(os.path.join(root, "stack.json"), "w") as fh:
            json.dump({"0": [["Functional.linear.0.forward", "Tensor.add.0.forward"],
                             ['File "a.py", line 1, in f', 'x = "q", y']],
                       "1": [["Functional.ünï_αβ.0.forward"], ['File "ü.py", line 2, in g', "y = 'ß'"]]}, fh)
    return path


@pytest.mark.parametrize("stack", [False, True], ids=["no-stack", "stack"])
def test_awkward_pair(tmp_path, stack):
    target = _write(str(tmp_path / "t" / "rank0"), _awkward(False), stack)
    golden = _write(str(tmp_path / "g" / "rank0"), _awkward(True), stack)
    result, text = _check_same(tmp_path / "out", target, golden)
    # the cases are there: the overflowing difference, the quoted name, a doubly matched row, an unmatched one
    assert "inf%" in text or ",inf," in text
    assert '"Functional.=cmd,x.0.forward.input.0"' in text
    assert sum(1 for line in result.lines if line.target.name.startswith("Tensor.same.")) == 2
    assert any(line.golden is None for line in result.lines)
    assert {line.result for line in result.lines} >= {"error", "pass"}
    _check_same(tmp_path / "fuzzy", target, golden, fuzzy=True)


def _rows_by_the_general_walk(data: dict) -> list:
    """(name, matched name) of every row, each entry listed by entry_rows and renamed through split_key."""
    from pytest_msprobe.runs_compare.rows import EntryError, entry_rows, split_key

    out, seen = [], {}
    for key, entry in data.items():
        try:
            listed = entry_rows(key, entry)
        except EntryError:
            continue
        stem, call_dir, direction = split_key(key)
        if not stem:
            continue
        renamed = key
        if direction == "backward":
            order = seen.get(stem, 0)
            seen[stem] = order + 1
            head, _, tail = call_dir.rpartition(".")
            renamed = f"{stem}.{order if head.isdigit() else head}.{order if tail.isdigit() else tail}"
        out += [(row.name, renamed + row.name[len(key):] if row.name.startswith(key) else row.name)
                for row in listed]
    return out


def test_entry_keys_of_every_form_are_listed_and_renamed_alike():
    item = {"input_args": [_tensor()], "output": [_tensor()]}
    deep: dict = {"input_args": []}
    node = deep["input_args"]
    for _ in range(60):
        node.append([])
        node = node[0]
    keys = ["Functional.linear.4.backward", "Functional.linear.00.backward", "Functional.linear.7.backward",
            "Functional.linear.4.forward", ".0.forward", "0.backward", "x.forward", "A.b.0.parameters_grad",
            "Module.m.Linear.forward.0", "Module.m.Linear.backward.1", "Tensor.add.x.backward",
            "Tensor.add.1.backward", "Tensor.add.١.backward"]
    data = {key: dict(item) for key in keys}
    data["Functional.deep.0.forward"] = deep
    data["Functional.odd.0.forward"] = [1, 2]
    problems: list = []
    rows = dump_rows(data, problems)
    assert [(row.name, row.cmp) for row in rows] == _rows_by_the_general_walk(data)
    assert any("Functional.deep.0.forward" in p for p in problems)
    assert any("Functional.odd.0.forward" in p for p in problems)
    assert ("Functional.linear.7.backward.input.0", "Functional.linear.2.backward.input.0") in \
        [(row.name, row.cmp) for row in rows]
