"""``pytest --msprobe-compare TARGET --msprobe-golden GOLDEN`` through pytester: one item per call, the exit
status, -k, --lf, junitxml, -n 2, and the CSV the same bytes as ``pytest-msprobe compare``'s."""
from __future__ import annotations

import glob
import os
import shutil
from xml.etree import ElementTree

import pytest

from pytest_msprobe.runs_compare.runner import compare_runs

DATA = os.path.join(os.path.dirname(__file__), "data")
LLAMA = os.path.join(DATA, "msprobe_26_2_compare", "llama", "statistics")


@pytest.fixture
def pair(pytester):
    """The bf16 Llama statistics dumps: golden, and a target whose silu output was changed below the API."""
    pytester.makeini("[pytest]\n")
    for name in ("golden", "fault_silu"):
        shutil.copytree(os.path.join(LLAMA, name), str(pytester.path / name))
    return str(pytester.path / "fault_silu" / "step0"), str(pytester.path / "golden" / "step0")


def _run(pytester, target, golden, *extra):
    return pytester.runpytest_subprocess("--msprobe-compare", target, "--msprobe-golden", golden,
                                         "--msprobe-compare-out", str(pytester.path / "out"), "-p", "no:randomly",
                                         *extra)


def test_one_item_per_call_and_the_first_divergence_fails(pytester, pair):
    target, golden = pair
    result = _run(pytester, target, golden, "-q", "-rf", f"--junitxml={pytester.path / 'r.xml'}")
    assert result.ret == 1
    out = result.stdout.str()
    assert "FAILED fault_silu/step0/rank/dump.json::Functional.silu.0" in out
    assert "first divergence: rank_0 Functional.silu.0.forward" in out
    root = ElementTree.parse(str(pytester.path / "r.xml")).getroot()
    cases = root.iter("testcase")
    names = [c.get("name") for c in cases]
    assert "Functional.linear.0" in names and "Module.model.LlamaModel.0" in names
    ours = glob.glob(str(pytester.path / "out" / "compare_result_rank_*.csv"))
    assert len(ours) == 1 and glob.glob(str(pytester.path / "out" / "diff_analyze_*.json"))
    results = compare_runs(target, golden, str(pytester.path / "cli"), report=lambda line: None)
    with open(ours[0], "rb") as a, open(results[0].path, "rb") as b:
        assert a.read() == b.read()


def test_k_and_last_failed(pytester, pair):
    target, golden = pair
    assert _run(pytester, target, golden, "-q", "-k", "linear").ret == 0
    _run(pytester, target, golden, "-q")
    again = _run(pytester, target, golden, "-q", "--lf")
    assert again.ret == 1
    assert again.parseoutcomes().get("failed") == 1 and "passed" not in again.parseoutcomes()


def test_identical_runs_pass_and_run_on_two_workers(pytester, pair):
    _, golden = pair
    result = _run(pytester, golden, golden, "-q", "-n", "2")
    assert result.ret == 0
    assert "first divergence: none beyond noise" in result.stdout.str()


def test_missing_golden_is_a_usage_error(pytester, pair):
    target, _ = pair
    result = pytester.runpytest_subprocess("--msprobe-compare", target)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--msprobe-compare needs --msprobe-golden" in result.stderr.str()
