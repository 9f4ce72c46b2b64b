"""The group-testing search and the choice of candidates, on synthetic effects (no step is run)."""
from __future__ import annotations

import math

import pytest

from pytest_msprobe.attribution import candidates as cand
from pytest_msprobe.attribution.search import SetRun, search


def _additive(effects: dict, calls: list):
    def evaluate(names: tuple) -> SetRun:
        calls.append(names)
        return SetRun(tuple(names), sum(effects.get(n, 0.0) for n in names))
    return evaluate


@pytest.mark.parametrize("n,culprits", [(512, {"c37": 0.7}), (300, {"c3": 0.4, "c250": 0.3, "c251": 0.2}),
                                        (64, {f"c{i}": 0.12 for i in (1, 9, 40, 63)})])
def test_k_culprits_among_n_cost_2_k_log2_n_runs(n, culprits):
    names = [f"c{i}" for i in range(n)]
    effects = dict(culprits)
    effects.update({name: 0.05 / n for name in names if name not in culprits})     # rounding spread thin
    calls: list = []
    found = search(names, _additive(effects, calls), min_share=0.1, budget=10_000)
    assert {t.names[0] for t in found.culprits} == set(culprits)
    assert [t.names[0] for t in found.culprits] == sorted(culprits, key=lambda c: -culprits[c])
    assert len(calls) <= 2 * len(culprits) * math.ceil(math.log2(n))


def test_budget_ends_the_search_where_it_matters_least():
    names = [f"c{i}" for i in range(256)]
    effects = {"c10": 0.6, "c200": 0.3}
    calls: list = []
    found = search(names, _additive(effects, calls), min_share=0.1, budget=16)
    assert len(calls) <= 16
    assert found.budget_hit
    assert [t.names[0] for t in found.culprits] == ["c10"]      # the larger share was split first
    assert any("c200" in t.names for t in found.unsearched)


def test_drift_spread_thin_is_reported_as_a_group():
    names = [f"c{i}" for i in range(16)]
    found = search(names, _additive({n: 1 / 16 for n in names}, []), min_share=0.2, budget=100)
    assert not found.culprits
    assert found.groups and all(t.share is not None and t.share >= 0.2 for t in found.groups)


def test_candidates_from_names_patterns_and_a_result_csv(tmp_path):
    calls = ["Functional.linear.0", "Functional.silu.0", "Torch.matmul.0", "Functional.silu.1", "Tensor.__add__.0"]
    assert cand.select(calls, None)[0] == calls
    chosen, _, unmatched = cand.select(calls, ["Functional.silu.*", "Torch.matmul.0", "Functional.gelu.*"])
    assert chosen == ["Functional.silu.0", "Torch.matmul.0", "Functional.silu.1"]
    assert unmatched == ["Functional.gelu.*"]
    result = tmp_path / "accuracy_checking_result_20260101000000.csv"
    result.write_text("\ufeffAPI name,Forward Test Success,Backward Test Success,Message\r\n"
                      "Functional.linear.0,pass,pass\r\nFunctional.silu.1,error,pass\r\n"
                      "Tensor.__add__.0,warning,\r\n", encoding="utf-8")
    chosen, statuses, _ = cand.select(calls, [str(result)])
    assert chosen == ["Functional.silu.1", "Tensor.__add__.0"]
    assert statuses["Functional.linear.0"] == "forward pass, backward pass"
    compare = tmp_path / "compare_result.csv"
    compare.write_text("NPU Name,Bench Name,Result\r\nFunctional.silu.0.forward.output.0,x,error\r\n"
                       "Functional.linear.0.forward.output.0,x,pass\r\n", encoding="utf-8")
    assert cand.select(calls, [str(compare)])[0] == ["Functional.silu.0"]
    other = tmp_path / "other.csv"
    other.write_text("a,b\r\n1,2\r\n", encoding="utf-8")
    with pytest.raises(ValueError, match="neither an accuracy_checking_result CSV"):
        cand.select(calls, [str(other)])


def test_candidates_from_an_output_folder_take_its_newest_result(tmp_path):
    """An output folder holds one CSV pair per run: --candidates OUT/ reads the newest result CSV in it."""
    calls = ["Functional.linear.0", "Functional.silu.0", "Tensor.__add__.0"]
    header = "\ufeffAPI name,Forward Test Success,Backward Test Success,Message\r\n"
    (tmp_path / "accuracy_checking_result_20260101000000.csv").write_text(
        header + "Functional.linear.0,error,pass\r\nFunctional.silu.0,pass,pass\r\n", encoding="utf-8")
    (tmp_path / "accuracy_checking_result_20260102000000.csv").write_text(
        header + "Functional.linear.0,pass,pass\r\nFunctional.silu.0,error,pass\r\n", encoding="utf-8")
    chosen, statuses, unmatched = cand.select(calls, [str(tmp_path)])
    assert chosen == ["Functional.silu.0"] and not unmatched
    assert statuses["Functional.linear.0"] == "forward pass, backward pass"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no accuracy_checking_result"):
        cand.select(calls, [str(empty)])
