"""An I/O failure of the checker's CSVs is one line naming the path and what to do; the rows written so far
stay whole, and ``--lf`` finishes the pair once the cause is gone."""
from __future__ import annotations

import csv
import glob
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from pytest_msprobe.report import acc_csv
from pytest_msprobe.report.columns import DETAILS_HEADER

STATS_STEP = pathlib.Path(__file__).parent / "data" / "mlp_fp32_statistics_L1" / "step0" / "rank"
APIS = sorted({k.rsplit(".", 1)[0] for k in json.loads((STATS_STEP / "dump.json").read_text())["data"]
               if not k.startswith("Module")})


def _pytest(cwd: pathlib.Path, *args: str, fsize: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}

    def limit() -> None:            # a file-size limit: writes past it fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-q", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, preexec_fn=limit if fsize else None)


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path) -> None:
    shutil.copytree(STATS_STEP, tmp_path / "dump")
    (tmp_path / "afile").write_text("not a folder")
    res = _pytest(tmp_path, "--msprobe-api-info=dump", "--msprobe-out=afile/out")
    text = res.stdout + res.stderr
    assert res.returncode == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    (line,) = [ln for ln in res.stderr.splitlines() if "afile" in ln]
    assert str(tmp_path / "afile" / "out") in line and "--msprobe-out" in line, line


def _whole(out: pathlib.Path) -> list:
    """The result rows, after checking that both files hold whole rows only and that each API with a result
    row has its details rows."""
    (result,) = glob.glob(str(out / "accuracy_checking_result_*.csv"))
    with open(acc_csv.details_path_for(result), encoding="utf-8-sig", newline="") as fh:
        details = list(csv.reader(fh))
    assert details and all(len(r) >= len(DETAILS_HEADER) for r in details), details[-2:]
    with open(result, "rb") as fh:
        raw = fh.read()
    assert raw.endswith(b"\r\n"), raw[-80:]
    rows = acc_csv.read_result_csv(result)
    with_details = {acc_csv.api_of_output(r[0]) for r in details[1:]}
    assert {r.name for r in rows if r.forward != "SKIP"} <= with_details
    return [r.name for r in rows]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_full_disk_stops_the_check_with_one_line_and_lf_finishes_the_pair(tmp_path, workers) -> None:
    shutil.copytree(STATS_STEP, tmp_path / "dump")
    args = ["--msprobe-api-info=dump", "--msprobe-out=out", *workers]
    res = _pytest(tmp_path, *args, fsize=4000)
    text = res.stdout + res.stderr
    assert res.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    lines = [ln for ln in text.splitlines() if "cannot write" in ln and "ulimit -f" in ln]
    assert lines and str(tmp_path / "out") in lines[0] and "--lf" in lines[0], text[-3000:]
    before = _whole(tmp_path / "out")
    assert len(before) < len(APIS)
    res = _pytest(tmp_path, *args, "--lf")
    assert res.returncode in (0, 1), (res.stdout + res.stderr)[-3000:]
    after = _whole(tmp_path / "out")
    assert sorted(after) == APIS
