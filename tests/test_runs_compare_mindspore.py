"""MindSpore dumps compared as msprobe 26.2 compares them, row for row: MindSpore against MindSpore, and a
MindSpore target against a PyTorch golden through msprobe's name mappings (``-am``, ``-am FILE``, ``-cm FILE``,
``-dm FILE``). The dumps are this project's dumps of one small network built in both frameworks with the same
weights; msprobe's CSVs were written by its own compare (tests/data/msprobe_26_2_compare/make_ms_fixtures.py).
Across frameworks the CSV is msprobe's with the documented Result/Err_message cells changed (docs/compare.md:
dtypes judged by kind and width, no requires_grad rule against a side that does not record it)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from pytest_msprobe.cli import main as cli_main
from pytest_msprobe.runs_compare import mapping, xframework
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


MSG_DTYPE = "error: The dtype of NPU and Bench are inconsistent."
MSG_GRAD = "error: The Required_Grad of NPU and Bench are inconsistent"
SAME_KIND = {("Float32", "torch.float32")}      # the dtype pairs of these fixtures that name one kind and width
LEVELS = ("pass", "warning", "error")


def across_frameworks(theirs: list) -> tuple:
    """msprobe's CSV of a MindSpore target against a PyTorch golden as this project writes it, and the cells that
    differ, as (row index, column name): on each row the dtype message is dropped where the two dtypes name one
    kind and width, the requires_grad message where a side's requires_grad is N/A; Result is the worst level of
    the messages left. Every other cell (Requires_grad Consistent too) stays msprobe's."""
    head = theirs[0]
    res, err = head.index("Result"), head.index("Err_message")
    dtypes = head.index("NPU Dtype"), head.index("Bench Dtype")
    grads = head.index("NPU Requires_grad"), head.index("Bench Requires_grad")
    out, changed = [head], set()
    for i, row in enumerate(theirs[1:], 1):
        row = list(row)
        messages = json.loads(row[err])
        kept = [m for m in messages
                if not (m == MSG_DTYPE and (row[dtypes[0]], row[dtypes[1]]) in SAME_KIND)
                and not (m == MSG_GRAD and "N/A" in (row[grads[0]], row[grads[1]]))]
        if kept != messages:
            row[err] = json.dumps(kept)
            changed.add((i, "Err_message"))
            result = max((m.split(":")[0] for m in kept), key=LEVELS.index, default="pass")
            if result != row[res]:
                row[res] = result
                changed.add((i, "Result"))
        out.append(row)
    return out, changed


def assert_msprobe_across_frameworks(ours: list, theirs: list) -> set:
    """Our CSV is msprobe's with exactly the cells :func:`across_frameworks` names changed; returns them."""
    expected, changed = across_frameworks(theirs)
    assert_same_table(ours, expected)
    head = theirs[0]
    differ = {(i, head[c]) for i, (mine, ref) in enumerate(zip(ours, theirs)) for c, (a, b) in enumerate(zip(mine, ref))
              if a != b and head[c] in ("Result", "Err_message")}
    assert differ == changed
    return changed


