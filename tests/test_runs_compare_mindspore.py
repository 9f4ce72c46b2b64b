"""MindSpore dumps compared as msprobe 26.2 compares them, row for row: MindSpore against MindSpore, and a
MindSpore target against a PyTorch golden through msprobe's name mappings (``-am``, ``-am FILE``, ``-cm FILE``,
``-dm FILE``). The dumps are this project's dumps of one small network built in both frameworks with the same
weights; msprobe's CSVs were written by its own compare (tests/data/msprobe_26_2_compare/make_ms_fixtures.py)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from pytest_msprobe.cli import main as cli_main
from pytest_msprobe.runs_compare import mapping
from pytest_msprobe.runs_compare.inputs import CompareInputError
from pytest_msprobe.runs_compare.runner import compare_runs
from test_runs_compare import _read, assert_same_table

FIXTURES = os.path.join(os.path.dirname(__file__), "data", "msprobe_26_2_compare")
DUMPS = os.path.join(FIXTURES, "mindspore")
MSPROBE_OUT = os.path.join(DUMPS, "msprobe_out")
MAKE = os.path.join(FIXTURES, "make_ms_fixtures.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ms(task: str, variant: str = "golden") -> str:
    return os.path.join(DUMPS, "ms", task, variant, "step0")


def _pt(task: str) -> str:
    return os.path.join(DUMPS, "pt", task, "golden", "step0")


CASES = {   # name -> (target, golden, mapping options)
    "fault": (lambda t: _ms(t, "fault"), _ms, {}),
    "inf": (lambda t: _ms(t, "inf"), _ms, {}),
    "none": (_ms, _pt, {}),
    "am": (_ms, _pt, {"api_mapping": True}),
    "am_file": (_ms, _pt, {"api_mapping": os.path.join(DUMPS, "api_mapping.yaml")}),
    "cm": (_ms, _pt, {"cell_mapping": os.path.join(DUMPS, "cell_mapping.yaml")}),
    "dm": (_ms, _pt, {"data_mapping": os.path.join(DUMPS, "data_mapping.yaml")}),
    "lm": (_ms, _pt, {"layer_mapping": True}),
    "lm_file": (_ms, _pt, {"layer_mapping": os.path.join(DUMPS, "layer_mapping.yaml")}),
}


def _compare(target: str, golden: str, out: str, **options) -> list:
    return compare_runs(target, golden, out, report=lambda line: None, names=mapping.load(**options))


@pytest.mark.parametrize("task", ["statistics", "tensor", "md5"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_row_for_row_with_msprobe(tmp_path, task, case):
    target, golden, options = CASES[case]
    results = _compare(target(task), golden(task), str(tmp_path), **options)
    assert [r.mode for r in results] == [task]
    theirs = _read(os.path.join(MSPROBE_OUT, f"{task}_{case}", "compare_result.csv.gz"))
    assert_same_table(_read(results[0].path), theirs)


def _bench_names(task: str, case: str) -> dict:
    rows = _read(os.path.join(MSPROBE_OUT, f"{task}_{case}", "compare_result.csv.gz"))
    return {row[0]: row[1] for row in rows[1:]}


def test_the_fixtures_exercise_each_mapping():
    """What each mapping pairs in msprobe's own output: the tests above would pass on empty tables otherwise."""
    am, am_file = _bench_names("statistics", "am"), _bench_names("statistics", "am_file")
    cm, dm = _bench_names("statistics", "cm"), _bench_names("statistics", "dm")
    assert am["Functional.dense.0.forward.output.0"] == "Functional.linear.0.forward.output.0"    # the table
    assert am["Mint.tanh.0.forward.input.0"] == "Torch.tanh.0.forward.input.0"                   # Mint -> Torch
    assert am["MintFunctional.relu.0.forward.output.0"] == "Functional.relu.0.forward.output.0"
    assert am["Cell.fc1.DenseBlock.forward.0.output.0"] == "N/A"
    # a target backward call keeps its index; the golden's are numbered by their order (linear.1 ran first)
    assert am["Functional.dense.1.backward.input.0"] == "Functional.linear.0.backward.input.0"
    assert am_file["Functional.dense.1.backward.output.2"] == "N/A"        # a position the user table leaves out
    assert am_file["Functional.dense.0.forward.input.2"] == "Functional.linear.0.forward.input.2"
    assert cm["Cell.fc2.DenseBlock.parameters_grad.0.weight"] == "Module.fc2.LinearBlock.parameters_grad.0.weight"
    assert cm["Mint.tanh.0.forward.input.0"] == "N/A"
    assert dm["Functional.dense.0.forward.input.1"] == "Functional.linear.0.forward.input.1"
    assert dm["Functional.dense.1.forward.input.1"] == "N/A"
    lm, lm_file = _bench_names("statistics", "lm"), _bench_names("statistics", "lm_file")
    assert lm["Cell.fc1.DenseBlock.forward.0.output.0"] == "Module.fc1.LinearBlock.forward.0.output.0"
    assert lm["Mint.tanh.0.forward.input.0"] == "Torch.tanh.0.forward.input.0"         # same place in the tree
    assert lm["Functional.dense.0.forward.input.0"] == "N/A"                            # dense is not linear
    # the file: dense under a DenseBlock is linear; fc2.dense under the top is fc2.linear (two steps at once)
    assert lm_file["Functional.dense.0.forward.input.0"] == "Functional.linear.0.forward.input.0"
    assert lm_file["Functional.dense.1.forward.output.0"] == "Functional.linear.1.forward.output.0"
    # a mapped name meets the golden's backward calls numbered by order: fc1's backward meets linear.1's
    assert lm_file["Functional.dense.0.backward.output.1"] == "Functional.linear.1.backward.output.1"
    head = _read(os.path.join(MSPROBE_OUT, "statistics_inf", "compare_result.csv.gz"))[0]
    results = {row[0]: row for row in _read(os.path.join(MSPROBE_OUT, "statistics_inf", "compare_result.csv.gz"))}
    assert results["Mint.tanh.0.forward.output.0"][head.index("Result")] != "pass"


