"""End-to-end NPU-vs-GPU compare on details CSVs written by our own checker (pytester).

The same dump is checked twice: with the ``cpu`` backend (playing the GPU) and with a ``perturbed`` test
backend (playing the NPU) registered through ``pytest_msprobe_register_devices``, which scales gelu's
output by 1.01. The compare must then call gelu error and pass everything else.
"""
from __future__ import annotations

import csv
import io
import shutil

import pytest
import torch  # noqa: F401 - imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
from pytest_msprobe.report import apc
from pytest_msprobe.report.columns import DETAILS_HEADER

PERTURBED = '''
from pytest_msprobe.devices import CpuBackend


class Perturbed(CpuBackend):
    name = "perturbed"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        return out * 1.01 if getattr(func, "__name__", "") == "gelu" else out


def pytest_msprobe_register_devices(registry):
    registry.register(Perturbed())
'''


def only(directory, pattern):
    found = sorted(directory.glob(pattern))
    assert len(found) == 1, (pattern, found)
    return found[0]


def as_msprobe_file(src, dst, *, bom, crlf):
    """Rewrite one of our details CSVs with msprobe's exact 23-column header (our Data Mode column dropped)."""
    with open(src, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][:23] == DETAILS_HEADER
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n" if crlf else "\n").writerows(r[:23] for r in rows)
    dst.write_text(buf.getvalue(), encoding="utf-8-sig" if bom else "utf-8", newline="")
    return dst


@pytest.mark.slow
def test_checker_details_compare(pytester, data_dir, tmp_path):
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PERTURBED)
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")

    gpu_run = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-out", "gpu", "-p", "no:randomly")
    gpu_run.assert_outcomes(passed=15)
    gpu_csv = only(pytester.path / "gpu", "accuracy_checking_details_*.csv")

    npu_run = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-out", "npu",
                                 "--msprobe-device-type", "perturbed", f"--msprobe-gpu-csv={gpu_csv}",
                                 "-p", "no:randomly")
    assert npu_run.ret != 0
    npu_run.stdout.fnmatch_lines(["*api_precision_compare*15 APIs, 1 error*", "*compare error: Functional.gelu.0*"])
    npu_csv = only(pytester.path / "npu", "accuracy_checking_details_*.csv")

    # the compare the plugin ran
    with open(only(pytester.path / "npu", "api_precision_compare_result_*.csv"), encoding="utf-8-sig") as f:
        result = {r["API Name"]: r for r in csv.DictReader(f)}
    assert len(result) == 15
    assert result["Functional.gelu.0"]["Forward Test Success"] == "error"
    assert result["Functional.gelu.0"]["Backward Test Success"] == "error"
    for name, r in result.items():
        if name != "Functional.gelu.0":
            assert r["Forward Test Success"] == "pass", name
            assert r["Backward Test Success"] in ("pass", " "), name

    # the same CSVs rewritten as msprobe writes them (exact header, BOM or not, CRLF or LF) read identically
    outputs = set()
    for i, (bom, crlf) in enumerate([(True, True), (False, False), (True, False)]):
        n = as_msprobe_file(npu_csv, tmp_path / f"npu{i}.csv", bom=bom, crlf=crlf)
        g = as_msprobe_file(gpu_csv, tmp_path / f"gpu{i}.csv", bom=not bom, crlf=crlf)
        out = apc.run_compare(n, g, tmp_path / f"out{i}", timestamp="20260101000000")
        assert out.failed == ["Functional.gelu.0"]
        outputs.add((out.result_csv.read_bytes(), out.details_csv.read_bytes()))
    direct = apc.run_compare(npu_csv, gpu_csv, tmp_path / "direct", timestamp="20260101000000")
    outputs.add((direct.result_csv.read_bytes(), direct.details_csv.read_bytes()))
    assert len(outputs) == 1

    algorithms = {r[0].rsplit(".", 3)[0]: r[26] for r in csv.reader(io.StringIO(
        direct.details_csv.read_bytes().decode("utf-8-sig"), newline=""))}
    assert algorithms["Functional.linear.0"] == "ULP误差比对法"
    assert algorithms["Tensor.__add__.0"] == "绝对阈值法"
    assert algorithms["Torch.relu.0"] == "二进制一致法"
    assert algorithms["Functional.gelu.0"] == "标杆比对法"
