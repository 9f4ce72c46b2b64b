"""Large statistics pairs are read and listed in two spawned processes (runs_compare/sideproc.py) and come back as
columns (sidecols.py): forced onto small real dumps here, the CSV, the lines made on demand and the first
divergence are the bytes and values of the in-process path; bad input gives the same one line; a pair the
columns do not serve (md5 mode) is read in-process."""
from __future__ import annotations

import json
import os
import pickle
from types import SimpleNamespace

import pytest

from pytest_msprobe.runs_compare import diverge, runner, sideproc
from pytest_msprobe.runs_compare.columnar import StatLines
from pytest_msprobe.runs_compare.inputs import CompareInputError, read_side
from pytest_msprobe.runs_compare.rows import dump_rows
from pytest_msprobe.runs_compare.sidecols import SideColumns
from tests.test_runs_compare_columnar import _awkward, _write

DATA = os.path.join(os.path.dirname(__file__), "data", "msprobe_26_2_compare", "llama")
ITEM_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm")


def _pair(target: str, golden: str) -> SimpleNamespace:
    return SimpleNamespace(label="rank0", target=target, golden=golden, rank=0)


def _line_view(result) -> list:
    return [(m.target.name, m.target.key, m.target.dtype, m.target.shape, m.target.stats, m.metrics, m.result,
             m.messages, m.stack, None if m.golden is None else (m.golden.name, m.golden.stats))
            for m in result.lines]


def _both_paths(tmp_path, target: str, golden: str) -> tuple:
    """(in-process result, process result, CSV bytes of each) of one pair."""
    pair = _pair(target, golden)
    for name in ("here", "spawned"):
        os.makedirs(tmp_path / name)
    here = runner.compare_pair(pair, str(tmp_path / "here"), stamp="0")
    there = runner.compare_pair(pair, str(tmp_path / "spawned"), stamp="0", process_min_bytes=0)
    with open(here.path, "rb") as a, open(there.path, "rb") as b:
        return here, there, a.read(), b.read()


def test_llama_statistics_pair_through_two_processes(tmp_path):
    golden = os.path.join(DATA, "statistics", "golden", "step0", "rank", "dump.json")
    target = os.path.join(DATA, "statistics", "noise_fault_silu", "step0", "rank", "dump.json")
    here, there, csv_here, csv_there = _both_paths(tmp_path, target, golden)
    assert isinstance(there.lines, StatLines) and there.target.data == {}      # the parent held no tree
    assert here.target.data                                                     # ... the in-process path did
    assert csv_there == csv_here and len(csv_here) > 10_000
    assert _line_view(there) == _line_view(here)
    assert diverge.analyze([there])[0] == diverge.analyze([here])[0]
    assert diverge.analyze([there])[0]                                           # a fault found, the same one


def test_awkward_pair_through_two_processes(tmp_path):
    target = _write(str(tmp_path / "t" / "rank0"), _awkward(False), True)
    golden = _write(str(tmp_path / "g" / "rank0"), _awkward(True), True)
    here, there, csv_here, csv_there = _both_paths(tmp_path, target, golden)
    assert csv_there == csv_here
    assert _line_view(there) == _line_view(here)
    assert there.notes == here.notes
    for a, b in zip(here.lines, there.lines):           # the items made again hold what a row is read by
        assert repr([(a.target.item or {}).get(k) for k in ITEM_KEYS]) == \
            repr([(b.target.item or {}).get(k) for k in ITEM_KEYS])
    assert diverge.analyze([there])[0] == diverge.analyze([here])[0]


def test_columns_sent_and_rows_made_again_are_the_listed_rows(tmp_path):
    path = _write(str(tmp_path / "t" / "rank0"), _awkward(False), False)
    rows = dump_rows(read_side(path).data, [])
    cols = pickle.loads(pickle.dumps(SideColumns(rows, keep_items=True)))
    assert len(cols.rows) == len(rows) > 10
    for i, row in enumerate(rows):
        made = cols.rows[i]
        assert made is cols.rows[i]                     # one object per row: rows are paired by identity
        assert (made.name, made.cmp, made.key, made.state, made.dtype, made.shape, made.grad, made.md5,
                made.data_name) == (row.name, row.cmp, row.key, row.state, row.dtype, row.shape, row.grad,
                                    row.md5, row.data_name)
        assert repr(made.stats) == repr(row.stats)      # NaN, signed zeros and texts as listed
        raw = row.item or {}
        assert repr([(made.item or {}).get(k) for k in ITEM_KEYS]) == repr([raw.get(k) for k in ITEM_KEYS])


def test_bad_input_gives_the_in_process_line(tmp_path):
    golden = _write(str(tmp_path / "g" / "rank0"), _awkward(True), False)
    bad = tmp_path / "t" / "rank0"
    os.makedirs(bad)
    (bad / "dump.json").write_text('{"task": "statistics", "data": {"Tensor.add.0.forward": [1,')
    lines = {}
    for label, min_bytes in (("here", None), ("spawned", 0)):
        out: list = []
        results = runner.compare_runs(str(bad / "dump.json"), golden, str(tmp_path / label), report=out.append,
                                      process_min_bytes=min_bytes)
        assert results == [] and len(out) == 1
        lines[label] = out[0]
    assert lines["spawned"] == lines["here"]
    with pytest.raises(CompareInputError) as raised:         # raised by the worker, the same text
        sideproc.read_listed(_pair(str(bad / "dump.json"), golden), min_bytes=0)
    assert lines["here"].endswith(str(raised.value))
    assert "dump.json is not valid JSON" in lines["here"] and "repair-dump" in lines["here"]


def test_md5_pair_is_read_in_process(tmp_path):
    golden = os.path.join(DATA, "md5", "golden", "step0", "rank", "dump.json")
    with open(golden) as fh:
        assert json.load(fh)["task"] == "statistics"            # md5 mode: a statistics task with md5 texts
    assert sideproc.read_listed(_pair(golden, golden), min_bytes=0) is None
    here, there, csv_here, csv_there = _both_paths(tmp_path, golden, golden)
    assert csv_there == csv_here and here.mode == there.mode == "md5"
