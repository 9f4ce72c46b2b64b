"""Per-output verdicts: the status chain, the other statuses, dropout and roll-up, both versions."""
from __future__ import annotations

import math
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from dumpers.format import output_row_name

from pytest_msprobe.precision import compare as C
from pytest_msprobe.precision import compare as M
from pytest_msprobe.precision.compare import (
    compare_output,
    compare_outputs,
    dropout_status,
    rollup,
    skip_row,
)
from pytest_msprobe.report.columns import DETAIL_METRIC_FIELDS

GEN = torch.Generator().manual_seed(0)
BASE = torch.rand(512, generator=GEN, dtype=torch.float64) * 100 + 100      # values in [100, 200)


def _fp32(scale):
    return BASE, (BASE * scale).float()


def _fp16(scale):
    b = BASE.float()
    return b, (b * scale).half()


def _bf16(scale, jitter=None):
    d = (BASE.float() * scale).bfloat16()
    return (BASE.float() if jitter is None else d.float() * (1 + jitter)), d


W = {"1.0.4": "Warning", "26.2": "warning"}

CHAIN = [
    # (label, make, status key, verdict sentence, filled legacy cells)
    ("fp32 max-abs pass", lambda: (BASE, BASE.float()), "pass", C.V_MAXABS_PASS, {"cosine", "max_abs_err"}),
    ("fp32 cosine error", lambda: (BASE, (-BASE).float()), "error", C.V_COS_ERR, {"cosine"}),
    ("fp32 thousandth error", lambda: _fp32(1.002), "error", C.V_THOUSAND_ERR,
     {"cosine", "max_abs_err", "thousand_ratio", "ten_thousand_ratio"}),
    ("fp32 ten-thousandth warning", lambda: _fp32(1.0005), "warning", C.V_TEN_THOUSAND_WARN,
     {"cosine", "max_abs_err", "thousand_ratio", "ten_thousand_ratio"}),
    ("fp32 full pass", lambda: _fp32(1.00005), "pass", C.V_TEN_THOUSAND_PASS,
     {"cosine", "max_abs_err", "thousand_ratio", "ten_thousand_ratio"}),
    ("fp16 hundredth error", lambda: _fp16(1.02), "error", C.V_HUNDRED_ERR,
     {"cosine", "max_abs_err", "hundred_ratio"}),
    ("fp16 thousandth pass", lambda: _fp16(1.0), "pass", C.V_THOUSAND_PASS,
     {"cosine", "max_abs_err", "hundred_ratio", "thousand_ratio"}),
    ("fp16 thousandth warning", lambda: _fp16(1.003), "warning", C.V_THOUSAND_WARN,
     {"cosine", "max_abs_err", "hundred_ratio", "thousand_ratio"}),
    ("bf16 rounding warning", lambda: _bf16(1.0),
     "warning", C.V_THOUSAND_WARN, {"cosine", "max_abs_err", "hundred_ratio", "thousand_ratio"}),
    ("bf16 thousandth pass", lambda: _bf16(1.0, 1e-5), "pass", C.V_THOUSAND_PASS,
     {"cosine", "max_abs_err", "hundred_ratio", "thousand_ratio"}),
    ("bf16 hundredth error", lambda: _bf16(1.05), "error", C.V_HUNDRED_ERR,
     {"cosine", "max_abs_err", "hundred_ratio"}),
]
LEGACY = {"cosine", "max_abs_err", "hundred_ratio", "thousand_ratio", "ten_thousand_ratio"}


@pytest.mark.parametrize("version", ["1.0.4", "26.2"])
@pytest.mark.parametrize("label, make, status, sentence, filled", CHAIN, ids=[c[0] for c in CHAIN])
def test_status_chain(version, label, make, status, sentence, filled):
    bench, device = make()
    row = compare_output("gelu", "Functional.gelu.0.forward.output.0", bench, device, version=version)
    assert row.status == (W[version] if status == "warning" else status)
    assert row.message == "\n" + sentence
    assert {k for k in LEGACY if row.metrics[k] is not None} == filled
    assert row.bench_dtype == str(bench.dtype) and row.device_dtype == str(device.dtype)
    assert row.shape == "(512,)" and row.standard == "benchmark"
    # benchmark cells are computed before the chain, so they are filled whatever the verdict
    assert row.metrics["rmse"] is not None and row.metrics["error_balance"] is not None