def test_cross_framework_statistics_agree(tmp_path):
    """The same network in both frameworks: every forward row paired by -am holds the same statistics within
    float32 rounding (the frameworks' kernels sum in other orders)."""
    results = _compare(_ms("statistics"), _pt("statistics"), str(tmp_path), api_mapping=True)
    forward = [line for line in results[0].lines if ".forward." in line.target.name and line.golden is not None
               and line.target.dtype == "Float32"]
    assert len(forward) >= 20
    for line in forward:
        t, g = line.target.stats, line.golden.stats
        n = 1
        for dim in (line.golden.item or {}).get("shape") or []:
            n *= dim
        scale = max(abs(g[0]), abs(g[1]), abs(g[3]))
        for i in range(4):       # a sum of n float32 terms: within n units of roundoff of its magnitude
            assert abs(t[i] - g[i]) <= 4 * max(n, 1) * 2.0 ** -24 * scale, (line.target.name, i, t[i], g[i])


def test_live_dumps_of_both_frameworks(tmp_path):
    """This project's dumpers, run now on the fixtures' network (MindSpore and PyTorch, statistics): -am pairs the
    calls, and the golden's statistics are those the fixtures hold."""
    pytest.importorskip("mindspore")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for what in ("golden", "torch"):
        run = subprocess.run([sys.executable, MAKE, "dump-to", str(tmp_path), "statistics", what], env=env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
    ours = _compare(os.path.join(tmp_path, "ms", "statistics", "golden", "step0"),
                    os.path.join(tmp_path, "pt", "statistics", "golden", "step0"), str(tmp_path / "out"),
                    api_mapping=True)
    kept = _compare(_ms("statistics"), _pt("statistics"), str(tmp_path / "kept"), api_mapping=True)
    assert [line.target.name for line in ours[0].lines] == [line.target.name for line in kept[0].lines]
    assert [line.golden is None for line in ours[0].lines] == [line.golden is None for line in kept[0].lines]


pytestmark = pytest.mark.mindspore


# --- the name rules ---------------------------------------------------------------------------------------------
def test_internal_names():
    assert mapping.internal_api_name("Mint.nn.functional.x.0.forward.input.0") == "Torch.nn.functional.x.0.forward" \
                                                                                 ".input.0"
    assert mapping.internal_api_name("MintFunctional.relu.0.forward.output.0") == "Functional.relu.0.forward.output.0"
    assert mapping.internal_api_name("Functional.add.3.backward.input.0") == "Torch.add.3.backward.input.0"
    assert mapping.internal_api_name("Functional.swapaxes.0.forward.input.0") == "Torch.transpose.0.forward.input.0"
    assert mapping.internal_api_name("Tensor.equal.1.forward.output.0") == "Tensor.eq.1.forward.output.0"
    assert mapping.internal_api_name("Primitive.conv2d.0.forward.input.0") == "Primitive.conv2d.0.forward.input.0"


def test_cell_names():
    cells = {"fc1.Dense": "fc1.Linear", "Dense": "Linear"}
    assert mapping.cell_name("Cell.fc1.Dense.forward.0.input.0", cells) == "Module.fc1.Linear.forward.0.input.0"
    assert mapping.cell_name("Cell.fc2.Dense.backward.0.output.0", cells) == "Module.fc2.Linear.backward.0.output.0"
    assert mapping.cell_name("Cell.fc2.Dense.parameters_grad.weight", {}) == "Module.fc2.Dense.parameters_grad.weight"
    assert mapping.cell_name("Cell.fc2.Dense.something", cells) == "N/A"


# --- bad input: one line, the rest compared --------------------------------------------------------------------
@pytest.mark.parametrize("text,flag,expected", [
    ("a: [1", "data_mapping", "not a YAML file"),
    ("- a\n- b\n", "data_mapping", "expected a mapping of names to names"),
    ("{}", "data_mapping", "maps no names"),
    ("x: !!python/object/apply:os.system ['true']\n", "cell_mapping", "not a YAML file"),
    ("ms_api: x\n", "api_mapping", "expected a list of entries"),
    ("- ms_api: Functional.dense\n  pt_api: 3\n", "api_mapping", "entry 0 needs ms_api and pt_api"),
])
def test_bad_mapping_files_are_refused_in_one_line(tmp_path, text, flag, expected):
    path = tmp_path / "map.yaml"
    path.write_text(text)
    with pytest.raises(CompareInputError, match=expected) as info:
        mapping.load(**{flag: str(path)})
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_layer_mapping_without_construct_json_skips_the_pair_in_one_line(tmp_path):
    for side, src in (("t", _ms("statistics")), ("g", _pt("statistics"))):
        shutil.copytree(src, str(tmp_path / side))
    os.remove(tmp_path / "g" / "rank" / "construct.json")
    lines: list = []
    assert compare_runs(str(tmp_path / "t"), str(tmp_path / "g"), str(tmp_path / "out"), report=lines.append,
                        names=mapping.load(layer_mapping=True)) == []
    assert any("SKIP" in line and "construct.json" in line and "level mix or L0" in line for line in lines)


def test_bad_layer_mapping_file(tmp_path):
    path = tmp_path / "lm.yaml"
    path.write_text("DenseBlock: [dense, linear]\n")
    with pytest.raises(CompareInputError, match="-lm .*expected class names"):
        mapping.load(layer_mapping=str(path))


def test_missing_mapping_file_names_it(tmp_path):
    with pytest.raises(CompareInputError, match="cannot be read"):
        mapping.load(cell_mapping=str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize("lists", ["ms_args: [0, 1]\n  pt_args: [0]", "ms_output: [0, 1]\n  pt_output: [0]"])
def test_user_entry_with_unequal_positions_is_skipped_and_said(tmp_path, lists):
    path = tmp_path / "am.yaml"
    path.write_text(f"- ms_api: Functional.dense\n  pt_api: Functional.linear\n  {lists}\n")
    lines: list = []
    names = mapping.load(api_mapping=str(path))
    results = compare_runs(_ms("statistics"), _pt("statistics"), str(tmp_path / "out"), report=lines.append,
                           names=names)
    assert any("entry 0 (Functional.dense)" in line and "not used" in line for line in lines)
    by_name = {line.target.name: line for line in results[0].lines}       # the built-in table still applies
    assert by_name["Functional.dense.0.forward.input.0"].golden.name == "Functional.linear.0.forward.input.0"


def test_api_and_layer_mapping_on_a_pytorch_target_are_said_and_ignored(tmp_path):
    lines: list = []
    results = compare_runs(_pt("statistics"), _pt("statistics"), str(tmp_path), report=lines.append,
                           names=mapping.load(api_mapping=True))
    assert any("target is a PyTorch dump" in line for line in lines)
    assert all(line.golden is not None for line in results[0].lines if line.target.dtype != "N/A")
    lines.clear()
    compare_runs(_pt("statistics"), _pt("statistics"), str(tmp_path / "lm"), report=lines.append,
                 names=mapping.load(layer_mapping=True))
    assert any("-lm is msprobe's MindSpore layer mapping" in line for line in lines)


def test_cli_flags(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert cli_main(["compare", "-tp", _ms("statistics"), "-gp", _pt("statistics"), "-o", out, "-am"]) == 0
    ours = [name for name in os.listdir(out) if name.endswith(".csv")]
    assert len(ours) == 1
    assert_same_table(_read(os.path.join(out, ours[0])),
                      _read(os.path.join(MSPROBE_OUT, "statistics_am", "compare_result.csv.gz")))
    capsys.readouterr()
    assert cli_main(["compare", "-tp", _ms("statistics"), "-gp", _pt("statistics"), "-o", out, "-lm", "-dm",
                     os.path.join(DUMPS, "data_mapping.yaml")]) == 2
    assert "-lm makes its own row mapping; leave out -dm" in capsys.readouterr().err
    assert cli_main(["compare", "-tp", _ms("statistics"), "-gp", _pt("statistics"), "-o", out, "-am", "-fm"]) == 2
    assert "-fm cannot be combined" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("[1, 2]")
    assert cli_main(["compare", "-tp", _ms("statistics"), "-gp", _pt("statistics"), "-o", out, "-dm",
                     str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-dm" in err[0] and str(bad) in err[0]


def test_pytest_form_with_api_mapping(pytester):
    """``pytest --msprobe-compare MS --msprobe-golden PT --msprobe-compare-api-mapping=FILE``: the CSV is msprobe's."""
    pytester.makeini("[pytest]\n")
    for side in ("ms", "pt"):
        shutil.copytree(os.path.join(DUMPS, side, "statistics", "golden"), str(pytester.path / side))
    table = os.path.join(DUMPS, "api_mapping.yaml")
    result = pytester.runpytest_subprocess("--msprobe-compare", str(pytester.path / "ms" / "step0"),
                                           "--msprobe-golden", str(pytester.path / "pt" / "step0"),
                                           f"--msprobe-compare-api-mapping={table}", "--msprobe-compare-out",
                                           str(pytester.path / "out"), "-p", "no:randomly", "-q", "-rfs")
    assert result.ret == 1                      # msprobe calls Float32 against torch.float32 a dtype error
    out = result.stdout.str()
    assert "FAILED ms/step0/rank/dump.json::Functional.dense.0" in out
    assert "FAILED ms/step0/rank/dump.json::Tensor.__mul__.0" in out
    (ours,) = glob.glob(str(pytester.path / "out" / "compare_result_rank_*.csv"))
    assert_same_table(_read(ours), _read(os.path.join(MSPROBE_OUT, "statistics_am_file", "compare_result.csv.gz")))


def test_msprobe_own_mindspore_npu_dump_row_for_row(tmp_path):
    """A MindSpore dump made by msprobe's own dumper on an Ascend NPU (msprobe's test data) against a copy with
    every seventh entry's first output Max times 1.5, dump.json files (make_fixtures.py repo npu_megatron_mindspore)."""
    golden = os.path.join(FIXTURES, "..", "msprobe_repo_fixtures", "npu_megatron_mindspore", "dump.json")
    target = os.path.join(FIXTURES, "repo", "npu_megatron_mindspore", "target", "dump.json")
    results = _compare(target, golden, str(tmp_path))
    theirs = _read(os.path.join(FIXTURES, "msprobe_out", "repo", "npu_megatron_mindspore", "compare_result.csv.gz"))
    col = theirs[0].index("MaxRelativeErr")
    assert len(theirs) > 20 and any(row[col] == "50.0%" for row in theirs[1:])
    assert_same_table(_read(results[0].path), theirs)


def test_user_table_positions_and_keywords_as_msprobe(tmp_path):
    """A user -am table that swaps positions: a keyword input and a position the golden call lacks match nothing;
    msprobe's CSV of the same hand-made pair, row for row."""
    table = os.path.join(DUMPS, "user_table")
    results = _compare(os.path.join(table, "target", "dump.json"), os.path.join(table, "golden", "dump.json"),
                       str(tmp_path), api_mapping=os.path.join(table, "am.yaml"))
    theirs = _read(os.path.join(MSPROBE_OUT, "user_table", "compare_result.csv.gz"))
    assert_same_table(_read(results[0].path), theirs)
    bench = {row[0]: row[1] for row in theirs[1:]}
    assert bench["Functional.dense.0.forward.input.0"] == "Functional.linear.0.forward.input.1"
    assert bench["Functional.dense.0.forward.input.bias"] == "N/A"
    assert bench["Functional.dense.0.backward.output.1"] == "Functional.linear.0.backward.output.0"


def test_layer_mapping_renumbers_pipeline_layers_as_msprobe(tmp_path):
    """-lm on layers numbered from 2 (a pipeline stage's global numbers) against layers numbered from 0: they pair
    by their place; msprobe's CSV of the same hand-made pair, row for row."""
    layers = os.path.join(DUMPS, "layers")
    results = _compare(os.path.join(layers, "target", "dump.json"), os.path.join(layers, "golden", "dump.json"),
                       str(tmp_path), layer_mapping=True)
    theirs = _read(os.path.join(MSPROBE_OUT, "layers", "compare_result.csv.gz"))
    assert_same_table(_read(results[0].path), theirs)
    bench = {row[0]: row[1] for row in theirs[1:]}
    assert bench["Cell.decoder.layers.3.ParallelTransformerLayer.forward.0.output.0"] == \
        "Module.decoder.layers.1.ParallelTransformerLayer.forward.0.output.0"
