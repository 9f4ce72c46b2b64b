"""The HTML report: rendered from real CSVs, escaped, and visible in headless Chromium."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from pytest_msprobe.report.html import load_stacks, read_csv_rows, render_report

ACC = "mlp_fp32_tensor_L1_acc_check"
RESULT = "accuracy_checking_result_20261130135251.csv"
DETAILS = "accuracy_checking_details_20261130135251.csv"


def _copy_run(data_dir, tmp_path):
    for name in (RESULT, DETAILS):
        shutil.copy(data_dir / ACC / name, tmp_path / name)
    return tmp_path / RESULT, tmp_path / DETAILS


def _add_hostile_api(result, details):
    """Append an API whose name and message carry HTML and a spreadsheet formula."""
    with open(result, "a", encoding="utf-8", newline="") as fh:
        fh.write('Tensor.<script>alert(1)</script>.0,error,, \r\n')
    with open(details, "a", encoding="utf-8", newline="") as fh:
        fh.write("Tensor.<script>alert(1)</script>.0.forward.output.0,torch.float32,torch.float16,\"(4,)\","
                 "0.5,2.0, , , , , , , , , , , , , , , ,error,\"=HYPERLINK(\"\"x\"\")<b>bold</b>\"\r\n")


def test_report_lists_every_api_and_escapes(data_dir, tmp_path):
    result, details = _copy_run(data_dir, tmp_path)
    _add_hostile_api(result, details)
    out = render_report(str(result), str(details), str(tmp_path / "r.html"),
                        dump_dir=str(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank"))
    html = open(out, encoding="utf-8").read()
    for row in read_csv_rows(str(result)):
        assert row["API name"].replace("<", "&lt;").replace(">", "&gt;") in html
    assert "<script>alert(1)</script>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert 'data:image/png;base64,' in html
    # the error API sorts first in the table and its stack is absent (not in stack.json); linear has one
    assert html.index("alert(1)") < html.index("Functional.linear.0")
    assert "Your code (from stack.json)" in html
    assert 'src="http' not in html and "<link" not in html   # self-contained: nothing fetched


def test_load_stacks_reads_grouped_and_flat(tmp_path, data_dir):
    grouped = load_stacks(str(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank"))
    assert "Functional.linear.0.forward" in grouped and grouped["Functional.linear.0.forward"]
    (tmp_path / "stack.json").write_text('{"Torch.relu.0.forward": ["File a.py, line 1, in f"]}')
    assert load_stacks(str(tmp_path)) == {"Torch.relu.0.forward": ["File a.py, line 1, in f"]}
    (tmp_path / "stack.json").write_text("[1, 2")
    assert load_stacks(str(tmp_path)) == {}


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(data_dir, tmp_path):
    chrome = _chromium()
    if chrome is None:
        if os.environ.get("MSPROBE_CI") == "1":
            pytest.fail("chromium is not installed; CI must install the Debian package 'chromium'")
        pytest.skip("chromium not installed (apt-get install chromium)")
    result, details = _copy_run(data_dir, tmp_path)
    _add_hostile_api(result, details)
    out = render_report(str(result), str(details), str(tmp_path / "r.html"))
    url = "file://" + out
    base = [chrome, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('<tr data-status="') == 16          # 15 sample APIs + the hostile one
    assert 'id="overview-plot"' in dom
    assert "<script>alert(1)</script>" not in dom
    artefacts = os.environ.get("MSPROBE_ARTIFACTS", str(tmp_path))
    os.makedirs(artefacts, exist_ok=True)
    shot = os.path.join(artefacts, "html_report.png")
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1400,1400", url],
                   capture_output=True, timeout=120)
    assert os.path.getsize(shot) > 10_000
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(shot)[..., :3]
    # the status cards and the plot's bars are drawn: the pass-green and error-red are on screen
    green = np.all(np.abs(img - np.array([0x2C, 0xA0, 0x2C]) / 255) < 0.03, axis=-1).sum()
    red = np.all(np.abs(img - np.array([0xD6, 0x27, 0x28]) / 255) < 0.03, axis=-1).sum()
    assert green > 500 and red > 500


def test_report_shows_replay_fidelity_and_filters_on_it(tmp_path):
    from pytest_msprobe.precision.compare import DetailRow
    from pytest_msprobe.report import acc_csv

    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        for api, cell in (("Functional.gelu.0", "differs: max abs diff 1.911e-02, max 83338 ulp, 100% of elements"),
                          ("Torch.relu.0", "exact"), ("Tensor.add_.0", "")):
            row = DetailRow(f"{api}.forward.output.0", "torch.float64", "torch.float32", "(8, 32)")
            w.write_api(acc_csv.result_cells(api, "pass", None, None), [acc_csv.detail_cells(row)], "real_data",
                        [cell])
    html = open(render_report(res, det, str(tmp_path / "r.html")), encoding="utf-8").read()
    assert '<select id="fidelity-filter"' in html and "r.dataset.fidelity === fid" in html
    assert '<th onclick="sortBy(7)">replay fidelity</th>' in html
    assert 'data-fidelity="unfaithful"' in html and 'data-fidelity="faithful"' in html
    assert 'data-fidelity="none"' in html                         # nothing recorded for add_
    assert "Functional.gelu.0.forward.output.0: differs: max abs diff 1.911e-02" in html
    assert "<th>replay fidelity</th>" in html                     # the details tables carry the column


def test_report_of_an_msprobe_csv_has_no_fidelity_column(data_dir, tmp_path):
    result, details = _copy_run(data_dir, tmp_path)
    html = open(render_report(str(result), str(details), str(tmp_path / "r.html")), encoding="utf-8").read()
    assert "fidelity-filter" not in html.split("<script>")[0] and "replay fidelity</th>" not in html