@pytest.mark.parametrize("api, dt, cells", [
    ("linear", torch.float16, {"ulp_max", "ulp_mean", "ulp_above_threshold_ratio"}),
    ("add", torch.bfloat16, {"inf_nan_error_rate", "rel_err_error_rate", "abs_err_error_rate"}),
    ("relu", torch.float32, {"binary_error_rate"}),
    ("gelu", torch.float32, {"small_value_err_ratio", "rmse", "error_balance", "max_rel_err", "mean_rel_err"}),
    ("conv2d", torch.float16, {"small_value_err_ratio", "rmse", "error_balance", "max_rel_err",
                               "mean_rel_err", "thousand_ratio"}),
    ("conv2d", torch.float64, {"thousand_ratio"}),
    ("gelu", torch.float64, set()),
])
def test_which_cells_are_filled_1_0_4(api, dt, cells):
    bench = BASE.to(torch.float64 if dt in (torch.float32, torch.float64) else torch.float32)
    row = compare_output(api, "x.0.forward.output.0", bench, bench.to(dt))
    new = {k for k in DETAIL_METRIC_FIELDS if k not in LEGACY and row.metrics[k] is not None}
    assert new == cells - {"thousand_ratio"}
    if "thousand_ratio" in cells:      # conv: always filled, even though max abs error passed
        assert row.metrics["thousand_ratio"] == 1.0


def test_26_2_gives_benchmark_cells_to_listed_apis():
    row = compare_output("linear", "x", BASE.float(), BASE.half(), version="26.2")
    assert row.standard == "benchmark" and row.metrics["ulp_max"] is None and row.metrics["rmse"] is not None


def test_cosine_nan_26_2_passes_step_one():
    b = BASE.clone()
    d = BASE.float()
    d[3] = float("nan")
    old = compare_output("gelu", "x", b, d)
    new = compare_output("gelu", "x", b, d, version="26.2")
    assert old.status == "error" and old.message.startswith("Dump data has NaN")
    assert old.message.endswith(C.V_COS_ERR) and math.isnan(old.metrics["cosine"])
    # 26.2: NaN cosine passes, NaN max abs error fails, the NaN element fails the ratios (1/512 > 1e-3)
    assert new.status == "error" and new.message == M.MSG_COS_NAN + "\n" + C.V_THOUSAND_ERR
    assert math.isnan(new.metrics["max_abs_err"]) and new.metrics["thousand_ratio"] == 511 / 512


def test_agreeing_nan_passes_by_default():
    b, d = BASE.clone(), BASE.float()
    b[3], d[3] = float("nan"), float("nan")
    row = compare_output("gelu", "x", b, d)
    assert row.status == "pass" and row.metrics["cosine"] == pytest.approx(1.0)


def test_fp64_message_26_2():
    row = compare_output("gelu", "x", BASE, BASE, version="26.2")
    assert row.message.startswith("The data type torch.float64 is not supported for new precision standard.\n")
    assert compare_output("gelu", "x", BASE, BASE).message.startswith("\nMax abs")


@pytest.mark.parametrize("bench, device, status, message", [
    (torch.ones(2), 1.0, "error", C.MSG_TYPE),
    (torch.ones(2, 3, dtype=torch.float64), torch.ones(3, 2), "error",
     "The shape of benchtorch.Size([2, 3]) and nputorch.Size([3, 2]) not equal."),
    (torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.int64), "error",
     "Bench out dtype is float64 but npu output dtype is int64, cannot compare."),
    (torch.tensor([1, 2]), torch.tensor([1, 2]), "pass",
     "Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n"),
    (torch.tensor([1, 2]), torch.tensor([1, 3]), "error",
     "Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n"),
    (torch.tensor([1, 2], dtype=torch.int8), torch.tensor([1, 2], dtype=torch.int8), "pass",
     "Compare algorithm is not supported for int8 data. Only judged by Error Rate.\n"),
    (torch.tensor([True]), torch.tensor([True]), "pass",
     "Compare algorithm is not supported for bool data. Only judged by Error Rate.\n"),
    (torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), "error",
     ("Compare algorithm is not supported for int64 data. Only judged by Error Rate."
     "There is not bench calculation result.\n")),
    (None, None, "SKIP", C.MSG_BENCH_NONE),
    ({"a": 1}, {"b": 1}, "error", C.MSG_DICT_KEYS),
    (3, 3, "pass", ""),
    (3, 4, "error", ""),
    (torch.zeros(0, dtype=torch.float64), torch.zeros(0), "error", C.MSG_EMPTY_REL),
])
def test_other_statuses(bench, device, status, message):
    row = compare_output("gelu", "x.0.forward.output.0", bench, device)
    assert (row.status, row.message) == (status, message)


