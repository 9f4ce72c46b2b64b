"""A dump directory is data, never part of the pytest run: no ``conftest.py`` and no ini file near a dump is
read, whatever the form of the option, with and without ``-n 2``; a form of an option that pytest would read
as a test path (and so take its rootdir, cache or ini file from) stops the run with the one-line fix."""
from __future__ import annotations

import glob
import pathlib
import shutil

import pytest
import torch  # noqa: F401 - before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - keeps in-process runs fast
from pytest_msprobe.report import acc_csv

DATA = pathlib.Path(__file__).parent / "data"
STATS_STEP = DATA / "mlp_fp32_statistics_L1" / "step0" / "rank"
MARK = "open({path!r}, 'w').write('ran')\n"
INI_FILES = {
    "pytest.ini": "[pytest]\n",
    "tox.ini": "[pytest]\n",
    "setup.cfg": "[tool:pytest]\n",
    "pyproject.toml": "[tool.pytest.ini_options]\n",
}


def api_names() -> list:
    import json
    data = json.loads((STATS_STEP / "dump.json").read_text())["data"]
    return sorted({key.rsplit(".", 1)[0] for key in data if not key.startswith(("Module", "Cell"))})


def plant(pytester: pytest.Pytester, where: str = "e/step0/rank") -> tuple:
    """A copy of a real dump whose folder (and the one above) holds a conftest.py that writes a file when
    imported; returns (dump directory, the files the conftests would write)."""
    dump = pytester.path / where
    shutil.copytree(STATS_STEP, dump)
    marks = [pytester.path / "PWNED_dump", pytester.path / "PWNED_parent"]
    (dump / "conftest.py").write_text(MARK.format(path=str(marks[0])))
    (dump.parent / "conftest.py").write_text(MARK.format(path=str(marks[1])))
    return dump, marks


def result_rows(out: pathlib.Path) -> list:
    files = glob.glob(str(out / "accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    return [r.name for r in acc_csv.read_result_csv(files[0])]


@pytest.mark.parametrize("workers", [None, "2"])
def test_a_conftest_in_or_above_the_dump_is_never_imported(pytester: pytest.Pytester, workers) -> None:
    dump, marks = plant(pytester)
    args = [f"--msprobe-api-info={pytester.path / 'e'}", "--msprobe-out=out", "-p", "no:randomly"]
    res = (pytester.runpytest_subprocess(*args, "-n", workers) if workers else pytester.runpytest_inprocess(*args))
    text = res.stdout.str() + res.stderr.str()
    assert res.ret in (0, 1), text[-3000:]
    assert not [m for m in marks if m.exists()], "a conftest.py of the dump ran"
    assert sorted(result_rows(pytester.path / "out")) == api_names()


def test_a_dump_inside_a_project_whose_conftest_has_pytest_plugins(pytester: pytest.Pytester) -> None:
    """A non-root conftest.py with ``pytest_plugins`` is an error for pytest: the dump's project is not ours."""
    dump = pytester.path / "other_project" / "dumps" / "step0" / "rank"
    shutil.copytree(STATS_STEP, dump)
    (pytester.path / "other_project" / "conftest.py").write_text("pytest_plugins = ['no_such_plugin_xyz']\n")
    res = pytester.runpytest_subprocess(f"--msprobe-api-info={dump.parent.parent}", "--msprobe-out=out",
                                        "-n", "2", "-p", "no:randomly")
    text = res.stdout.str() + res.stderr.str()
    assert res.ret in (0, 1), text[-3000:]
    assert sorted(result_rows(pytester.path / "out")) == api_names()


@pytest.mark.parametrize("ini", sorted(INI_FILES))
def test_an_ini_file_in_the_dump_is_never_read(pytester: pytest.Pytester, ini: str) -> None:
    """In the ``=`` form pytest never looks at the dump; an ini file there (here one that moves the CSVs and
    fails every run) is not read."""
    dump, marks = plant(pytester)
    text = INI_FILES[ini] + ("addopts = --msprobe-out=hijacked -x\n" if ini != "pyproject.toml"
                             else 'addopts = "--msprobe-out=hijacked -x"\n')
    (dump / ini).write_text(text)
    res = pytester.runpytest_inprocess(f"--msprobe-api-info={dump}", "--msprobe-out=out", "-p", "no:randomly")
    assert res.ret in (0, 1), res.stdout.str()[-3000:]
    assert not (pytester.path / "hijacked").exists()
    assert not [m for m in marks if m.exists()]
    assert sorted(result_rows(pytester.path / "out")) == api_names()


@pytest.mark.parametrize("ini", sorted(INI_FILES))
def test_the_space_form_that_would_take_the_dumps_ini_stops_with_the_fix(pytester: pytest.Pytester,
                                                                         ini: str) -> None:
    """``--msprobe-api-info DIR``: pytest reads its command line before any plugin and takes DIR for a test
    path, so it would root the run in the dump (its ini file, rootdir, cache): the run stops with one line that
    says to write ``=``, before any conftest is imported."""
    dump, marks = plant(pytester)
    (dump / ini).write_text(INI_FILES[ini])
    res = pytester.runpytest_inprocess("--msprobe-api-info", str(dump), "--msprobe-out=out")
    text = res.stdout.str() + res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert f"--msprobe-api-info={dump}" in text, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    assert not [m for m in marks if m.exists()]
    assert not (pytester.path / "out").exists()


def test_the_space_form_of_a_dump_below_the_working_directory_still_runs(pytester: pytest.Pytester) -> None:
    """With no ini file between the dump and where pytest runs, both forms root the run alike: no stop."""
    dump, marks = plant(pytester)
    res = pytester.runpytest_inprocess("--msprobe-api-info", "e", "--msprobe-out=out", "-p", "no:randomly")
    assert res.ret in (0, 1), res.stdout.str()[-3000:]
    assert not [m for m in marks if m.exists()]
    assert sorted(result_rows(pytester.path / "out")) == api_names()


@pytest.mark.parametrize("form", ["space", "equals"])
def test_an_existing_output_folder_outside_the_working_directory(pytester: pytest.Pytester, tmp_path_factory,
                                                                 form: str) -> None:
    """``--msprobe-out DIR`` with DIR elsewhere: pytest would root the run (rootdir, cache, so ``--lf``'s record)
    at the common ancestor once DIR exists; the run stops with the fix. Written with ``=`` it runs, rooted where
    pytest runs."""
    shutil.copytree(STATS_STEP, pytester.path / "dump")
    out = tmp_path_factory.mktemp("elsewhere") / "out"
    out.mkdir()
    args = ["--msprobe-out", str(out)] if form == "space" else [f"--msprobe-out={out}"]
    res = pytester.runpytest_inprocess("--msprobe-api-info=dump", *args, "-p", "no:randomly")
    text = res.stdout.str() + res.stderr.str()
    if form == "space":
        assert res.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
        assert f"--msprobe-out={out}" in text and "rootdir" in text, text[-3000:]
        assert not list(out.iterdir())
    else:
        assert res.ret in (0, 1), text[-3000:]
        assert f"rootdir: {pytester.path}" in text
        assert sorted(result_rows(out)) == api_names()
