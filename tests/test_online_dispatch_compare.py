"""Unit tests of online dispatch's item checks, skip rules, copies and argument validation."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from metrics_reference import reference

from dumpers.metrics_engine import CHUNK
from dumpers.online_dispatch import OnlineDispatchError, compare, config, ops, tensors
from dumpers.online_dispatch.seed import seed_all


# --- verdict table (doc rule: Cosine < 0.99 and MaxAbsErr > 0.001; Cosine < 0.9; MaxAbsErr > 1) ---------
@pytest.mark.parametrize(("cos", "err", "expected"), [
    (0.999, 0.5, "Yes"),
    (0.98, 0.0005, "Yes"),        # rule 1 needs both halves
    (0.98, 0.002, "No"),          # rule 1
    (0.89, 0.0001, "No"),         # rule 2
    (1.0, 1.5, "No"),             # rule 3
    (1.0, 1.0, "Yes"),            # boundaries are strict
    (0.99, 0.5, "Yes"),
    ("shape unmatched", "shape unmatched", "Unmatched"),
    ("N/A", 0.0, "No"),
    ("unsupported", 0.0, "None"),
    ("Nan", 0.0, "None"),
])
def test_verdict_table(cos, err, expected):
    assert compare.verdict(cos, err) == expected


def test_check_arrays_special_cases():
    ones = np.ones(10)
    assert compare.check_arrays(np.zeros(10), np.zeros(10)).cosine == 1.0
    zero_dev = compare.check_arrays(ones, np.zeros(10))
    assert (zero_dev.cosine, zero_dev.message) == ("Nan", compare.MSG_ZERO_NPU)
    zero_bench = compare.check_arrays(np.zeros(10), ones)
    assert (zero_bench.cosine, zero_bench.message) == ("Nan", compare.MSG_ZERO_BENCH)
    with_nan = compare.check_arrays(ones, np.r_[ones[:9], np.nan])
    assert (with_nan.cosine, with_nan.verdict, with_nan.message) == ("Nan", "None", compare.MSG_NAN)
    scalar = compare.check_arrays(np.array([2.0]), np.array([3.0]))
    assert (scalar.cosine, scalar.max_abs, scalar.verdict) == ("unsupported", 1.0, "None")
    empty = compare.check_arrays(np.zeros(0), np.zeros(0))
    assert (empty.cosine, empty.verdict, empty.message) == ("unsupported", "None", compare.MSG_EMPTY)
    shape = compare.check_arrays(np.zeros(4), np.zeros((2, 3)))
    assert shape.verdict == "Unmatched"


def _metric_cases() -> list:
    rng = np.random.default_rng(7)
    big = rng.standard_normal(3 * CHUNK + 17)
    cases = [
        (np.array([1.0, 2.0]), np.array([1.0, 2.5])),
        (rng.standard_normal(1000), rng.standard_normal(1000)),
        (big, big + rng.standard_normal(big.size) * 1e-3),             # several chunks: unscaled sums
        (big * 1e200, big * 1e200 * (1 + 1e-6)),                       # several chunks, extreme: scaled
        (np.full(CHUNK, 3.0), np.full(CHUNK, 3.0)),
        (np.zeros(5), np.zeros(5)),
        (np.zeros(5), np.ones(5)),
        (np.full(4, 1e-17), np.ones(4)),                               # all "zero" by max |x| <= eps
        (np.full(4, 1e-17), np.full(4, 2e-17)),
        (np.r_[1.0, np.nan, 2.0], np.r_[1.0, 2.0, 3.0]),
        (np.r_[1.0, 2.0, 3.0], np.r_[1.0, np.inf, 3.0]),
        (np.r_[-np.inf, 2.0], np.r_[1.0, 2.0]),
        (-rng.standard_normal(70000), rng.standard_normal(70000)),
    ]
    return cases


@pytest.mark.parametrize("case", range(len(_metric_cases())))
def test_metrics_equal_the_checkers(case):
    """Online dispatch's Cosine/MaxAbsErr are the checker's cells (one engine), which are the numpy
    reference's numbers bit for bit."""
    from pytest_msprobe.precision.compare import float_metrics

    bench, device = _metric_cases()[case]
    ref = reference(bench, device, eps=2.0 ** -52, agree_nonfinite=False)
    cell = float_metrics(bench, device, device_dtype="torch.float64", agree_nonfinite=False)
    value, passed = ref["cosine"]
    want = (1.0 if passed else math.nan) if value is None else value
    for got in (compare.cosine(bench, device), cell.cosine.value if cell.cosine.value is not None else want):
        assert got == want or (math.isnan(got) and math.isnan(want))
    ours = compare.max_abs_error(bench, device)
    assert ours == ref["max_abs_err"] == cell.values["max_abs_err"] or math.isnan(ours) and math.isnan(
        ref["max_abs_err"])
    assert compare.max_abs_error(np.zeros(0), np.zeros(0)) == 0.0


