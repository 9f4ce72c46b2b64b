"""Reading details CSVs, matching, grouping and writing the api_precision_compare CSVs (spec 5, 6, 9)."""
from __future__ import annotations

import csv
import io
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_msprobe.report import apc
from pytest_msprobe.report.columns import APC_DETAILS_HEADER, APC_RESULT_HEADER, DETAILS_HEADER

REAL = "mlp_fp32_tensor_L1_acc_check/accuracy_checking_details_20261130135251.csv"
BENCH_COLS = ["小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值"]
BENCHMARK_APIS = ("Functional.layer_norm.0", "Functional.gelu.0", "Tensor.softmax.0", "Functional.cross_entropy.0")


def read_rows(path) -> list:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def write_rows(path, rows, *, bom=True, crlf=True, header=DETAILS_HEADER) -> pathlib.Path:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n" if crlf else "\n").writerows([header, *rows])
    path = pathlib.Path(path)
    path.write_text(buf.getvalue(), encoding="utf-8-sig" if bom else "utf-8", newline="")
    return path


def perturb(rows, api_call, factor):
    """Scale the benchmark cells of every row of one API call (msprobe's text formatting is kept)."""
    out = []
    for row in rows:
        row = list(row)
        if row[0].startswith(api_call + "."):
            for col in BENCH_COLS:
                i = DETAILS_HEADER.index(col)
                if row[i].strip():
                    row[i] = f"{float(row[i]) * factor:.14f}"
        out.append(row)
    return out


def fill_104_cells(rows):
    """Give msprobe 26.2's rows the cells 1.0.4's algorithms read (ULP, absolute, binary), all passing."""
    out = []
    for row in rows:
        row = list(row)
        if row[2].strip():
            for col, value in (("ULP误差平均值", "0.5"), ("ULP误差大于阈值占比", "0.0"), ("二进制一致错误率", "0.0"),
                               ("inf/nan错误率", "0"), ("相对误差错误率", "0"), ("绝对误差错误率", "0")):
                row[DETAILS_HEADER.index(col)] = value
        out.append(row)
    return out


def row(name, dtype="torch.float32", shape="(4,)", message="", status="pass", **cells):
    """A details row; cells by DETAILS_HEADER name (blank when not given)."""
    r = [" "] * len(DETAILS_HEADER)
    r[0], r[1], r[2], r[3] = name, "torch.float64" if dtype.strip() else " ", dtype, shape
    for col, value in cells.items():
        r[DETAILS_HEADER.index(col)] = str(value)
    r[-2], r[-1] = status, message
    return r


def bench_row(name, value=1e-6, **kw):
    return row(name, **dict.fromkeys(BENCH_COLS, value), 误差均衡性=0.1, **kw)


@pytest.fixture
def real_rows(data_dir):
    return read_rows(data_dir / REAL)[1:]


def details(out: apc.CompareOutcome) -> dict:
    return {r[0]: dict(zip(APC_DETAILS_HEADER, r)) for r in read_rows(out.details_csv)[1:]}


