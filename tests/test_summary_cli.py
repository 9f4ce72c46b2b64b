"""``pytest-msprobe summary``: counts and failing APIs of a result CSV, exit status for CI."""
from __future__ import annotations

import glob

from pytest_msprobe import cli
from pytest_msprobe.precision.compare import DetailRow
from pytest_msprobe.report import acc_csv


def test_summary_of_msprobe_csv_passes(data_dir, capsys):
    src = glob.glob(str(data_dir / "mlp_fp32_tensor_L1_acc_check" / "accuracy_checking_result_*.csv"))[0]
    assert cli.main(["summary", src]) == 0
    out = capsys.readouterr().out
    assert "15 APIs" in out and "forward:  pass 15" in out and "backward: pass 9, blank 6" in out


def test_summary_lists_failing_api_with_metric_and_fails(tmp_path, capsys):
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    row = DetailRow("Functional.gelu.0.forward.output.0", "torch.float32", "torch.float16", "(8, 32)")
    row.metrics.update(cosine=0.9999, max_abs_err=0.04, hundred_ratio=0.3125)
    row.status = "error"
    row.message = "\nRelative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n"
    with acc_csv.AccCsvWriter(res, det) as w:
        w.write_api(acc_csv.result_cells("Functional.gelu.0", "error", "pass", None), [acc_csv.detail_cells(row)])
        w.write_api(acc_csv.result_cells("Torch.relu.0", "Warning", "pass", None), [])
        w.write_api(acc_csv.result_cells("VF.lstm.0", "SKIP", "SKIP", "prefix 'VF' is not replayable"), [])
    assert cli.main(["summary", res]) == 1
    out = capsys.readouterr().out
    assert "failing APIs (1, fail on error):" in out
    assert ("Functional.gelu.0: forward error, backward pass; Functional.gelu.0.forward.output.0: Relative error "
            "is greater than 0.01") in out and "double_hundred=0.31250000000000" in out
    assert "1 x prefix 'VF' is not replayable" in out
    assert cli.main(["summary", res, "--fail-on", "warning"]) == 1
    assert "failing APIs (2, fail on warning)" in capsys.readouterr().out
