"""GradComparator on real exports: identical runs, a run that changes at step 3, partial data, the CLI."""
from __future__ import annotations

import csv
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dumpers.grad_probe import GradComparator, GradientMonitor
from dumpers.grad_probe.anomaly import RULE_DROP, RULE_FIRST, describe, find_anomalies
from pytest_msprobe import cli


def export(path, *, change_at=None, steps=6, level="L2", model_seed=0):
    """Train a small MLP for ``steps`` optimizer steps; from ``change_at`` on, the inputs differ."""
    torch.manual_seed(model_seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = GradientMonitor({"task": "grad_probe", "dump_path": str(path), "grad_probe": {"grad_level": level}},
                          "pytorch")
    mon.monitor(model)
    same, other = torch.Generator().manual_seed(1), torch.Generator().manual_seed(99)
    for i in range(steps):
        x, y = torch.randn(64, 16, generator=same), torch.randn(64, 4, generator=same)
        if change_at is not None and i >= change_at:
            x, y = torch.randn(64, 16, generator=other), torch.randn(64, 4, generator=other)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    mon.remove()
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("grad_runs")
    return {"a": export(root / "a"), "b": export(root / "b"), "c": export(root / "c", change_at=3)}


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))


def test_identical_runs_similarity_one_everywhere(runs, tmp_path, capsys):
    (res,) = GradComparator.compare_distributed(str(runs["a"]), str(runs["b"]), str(tmp_path / "out"))
    out = tmp_path / "out"                                        # single-card: no rank level
    assert sorted(os.listdir(out)) == ["anomalies.csv", "similarities.csv", "similarities_picture"]
    rows = read_csv(out / "similarities.csv")
    assert rows[0] == ["step", "0", "1", "2", "3", "4", "5"]
    assert [r[0] for r in rows[1:]] == ["0.weight", "0.bias", "2.weight", "2.bias", "summary"]
    assert all(cell == "1.0" for r in rows[1:] for cell in r[1:])
    assert read_csv(out / "anomalies.csv") == [["step", "param_name", "similarity", "previous_similarity", "drop",
                                                "rule"]]
    assert sorted(os.listdir(out / "similarities_picture")) == [
        "0.bias.png", "0.weight.png", "2.bias.png", "2.weight.png", "summary_similarities.png"]
    with open(out / "similarities_picture" / "summary_similarities.png", "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert res.first_suspicious_step is None and res.rank == 0
    assert "no suspicious step" in capsys.readouterr().out


def test_inputs_changed_from_step3_flagged_at_step3(runs, tmp_path, capsys):
    (res,) = GradComparator.compare_distributed(str(runs["a"]), str(runs["c"]), str(tmp_path / "out"), plot=False)
    assert res.first_suspicious_step == 3
    assert res.summary[:3] == [1.0, 1.0, 1.0] and res.summary[3] < 0.9
    rows = read_csv(tmp_path / "out" / "anomalies.csv")[1:]
    assert rows[0][0] == "3" and rows[0][5] == RULE_DROP
    at3 = [r for r in rows if r[0] == "3"]
    drops = [float(r[4]) for r in at3]
    assert drops == sorted(drops, reverse=True)                   # parameters that drop most come first
    assert "first suspicious step 3" in capsys.readouterr().out
    assert not (tmp_path / "out" / "similarities_picture").exists()


def test_similarity_values_match_direct_count(runs, tmp_path):
    (res,) = GradComparator.compare_distributed(str(runs["a"]), str(runs["c"]), str(tmp_path / "o"), plot=False)
    same = total = 0
    for p in res.params:
        a = np.load(runs["a"] / "rank0" / "step4" / f"{p}.npy")
        c = np.load(runs["c"] / "rank0" / "step4" / f"{p}.npy")
        assert res.similarities[p][4] == np.count_nonzero(a == c) / a.size
        same += np.count_nonzero(a == c)
        total += a.size
    assert res.summary[4] == same / total
    rows = read_csv(tmp_path / "o" / "similarities.csv")
    assert rows[-1] == ["summary", *(str(v) for v in res.summary)]


def test_steps_on_one_side_reported_and_pt_files_read(runs, tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(runs["b"], b)
    shutil.rmtree(b / "rank0" / "step2")
    os.remove(b / "rank0" / "grad_summary_0.csv")                  # param order then comes from step 1
    for f in os.listdir(b / "rank0" / "step4"):                    # a .pt export reads like .npy
        arr = np.load(b / "rank0" / "step4" / f)
        torch.save(torch.from_numpy(arr), b / "rank0" / "step4" / f.replace(".npy", ".pt"))
        os.remove(b / "rank0" / "step4" / f)
    (res,) = GradComparator.compare_distributed(str(runs["a"]), str(b), str(tmp_path / "out"), plot=False)
    assert res.steps == [0, 1, 3, 4, 5] and res.only_in_1 == [2] and res.only_in_2 == []
    assert res.summary == [1.0] * 5
    assert "steps in only one export, not compared: first [2]" in capsys.readouterr().out


def test_multi_rank_layout_and_one_sided_ranks(runs, tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    for rank in (0, 1, 2):
        shutil.copytree(runs["a"] / "rank0", d1 / f"rank{rank}")
    for rank in (0, 1):
        shutil.copytree(runs["c"] / "rank0", d2 / f"rank{rank}")
    res = GradComparator.compare_distributed(str(d1), str(d2), str(tmp_path / "out"), plot=False)
    assert [r.rank for r in res] == [0, 1]
    assert sorted(os.listdir(tmp_path / "out")) == ["rank0", "rank1"]
    assert all(r.first_suspicious_step == 3 for r in res)


def test_errors_name_the_problem(runs, tmp_path):
    with pytest.raises(RuntimeError, match="no matched ranks"):
        GradComparator.compare_distributed(str(runs["a"]), str(tmp_path), str(tmp_path / "o"))
    l0 = export(tmp_path / "l0", steps=2, level="L0")
    with pytest.raises(RuntimeError, match="no matched steps"):
        GradComparator.compare_distributed(str(runs["a"]), str(l0), str(tmp_path / "o"))
    bad = tmp_path / "bad"
    shutil.copytree(runs["b"], bad)
    np.save(bad / "rank0" / "step1" / "0.bias.npy", np.zeros(5, bool))
    with pytest.raises(RuntimeError, match="tensor shape is not equal"):
        GradComparator.compare_distributed(str(runs["a"]), str(bad), str(tmp_path / "o"), plot=False)
    np.save(bad / "rank0" / "step1" / "0.bias.npy", np.zeros(32, np.float32))
    with pytest.raises(TypeError, match="tensor type is not bool"):
        GradComparator.compare_distributed(str(runs["a"]), str(bad), str(tmp_path / "o"), plot=False)


def test_missing_direction_file_is_a_blank_cell_not_a_crash(runs, tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(runs["b"], b)
    os.remove(b / "rank0" / "step1" / "2.bias.npy")
    (_res,) = GradComparator.compare_distributed(str(runs["a"]), str(b), str(tmp_path / "out"), plot=False)
    rows = {r[0]: r[1:] for r in read_csv(tmp_path / "out" / "similarities.csv")}
    assert rows["2.bias"][1] == "" and rows["2.bias"][0] == "1.0"
    assert "direction file of '2.bias' only in" in capsys.readouterr().out


def test_anomaly_rule_thresholds():
    steps = [0, 1, 2, 3]
    found = find_anomalies(steps, {
        "ok": [1.0, 0.97, 0.94, 0.91],            # drops of exactly 0.03 are not flagged
        "low_start": [0.96, 0.96, 0.96, 0.96],
        "drop": [0.99, 0.99, 0.95, 0.5],
        "gap": [1.0, float("nan"), 0.9, 0.9],     # compared against the last compared step
    })
    assert [(a.param, a.step, a.rule) for a in found] == [
        ("low_start", 0, RULE_FIRST), ("gap", 2, RULE_DROP), ("drop", 2, RULE_DROP), ("drop", 3, RULE_DROP)]
    assert describe(found).startswith("first suspicious step 0 (first step similarity < 0.97): low_start")
    assert describe([]).startswith("no suspicious step")


def test_cli(runs, tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli.main(["grad-compare", str(runs["a"]), str(runs["c"]), "-o", str(out), "--no-plots"]) == 0
    assert (out / "similarities.csv").is_file()
    assert cli.main(["grad-compare", str(runs["a"]), str(runs["c"]), "-o", str(out), "--no-plots",
                     "--fail-on-anomaly"]) == 1
    assert cli.main(["grad-compare", str(runs["a"]), str(runs["b"]), "-o", str(out), "--no-plots",
                     "--fail-on-anomaly"]) == 0
    assert cli.main(["grad-compare", str(runs["a"]), str(tmp_path / "none"), "-o", str(out)]) == 2
    text = capsys.readouterr().out
    assert "first suspicious step 3" in text and "no matched ranks" in text


def test_public_import():
    import pytest_msprobe
    assert pytest_msprobe.GradComparator is GradComparator