# ------------------------------------------------------------------------------------------ reading
class TestRead:
    def test_reads_msprobe_file(self, data_dir):
        t = apc.read_details(data_dir / REAL)
        assert len(t.rows) == 32
        assert t.rows[0]["API Name"] == "Functional.linear.0.forward.output.0"
        assert t.rows[0]["Message"].startswith("\nMax abs error")
        assert t.kinds["二进制一致错误率"] == "text"

    @pytest.mark.parametrize("bom", [True, False])
    @pytest.mark.parametrize("crlf", [True, False])
    def test_bom_and_line_endings_read_identically(self, tmp_path, data_dir, real_rows, bom, crlf):
        path = write_rows(tmp_path / "d.csv", real_rows, bom=bom, crlf=crlf)
        assert apc.read_details(path).rows == apc.read_details(data_dir / REAL).rows

    def test_doc_spellings_and_extra_columns_accepted(self, tmp_path, real_rows):
        header = [h.replace("ULP误差", "ULP 误差").replace("inf/nan", "inf / nan") for h in DETAILS_HEADER]
        header[0] = "API name"
        path = write_rows(tmp_path / "d.csv", [r + ["real"] for r in real_rows], header=header + ["Data Mode"])
        t = apc.read_details(path)
        assert t.rows[0]["ULP误差平均值"] == " " and t.rows[0]["Data Mode"] == "real"

    def test_missing_columns_named_with_file(self, tmp_path, real_rows):
        keep = [i for i, h in enumerate(DETAILS_HEADER) if h not in ("均方根误差", "双千指标")]
        path = write_rows(tmp_path / "npu.csv", [[r[i] for i in keep] for r in real_rows],
                          header=[DETAILS_HEADER[i] for i in keep])
        with pytest.raises(apc.ApcInputError, match=r"columns \{均方根误差,双千指标\} are missing in NPU") as e:
            apc.read_details(path, "NPU")
        assert "npu.csv" in str(e.value)

    def test_result_csv_gets_a_hint(self, data_dir):
        path = data_dir / REAL.replace("details", "result")
        with pytest.raises(apc.ApcInputError, match="this is a result CSV"):
            apc.read_details(path, "GPU")

    def test_empty_file(self, tmp_path):
        (tmp_path / "e.csv").write_bytes(b"")
        with pytest.raises(apc.ApcInputError, match=r"GPU details CSV .*e\.csv' is empty"):
            apc.read_details(tmp_path / "e.csv", "GPU")
        (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf\r\n")
        with pytest.raises(apc.ApcInputError, match="is empty"):
            apc.read_details(tmp_path / "bom.csv")

    def test_header_only(self, tmp_path):
        with pytest.raises(apc.ApcInputError, match="no rows"):
            apc.read_details(write_rows(tmp_path / "h.csv", []))

    def test_cut_off_row_names_line(self, tmp_path, real_rows):
        path = write_rows(tmp_path / "cut.csv", [real_rows[0], real_rows[1][:5]])
        with pytest.raises(apc.ApcInputError, match=r"cut\.csv', line 5: 5 cells but the header has 23"):
            apc.read_details(path)

    def test_missing_file_and_not_utf8(self, tmp_path):
        with pytest.raises(apc.ApcInputError, match="does not exist"):
            apc.read_details(tmp_path / "nope.csv")
        (tmp_path / "gbk.csv").write_bytes("API Name,均方根误差\n".encode("gbk"))
        with pytest.raises(apc.ApcInputError, match="not UTF-8"):
            apc.read_details(tmp_path / "gbk.csv")


# ------------------------------------------------------------------------------------------ end to end
class TestEndToEnd:
    @pytest.mark.parametrize("version", ["1.0.4", "26.2"])
    def test_worse_npu_api_is_error_others_pass(self, tmp_path, real_rows, version):
        rows = fill_104_cells(real_rows)
        npu = write_rows(tmp_path / "npu.csv", perturb(rows, "Functional.gelu.0", 1e5))
        gpu = write_rows(tmp_path / "gpu.csv", rows)
        out = apc.run_compare(npu, gpu, tmp_path / "out", version=version)
        assert out["Functional.gelu.0"] == ("error", "error")
        assert out.failed == ["Functional.gelu.0"]
        for name, (fwd, bwd) in out.items():
            if name != "Functional.gelu.0":
                assert fwd == "pass" and bwd in ("pass", None), name
        d = details(out)["Functional.gelu.0.forward.output.0"]
        assert d["比对结果"] == "error" and d["比对算法"] == "标杆比对法"
        assert "ERROR: 均方根误差比值超过阈值\n" in d["Message"]

    def test_better_gpu_api_is_error_104(self, tmp_path, real_rows):
        """Vice versa: msprobe's file as the NPU, a GPU that is 1000x more accurate on one API."""
        npu = write_rows(tmp_path / "npu.csv", real_rows)
        gpu = write_rows(tmp_path / "gpu.csv", perturb(real_rows, "Tensor.softmax.0", 1e-3))
        out = apc.run_compare(npu, gpu, tmp_path / "out")
        assert out["Tensor.softmax.0"] == ("error", "error")
        for api in BENCHMARK_APIS:
            if api != "Tensor.softmax.0":
                assert out[api] == ("pass", "pass")
        d = details(out)["Tensor.softmax.0.forward.output.0"]
        assert float(d["均方根误差比值"]) == pytest.approx(1000, rel=1e-2)   # inputs rounded to 14 decimals

    def test_worse_gpu_passes(self, tmp_path, real_rows):
        npu = write_rows(tmp_path / "npu.csv", real_rows)
        gpu = write_rows(tmp_path / "gpu.csv", perturb(real_rows, "Functional.gelu.0", 10.0))
        out = apc.run_compare(npu, gpu, tmp_path / "out", version="26.2")
        assert not out.failed
        assert out.count("pass") == len(out) == 15

    def test_msprobe_262_file_under_104_skips_with_hint(self, tmp_path, data_dir):
        out = apc.run_compare(data_dir / REAL, data_dir / REAL, tmp_path)
        assert out["Functional.gelu.0"] == ("pass", "pass")
        fwd, bwd, msg = out.apis["Functional.linear.0"]
        assert (fwd, bwd) == ("SKIP", "SKIP")
        assert "column ULP误差平均值 of the NPU row" in msg and "--standard 26.2" in msg
        assert out.apis["Tensor.add_.0"][:2] == ("SKIP", None)

    def test_input_encodings_give_identical_output(self, tmp_path, real_rows):
        outputs = []
        for i, (bom, crlf) in enumerate([(True, True), (False, False), (True, False)]):
            npu = write_rows(tmp_path / f"n{i}.csv", perturb(real_rows, "Functional.gelu.0", 1e5), bom=bom, crlf=crlf)
            gpu = write_rows(tmp_path / f"g{i}.csv", real_rows, bom=not bom, crlf=crlf)
            out = apc.run_compare(npu, gpu, tmp_path / f"o{i}", timestamp="20260101000000")
            outputs.append((out.result_csv.read_bytes(), out.details_csv.read_bytes()))
        assert outputs[0] == outputs[1] == outputs[2]


# ------------------------------------------------------------------------------------------ file format
class TestOutputFormat:
    def test_bom_crlf_headers_and_names(self, tmp_path, data_dir):
        out = apc.run_compare(data_dir / REAL, data_dir / REAL, tmp_path, version="26.2",
                              timestamp="20261130101010")
        assert out.result_csv.name == "api_precision_compare_result_20261130101010.csv"
        assert out.details_csv.name == "api_precision_compare_details_20261130101010.csv"
        for path, header in ((out.result_csv, APC_RESULT_HEADER), (out.details_csv, APC_DETAILS_HEADER)):
            raw = path.read_bytes()
            assert raw.startswith(b"\xef\xbb\xbf" + ",".join(header).encode() + b"\r\n")
            assert raw.count(b"\xef\xbb\xbf") == 1
            assert raw.endswith(b"\r\n")
        result = out.result_csv.read_bytes().decode("utf-8-sig").split("\r\n")
        assert result[1] == "Functional.linear.0,pass,pass,"          # trailing comma: empty Message
        assert "Tensor.add_.0,pass, ," in result
        rows = read_rows(out.details_csv)
        assert all(len(r) == 28 for r in rows)
        linear = rows[1]
        assert linear[:3] == ["Functional.linear.0.forward.output.0", "0.00000000000000", "pass"]
        assert linear[11:25] == [" "] * 14 and linear[25:27] == ["pass", "标杆比对法"]
        skip = rows[2]
        assert skip[1:25] == [" "] * 24 and skip[25:] == ["SKIP", " ", "Bench output is None, skip this test."]

    def test_multiline_message_is_quoted_with_bare_lf(self, tmp_path, real_rows):
        npu = write_rows(tmp_path / "npu.csv", perturb(real_rows, "Functional.gelu.0", 1e5))
        out = apc.run_compare(npu, write_rows(tmp_path / "gpu.csv", real_rows), tmp_path, version="26.2")
        text = out.details_csv.read_bytes().decode("utf-8-sig")
        assert ',error,标杆比对法,"ERROR: 均方根误差比值超过阈值\nERROR: 相对误差最大值比值超过阈值\n' in text

    def test_copied_cells_keep_text_or_reformat_numeric_columns(self, tmp_path):
        rows = [row("Torch.relu.0.forward.output.0", 二进制一致错误率="0.0"),
                row("Torch.relu.0.backward.output.0", 二进制一致错误率="0.5")]
        out = apc.run_compare(write_rows(tmp_path / "n.csv", rows), write_rows(tmp_path / "g.csv", rows), tmp_path)
        d = details(out)
        assert d["Torch.relu.0.forward.output.0"]["二进制一致错误率"] == "0.00000000000000"
        assert d["Torch.relu.0.backward.output.0"]["二进制一致错误率判定结果"] == "error"
        rows.append(row("Torch.relu.1.forward.output.0", dtype=" ", status="SKIP", message="skipped"))
        out = apc.run_compare(write_rows(tmp_path / "n.csv", rows), write_rows(tmp_path / "g.csv", rows), tmp_path)
        assert details(out)["Torch.relu.0.forward.output.0"]["二进制一致错误率"] == "0.0"

    def test_formula_injection_neutralised(self, tmp_path):
        rows = [bench_row("=cmd.x.0.forward.output.0")]
        out = apc.run_compare(write_rows(tmp_path / "n.csv", rows), write_rows(tmp_path / "g.csv", rows), tmp_path)
        assert read_rows(out.details_csv)[1][0] == "'=cmd.x.0.forward.output.0"


# ------------------------------------------------------------------------------------------ row handling
class TestRowHandling:
    def compare(self, tmp_path, npu_rows, gpu_rows, version="1.0.4"):
        return apc.run_compare(write_rows(tmp_path / "n.csv", npu_rows), write_rows(tmp_path / "g.csv", gpu_rows),
                               tmp_path / "out", version=version)

    def test_unmatched_rows_both_sides_are_skip_not_dropped(self, tmp_path):
        npu = [bench_row("Functional.gelu.0.forward.output.0"), bench_row("Functional.gelu.0.backward.output.0"),
               bench_row("Functional.silu.0.forward.output.0")]
        gpu = [bench_row("Functional.gelu.0.forward.output.0"), bench_row("Functional.tanh.0.forward.output.0")]
        out = self.compare(tmp_path, npu, gpu)
        d = details(out)
        assert list(d) == ["Functional.gelu.0.forward.output.0", "Functional.gelu.0.backward.output.0",
                           "Functional.silu.0.forward.output.0", "Functional.tanh.0.forward.output.0"]
        assert d["Functional.gelu.0.backward.output.0"]["Message"] == (
            "This API : Functional.gelu.0.backward.output.0 does not exist in the GPU data.")
        assert d["Functional.tanh.0.forward.output.0"]["Message"] == (
            "This API : Functional.tanh.0.forward.output.0 does not exist in the NPU data.")
        assert out["Functional.gelu.0"] == ("pass", "SKIP")
        assert out.apis["Functional.gelu.0"][2].endswith("does not exist in the GPU data.")
        assert out["Functional.silu.0"] == ("SKIP", None)
        assert out["Functional.tanh.0"] == ("SKIP", None)

    def test_gpu_only_backward_joins_its_api(self, tmp_path):
        npu = [bench_row("Functional.gelu.0.forward.output.0")]
        gpu = npu + [bench_row("Functional.gelu.0.backward.output.0")]
        out = self.compare(tmp_path, npu, gpu)
        assert len(out) == 1 and out["Functional.gelu.0"] == ("pass", "SKIP")

    def test_duplicate_gpu_rows_skip_that_output_only(self, tmp_path):
        npu = [bench_row("Functional.gelu.0.forward.output.0"), bench_row("Functional.silu.0.forward.output.0")]
        gpu = npu + [bench_row("Functional.gelu.0.forward.output.0")]
        out = self.compare(tmp_path, npu, gpu)
        assert out["Functional.gelu.0"] == ("SKIP", None)
        assert "has multiple records in the GPU data (2 rows)" in out.apis["Functional.gelu.0"][2]
        assert out["Functional.silu.0"] == ("pass", None)

    def test_fp64_row_skipped_per_row(self, tmp_path):
        rows = [bench_row("Functional.gelu.0.forward.output.0", dtype="torch.float64"),
                bench_row("Functional.gelu.0.forward.output.1")]
        out = self.compare(tmp_path, rows, rows)
        assert out["Functional.gelu.0"] == ("pass", None)     # judged per row, not by the last row
        d = details(out)["Functional.gelu.0.forward.output.0"]
        assert (d["比对结果"], d["Message"]) == ("SKIP", "This data type does not support benchmark compare.")
        only64 = [rows[0]]
        out = self.compare(tmp_path, only64, only64)
        assert out.apis["Functional.gelu.0"] == ("SKIP", None, "This data type does not support benchmark compare.")

    def test_dtype_mismatch_and_gpu_skip_row(self, tmp_path):
        npu = [bench_row("Functional.gelu.0.forward.output.0", dtype="torch.float16"),
               bench_row("Functional.gelu.0.backward.output.0")]
        gpu = [bench_row("Functional.gelu.0.forward.output.0"),
               row("Functional.gelu.0.backward.output.0", dtype=" ", status="SKIP", message="Bench output is None")]
        d = details(self.compare(tmp_path, npu, gpu))
        assert d["Functional.gelu.0.forward.output.0"]["Message"].startswith(
            "DEVICE Dtype differs: NPU torch.float16, GPU torch.float32")
        assert d["Functional.gelu.0.backward.output.0"]["Message"] == (
            "The GPU row of Functional.gelu.0.backward.output.0 was not compared: Bench output is None")

    def test_invalid_name_gets_own_result_row(self, tmp_path):
        rows = [bench_row("not_a_dump_name"), bench_row("Functional.gelu.0.forward.output.0")]
        out = self.compare(tmp_path, rows, rows)
        assert out.apis["not_a_dump_name"] == ("SKIP", "SKIP", "The API name not_a_dump_name is invalid.")
        assert out["Functional.gelu.0"] == ("pass", None)

    def test_prefixed_and_long_names_group(self, tmp_path):
        rows = [bench_row("Torch.linalg.vector_norm.0.forward.output.0"),
                bench_row("Mint.nn.functional.relu.0.backward.output.0")]
        out = self.compare(tmp_path, rows, rows)
        assert out["Torch.linalg.vector_norm.0"] == ("pass", None)
        assert out["Mint.nn.functional.relu.0"] == (None, "pass")

    def test_blank_needed_cell_skips_row_not_api(self, tmp_path):
        npu = [row("Tensor.__add__.0.forward.output.0", **{"inf/nan错误率": 0, "相对误差错误率": 0}),
               row("Tensor.__add__.0.forward.output.1", **{"inf/nan错误率": 0, "相对误差错误率": 0, "绝对误差错误率": 0})]  # noqa: E501
        out = self.compare(tmp_path, npu, npu)
        d = details(out)
        assert d["Tensor.__add__.0.forward.output.0"]["Message"] == (
            "ERROR: Input data is an empty string (column 绝对误差错误率 of the NPU row)")
        assert d["Tensor.__add__.0.forward.output.1"]["比对结果"] == "pass"
        assert out["Tensor.__add__.0"] == ("pass", None)

    def test_non_numeric_cell(self, tmp_path):
        rows = [bench_row("Functional.gelu.0.forward.output.0")]
        bad = [list(rows[0])]
        bad[0][DETAILS_HEADER.index("均方根误差")] = "abc"
        out = self.compare(tmp_path, rows, bad)
        assert "cannot be converted to float (column 均方根误差 of the GPU row holds 'abc')" in out.apis[
            "Functional.gelu.0"][2]

    def test_blank_benchmark_cells_read_as_zero_in_26_2(self, tmp_path):
        npu = [row("Functional.gelu.0.forward.output.0", 均方根误差=1e-3)]
        gpu = [row("Functional.gelu.0.forward.output.0", 均方根误差=1e-3)]
        assert self.compare(tmp_path, npu, gpu, "26.2")["Functional.gelu.0"] == ("pass", None)
        assert self.compare(tmp_path, npu, gpu, "1.0.4")["Functional.gelu.0"] == ("SKIP", None)

    def test_empty_output_skipped(self, tmp_path):
        rows = [bench_row("Functional.gelu.0.forward.output.0", shape="(0,)"),
                bench_row("Functional.gelu.0.forward.output.1", shape="(3, 0, 2)"),
                bench_row("Functional.gelu.0.forward.output.2", shape="(10, 20)")]
        d = details(self.compare(tmp_path, rows, rows))
        assert [r["比对结果"] for r in d.values()] == ["SKIP", "SKIP", "pass"]

    def test_topk_hint_in_result_by_base_name(self, tmp_path):
        rows = [row("Torch.topk.0.forward.output.0", 二进制一致错误率="0.5"),
                row("Torch.topk.0.forward.output.1", dtype="torch.int64", 二进制一致错误率="0")]
        out = self.compare(tmp_path, rows, rows)
        fwd, _, msg = out.apis["Torch.topk.0"]
        assert fwd == "error" and msg.startswith("在npu上，topk")

    def test_warning_spelling_104(self, tmp_path):
        npu = [bench_row("Functional.gelu.0.forward.output.0", value=1.5e-6)]
        gpu = [bench_row("Functional.gelu.0.forward.output.0", value=1e-6)]
        out = self.compare(tmp_path, npu, gpu)
        assert out["Functional.gelu.0"] == ("Warning", None)
        assert out.count("warning") == 1 and not out.failed


# ------------------------------------------------------------------------------------------ spec sample
SPEC_NPU = ("Functional.gelu.0.forward.output.0,torch.float32,torch.float16,\"(8, 32)\",0.99999997611022,0.01978445,"
            "1.00000000000000,0.00000000000000, , ,0.35156250000000,0.00437963823035,0,0.005735004,0.0051193703, , , ,"
            " , , ,warning,")
SPEC_GPU = ("Functional.gelu.0.forward.output.0,torch.float32,torch.float16,\"(8, 32)\",0.99999999,0.0011,"
            "1.00000000000000,0.9,1.0, ,0.00048828125000,0.00048828125000,0,0.0004882812,0.00048828125, , , ,"
            " , , ,pass,")
SPEC_DETAILS = ("Functional.gelu.0.forward.output.0,{sv},pass,8.96949909575680,error,{maxrel},error,"
                "10.48447037440000,error,720.00000000000000,error, , , , , , , , , , , , , , ,error,标杆比对法,"
                "\"ERROR: 均方根误差比值超过阈值\nERROR: 相对误差最大值比值超过阈值\nERROR: 相对误差平均值比值超过阈值\n\"\r\n")  # noqa: E501


@pytest.mark.parametrize("version,sv,maxrel", [
    ("26.2", "0.00000000000000", "11.74528819200000"),   # the spec's msprobe 26.2.0 row, byte for byte
    ("1.0.4", "1.00000000000000", "11.74528939471763"),  # 1.0.4: both-zero ratio is 1, no floor
])
def test_spec_sample_row(tmp_path, version, sv, maxrel):
    header = ",".join(DETAILS_HEADER) + "\r\n"
    (tmp_path / "n.csv").write_text(header + SPEC_NPU + "\r\n", encoding="utf-8-sig", newline="")
    (tmp_path / "g.csv").write_text(header + SPEC_GPU + "\r\n", encoding="utf-8-sig", newline="")
    out = apc.run_compare(tmp_path / "n.csv", tmp_path / "g.csv", tmp_path, version=version)
    text = out.details_csv.read_bytes().decode("utf-8-sig")
    assert text.split("\r\n", 1)[1] == SPEC_DETAILS.format(sv=sv, maxrel=maxrel)
    assert out.result_csv.read_bytes().decode("utf-8-sig").split("\r\n")[1] == "Functional.gelu.0,error, ,"


# ------------------------------------------------------------------------------------------ invariants
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_nothing_dropped_one_result_row_per_api(data):
    """Whatever subset and order of outputs each side has, every output gets exactly one details row and
    every API call exactly one result row."""
    table = apc.read_details(pathlib.Path(__file__).parent / "data" / REAL)
    rows = table.rows
    npu_rows = data.draw(st.lists(st.sampled_from(rows), unique_by=lambda r: r["API Name"], max_size=12))
    gpu_rows = data.draw(st.lists(st.sampled_from(rows), unique_by=lambda r: r["API Name"], max_size=12))
    npu = apc.DetailsTable(table.path, "NPU", npu_rows, table.kinds)
    gpu = apc.DetailsTable(table.path, "GPU", gpu_rows, table.kinds)
    version = data.draw(st.sampled_from(["1.0.4", "26.2"]))
    details_rows, results = apc.compare_tables(npu, gpu, version=version)
    names = [n for n, _ in details_rows]
    assert sorted(names) == sorted({r["API Name"] for r in npu_rows + gpu_rows})
    calls = [r.name for r in results]
    assert len(calls) == len(set(calls))
    assert set(calls) == {n.rsplit(".", 3)[0] for n in names}
    for name, verdict in details_rows:
        matched = any(r["API Name"] == name for r in npu_rows) and any(r["API Name"] == name for r in gpu_rows)
        assert matched or verdict.status == "SKIP"


def test_two_compares_in_one_second_keep_both(tmp_path, data_dir):
    first = apc.run_compare(data_dir / REAL, data_dir / REAL, tmp_path)
    second = apc.run_compare(data_dir / REAL, data_dir / REAL, tmp_path)
    assert first.result_csv != second.result_csv
    assert len(list(tmp_path.glob("api_precision_compare_*.csv"))) == 4