def test_builtin_cells():
    eq = compare_output("size", "x", 3, 3)
    ne = compare_output("size", "x", 3, 4)
    assert eq.bench_dtype == "<class 'int'>" and eq.metrics["binary_error_rate"] == 0
    assert type(eq.metrics["binary_error_rate"]) is int
    assert ne.metrics["binary_error_rate"] == 1          # fix: msprobe leaves it blank


def test_int_row_cells():
    row = compare_output("argmax", "x", torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 3, 5]))
    assert row.metrics["binary_error_rate"] == 0.25 and row.metrics["cosine"] is None


def test_int_messages_26_2():
    row = compare_output("argmax", "x", torch.tensor([1]), torch.tensor([1]), version="26.2")
    assert row.message == "Current int64 data, only perform binary comparison.\n"


def test_empty_outputs_by_standard_and_version():
    e64, e32 = torch.zeros(0, dtype=torch.float64), torch.zeros(0)
    assert compare_output("linear", "x", e64, e32).status == "SKIP"           # ULP: cosine cannot reduce
    assert compare_output("linear", "x", e64, e32).message.startswith("zero-size array")
    new = compare_output("gelu", "x", e64, e32, version="26.2")
    assert (new.status, new.message) == ("SKIP", "There is not bench calculation result.")
    old = compare_output("gelu", "x", e64, e32)
    assert math.isnan(old.metrics["rmse"]) and old.metrics["error_balance"] == 0


def test_scalar_output():
    row = compare_output("cross_entropy", "x", torch.tensor(2.0, dtype=torch.float64), torch.tensor(2.0))
    assert row.shape == "()" and row.status == "pass" and row.metrics["cosine"] is None
    assert row.message == ("All the data in device dump data is scalar. Please refer to other compare "
                           "algorithms.\n" + C.V_MAXABS_PASS)


def test_dict_with_equal_keys_compares_values():
    ok = compare_output("f", "x", {"a": BASE}, {"a": BASE.float()})
    bad = compare_output("f", "x", {"a": BASE, "b": 1}, {"a": (-BASE).float(), "b": 1})
    assert ok.status == "pass" and bad.status == "error" and "[a] error" in bad.message


def test_compare_outputs_sequences():
    b = (BASE, BASE, None)
    rows = compare_outputs("f", partial(output_row_name, "Torch.f.0", "forward"), b,
                           (BASE.float(), (-BASE).float(), None, BASE))
    assert [r.name for r in rows] == [f"Torch.f.0.forward.output.{i}" for i in range(3)]
    assert [r.status for r in rows] == ["pass", "error", "SKIP"]
    short = compare_outputs("f", partial(output_row_name, "Torch.f.0", "forward"), b, [BASE.float()])
    assert [r.status for r in short] == ["pass", "error", "error"]
    assert short[1].message == C.MSG_STRUCTURE
    single = compare_outputs("f", partial(output_row_name, "Torch.f.0", "backward"), BASE, BASE.float())
    assert [r.name for r in single] == ["Torch.f.0.backward.output.0"]
    first = compare_outputs("npu_fusion_attention", partial(output_row_name, "NPU.npu_fusion_attention.0", "forward"),
                            (BASE, BASE), (BASE.float(), (-BASE).float()))
    assert len(first) == 1 and first[0].status == "pass"
    t_f = partial(output_row_name, "T.f.0", "forward")
    assert compare_outputs("f", t_f, [BASE], BASE.float())[0].message == C.MSG_TYPE


