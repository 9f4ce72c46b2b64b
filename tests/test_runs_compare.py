"""The compare of two runs against msprobe 26.2's own compare CSVs, row for row (tests/data/msprobe_26_2_compare,
made by its make_fixtures.py where msprobe is installed), and its handling of bad input."""
from __future__ import annotations

import csv
import glob
import gzip
import json
import math
import os
import shutil

import pytest

from pytest_msprobe.cli import main as cli_main
from pytest_msprobe.runs_compare import match
from pytest_msprobe.runs_compare.inputs import CompareInputError, pairs_of
from pytest_msprobe.runs_compare.runner import compare_runs

DATA = os.path.join(os.path.dirname(__file__), "data")
FIXTURES = os.path.join(DATA, "msprobe_26_2_compare")
MSPROBE_OUT = os.path.join(FIXTURES, "msprobe_out")
PRINTED = 1e-12          # msprobe prints tensor metrics rounded to 12 decimals


def _read(path: str) -> list:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _same_cell(ours: str, theirs: str) -> bool:
    if ours == theirs:
        return True
    try:
        a, b = float(ours.rstrip("%")), float(theirs.rstrip("%"))
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=2 * PRINTED)


def assert_same_table(ours: list, theirs: list) -> None:
    assert ours[0] == theirs[0], "headers differ"
    assert [r[0] for r in ours] == [r[0] for r in theirs], "row names or order differ"
    head = theirs[0]
    for mine, ref in zip(ours[1:], theirs[1:]):
        for col, a, b in zip(head, mine, ref):
            assert _same_cell(a, b), f"{mine[0]} {col}: ours {a!r}, msprobe {b!r}"


def _compare(target: str, golden: str, out: str, **kw) -> list:
    results = compare_runs(target, golden, out, report=lambda line: None, **kw)
    return results


PAIRS = [("samples/mlp_fp32_statistics_L1", "mlp_fp32_statistics_L1"),
         ("samples/mlp_fp32_statistics_mix", "mlp_fp32_statistics_mix"),
         ("samples/mlp_fp32_tensor_L1", "mlp_fp32_tensor_L1")]


@pytest.mark.parametrize("ref,sample", PAIRS, ids=[p[1] for p in PAIRS])
def test_msprobe_samples_row_for_row(tmp_path, ref, sample):
    results = _compare(os.path.join(DATA, sample, "step1"), os.path.join(DATA, sample, "step0"), str(tmp_path))
    assert len(results) == 1
    assert_same_table(_read(results[0].path), _read(os.path.join(MSPROBE_OUT, ref, "compare_result.csv.gz")))
    assert os.path.basename(results[0].path).startswith("compare_result_rank_")


def _llama_pairs() -> list:
    out = []
    for ref in sorted(glob.glob(os.path.join(MSPROBE_OUT, "*", "*", "compare_result.csv.gz"))):
        task, variant = ref.split(os.sep)[-3:-1]
        if task not in ("samples", "repo"):
            out.append((task, variant))
    return out


@pytest.mark.parametrize("task,variant", _llama_pairs(), ids=lambda v: v)
def test_llama_dumps_row_for_row(tmp_path, task, variant):
    """msprobe's own dumps of a bf16 Llama step, a planted fault and/or GEMM noise: our CSV is msprobe's."""
    root = os.path.join(FIXTURES, "llama", task)
    results = _compare(os.path.join(root, variant, "step0"), os.path.join(root, "golden", "step0"), str(tmp_path))
    assert [r.mode for r in results] == [task]
    assert_same_table(_read(results[0].path), _read(os.path.join(MSPROBE_OUT, task, variant, "compare_result.csv.gz")))


def test_llama_fixtures_present():
    assert {t for t, _ in _llama_pairs()} == {"statistics", "md5", "tensor"}


def test_rank_directories_and_dump_json_files_are_accepted(tmp_path):
    sample = os.path.join(DATA, "mlp_fp32_statistics_L1")
    by_dir = _compare(os.path.join(sample, "step1", "rank"), os.path.join(sample, "step0", "rank"),
                      str(tmp_path / "a"))
    by_file = _compare(os.path.join(sample, "step1", "rank", "dump.json"),
                       os.path.join(sample, "step0", "rank", "dump.json"), str(tmp_path / "b"))
    assert os.path.basename(by_file[0].path).startswith("compare_result_2")     # no rank in the name
    assert _read(by_dir[0].path) == _read(by_file[0].path)


def _copy_rank(src: str, dest: str) -> str:
    shutil.copytree(src, dest)
    return dest


def test_two_ranks_one_csv_each_and_unequal_counts_refused(tmp_path):
    rank = os.path.join(DATA, "mlp_fp32_statistics_L1", "step0", "rank")
    for side in ("t", "g"):
        for r in (0, 1):
            _copy_rank(rank, str(tmp_path / side / "step0" / f"rank{r}"))
    results = _compare(str(tmp_path / "t" / "step0"), str(tmp_path / "g" / "step0"), str(tmp_path / "out"))
    assert sorted(os.path.basename(r.path).split("_")[2] for r in results) == ["rank0", "rank1"]
    shutil.rmtree(tmp_path / "g" / "step0" / "rank1")
    with pytest.raises(CompareInputError, match="2 rank directories .* but -gp .* has 1"):
        pairs_of(str(tmp_path / "t" / "step0"), str(tmp_path / "g" / "step0"))


