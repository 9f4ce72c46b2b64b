"""The commands that read a check's CSVs take its folder, or a shell glob that matched several pairs, and read
the newest pair, saying which: the documented commands keep working from the second run on."""
from __future__ import annotations

import glob
import pathlib
import shutil

import pytest
import torch  # noqa: F401 - before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - keeps in-process runs fast
from pytest_msprobe.cli import main

STATS_STEP = pathlib.Path(__file__).parent / "data" / "mlp_fp32_statistics_L1" / "step0" / "rank"
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


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> pathlib.Path:
    """A folder holding the pairs of two real checks of one dump: a clean one, then one with gelu failing."""
    pytester_dir = tmp_path_factory.mktemp("runs")
    shutil.copytree(STATS_STEP, pytester_dir / "dump")
    (pytester_dir / "conftest.py").write_text(PERTURB)
    import subprocess
    import sys
    for device in ("cpu", "perturbed"):
        res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                              "--msprobe-api-info=dump", "--msprobe-out=out", f"--msprobe-device-type={device}"],
                             cwd=pytester_dir, capture_output=True, text=True, timeout=300)
        assert res.returncode in (0, 1), res.stdout[-2000:] + res.stderr[-2000:]
    assert len(glob.glob(str(pytester_dir / "out" / "accuracy_checking_result_*.csv"))) == 2
    return pytester_dir


def _newest(folder: pathlib.Path, kind: str = "result") -> str:
    return sorted(glob.glob(str(folder / "out" / f"accuracy_checking_{kind}_*.csv")))[-1]


@pytest.mark.parametrize("form", ["folder", "glob"])
def test_summary_reads_the_newest_pair(two_runs, capsys, form) -> None:
    out = two_runs / "out"
    args = [str(out)] if form == "folder" else sorted(glob.glob(str(out / "accuracy_checking_result_*.csv")))
    rc = main(["summary", *args])
    captured = capsys.readouterr()
    assert rc == 1, captured                       # the newest run has gelu failing
    assert f"reading {_newest(two_runs)} (the newest of 2" in captured.err
    assert "Functional.gelu.0" in captured.out


def test_html_report_generate_and_compare_take_a_folder(two_runs, capsys, tmp_path) -> None:
    out = str(two_runs / "out")
    assert main(["html-report", out, "-o", str(tmp_path / "report.html")]) == 0
    assert (tmp_path / "report.html").stat().st_size > 0
    assert main(["generate", str(two_runs / "dump" / "dump.json"), "-o", str(tmp_path / "suite"), "--random",
                 "--from-result", *sorted(glob.glob(out + "/accuracy_checking_result_*.csv"))]) == 0
    assert "Functional.gelu.0" in (tmp_path / "suite" / "msprobe_data" / "generated.json").read_text()
    rc = main(["api-precision-compare", "-npu", out, "-gpu", out, "-o", str(tmp_path / "apc")])
    err = capsys.readouterr().err
    assert rc in (0, 1) and f"reading {_newest(two_runs, 'details')}" in err, err
    assert glob.glob(str(tmp_path / "apc" / "api_precision_compare_result_*.csv"))


def test_a_folder_without_csvs_is_one_line(tmp_path, capsys) -> None:
    assert main(["summary", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path) in err and "accuracy_checking_result_" in err, err