def test_check_arrays_values():
    rng = np.random.default_rng(0)
    bench = rng.standard_normal(1000)
    device = bench.copy()
    device[-50:] = 0.0                                  # a kernel that drops the last 5 %
    res = compare.check_arrays(bench, device)
    expected_cos = float(device @ bench / np.linalg.norm(device) / np.linalg.norm(bench))
    assert math.isclose(res.cosine, expected_cos, rel_tol=1e-9)
    assert res.cosine < 0.99 and res.verdict == "No"
    assert res.max_abs == pytest.approx(np.max(np.abs(bench[-50:])))
    assert compare.check_arrays(bench, bench * 1.05).verdict == "Yes"   # scaling keeps Cosine at 1


def test_max_relative_error_zero_bench_gets_eps():
    eps = compare.EPS
    assert compare.max_relative_error(np.array([0.0, 2.0]), np.array([0.0, 3.0])) == 0.5
    got = compare.max_relative_error(np.array([0.0]), np.array([1.0]))
    assert got == pytest.approx(abs((1.0 + eps) - eps) / eps)


def test_dropout_rule():
    bench = np.ones(200)
    bench[:100] = 0
    device = np.ones(200)
    device[:110] = 0                                     # 5 % more zeros: passes
    assert compare.check_arrays(bench, device, dropout=True).verdict == "Yes"
    device[:130] = 0                                     # 15 % more zeros: fails
    assert compare.check_arrays(bench, device, dropout=True).verdict == "No"
    assert compare.check_arrays(np.ones(50), np.zeros(50), dropout=True).verdict == "Yes"


def test_scalar_outputs():
    res = compare.check_scalars(2, 3)
    assert (res.cosine, res.max_abs, res.max_rel, res.verdict) == ("unsupported", 1.0, 0.5, "None")
    assert res.message == compare.MSG_SCALAR_DATA


# --- skip rules -------------------------------------------------------------------------------------------
def test_skip_list_is_msprobe_1_1_0():
    assert len(ops.ATEN_OPS_BLACKLIST) == 48
    assert {"detach", "native_batch_norm_backward", "max", "add_", "allreduce_"} <= ops.ATEN_OPS_BLACKLIST


@pytest.mark.parametrize(("op", "packet", "expected"), [
    (torch.ops.aten.view.default, "view", ops.SKIP_LIST),
    (torch.ops.aten.t.default, "t", ops.VIEW),
    (torch.ops.aten.bernoulli_.float, "bernoulli_", ops.RANDOM_OP),
    (torch.ops.aten.normal.Tensor_float, "normal", ops.RANDOM_OP),
    (torch.ops.aten.empty_strided.default, "empty_strided", ops.UNINIT),
    (torch.ops.aten.mul.Tensor, "mul", None),
    (torch.ops.aten.native_dropout.default, "native_dropout", None),   # judged by the dropout rule
])
def test_skip_reason(op, packet, expected):
    assert ops.skip_reason(op, packet, [torch.ones(2)], ops.ATEN_OPS_BLACKLIST) == expected


def test_skip_reason_for_tensor_kinds():
    mul = torch.ops.aten.mul.Tensor
    assert ops.skip_reason(mul, "mul", [torch.ones(2, device="meta")], frozenset()) == ops.META
    sparse = torch.eye(3).to_sparse()
    assert "layout" in ops.skip_reason(mul, "mul", [sparse], frozenset())
    assert ops.skip_reason(mul, "mul", [torch.ones(2)], frozenset({"mul"})) == ops.SKIP_LIST


def test_split_and_resolve_names():
    assert ops.split_name(torch.ops.aten.add.Tensor) == ("aten", "add", "Tensor")
    assert ops.resolve("aten::add.Tensor") is torch.ops.aten.add.Tensor
    assert ops.is_mutable(torch.ops.aten.mul_.Tensor) and ops.is_mutable(torch.ops.aten.add.out)
    assert not ops.is_mutable(torch.ops.aten.mul.Tensor)


