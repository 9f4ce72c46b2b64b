"""Two checks into one ``--msprobe-out`` never share or replace a CSV pair: each claims its pair by creating
both files exclusively, a pair being written is locked, and the end-of-run rewrite of a parallel run replaces
only the files it wrote."""
from __future__ import annotations

import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import pytest

from pytest_msprobe.report import acc_csv
from pytest_msprobe.resume import ResumePlan

STATS_STEP = pathlib.Path(__file__).parent / "data" / "mlp_fp32_statistics_L1" / "step0" / "rank"


def _settings(out: pathlib.Path) -> types.SimpleNamespace:
    return types.SimpleNamespace(result_csv=None, out_dir=str(out), fail_on="error", seed=1234)


def _config(root: pathlib.Path) -> types.SimpleNamespace:
    return types.SimpleNamespace(option=types.SimpleNamespace(lf=False), cache=None, rootpath=root)


def test_two_checks_started_in_the_same_second_get_two_pairs(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(acc_csv, "new_timestamp", lambda: "20260102030405")   # both start in one second
    dumps = [str(STATS_STEP / "dump.json")]
    first = ResumePlan.decide(_config(tmp_path), _settings(tmp_path / "out"), dumps)
    second = ResumePlan.decide(_config(tmp_path), _settings(tmp_path / "out"), dumps)
    assert first.result_csv != second.result_csv and first.details_csv != second.details_csv
    assert {first.timestamp, second.timestamp} == {"20260102030405", "20260102030406"}
    for plan in (first, second):     # claimed: the files exist before either check writes a row
        assert os.path.exists(plan.result_csv) and os.path.exists(plan.details_csv)


def test_a_pair_being_written_is_not_written_by_a_second_check(tmp_path) -> None:
    result, details = acc_csv.csv_paths(str(tmp_path), "20260102030405")
    with acc_csv.AccCsvWriter(result, details) as writer:
        writer.write_api(["Torch.relu.0", "pass", "pass"], [])
        with pytest.raises(OSError, match="being written by another check"):
            acc_csv.AccCsvWriter(result, details)
    rows = acc_csv.read_result_csv(result)
    assert [r.name for r in rows] == ["Torch.relu.0"]


def _run(cwd: pathlib.Path, out: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                             "--msprobe-api-info=dump", f"--msprobe-out={out}", "-n", "2"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_parallel_checks_into_one_folder_keep_every_row(tmp_path) -> None:
    shutil.copytree(STATS_STEP, tmp_path / "dump")
    data = json.loads((STATS_STEP / "dump.json").read_text())["data"]
    apis = sorted({k.rsplit(".", 1)[0] for k in data if not k.startswith("Module")})
    runs = [_run(tmp_path, str(tmp_path / "out")) for _ in range(2)]
    texts = [r.communicate(timeout=300)[0] for r in runs]
    assert [r.returncode for r in runs] == [0, 0] or all(r.returncode in (0, 1) for r in runs), texts
    pairs = sorted(glob.glob(str(tmp_path / "out" / "accuracy_checking_result_*.csv")))
    assert len(pairs) == 2, (pairs, texts)
    for result in pairs:
        with open(result, encoding="utf-8") as fh:
            text = fh.read()
        assert text.count("\ufeff") == 1 and text.count(acc_csv.RESULT_HEADER[0]) == 1, text[:500]
        assert sorted(r.name for r in acc_csv.read_result_csv(result)) == apis
        named = [t for t in texts if result in t]
        assert len(named) == 1, "each check names its own pair"


PERTURB = '''
from pytest_msprobe.devices import CpuBackend


class Perturbed(CpuBackend):
    name = "perturbed"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        return out * 1.05 if getattr(func, "__name__", "") == "gelu" else out


def pytest_msprobe_register_devices(registry):
    registry.register(Perturbed())
'''


def test_lf_continues_its_own_pair_after_another_dump_was_checked(pytester: pytest.Pytester) -> None:
    import torch  # noqa: F401 - before an in-process run: torch cannot be imported twice
    pytester.makeconftest(PERTURB)
    for name in ("one", "two"):
        shutil.copytree(STATS_STEP, pytester.path / name)
    args = ("--msprobe-device-type=perturbed", "--msprobe-out=out", "-p", "no:randomly")
    first = pytester.runpytest_inprocess("--msprobe-api-info=one", *args)
    assert first.ret == pytest.ExitCode.TESTS_FAILED, first.stdout.str()[-2000:]
    (pair,) = glob.glob(str(pytester.path / "out" / "accuracy_checking_result_*.csv"))
    pytester.runpytest_inprocess("--msprobe-api-info=two", *args)      # another dump in between
    again = pytester.runpytest_inprocess("--msprobe-api-info=one", "--lf", *args)
    text = again.stdout.str()
    assert f"msprobe: writing {pair} (resumed" in text, text[-2000:]
    assert len(glob.glob(str(pytester.path / "out" / "accuracy_checking_result_*.csv"))) == 2
    data = json.loads((STATS_STEP / "dump.json").read_text())["data"]
    apis = sorted({k.rsplit(".", 1)[0] for k in data if not k.startswith("Module")})
    assert sorted(r.name for r in acc_csv.read_result_csv(pair)) == apis
