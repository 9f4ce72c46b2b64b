"""The HTML report says where a call sits in the user's model (construct.json's module path) and shows the
user's own frames before the framework's; every header is in one language; wide tables scroll inside the page."""
from __future__ import annotations

import json
import re
import shutil

from pytest_msprobe.report.html import render_report

RUN = "mlp_fp32_tensor_L1_acc_check"
DUMP = ("mlp_fp32_tensor_L1", "step0", "rank")


def _report(data_dir, tmp_path) -> str:
    run = tmp_path / "run"
    shutil.copytree(data_dir / RUN, run)
    dump = tmp_path / "dump"
    shutil.copytree(data_dir.joinpath(*DUMP), dump)
    (dump / "construct.json").write_text(json.dumps({
        "Functional.linear.0.forward": "Module.fc1.Linear.forward.0",
        "Module.fc1.Linear.forward.0": "Module.net.Sequential.forward.0",
        "Module.net.Sequential.forward.0": None}))
    (result,) = run.glob("accuracy_checking_result_*.csv")
    out = render_report(str(result), None, str(tmp_path / "r.html"), dump_dir=str(dump))
    return open(out, encoding="utf-8").read()


def test_the_module_path_and_the_users_frames_first(data_dir, tmp_path) -> None:
    html = _report(data_dir, tmp_path)
    assert "module: Module.net.Sequential.forward.0 &gt; Module.fc1.Linear.forward.0" in html
    start = html.index('id="api-', html.index("Per-API details"))
    linear = html[html.index("<b>Functional.linear.0</b>", start):]
    linear = linear[:linear.index("</details>\n</details>") if "</details>\n</details>" in linear else None]
    user = linear.index('class="user-stack"')
    assert "train.py" in linear[user:linear.index("</pre>", user)]
    assert "site-packages/torch" not in linear[user:linear.index("</pre>", user)]
    assert linear.index("framework frames") > user


def test_every_header_in_one_language_and_tables_scroll(data_dir, tmp_path) -> None:
    html = _report(data_dir, tmp_path)
    headers = re.findall(r"<th[^>]*>(.*?)</th>", html)
    assert headers and not [h for h in headers if re.search(r"[\u4e00-\u9fff]", h)], headers
    assert html.count('<div class="scroll"><table') >= 2 and "overflow-x: auto" in html


def test_the_chart_plots_the_metric_that_decided_each_status(data_dir) -> None:
    from pytest_msprobe.precision.compare import V_COS_ERR, V_HUNDRED_ERR
    from pytest_msprobe.report.html import read_csv_rows
    from pytest_msprobe.report.html_chart import api_bar, deciding_metric
    (details,) = (data_dir / RUN).glob("accuracy_checking_details_*.csv")
    rows = read_csv_rows(str(details))
    assert all(deciding_metric(r) is not None for r in rows if r["Status"].strip().lower() != "skip")
    # an output failing the double-hundred ratio, its max abs error blank (msprobe's rule): its bar is that ratio
    failing = dict(rows[0], Status="error", Message=V_HUNDRED_ERR, **{"双百指标": "0.75", "最大绝对误差": " "})
    assert api_bar([rows[0], failing]) == ("hundred_ratio", 0.25)
    cos = dict(rows[0], Status="error", Message=V_COS_ERR, **{"余弦相似度": "0.9"})
    field, value = api_bar([failing, cos])
    assert field in ("hundred_ratio", "cosine") and value == max(0.25, 1 - 0.9)