# --- copies, items and transport ---------------------------------------------------------------------------
def test_copy_rules():
    half = torch.ones(3, dtype=torch.bfloat16)
    args = ([half, 2], {"device": torch.device("cpu"), "t": torch.arange(3)}, None, "x")
    copied = tensors.copy_tree(args)
    assert copied[0][0].dtype == torch.float32 and copied[0][1] == 2
    assert copied[1]["t"] is not args[1]["t"] and torch.equal(copied[1]["t"], args[1]["t"])
    assert copied[2] is None and copied[3] == "x"


def test_item_names():
    args = (torch.ones(2), [torch.ones(1), 3], None)
    names = [n for n, _ in tensors.input_items("addmm_1", args, {"alpha": 1, "out": torch.ones(1)})]
    assert names == ["addmm_1_input.0", "addmm_1_input.1.0", "addmm_1_input.1.1", "addmm_1_input_alpha",
                     "addmm_1_input_out"]
    assert [n for n, _ in tensors.output_items("add_3", torch.ones(1))] == ["add_3_output"]
    assert [n for n, _ in tensors.output_items("b_1", (torch.ones(1), torch.ones(1)))] == ["b_1_output.0",
                                                                                       "b_1_output.1"]


def test_pack_roundtrip_keeps_values_and_dtypes():
    tree = ([torch.arange(6).reshape(2, 3).t(), torch.tensor([True, False])], {"x": torch.zeros(0)}, 1.5)
    back = tensors.unpack(tensors.pack(tree))
    assert torch.equal(back[0][0], tree[0][0]) and back[0][1].dtype == torch.bool
    assert back[1]["x"].shape == (0,) and back[2] == 1.5


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 6).t(), lambda: torch.randn(2, 3, 5).permute(2, 0, 1),
                                  lambda: torch.randn(6, 8)[:, ::2], lambda: torch.randn(3, 1, 4).transpose(0, 2),
                                  lambda: torch.randn(5)])
def test_pack_keeps_the_layout_clone_keeps_in_process(make):
    """A worker gets its inputs laid out as the in-process copy (clone) is: the same kernels, the same bits."""
    import pickle

    t = make()
    back = tensors.unpack(pickle.loads(pickle.dumps(tensors.pack(t))))
    clone = t.detach().clone()
    # the memory layout: strides of the dimensions longer than 1 (a size-1 dimension's stride is never used)
    assert torch.equal(back, t) and [s for s, n in zip(back.stride(), back.shape) if n > 1] == \
        [s for s, n in zip(clone.stride(), clone.shape) if n > 1]


def test_pack_gives_workers_the_gemm_layout_of_the_training_process():
    """addmm with a transposed weight (nn.Linear) runs the same kernel in a worker as in process."""
    import pickle

    g = torch.Generator().manual_seed(0)
    bias, x, w = torch.randn(32, generator=g), torch.randn(16, 64, generator=g), torch.randn(32, 64, generator=g)
    args = (bias, x, w.t())
    local = torch.addmm(*[a.clone() for a in args])
    remote = torch.addmm(*tensors.unpack(pickle.loads(pickle.dumps(tensors.pack(args)))))
    assert torch.equal(local, remote)


# --- arguments ------------------------------------------------------------------------------------------
def test_argument_validation(tmp_path):
    with pytest.raises(OnlineDispatchError, match="dump mode"):
        config.check_dump_mode("sometimes")
    with pytest.raises(OnlineDispatchError, match="set dump_path"):
        config.check_dump_path(None)
    with pytest.raises(OnlineDispatchError, match="not an existing directory"):
        config.check_dump_path(str(tmp_path / "missing"))
    with pytest.raises(OnlineDispatchError, match="characters"):
        config.check_dump_path(str(tmp_path) + "/a b")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(OnlineDispatchError, match="symbolic link"):
        config.check_dump_path(str(link))
    with pytest.raises(OnlineDispatchError, match="process_num"):
        config.check_process_num(-1)
    with pytest.raises(OnlineDispatchError, match="process_num"):
        config.check_process_num(True)
    with pytest.raises(OnlineDispatchError, match="debug"):
        config.check_debug("yes")
    assert config.check_tag(5) is None


def test_api_list_filtering(caplog):
    assert config.check_api_list(["mm", "not_an_op"], "list") == ["mm"]
    assert "not_an_op is not aten api" in caplog.text
    assert config.check_api_list(["mm"], "auto") == []


def test_seed_all_reproducible():
    seed_all(7)
    a = (torch.rand(3), np.random.rand())
    seed_all(7)
    b = (torch.rand(3), np.random.rand())
    assert torch.equal(a[0], b[0]) and a[1] == b[1]
    with pytest.raises(ValueError, match="seed"):
        seed_all(-1)
