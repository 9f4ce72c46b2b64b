"""api-precision-compare and --msprobe-gpu-csv choose the precision standard from the details CSVs."""
from __future__ import annotations

import csv
import glob
import io
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch  # noqa: F401 - imported before pytester snapshots sys.modules

import generators.inputs  # noqa: F401
import pytest_msprobe.precision.compare  # noqa: F401
from pytest_msprobe.report import apc, standard_detect
from pytest_msprobe.report.columns import DATA_MODE_COLUMN

DATA = pathlib.Path(__file__).parent / "data"
MSPROBE_26_2 = "mlp_fp32_tensor_L1_acc_check/accuracy_checking_details_20261130135251.csv"


def cli(capsys, *argv):
    from pytest_msprobe.cli import main

    rc = main(["api-precision-compare", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def read(path):
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))


def without_data_mode(src, dst):
    """The same CSV without our extra column: the layout msprobe itself writes."""
    rows = read(src)
    keep = [i for i, name in enumerate(rows[0]) if name != DATA_MODE_COLUMN]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerows([[r[i] for i in keep] for r in rows])
    dst.write_text("\ufeff" + buf.getvalue(), encoding="utf-8", newline="")
    return dst


@pytest.fixture(scope="module")
def our_csvs(tmp_path_factory):
    """Details CSVs our checker writes for msprobe's MLP tensor dump under each standard."""
    out = {}
    root = tmp_path_factory.mktemp("ours")
    for standard in ("1.0.4", "26.2"):
        d = root / standard
        shutil.copytree(DATA / "mlp_fp32_tensor_L1" / "step0" / "rank", d / "dump")
        (d / "pytest.ini").write_text("[pytest]\n")
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                               "--msprobe-api-info", "dump/dump.json", "--msprobe-out", "out",
                               "--msprobe-standard", standard], cwd=d, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        out[standard] = glob.glob(str(d / "out" / "accuracy_checking_details_*.csv"))[0]
    return out


def test_msprobe_26_2_csvs_are_recognised_and_judged_as_msprobe_does(data_dir, tmp_path, capsys):
    found = standard_detect.standard_of_csv(str(data_dir / MSPROBE_26_2))
    assert found.standard == "26.2" and "only benchmark cells" in found.reason
    rc, text = cli(capsys, "-npu", data_dir / MSPROBE_26_2, "-gpu", data_dir / MSPROBE_26_2, "-o", tmp_path / "a")
    assert rc == 0 and text.startswith("standard 26.2, detected from the CSVs: NPU and GPU CSV: ")
    assert "15 APIs, 15 pass" in text and "SKIP" not in text.split("15 pass", 1)[1].split("\n")[0].replace(
        "0 SKIP", "")
    rc, _ = cli(capsys, "-npu", data_dir / MSPROBE_26_2, "-gpu", data_dir / MSPROBE_26_2, "-o", tmp_path / "b",
                "--standard", "26.2")
    detected = sorted((tmp_path / "a").glob("api_precision_compare_*.csv"))
    forced = sorted((tmp_path / "b").glob("api_precision_compare_*.csv"))
    assert [p.read_bytes() for p in detected] == [p.read_bytes() for p in forced]   # msprobe's verdict, every API


@pytest.mark.parametrize("standard", ["1.0.4", "26.2"])
def test_our_csvs_say_their_standard_and_msprobes_layout_is_read_from_cells(our_csvs, tmp_path, standard, capsys):
    ours = our_csvs[standard]
    rows = read(ours)
    mode = rows[0].index(DATA_MODE_COLUMN)
    marks = {r[mode] for r in rows[1:]}
    assert marks == ({"real_data"} if standard == "1.0.4" else {"real_data (standard 26.2)"})
    assert standard_detect.standard_of_csv(ours).standard == standard
    plain = without_data_mode(ours, tmp_path / "plain.csv")          # as msprobe itself would write it
    found = standard_detect.standard_of_csv(str(plain))
    assert found.standard == standard, found.reason
    rc, text = cli(capsys, "-npu", ours, "-gpu", plain, "-o", tmp_path / "o")
    assert rc == 0 and text.startswith(f"standard {standard}, detected from the CSVs")
    assert " SKIP" not in text.splitlines()[1].replace("0 SKIP", "")


def test_two_standards_are_one_clear_error_and_standard_overrides(our_csvs, data_dir, tmp_path, capsys):
    rc, text = cli(capsys, "-npu", our_csvs["1.0.4"], "-gpu", data_dir / MSPROBE_26_2, "-o", tmp_path / "x")
    assert rc == 2 and text.count("\n") == 1
    assert "NPU CSV was written under standard 1.0.4" in text and "GPU CSV under 26.2" in text
    assert "Traceback" not in text and not list((tmp_path / "x").glob("*.csv"))
    rc, text = cli(capsys, "-npu", our_csvs["1.0.4"], "-gpu", data_dir / MSPROBE_26_2, "-o", tmp_path / "y",
                   "--standard", "26.2")
    assert rc in (0, 1) and text.startswith("standard 26.2, as requested; the NPU CSV looks like 1.0.4")


def test_a_csv_that_fits_both_layouts_uses_the_default_and_says_so(data_dir, tmp_path):
    rows = read(data_dir / MSPROBE_26_2)
    benchmark_only = [rows[0]] + [r for r in rows[1:] if r[0].startswith(("Functional.layer_norm", "Tensor.softmax"))]
    path = tmp_path / "both.csv"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerows(benchmark_only)
    path.write_text("\ufeff" + buf.getvalue(), encoding="utf-8", newline="")
    assert standard_detect.standard_of_csv(str(path)).standard is None
    out = apc.run_compare(path, path, tmp_path / "o", version=None)
    assert out.version == "1.0.4" and "neither CSV tells the standards apart" in out.standard_reason


def test_gpu_csv_option_checks_under_the_gpu_csvs_standard(pytester, data_dir):
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    pytester.makeini("[pytest]\n")
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "-p", "no:randomly",
                             f"--msprobe-gpu-csv={data_dir / MSPROBE_26_2}")
    res.stdout.fnmatch_lines(["msprobe: device *, standard 26.2,*",
                              "msprobe: standard 26.2, that of the GPU CSV: the torch.float32 output *"])
    assert res.ret == 0, res.stdout.str()[-2000:]
    details = glob.glob(str(pytester.path / "accuracy_checking_details_*.csv"))[0]
    assert standard_detect.standard_of_csv(details).standard == "26.2"
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "-p", "no:randomly", "--msprobe-standard",
                             "1.0.4", f"--msprobe-gpu-csv={data_dir / MSPROBE_26_2}", "--msprobe-out", "forced")
    res.stdout.fnmatch_lines(["msprobe: device *, standard 1.0.4,*"])
