"""The result/details CSV pair: msprobe's layout, crash safety, resume rewrite, reading msprobe's files."""
from __future__ import annotations

import csv
import glob
import io
import os

import pytest

from pytest_msprobe.precision.compare import DetailRow, skip_row
from pytest_msprobe.report import acc_csv
from pytest_msprobe.report.columns import (
    DATA_MODE_COLUMN,
    DETAILS_HEADER,
    EXPECTED_COLUMN,
    FIDELITY_COLUMN,
    RESULT_HEADER,
)


def _read_bytes(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _read_text(path) -> str:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return fh.read()



def _pass_row(name: str) -> DetailRow:
    row = DetailRow(name, "torch.float64", "torch.float32", "(8, 32)")
    row.metrics.update(cosine=1.0, max_abs_err=1.1826402e-07, error_balance=0.01171875, small_value_err_ratio=0)
    row.message = "\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
    return row


TRICKY_CELLS = ["", " ", "a,b", 'say "hi"', "\nline\n", "\r", "'=SUM(A1)", "  lead", "trail  ", "plain", ""]


@pytest.mark.parametrize("tail", [[], [""], ["", ""], ["real_data", ""], ["", 'x,"y"'], ["\n"]])
def test_a_row_rendered_where_it_was_computed_is_the_row_the_writer_writes(tail):
    """Workers send each details row as its CSV line and the controller adds its own trailing cells: the same
    text as writing all the cells at once, whatever the cells hold."""
    for cells in (TRICKY_CELLS, [""], ["only"], TRICKY_CELLS[::-1]):
        direct = io.StringIO()
        csv.writer(direct, lineterminator="\r\n").writerow(list(cells) + list(tail))
        assert acc_csv._joined(acc_csv.row_text(cells), tail) == direct.getvalue()


def test_layout_bom_crlf_headers_and_field_counts(tmp_path):
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        w.write_api(acc_csv.result_cells("Functional.linear.0", "pass", "pass", None),
                    [acc_csv.detail_cells(_pass_row("Functional.linear.0.forward.output.0"))], "real_data",
                    ["close (max 2 ulp, limit 4)"], ["0.37"])
        w.write_api(acc_csv.result_cells("Tensor.add_.0", "pass", None, None), [], "real_data")
        w.write_api(acc_csv.result_cells("VF.lstm.0", "SKIP", "SKIP", "prefix 'VF' is not replayable"),
                    [acc_csv.detail_cells(skip_row("VF.lstm.0.forward.output.0", "prefix 'VF' is not replayable"))],
                    "real_data")
    raw = _read_bytes(res)
    assert raw.startswith(b"\xef\xbb\xbfAPI name,Forward Test Success,Backward Test Success,Message\r\n")
    assert raw.count(b"\xef\xbb\xbf") == 1
    assert b"Functional.linear.0,pass,pass\r\n" in raw          # three fields, no trailing comma
    assert b"Tensor.add_.0,pass, \r\n" in raw                    # blank backward is one space
    assert b"VF.lstm.0,SKIP,SKIP,prefix 'VF' is not replayable\r\n" in raw
    draw = _read_bytes(det)
    extra = [DATA_MODE_COLUMN, FIDELITY_COLUMN, EXPECTED_COLUMN]
    assert draw.startswith(b"\xef\xbb\xbf" + ",".join(DETAILS_HEADER + extra).encode() + b"\r\n")
    # message with newlines is quoted, with bare LF inside, CRLF only as record terminator
    assert (b'pass,"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n",'
            b'real_data,"close (max 2 ulp, limit 4)",0.37\r\n') in draw     # a comma: quoted
    assert draw.endswith(b",prefix 'VF' is not replayable,real_data,,\r\n")     # no recording, no multiple: blank
    assert b'"(8, 32)",1.00000000000000,1.1826402e-07' not in draw   # python float -> 14 decimals
    header, rows = acc_csv.read_details_csv(det)
    assert header[-3:] == [DATA_MODE_COLUMN, FIDELITY_COLUMN, EXPECTED_COLUMN] and len(rows) == 2
    assert rows[0][4] == "1.00000000000000" and rows[0][12] == "0" and rows[0][5] == "0.00000011826402"
    assert rows[1][4:21] == [" "] * 17 and rows[1][21] == "SKIP"


def test_pandas_reads_details_by_column_name(tmp_path):
    pd = pytest.importorskip("pandas")
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        w.write_api(acc_csv.result_cells("Functional.linear.0", "pass", "pass", None),
                    [acc_csv.detail_cells(_pass_row("Functional.linear.0.forward.output.0"))], "random_data")
    df = pd.read_csv(det)          # the way msprobe's api_precision_compare reads it
    assert list(df.columns[:len(DETAILS_HEADER)]) == DETAILS_HEADER
    assert df["API Name"][0] == "Functional.linear.0.forward.output.0" and df[DATA_MODE_COLUMN][0] == "random_data"


def test_formula_injection_is_neutralised(tmp_path):
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        w.write_api(acc_csv.result_cells("=HYPERLINK(1).0", "SKIP", "SKIP", "@SUM(A1)"),
                    [acc_csv.detail_cells(skip_row("=HYPERLINK(1).0.forward.output.0", "+cmd"))])
    text = _read_text(res)
    assert "'=HYPERLINK(1).0,SKIP,SKIP,'@SUM(A1)" in text
    assert "'+cmd" in _read_text(det)
    assert acc_csv.read_result_csv(res)[0].name == "=HYPERLINK(1).0"


def test_keep_apis_rewrites_pair_without_duplicates_and_cut_rows(tmp_path):
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        for name, status in (("A.a.0", "pass"), ("B.b.0", "error"), ("A.a.0", "pass")):
            w.write_api(acc_csv.result_cells(name, status, None, None),
                        [acc_csv.detail_cells(_pass_row(f"{name}.forward.output.0"))])
    with open(det, "a", encoding="utf-8", newline="") as fh:     # orphan details of an unfinished API,
        fh.write("C.c.0.forward.output.0,torch.float64,torch.fl")  # cut mid-row by a kill
    assert acc_csv.finished_apis(res, include_failing=False) == {"A.a.0"}
    assert acc_csv.finished_apis(res, include_failing=True) == {"A.a.0", "B.b.0"}
    acc_csv.keep_apis(res, det, {"A.a.0"})
    rows = acc_csv.read_result_csv(res)
    assert [r.name for r in rows] == ["A.a.0"]
    _, drows = acc_csv.read_details_csv(det)
    assert {acc_csv.api_of_output(r[0]) for r in drows} == {"A.a.0"} and len(drows) == 2
    assert _read_bytes(res).count(b"\xef\xbb\xbf") == 1
    # appending after the rewrite keeps one header and one BOM
    with acc_csv.AccCsvWriter(res, det) as w:
        w.write_api(acc_csv.result_cells("B.b.0", "pass", None, None), [])
    assert [r.name for r in acc_csv.read_result_csv(res)] == ["A.a.0", "B.b.0"]
    assert _read_bytes(det).count(b"\xef\xbb\xbf") == 1


def test_reads_msprobe_result_and_continues_without_data_mode(tmp_path, data_dir):
    src = glob.glob(str(data_dir / "mlp_fp32_tensor_L1_acc_check" / "accuracy_checking_result_*.csv"))[0]
    rows = acc_csv.read_result_csv(src)
    assert len(rows) == 15 and rows[0].name == "Functional.linear.0" and rows[-1].backward == " "
    assert acc_csv.timestamp_of(src) == "20261130135251"
    res = tmp_path / os.path.basename(src)
    det = acc_csv.details_path_for(str(res))
    res.write_bytes(_read_bytes(src))
    with open(det, "wb") as fh:
        fh.write(_read_bytes(acc_csv.details_path_for(src)))
    w = acc_csv.AccCsvWriter(str(res), det)
    assert not w.data_mode_column          # an msprobe file keeps msprobe's 23 columns
    w.write_api(acc_csv.result_cells("Functional.gelu.1", "pass", None, None),
                [acc_csv.detail_cells(_pass_row("Functional.gelu.1.forward.output.0"))], "real_data")
    w.close()
    last = list(csv.reader(io.StringIO(_read_text(det))))[-1]
    assert len(last) == len(DETAILS_HEADER)


def test_continuing_a_details_csv_without_the_fidelity_column_keeps_its_layout(tmp_path):
    """A details CSV of an earlier version (Data Mode last) is continued in its own layout."""
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with open(det, "w", encoding="utf-8-sig", newline="") as fh:
        csv.writer(fh, lineterminator="\r\n").writerow(DETAILS_HEADER + [DATA_MODE_COLUMN])
    w = acc_csv.AccCsvWriter(res, det)
    assert w.data_mode_column and not w.fidelity_column
    w.write_api(acc_csv.result_cells("Functional.gelu.1", "pass", None, None),
                [acc_csv.detail_cells(_pass_row("Functional.gelu.1.forward.output.0"))], "real_data", ["exact"])
    w.close()
    last = list(csv.reader(io.StringIO(_read_text(det))))[-1]
    assert len(last) == len(DETAILS_HEADER) + 1 and last[-1] == "real_data"


def test_failing_apis_case_insensitive_and_fail_on(tmp_path):
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        w.write_api(["X.x.0", "Warning", "pass"], [])
        w.write_api(["Y.y.0", "pass", "ERROR"], [])
    assert acc_csv.failing_apis(res) == {"Y.y.0"}
    assert acc_csv.failing_apis(res, fail_on="warning") == {"X.x.0", "Y.y.0"}
    assert RESULT_HEADER[0] == "API name"


def test_not_a_result_csv_is_refused(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("foo,bar\n1,2\n")
    with pytest.raises(ValueError, match="not an accuracy_checking_result CSV"):
        acc_csv.read_result_csv(str(p))


def test_sort_apis_restores_dump_order_keeping_groups(tmp_path):
    res, det = acc_csv.csv_paths(str(tmp_path), "20260101000000")
    with acc_csv.AccCsvWriter(res, det) as w:
        for name in ("Old.x.0", "C.c.0", "A.a.0", "B.b.0"):
            w.write_api(acc_csv.result_cells(name, "pass", None, None),
                        [acc_csv.detail_cells(_pass_row(f"{name}.forward.output.{i}")) for i in range(2)])
    acc_csv.sort_apis(res, det, {"A.a.0": 0, "B.b.0": 1, "C.c.0": 2})
    assert [r.name for r in acc_csv.read_result_csv(res)] == ["Old.x.0", "A.a.0", "B.b.0", "C.c.0"]
    names = [r[0] for r in acc_csv.read_details_csv(det)[1]]
    assert names == [f"{a}.forward.output.{i}" for a in ("Old.x.0", "A.a.0", "B.b.0", "C.c.0") for i in range(2)]
    assert _read_bytes(res).count(b"\xef\xbb\xbf") == 1