def test_unfinished_dump_names_repair_dump(tmp_path, capsys):
    target = _copy_rank(os.path.join(DATA, "mlp_fp32_statistics_L1", "step1"), str(tmp_path / "t"))
    open(os.path.join(target, "rank", "dump.journal"), "w").close()
    code = cli_main(["compare", "-tp", target, "-gp", os.path.join(DATA, "mlp_fp32_statistics_L1", "step0"),
                     "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "pytest-msprobe repair-dump" in err and "SKIP" in err


def test_unmatched_and_hostile_entries_leave_the_rest_compared(tmp_path):
    src = os.path.join(DATA, "mlp_fp32_tensor_L1", "step0", "rank")
    target = _copy_rank(src, str(tmp_path / "t" / "rank"))
    with open(os.path.join(target, "dump.json")) as fh:
        doc = json.load(fh)
    keys = list(doc["data"])
    doc["data"]["Functional.extra.0.forward"] = {"input_args": [], "output": [None]}
    first = doc["data"][keys[0]]["input_args"][0]
    first["data_name"] = "../../../../etc/passwd"            # a path out of the dump: never read
    deep: list = [1]
    for _ in range(60):
        deep = [deep]
    doc["data"]["Functional.deep.0.forward"] = {"input_args": deep}
    with open(os.path.join(target, "dump.json"), "w") as fh:
        json.dump(doc, fh)
    notes: list = []
    results = compare_runs(target, src, str(tmp_path / "out"), report=notes.append)
    rows = _read(results[0].path)
    by_name = {r[0]: r for r in rows[1:]}
    head = rows[0]
    assert by_name["Functional.extra.0.forward.output.0"][head.index("Bench Name")] == "N/A"
    assert by_name[rows[1][0]][head.index("Cosine")] == "unsupported"      # the refused file
    assert any("Functional.deep.0.forward" in n and "deeper" in n for n in notes)
    assert any("have no golden row" in n for n in notes)
    assert by_name[rows[2][0]][head.index("Cosine")] == "1.0"            # the rest compared


def test_fuzzy_match_ignores_call_indices():
    assert match.fuzzy_name("Functional.linear.3.forward.input.0") == "Functional.linear.forward.input.0"
    assert match.fuzzy_name("Functional.linear.12.backward.output.1") == "Functional.linear.backward.output.1"


def test_fuzzy_compare_pairs_renumbered_calls(tmp_path):
    src = os.path.join(DATA, "mlp_fp32_statistics_L1", "step0", "rank")
    target = _copy_rank(src, str(tmp_path / "t" / "rank"))
    with open(os.path.join(target, "dump.json")) as fh:
        text = fh.read()
    with open(os.path.join(target, "dump.json"), "w") as fh:
        fh.write(text.replace("Functional.linear.0.", "Functional.linear.7."))
    exact = _compare(target, src, str(tmp_path / "e"))[0]
    fuzzy = _compare(target, src, str(tmp_path / "f"), fuzzy=True)[0]
    unmatched = [line.target.name for line in exact.lines if line.golden is None]
    assert unmatched and all(".linear.7." in name for name in unmatched)
    assert all(line.golden is not None for line in fuzzy.lines)


def test_modes_must_agree_and_xlsx_needs_openpyxl(tmp_path, capsys):
    stats = os.path.join(DATA, "mlp_fp32_statistics_L1", "step0")
    tensor = os.path.join(DATA, "mlp_fp32_tensor_L1", "step0")
    notes: list = []
    assert compare_runs(stats, tensor, str(tmp_path / "o"), report=notes.append) == []
    assert any("statistics dump but" in n for n in notes)
    try:
        import openpyxl  # noqa: F401
    except ImportError:
        code = cli_main(["compare", "-tp", stats, "-gp", stats, "-o", str(tmp_path / "x"), "--xlsx"])
        assert code == 2 and "--xlsx needs openpyxl" in capsys.readouterr().err


def test_npu_megatron_dump_row_for_row(tmp_path):
    """A PyTorch dump made on an Ascend NPU (msprobe's own test data) against a perturbed copy, dump.json files."""
    golden = os.path.join(DATA, "msprobe_repo_fixtures", "npu_megatron_pytorch", "dump.json")
    target = os.path.join(FIXTURES, "repo", "npu_megatron_pytorch", "target", "dump.json")
    results = _compare(target, golden, str(tmp_path))
    assert_same_table(_read(results[0].path),
                      _read(os.path.join(MSPROBE_OUT, "repo", "npu_megatron_pytorch", "compare_result.csv.gz")))


def test_mindspore_against_mindspore(tmp_path):
    """MindSpore's dtype spellings (Float32, BFloat16) pair and compare; a perturbed output is seen."""
    src = os.path.join(DATA, "msprobe_repo_fixtures", "npu_megatron_mindspore", "dump.json")
    with open(src) as fh:
        doc = json.load(fh)
    key = next(k for k, v in doc["data"].items() if isinstance(v, dict) and v.get("output")
               and isinstance(v["output"][0], dict) and isinstance(v["output"][0].get("Max"), float)
               and "Float" in v["output"][0].get("dtype", ""))
    doc["data"][key]["output"][0]["Max"] *= 1.5
    target = tmp_path / "target.json"
    target.write_text(json.dumps(doc))
    result = _compare(str(target), src, str(tmp_path / "out"))[0]
    assert result.mode == "statistics" and all(line.golden is not None for line in result.lines)
    moved = [line for line in result.lines if line.metrics[0] not in ("0", "N/A")]
    assert [line.target.key for line in moved] == [key]
    assert moved[0].metrics[4] == "50.0%"
