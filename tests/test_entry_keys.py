"""Entry keys are read with whole-key rules: no key with a stray newline (or other trailing character) passes
for another call's key, at any layer (the key grammar, API names, the loader, a whole check)."""
from __future__ import annotations

import glob
import json
import pathlib
import shutil

import pytest
import torch  # noqa: F401 - before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - keeps in-process runs fast
from dumpers import format as fmt
from generators.loader import load_dump
from pytest_msprobe.report import acc_csv

STATS_STEP = pathlib.Path(__file__).parent / "data" / "mlp_fp32_statistics_L1" / "step0" / "rank"
ALIASES = ["Torch.relu.0\n.forward", "Torch.relu.0.forward\n", "Torch.relu.0 .forward", "Module.fc.Linear.forward.0\n",
           "Torch.relu.01.forward", "Torch.relu.\uff10.forward", "Module.fc.Linear.parameters_grad.0\n"]


@pytest.mark.parametrize("key", ALIASES)
def test_a_key_with_a_stray_character_is_not_a_call_key(key: str) -> None:
    with pytest.raises(ValueError):
        fmt.parse_entry_key(key)


def test_a_stray_character_in_the_api_name_names_another_call() -> None:
    assert fmt.parse_entry_key("Torch.relu\n.0.forward").api_call != "Torch.relu.0"


def _dump_with_alias(tmp: pathlib.Path, alias: str) -> tuple:
    """A real dump with a second ``Torch.relu.0`` entry under ``alias``, holding other statistics."""
    doc = json.loads((STATS_STEP / "dump.json").read_text())
    data = doc["data"]
    fake = json.loads(json.dumps(data["Torch.relu.0.forward"]))
    data[alias] = fake
    d = tmp / "dump"
    shutil.copytree(STATS_STEP, d)
    (d / "dump.json").write_text(json.dumps(doc))
    return d / "dump.json", len({k.rsplit(".", 1)[0] for k in data if not k.startswith("Module")})


@pytest.mark.parametrize("alias", ["Torch.relu.0\n.forward", "Torch.relu.0.forward\n"])
def test_the_loader_keeps_an_aliasing_key_apart(tmp_path: pathlib.Path, alias: str) -> None:
    path, _ = _dump_with_alias(tmp_path, alias)
    cases = load_dump(str(path)).cases
    relu = [c for c in cases if c.name == "Torch.relu.0"]
    assert len(relu) == 1 and relu[0].problem is None, [(c.name, c.problem) for c in relu]
    odd = [c for c in cases if c.name != "Torch.relu.0" and "relu" in c.name]
    assert len(odd) == 1 and odd[0].problem, [(c.name, c.problem) for c in cases]


def test_a_check_reports_the_aliasing_key_on_its_own_row(pytester: pytest.Pytester) -> None:
    path, _ = _dump_with_alias(pytester.path, "Torch.relu.0\n.forward")
    res = pytester.runpytest_inprocess(f"--msprobe-api-info={path}", "--msprobe-out=out", "-p", "no:randomly")
    assert res.ret in (0, 1), res.stdout.str()[-3000:]
    rows = acc_csv.read_result_csv(glob.glob(str(pytester.path / "out" / "accuracy_checking_result_*.csv"))[0])
    relu = [r for r in rows if "relu" in r.name]
    assert sorted(r.name for r in relu) == ["Torch.relu.0", "Torch.relu.0\\n.forward"], relu
    odd = next(r for r in relu if r.name != "Torch.relu.0")
    assert odd.forward == "SKIP" and "must look like" in odd.message, odd
