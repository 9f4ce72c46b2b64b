"""The `pytest-msprobe` console command: every subcommand has working help with an example."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_msprobe import cli


@pytest.mark.parametrize("command", sorted(cli.SUBCOMMANDS))
def test_subcommand_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"pytest-msprobe {command}" in out
    assert "example" in out.lower(), f"{command} --help shows no example"


def test_top_level_help_lists_every_subcommand():
    proc = subprocess.run([sys.executable, "-m", "pytest_msprobe.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for name in cli.SUBCOMMANDS:
        assert name in proc.stdout


def test_unknown_command_says_what_exists(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare-everything"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'compare-everything'" in err and "api-precision-compare" in err


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
