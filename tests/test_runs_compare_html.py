"""The compare view (pytest-msprobe compare --html): the divergence curve of msprobe's own Llama statistics dumps,
the first divergence marked on it and named above its rows, and nothing marked on a pair that is noise only."""
from __future__ import annotations

import base64
import csv
import glob
import io
import json
import os
import re

import pytest

from pytest_msprobe.cli import main as cli_main
from pytest_msprobe.runs_compare.html import read_curve

STATS = os.path.join(os.path.dirname(__file__), "data", "msprobe_26_2_compare", "llama", "statistics")
MARK = (0xd6, 0x27, 0x28)           # the first divergence's star


def _compare(tmp_path, variant: str) -> tuple:
    out = str(tmp_path / variant)
    code = cli_main(["compare", "-tp", os.path.join(STATS, variant, "step0"), "-gp",
                     os.path.join(STATS, "golden", "step0"), "-o", out, "-da", "--html"])
    assert code == 0
    (view,) = glob.glob(os.path.join(out, "compare_view_*.html"))
    (table,) = glob.glob(os.path.join(out, "compare_result_*.csv"))
    found = glob.glob(os.path.join(out, "diff_analyze_*.json"))
    with open(view, encoding="utf-8") as fh:
        html = fh.read()
    return html, table, found[0] if found else None


def _marked_pixels(html: str) -> int:
    import matplotlib.image as mpimg
    import numpy as np

    data = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html).group(1)
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = (mpimg.imread(io.BytesIO(png), format="png")[:, :, :3] * 255).round()
    return int(np.all(np.abs(image - np.array(MARK)) <= 2, axis=2).sum())


@pytest.mark.parametrize("variant", ["noise_fault_silu", "fault_rsqrt"])
def test_first_divergence_is_marked_and_its_rows_shown(tmp_path, variant):
    html, table, diff_json = _compare(tmp_path, variant)
    with open(diff_json, encoding="utf-8") as fh:
        node = next(iter(json.load(fh).values()))[0]
    op = node["op_name"]
    tag = re.search(r'<div class="first" id="first-divergence" data-op="([^"]+)" data-rank="(\d+)" '
                    r'data-index="(\d+)"', html)
    assert tag and tag.group(1) == op and int(tag.group(2)) == node["rank"]
    curve = read_curve(table, 0)
    assert curve.calls[int(tag.group(3))] == op            # the mark sits at the call's place on the curve
    with open(table, newline="", encoding="utf-8") as fh:
        expected = [row[0] for row in csv.reader(fh) if row[0].startswith(op + ".")]
    shown = re.search(r'<table id="first-rows">(.*?)</table>', html, re.S).group(1)
    names = re.findall(r"<tr><td>([^<]+)</td>", shown)
    assert names == expected and expected                   # the table filtered to that call, all its rows
    assert _marked_pixels(html) > 20


def test_noise_only_marks_nothing(tmp_path):
    html, _, diff_json = _compare(tmp_path, "noise")
    assert diff_json is None
    assert 'id="no-divergence"' in html and 'id="first-divergence"' not in html
    assert _marked_pixels(html) == 0


def test_unreadable_diff_json_is_one_line_and_the_curve_is_drawn(tmp_path):
    from pytest_msprobe.runs_compare.html import render_compare_view

    _, table, _ = _compare(tmp_path, "fault_silu")
    bad = tmp_path / "diff_analyze_1.json"
    bad.write_text('{"rank_0": [{"op_name": ')
    html = open(render_compare_view([table], str(bad), str(tmp_path / "view.html")), encoding="utf-8").read()
    assert 'id="no-divergence"' in html and "not read" in html and str(bad) in html
    assert 'src="data:image/png;base64,' in html


def test_two_ranks_two_lines_and_the_first_across_ranks_marked(tmp_path):
    import shutil

    for side, rank0, rank1 in (("target", "fault__softmax", "fault_rsqrt"), ("golden", "golden", "golden")):
        shutil.copytree(os.path.join(STATS, rank0, "step0", "rank"), tmp_path / side / "step0" / "rank0")
        shutil.copytree(os.path.join(STATS, rank1, "step0", "rank"), tmp_path / side / "step0" / "rank1")
    out = tmp_path / "out"
    assert cli_main(["compare", "-tp", str(tmp_path / "target" / "step0"), "-gp", str(tmp_path / "golden" / "step0"),
                     "-o", str(out), "-da", "--html"]) == 0
    (view,) = glob.glob(str(out / "compare_view_*.html"))
    html = open(view, encoding="utf-8").read()
    assert re.search(r'data-op="Torch\.rsqrt\.0\.forward" data-rank="1"', html)
    assert "also diverging: rank 0 Functional.softmax.0.forward" in html
    assert html.count("compare_result_rank") >= 2 and "rank 0:" in html and "rank 1:" in html
    assert _marked_pixels(html) > 20
