"""``pytest-msprobe overflow-check``: the first call that turns finite inputs into inf/nan, per rank and across
ranks, on msprobe 26.2's MLP sample with an inf planted from one call on."""
from __future__ import annotations

import json
import os
import shutil

from pytest_msprobe.cli import main as cli_main
from pytest_msprobe.runs_compare.overflow import check

RANK = os.path.join(os.path.dirname(__file__), "data", "mlp_fp32_statistics_mix", "step0", "rank")


def _poison(rank_dir: str, origin: str, nested: bool = False) -> None:
    """From ``origin`` on, every output (and every later input) records an inf Max."""
    path = os.path.join(rank_dir, "dump.json")
    with open(path) as fh:
        doc = json.load(fh)
    on = False
    for key, entry in doc["data"].items():
        if key == origin:
            on = True
            for item in entry["output"]:
                if isinstance(item, dict) and "Max" in item:
                    item["Max"] = float("inf")
            continue
        if on and not key.startswith("Module"):
            for part in ("input_args", "output"):
                for item in entry.get(part) or []:
                    if isinstance(item, dict) and "Max" in item:
                        item["Max"] = float("nan")
    if nested:         # an inf inside a list argument of a call before the origin: that call is not blamed
        first = next(k for k in doc["data"] if not k.startswith("Module") and k.endswith("forward"))
        doc["data"][first]["input_args"] = [[{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2],
                                               "Max": float("inf"), "Min": 0.0, "Mean": 1.0, "Norm": 1.0}]]
        doc["data"][first]["output"][0]["Max"] = float("inf")
    with open(path, "w") as fh:
        json.dump(doc, fh)


def test_first_origin_per_rank_and_across_ranks(tmp_path, capsys):
    step = tmp_path / "step0"
    shutil.copytree(RANK, step / "rank0")
    shutil.copytree(RANK, step / "rank1")
    _poison(str(step / "rank0"), "Functional.gelu.0.forward")
    _poison(str(step / "rank1"), "Functional.layer_norm.0.forward", nested=True)
    doc, origins = check(str(step), report=lambda line: None)
    assert [o.key for o in origins] == ["Functional.layer_norm.0.forward", "Functional.gelu.0.forward"]
    assert list(doc) == ["rank_1", "rank_0"] and doc["rank_1"][0]["first_across_ranks"]
    assert doc["rank_0"][0]["construct_info"][-1] == "Functional.gelu.0.forward"
    assert cli_main(["overflow-check", "-i", str(step), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "rank_1 Functional.layer_norm.0.forward" in out
    written = [n for n in os.listdir(tmp_path / "out") if n.startswith("anomaly_analyze_")]
    assert len(written) == 1


def test_clean_run_finds_nothing(tmp_path, capsys):
    shutil.copytree(RANK, tmp_path / "step0" / "rank")
    assert cli_main(["overflow-check", "-i", str(tmp_path / "step0"), "-o", str(tmp_path / "out")]) == 0
    assert "no call turns finite inputs into inf/nan" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "out")