@pytest.mark.parametrize("task", ["statistics", "tensor", "md5"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_row_for_row_with_msprobe(tmp_path, task, case):
    """Same framework: msprobe's CSV. MindSpore against PyTorch: msprobe's with the documented cells changed (the
    md5 compare has no dtype or requires_grad rule, so none there)."""
    target, golden, options = CASES[case]
    results = _compare(target(task), golden(task), str(tmp_path), **options)
    assert [r.mode for r in results] == [task]
    theirs = _read(os.path.join(MSPROBE_OUT, f"{task}_{case}", "compare_result.csv.gz"))
    ours = _read(results[0].path)
    if golden is not _pt:
        assert_same_table(ours, theirs)
        return
    changed = assert_msprobe_across_frameworks(ours, theirs)
    assert bool(changed) == (task != "md5")


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
    assert_msprobe_across_frameworks(_read(os.path.join(out, ours[0])),
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


def _edited_ms_dump(tmp_path, task: str) -> str:
    """The MindSpore dump with fc2's input Float16, its output BFloat16, its weight's requires_grad False and its
    bias's True (the PyTorch golden: torch.float32, requires_grad True)."""
    target = tmp_path / "ms"
    shutil.copytree(_ms(task), str(target))
    path = target / "rank" / "dump.json"
    doc = json.loads(path.read_text())
    call = doc["data"]["Cell.fc2.DenseBlock.forward.0"]
    call["input_args"][0]["dtype"] = "Float16"
    call["output"][0]["dtype"] = "BFloat16"
    call["parameters"]["weight"]["requires_grad"] = False
    call["parameters"]["bias"]["requires_grad"] = True
    path.write_text(json.dumps(doc))
    return str(target)


@pytest.mark.parametrize("options", [{}, {"api_mapping": True}, {"layer_mapping": True},
                                     {"cell_mapping": os.path.join(DUMPS, "cell_mapping.yaml")}],
                         ids=["none", "am", "lm", "cm"])
def test_columnar_and_line_rules_agree_across_frameworks(tmp_path, options):
    """The statistics compare over columns gives each row the Result and messages table.check_api gives it with
    the cross-framework rules, real dtype and requires_grad differences among them."""
    from pytest_msprobe.runs_compare import table
    from pytest_msprobe.runs_compare.inputs import read_side
    from pytest_msprobe.runs_compare.runner import build_lines

    target = read_side(os.path.join(_edited_ms_dump(tmp_path, "statistics"), "rank", "dump.json"))
    golden = read_side(os.path.join(_pt("statistics"), "rank", "dump.json"))
    mode, columnar, _ = build_lines(target, golden, names=mapping.load(**options))
    assert mode == table.STATISTICS
    made = list(columnar)
    lines = [table.Line(m.target, m.golden, metrics=m.metrics) for m in made]
    groups: dict = {}
    for line in lines:
        groups.setdefault(line.target.key, []).append(line)
    for group in groups.values():
        table.check_api(group, mode, xframework.CROSS)
    assert [(m.result, m.messages) for m in made] == [(x.result, x.messages) for x in lines]
    flagged = {m.target.name for m in made if MSG_DTYPE in m.messages or MSG_GRAD in m.messages}
    edited = {"Cell.fc2.DenseBlock.forward.0." + row for row in ("input.0", "output.0", "parameters.weight")}
    assert flagged == (edited if "cell_mapping" in options or "layer_mapping" in options else set())
    assert sum(m.golden is not None for m in made) >= 9


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_real_dtype_or_requires_grad_difference_across_frameworks_is_still_an_error(tmp_path, task):
    """MindSpore rows whose dtype differs in width (Float16, BFloat16) from the PyTorch golden's torch.float32, and
    a recorded requires_grad that differs: errors, in the statistics (columnar) and the tensor (line) compare; the
    rows of that call the edit leaves alone pass."""
    target = _edited_ms_dump(tmp_path, task)
    results = _compare(target, _pt(task), str(tmp_path / "out"),
                       cell_mapping=os.path.join(DUMPS, "cell_mapping.yaml"))
    rows = {row[0]: row for row in _read(results[0].path)}
    head = _read(results[0].path)[0]
    res, err = head.index("Result"), head.index("Err_message")

    def verdict(name: str) -> tuple:
        return rows[name][res], json.loads(rows[name][err])

    prefix = "Cell.fc2.DenseBlock.forward.0."
    assert rows[prefix + "input.0"][head.index("Bench Dtype")] == "torch.float32"
    assert verdict(prefix + "input.0") == ("error", [MSG_DTYPE])
    assert verdict(prefix + "output.0") == ("error", [MSG_DTYPE])
    assert verdict(prefix + "parameters.weight") == ("error", [MSG_GRAD])
    assert verdict(prefix + "parameters.bias") == ("pass", [])
    assert rows[prefix + "parameters.weight"][head.index("Requires_grad Consistent")] == "False"
    assert rows[prefix + "parameters.bias"][head.index("Requires_grad Consistent")] == "True"


def test_dtype_and_requires_grad_rules():
    assert xframework.rules_of("mindspore", "pytorch") is xframework.CROSS
    assert xframework.rules_of("pytorch", "mindspore") is xframework.CROSS
    assert xframework.rules_of("pytorch", "pytorch") is xframework.SAME
    assert xframework.rules_of("mindspore", "mindspore") is xframework.SAME
    cross, same = xframework.CROSS, xframework.SAME
    for ms, pt in (("Float32", "torch.float32"), ("Float16", "torch.float16"), ("BFloat16", "torch.bfloat16"),
                   ("Int64", "torch.int64"), ("UInt8", "torch.uint8"), ("Bool", "torch.bool"),
                   ("Complex64", "torch.complex64"), ("Float8E4M3FN", "torch.float8_e4m3fn")):
        assert not cross.dtypes_differ(ms, pt) and not cross.dtypes_differ(pt, ms)
        assert same.dtypes_differ(ms, pt)                          # one framework: msprobe's text rule
    for ms, pt in (("Float16", "torch.float32"), ("BFloat16", "torch.float16"), ("Int32", "torch.int64"),
                   ("Float32", "torch.int32"), ("N/A", "torch.float32"), ("Float32", "N/A"),
                   ("<class 'int'>", "<class 'float'>"), ("Int4", "torch.int4"), ("HiFloat8", "torch.float8_e4m3fn"),
                   ("Float32", "float32"), ("Float32", "Float16")):
        assert cross.dtypes_differ(ms, pt)
    assert not cross.dtypes_differ("<class 'float'>", "<class 'float'>")
    assert cross.grads_differ("False", "True") and same.grads_differ("False", "True")
    assert not cross.grads_differ("N/A", "True") and same.grads_differ("N/A", "True")
    assert not cross.grads_differ("", "True") and not same.grads_differ("", "True")
    assert not cross.grads_differ("True", "True")


def _run_pytest_form(pytester, target: str, *options: str):
    pytester.makeini("[pytest]\n")
    for side, src in (("ms", os.path.join(DUMPS, "ms", "statistics", target)),
                      ("pt", os.path.join(DUMPS, "pt", "statistics", "golden"))):
        shutil.copytree(src, str(pytester.path / side))
    return pytester.runpytest_subprocess("--msprobe-compare", str(pytester.path / "ms" / "step0"),
                                         "--msprobe-golden", str(pytester.path / "pt" / "step0"), *options,
                                         "--msprobe-compare-out", str(pytester.path / "out"), "-p", "no:randomly",
                                         "-q", "-rfs")


def _failed(result) -> set:
    prefix = "FAILED ms/step0/rank/dump.json::"
    return {line[len(prefix):].split(" ")[0] for line in result.outlines if line.startswith(prefix)}


def _error_calls(theirs: list, message: str) -> set:
    from pytest_msprobe.runs_compare.pytest_items import call_name

    head = theirs[0]
    return {call_name(re.match(r"(.*?\.(?:forward|backward|parameters_grad)(?:\.\d+)?)\.", row[0]).group(1))
            for row in theirs[1:] if message in json.loads(row[head.index("Err_message")])}


def test_pytest_form_with_api_mapping(pytester):
    """``pytest --msprobe-compare MS --msprobe-golden PT --msprobe-compare-api-mapping=FILE``: the CSV is msprobe's
    but for the cross-framework cells; the calls that fail are those whose backward rows msprobe pairs with another
    call's (the golden's backward calls numbered by their order), not every call for its dtype spelling."""
    table = os.path.join(DUMPS, "api_mapping.yaml")
    result = _run_pytest_form(pytester, "golden", f"--msprobe-compare-api-mapping={table}")
    theirs = _read(os.path.join(MSPROBE_OUT, "statistics_am_file", "compare_result.csv.gz"))
    shape = _error_calls(theirs, "error: The shape of NPU and Bench are inconsistent.")
    assert shape == {"Functional.dense.0", "Functional.dense.1"}
    assert result.ret == 1 and _failed(result) == shape
    assert MSG_DTYPE not in result.stdout.str() and MSG_GRAD not in result.stdout.str()
    (ours,) = glob.glob(str(pytester.path / "out" / "compare_result_rank_*.csv"))
    assert_msprobe_across_frameworks(_read(ours), theirs)


def test_pytest_form_across_frameworks_passes_the_fault_free_pair(pytester):
    """The same network in MindSpore and PyTorch, -cm: every call whose rows are paired passes (msprobe 26.2 fails
    them all on ``Float32`` against ``torch.float32`` and on requires_grad ``N/A``)."""
    theirs = _read(os.path.join(MSPROBE_OUT, "statistics_cm", "compare_result.csv.gz"))
    assert _error_calls(theirs, MSG_DTYPE) and _error_calls(theirs, MSG_GRAD)
    result = _run_pytest_form(pytester, "golden", "--msprobe-compare-cell-mapping=" +
                              os.path.join(DUMPS, "cell_mapping.yaml"))
    assert result.ret == 0
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 6 and "failed" not in outcomes


def test_pytest_form_across_frameworks_fails_the_faulty_calls(pytester):
    """The MindSpore run with an infinity in its batch against the PyTorch golden, -cm: the paired calls that fail
    are those msprobe fails for inf/nan in the MindSpore-only compare, each on its inf/nan rows alone."""
    result = _run_pytest_form(pytester, "inf", "--msprobe-compare-cell-mapping=" +
                              os.path.join(DUMPS, "cell_mapping.yaml"))
    inf_nan = "error: There is nan/inf/-inf in the maximum or minimum value of NPU."
    theirs_inf = _read(os.path.join(MSPROBE_OUT, "statistics_inf", "compare_result.csv.gz"))
    paired = _error_calls(_read(os.path.join(MSPROBE_OUT, "statistics_cm", "compare_result.csv.gz")), MSG_DTYPE)
    expected = _error_calls(theirs_inf, inf_nan) & paired
    assert len(expected) >= 4
    assert result.ret == 1 and _failed(result) == expected
    out = result.stdout.str()
    assert inf_nan in out and MSG_DTYPE not in out and MSG_GRAD not in out


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
    assert assert_msprobe_across_frameworks(_read(results[0].path), theirs)
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
    assert assert_msprobe_across_frameworks(_read(results[0].path), theirs)
    bench = {row[0]: row[1] for row in theirs[1:]}
    assert bench["Cell.decoder.layers.3.ParallelTransformerLayer.forward.0.output.0"] == \
        "Module.decoder.layers.1.ParallelTransformerLayer.forward.0.output.0"
