"""The ``pytest-msprobe api-precision-compare`` subcommand and its ratio plot."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from pytest_msprobe import cli
from pytest_msprobe.cli import api_precision_compare

REAL = "mlp_fp32_tensor_L1_acc_check/accuracy_checking_details_20261130135251.csv"


@pytest.fixture
def pair(tmp_path, data_dir):
    """An NPU details CSV whose gelu rows have 1e5 times msprobe's errors, and msprobe's file as the GPU."""
    src = data_dir / REAL
    gpu = tmp_path / "gpu.csv"
    shutil.copy(src, gpu)
    text = src.read_bytes().decode("utf-8-sig")
    lines = []
    for line in text.split("\r\n"):
        if line.startswith("Functional.gelu.0."):
            cells = line.split(",")
            for i in (12, 13, 14, 15):          # 均方根误差, 小值域错误占比, 相对误差最大值/平均值 (after the quoted shape)  # noqa: E501
                if cells[i].strip():
                    cells[i] = f"{float(cells[i]) * 1e5:.14f}"
            line = ",".join(cells)
        lines.append(line)
    npu = tmp_path / "npu.csv"
    npu.write_text("\r\n".join(lines), encoding="utf-8-sig", newline="")
    return npu, gpu


@pytest.mark.parametrize("flags", [("-npu", "-gpu", "-o"), ("--npu", "--gpu", "-o"),
                                   ("--npu_csv_path", "--gpu_csv_path", "--out_path")])
def test_spellings_and_exit_status(pair, tmp_path, capsys, flags):
    npu, gpu = pair
    out = tmp_path / "out"
    rc = cli.main(["api-precision-compare", flags[0], str(npu), flags[1], str(gpu), flags[2], str(out),
                   "--standard", "26.2"])
    assert rc == 1
    printed = capsys.readouterr().out
    assert "15 APIs, 14 pass, 0 warning, 1 error, 0 SKIP" in printed
    assert "error: Functional.gelu.0" in printed
    assert len(list(out.glob("api_precision_compare_result_*.csv"))) == 1
    assert len(list(out.glob("api_precision_compare_details_*.csv"))) == 1


def test_all_pass_exit_0_and_plot(tmp_path, data_dir, capsys):
    src = str(data_dir / REAL)
    rc = cli.main(["api-precision-compare", "-npu", src, "-gpu", src, "-o", str(tmp_path), "--plot"])
    assert rc == 0
    png = list(tmp_path.glob("api_precision_compare_ratios_*.png"))
    assert len(png) == 1 and png[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot:    {png[0]}" in capsys.readouterr().out


def test_unreadable_input_exit_2_names_file(tmp_path, data_dir, capsys):
    src = str(data_dir / REAL)
    rc = cli.main(["api-precision-compare", "-npu", src, "-gpu", str(tmp_path / "missing.csv")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "GPU details CSV" in err and "missing.csv" in err


def test_unknown_standard_is_usage_error(data_dir):
    with pytest.raises(SystemExit) as e:
        cli.main(["api-precision-compare", "-npu", "a", "-gpu", "b", "--standard", "2.0"])
    assert e.value.code == 2


def test_help_texts():
    assert "-npu NPU.csv -gpu GPU.csv" in api_precision_compare.EPILOG
    assert "Exit status" in api_precision_compare.DESCRIPTION


def test_console_script_runs(pair, tmp_path):
    """The installed entry point, in a fresh process (as users run it)."""
    npu, gpu = pair
    proc = subprocess.run([sys.executable, "-m", "pytest_msprobe.cli", "api-precision-compare",
                           "-npu", str(npu), "-gpu", str(gpu), "-o", str(tmp_path / "o")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "error: Functional.gelu.0" in proc.stdout


def test_plot_without_judged_rows(tmp_path):
    from pytest_msprobe.precision.apc_rules import skip_verdict
    from pytest_msprobe.report.apc_plot import plot_ratios

    path = plot_ratios([("a.0.forward.output.0", skip_verdict("x"))], tmp_path / "p.png")
    assert path.stat().st_size > 0