def test_skip_row():
    row = skip_row("T.f.0.forward.output.0", "why")
    assert (row.status, row.message, row.bench_dtype, row.shape) == ("SKIP", "why", None, None)
    assert all(v is None for v in row.metrics.values())
    assert list(row.metrics) == DETAIL_METRIC_FIELDS


def test_dropout_rule():
    x = torch.ones(200)
    y = x.clone()
    y[:30] = 0                       # 30 / 200 = 0.15 -> error
    assert dropout_status(x, y) == "error"
    y[10:30] = 1                     # 10 / 200 = 0.05 -> pass
    assert dropout_status(x, y) == "pass"
    assert dropout_status(torch.ones(50), torch.zeros(50)) == "pass"       # N < 100
    assert dropout_status([torch.ones(200)], [torch.zeros(200)]) == "error"


@pytest.mark.parametrize("statuses, v104, v262", [
    ([], None, None),
    (["pass", "pass"], "pass", "pass"),
    (["error", "Warning"], "error", "error"),           # msprobe 1.0.4 says Warning (defect 9 #2)
    (["pass", "warning"], "Warning", "warning"),
    (["SKIP", "SKIP"], "SKIP", "SKIP"),                 # msprobe says pass (defect 9 #12)
    (["SKIP", "pass"], "pass", "pass"),
    (["SKIP", "error"], "error", "error"),
])
def test_rollup(statuses, v104, v262):
    assert rollup(statuses) == v104
    assert rollup(statuses, version="26.2") == v262


def test_large_bf16_output_is_read_in_chunks(monkeypatch):
    monkeypatch.setattr(M, "CHUNK", 1000)
    reads = []
    real = M.Bf16BitsSource.read_bits

    def spy(self, start, stop):
        reads.append(stop - start)
        return real(self, start, stop)

    monkeypatch.setattr(M.Bf16BitsSource, "read_bits", spy)
    b = torch.rand(5000, generator=GEN) + 1
    row = C.compare_output("gelu", "x", b, b.bfloat16())
    assert row.status in ("pass", "Warning") and len(reads) >= 5 and max(reads) <= 1000


@settings(max_examples=40, deadline=None)
@given(dt=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]),
       n=st.integers(1, 300), seed=st.integers(0, 2 ** 16), version=st.sampled_from(["1.0.4", "26.2"]),
       api=st.sampled_from(["gelu", "linear", "add", "relu", "conv2d"]))
def test_identical_outputs_always_pass(dt, n, seed, version, api):
    g = torch.Generator().manual_seed(seed)
    device = (torch.randn(n, generator=g) * 10).to(dt)
    bench = device.to(torch.float64 if dt == torch.float32 else torch.float32)
    row = compare_output(api, "x", bench, device, version=version)
    assert row.status == "pass", row.message
    assert row.metrics["max_abs_err"] == 0
    for key in ("binary_error_rate", "rmse", "error_balance", "max_rel_err", "ulp_max", "inf_nan_error_rate",
                "rel_err_error_rate", "abs_err_error_rate", "small_value_err_ratio"):
        assert row.metrics[key] in (None, 0), key


def test_documented_fp16_example():
    # docs/precision-standard.md, "The status of one output", second example
    row = compare_output("gelu", "x", torch.tensor([100.0, 150.0]), torch.tensor([100.1, 150.0]).half())
    assert row.status == "Warning" and row.message == "\n" + C.V_THOUSAND_WARN
    assert row.metrics["max_abs_err"] == 0.125 and row.metrics["thousand_ratio"] == 0.5


def test_quantization_int_outputs_26_2():
    b, d = torch.tensor([1, 5, -3], dtype=torch.int8), torch.tensor([2, 5, -3], dtype=torch.int8)
    assert compare_output("npu_dynamic_quant", "x", b, d, version="26.2").status == "pass"
    assert compare_output("npu_dynamic_quant", "x", b, d + 1, version="26.2").status == "error"
    assert compare_output("npu_dynamic_quant", "x", b, d).status == "error"     # 1.0.4: bit for bit
