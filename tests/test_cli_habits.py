"""msprobe's command habits get an answer: its command names, ``-f pytorch``, and ``--version``."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from pytest_msprobe.cli import main


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "pytest_msprobe.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=120)


def test_version() -> None:
    from pytest_msprobe import __version__
    res = _cli("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"pytest-msprobe {__version__}"


@pytest.mark.parametrize("command", ["run_ut", "acc_check", "multi_run_ut", "multi_acc_check"])
def test_the_check_commands_point_to_the_pytest_run(command, capsys) -> None:
    rc = main(["-f", "pytorch", command, "-api_info", "dump/step0/rank/dump.json", "-o", "out", "-save_error_data",
               "-d", "0", "1", "-n", "8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    line = err.split("run: ", 1)[1]
    assert shlex.split(line) == ["pytest", "--msprobe-api-info=dump/step0/rank/dump.json", "--msprobe-out=out",
                                 "--msprobe-save-error-data", "--msprobe-devices=0,1", "-n", "8"]


def test_multi_run_ut_without_n_gets_workers_and_unknown_options_are_named(capsys) -> None:
    rc = main(["multi_run_ut", "--api_info_file=d.json", "-j", "-bogus"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "run: pytest --msprobe-api-info=d.json -n auto" in err and "-bogus: no counterpart" in err, err


def test_msprobe_spelling_of_api_precision_compare_runs_the_command(tmp_path) -> None:
    res = _cli("-f", "pytorch", "api_precision_compare", "-npu", str(tmp_path / "none.csv"), "-gpu",
               str(tmp_path / "none.csv"), "-o", str(tmp_path))
    assert res.returncode == 2, res.stderr
    assert "pytest-msprobe api-precision-compare: error" in res.stderr and "unknown command" not in res.stderr
