"""grad_summary rows and files: interval counting, cell formats, CSV bytes, direction files."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dumpers.grad_probe.summary import (
    csv_rows,
    fraction_cell,
    read_summary,
    summarise_flat,
    write_step,
)


def test_doc_worked_example_interval_counts():
    """bounds [-10, 0, 10] on [9.3, 5.4, -1.0, -12.3] -> counts 1, 1, 2, 0."""
    rec = summarise_flat(np.array([9.3, 5.4, -1.0, -12.3], np.float32), [(4,)], ["w"], 0, "L2", (-10, 0, 10))
    assert rec.intervals.tolist() == [[1, 1, 2, 0]]
    assert rec.zeros.tolist() == [0]
    row = csv_rows(rec, "L2")[0]
    assert row[1:6] == ["0.25", "0.25", "0.5", "0.0", "0.0"]


def test_buckets_are_left_open_right_closed_and_zeros_counted_twice():
    vals = np.array([-1.0, -0.5, 0.0, 0.0, 1.0, 1.5, -2.0, 0.25], np.float32)
    rec = summarise_flat(vals, [(2, 4)], ["w"], 0, "L2", (-1, 0, 1))
    # (-inf,-1]: -2,-1   (-1,0]: -0.5,0,0   (0,1]: 1,0.25   (1,inf): 1.5
    assert rec.intervals.tolist() == [[2, 3, 2, 1]]
    assert rec.zeros.tolist() == [2]
    assert rec.intervals.sum() == vals.size


def test_stat_cells_are_float32_widened_repr():
    vals = np.array([0.1, -0.3, 2.0], np.float32)
    rec = summarise_flat(vals, [(3,)], ["p"], 5, "L1", (-1, 0, 1))
    row = csv_rows(rec, "L1")[0]
    assert row == ["p", repr(float(np.float32(2.0))), repr(float(np.float32(-0.3))),
                   repr(float(np.float32(np.linalg.norm(vals.astype(np.float64))))), "[3]"]
    assert row[2] == "-0.30000001192092896"
    assert rec.direction.tolist() == [True, False, True]


def test_l0_md5_is_of_float32_bytes():
    vals = np.arange(6, dtype=np.float32) - 2
    rec = summarise_flat(vals, [(2, 3)], ["w"], 0, "L0", ())
    assert rec.md5s == [hashlib.md5(vals.tobytes()).hexdigest()]
    assert rec.direction is None


def test_empty_gradient_cells():
    assert fraction_cell(0, 0) == "0"
    rec = summarise_flat(np.zeros(0, np.float32), [(0, 3)], ["e"], 0, "L2", (0,))
    row = csv_rows(rec, "L2")[0]
    assert row[1:4] == ["0", "0", "0"] and row[-1] == "[0, 3]"


def test_csv_bytes_bom_crlf_minimal_quoting_and_direction_files(tmp_path):
    vals = np.array([1.0, -1.0, 0.0, 2.0, 3.0, -4.0], np.float32)
    rec = summarise_flat(vals, [(2, 2), (2,)], ["a.weight", "a.bias"], 3, "L2", (-1, 0, 1))
    write_step(str(tmp_path), rec, "L2", (-1, 0, 1))
    raw = (tmp_path / "grad_summary_3.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfparam_name,\"(-inf, -1]\",\"(-1, 0]\",\"(0, 1]\",\"(1, inf)\",=0,max,")
    assert raw.count(b"\r\n") == 3 and b"\n" not in raw.replace(b"\r\n", b"")
    assert b',"[2, 2]"\r\n' in raw and b",[2]\r\n" in raw
    rows = read_summary(str(tmp_path / "grad_summary_3.csv"))
    assert [r["param_name"] for r in rows] == ["a.weight", "a.bias"]
    assert rows[0]["=0"] == "0.25" and rows[1]["(1, inf)"] == "0.5"
    w = np.load(tmp_path / "step3" / "a.weight.npy")
    assert w.dtype == np.bool_ and w.shape == (2, 2) and w.tolist() == [[True, False], [False, True]]
    assert np.load(tmp_path / "step3" / "a.bias.npy").tolist() == [True, False]
    # dirs 0o750, files 0o640 (a umask can only narrow them): nothing for others, no group write
    assert (tmp_path / "step3").stat().st_mode & 0o027 == 0
    assert (tmp_path / "grad_summary_3.csv").stat().st_mode & 0o137 == 0


@pytest.mark.parametrize("name", ["a/b", "a b"])
def test_unsafe_names_get_no_direction_file(tmp_path, name):
    rec = summarise_flat(np.ones(2, np.float32), [(2,)], [name], 0, "L1", ())
    write_step(str(tmp_path), rec, "L1", ())
    assert list((tmp_path / "step0").iterdir()) == []
    assert read_summary(str(tmp_path / "grad_summary_0.csv"))[0]["param_name"] == name
