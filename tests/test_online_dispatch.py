"""End-to-end tests of PtdbgDispatch on a small model, forward and backward, on the CPU.

Our "device" is the CPU here, so a planted inaccuracy must make the device kernel differ from the bench
honestly: the custom op ``msprobe_od_test::tail_gelu`` has a device kernel that leaves the last 5 % of
its output at zero (a classic tail-handling bug of vectorised kernels), and the bench uses a CPU reference
given through ``bench_overrides`` - the same mechanism a user has for device ops without a CPU kernel.
"""
from __future__ import annotations

import copy
import csv
import os
import re
import stat
import tempfile

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dumpers.online_dispatch import COMPARE_RESULT_HEADER, PtdbgDispatch, seed_all, shutdown_workers

NS = "msprobe_od_test"


@torch.library.custom_op(f"{NS}::tail_gelu", mutates_args=())
def tail_gelu(x: torch.Tensor) -> torch.Tensor:
    """The planted faulty kernel: GELU, but the last 5 % of the elements are left at zero."""
    out = torch.nn.functional.gelu(x)
    flat = out.view(-1)
    flat[flat.numel() - flat.numel() // 20:] = 0
    return out


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return torch.ops.aten.gelu_backward(grad, x)


tail_gelu.register_autograd(_backward, setup_context=_setup)


def reference_gelu(x: torch.Tensor) -> torch.Tensor:
    """The bench's reference implementation of tail_gelu."""
    return torch.nn.functional.gelu(x)


OVERRIDES = {f"{NS}::tail_gelu": reference_gelu}


class TailGelu(torch.nn.Module):
    def forward(self, x):
        return torch.ops.msprobe_od_test.tail_gelu(x)


def make_model(dtype=torch.float32, dropout=0.0):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), TailGelu(), torch.nn.Dropout(dropout),
                               torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to(dtype)


def make_batch(dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=g).to(dtype), torch.randint(0, 4, (16,), generator=g)


class Recorder(TorchDispatchMode):
    """An independent list of the aten ops executed (packet names, in order)."""

    def __init__(self):
        super().__init__()
        self.packets = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.packets.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def expected_bases(packets):
    counts, bases = {}, []
    for p in packets:
        counts[p] = counts.get(p, 0) + 1
        bases.append(f"{p}_{counts[p]}")
    return bases


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == COMPARE_RESULT_HEADER
    return [dict(zip(COMPARE_RESULT_HEADER, r)) for r in rows[1:]]


_BASE = re.compile(r"^(.*_\d+)_(input|output)")


def row_bases(rows):
    bases = []
    for r in rows:
        base = _BASE.match(r["NPU Name"]).group(1)
        if not bases or bases[-1] != base:
            bases.append(base)
    return bases


def run_step(model, x, y, dump_path=None, **kw):
    """One forward + backward, each in its own PtdbgDispatch block when dump_path is given."""
    if dump_path is None:
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        return loss, None, None
    # a fresh parent per block: blocks in one parent within one second wait for the next second
    with PtdbgDispatch(dump_path=tempfile.mkdtemp(dir=dump_path), bench_overrides=OVERRIDES, **kw) as fwd:
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    with PtdbgDispatch(dump_path=tempfile.mkdtemp(dir=dump_path), bench_overrides=OVERRIDES, **kw) as bwd:
        loss.backward()
    return loss, fwd, bwd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_op_listed_and_planted_op_failed(tmp_path, dtype, capsys):
    x, y = make_batch(dtype)
    rec_model = make_model(dtype)
    with Recorder() as rec_fwd:
        loss = torch.nn.functional.cross_entropy(rec_model(x).float(), y)
    with Recorder() as rec_bwd:
        loss.backward()

    _, fwd, bwd = run_step(make_model(dtype), x, y, tmp_path, dump_mode="auto")
    fwd_rows, bwd_rows = read_rows(fwd.csv_path), read_rows(bwd.csv_path)
    assert row_bases(fwd_rows) == expected_bases(rec_fwd.packets)
    assert row_bases(bwd_rows) == expected_bases(rec_bwd.packets)
    assert fwd.api_index == len(rec_fwd.packets) and bwd.api_index == len(rec_bwd.packets)

    planted = next(r for r in fwd_rows if r["NPU Name"] == "tail_gelu_1_output")
    assert planted["Accuracy Reached or Not"] == "No"
    assert float(planted["Cosine"]) < 0.99 and float(planted["MaxAbsErr"]) > 0.001
    assert "tail_gelu_1_output" in fwd.failed
    compared = [r for r in fwd_rows + bwd_rows if not r["Err_message"].startswith("skipped")]
    assert {r["NPU Dtype"] for r in compared if r["NPU Dtype"].startswith("torch.")} <= {
        "torch.float32", "torch.int64", "torch.bool"}       # fp16/bf16 items are up-cast
    assert any(r["NPU Name"].startswith("addmm") for r in compared)
    if dtype == torch.float32:    # same CPU kernels on both sides: only the planted op may fail
        failing = [r["NPU Name"] for r in compared if r["Accuracy Reached or Not"] in ("No", "Unmatched")]
        assert failing == ["tail_gelu_1_output"]
    else:                         # bf16 device vs fp32 bench: real differences, still small
        mm = next(r for r in compared if r["NPU Name"] == "addmm_1_output")
        assert 0 < float(mm["MaxAbsErr"]) < 0.1 and float(mm["Cosine"]) > 0.999

    npu, cpu = os.path.join(fwd.run_dir, "npu"), os.path.join(fwd.run_dir, "cpu")
    assert sorted(os.listdir(npu)) == ["tail_gelu_1_input.0.npy", "tail_gelu_1_output.npy"]
    assert os.listdir(cpu) == ["tail_gelu_1_output.npy"]
    x_in = np.load(os.path.join(npu, "tail_gelu_1_input.0.npy"))
    bench = np.load(os.path.join(cpu, "tail_gelu_1_output.npy"))
    device = np.load(os.path.join(npu, "tail_gelu_1_output.npy"))
    assert x_in.dtype == np.float32 and bench.shape == device.shape == (16, 32)
    np.testing.assert_allclose(bench, torch.nn.functional.gelu(torch.from_numpy(x_in)).numpy(), rtol=1e-6)
    assert np.all(device.reshape(-1)[-25:] == 0) and not np.all(bench.reshape(-1)[-25:] == 0)
    assert os.listdir(os.path.join(bwd.run_dir, "npu")) == []        # auto: nothing failed in backward

    out = capsys.readouterr().out
    failed_lines = [ln for ln in out.splitlines() if "Failed" in ln]
    assert failed_lines == [ln for ln in failed_lines if "tail_gelu_1_output" in ln] and len(failed_lines) == 1


def test_training_is_bit_identical(tmp_path):
    x, y = make_batch()
    results = []
    for dump_path in (None, tmp_path):
        model = make_model(dropout=0.25)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seed_all(3)
        losses = []
        for _ in range(2):
            opt.zero_grad()
            loss, _, _ = run_step(model, x, y, dump_path, dump_mode="all")
            opt.step()
            losses.append(loss.detach().clone())
        results.append((losses, [p.detach().clone() for p in model.parameters()], torch.rand(3)))
    (l0, p0, r0), (l1, p1, r1) = results
    assert all(torch.equal(a, b) for a, b in zip(l0, l1))
    assert all(torch.equal(a, b) for a, b in zip(p0, p1))
    assert torch.equal(r0, r1)          # the random generator was not advanced by the bench


def _npy_files(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs
                  if f.endswith(".npy"))


@pytest.mark.slow
def test_process_num_gives_identical_results(tmp_path):
    outs = {}
    try:
        for num in (0, 2):
            x, y = make_batch(torch.bfloat16)
            out_dir = tmp_path / str(num)
            out_dir.mkdir()
            _, fwd, bwd = run_step(make_model(torch.bfloat16, dropout=0.25), x, y, out_dir, dump_mode="all",
                                   process_num=num)
            outs[num] = (fwd, bwd)
    finally:
        shutdown_workers()
    for a, b in zip(outs[0], outs[2]):
        rows_a, rows_b = read_rows(a.csv_path), read_rows(b.csv_path)
        assert len(rows_a) > 30
        strip = [{k: v for k, v in r.items() if k != "NPU_Stack_Info"} for r in rows_a]
        assert strip == [{k: v for k, v in r.items() if k != "NPU_Stack_Info"} for r in rows_b]
        assert all(r["NPU_Stack_Info"].startswith("[[") for r in rows_b)
        assert a.failed == b.failed
        files = _npy_files(a.run_dir)
        assert files == _npy_files(b.run_dir) and len(files) > 30
        for rel in files:
            fa, fb = np.load(os.path.join(a.run_dir, rel)), np.load(os.path.join(b.run_dir, rel))
            assert fa.dtype == fb.dtype and np.array_equal(fa, fb, equal_nan=True), rel


def test_dump_modes(tmp_path):
    x, y = make_batch()
    counts = {}
    for mode, api_list in (("OFF", None), ("list", ["mm", "not_an_op"]), ("all", None)):
        _, fwd, bwd = run_step(make_model(), x, y, tmp_path, dump_mode=mode, api_list=api_list)
        files = [f for run in (fwd, bwd) for sub in ("npu", "cpu") for f in os.listdir(f"{run.run_dir}/{sub}")]
        counts[mode] = files
    assert counts["OFF"] == []
    assert counts["list"] and all(f.startswith("mm_") for f in counts["list"])
    names = {re.match(r"^(.*_\d+)_", f).group(1) for f in counts["all"]}
    assert {"addmm_1", "tail_gelu_1", "native_layer_norm_1", "mm_1", "gelu_backward_1"} <= names


def test_layout_names_and_permissions(tmp_path):
    with PtdbgDispatch(dump_path=str(tmp_path), tag="step3") as od:
        torch.ones(2) + 1
    name = os.path.basename(od.run_dir)
    assert re.fullmatch(r"msprobe_step3_rank0_\d{14}", name)
    assert os.path.basename(od.csv_path) == f"compare_result_rank0_{od.timestamp}.csv"
    assert stat.S_IMODE(os.stat(od.run_dir).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(od.csv_path).st_mode) == 0o640
    with PtdbgDispatch(dump_path=str(tmp_path)) as od2:     # no tag; same second -> a new directory
        pass
    assert re.fullmatch(r"msprobe_rank0_\d{14}", os.path.basename(od2.run_dir))
    assert read_rows(od2.csv_path) == []


def test_nested_and_reused_blocks_raise(tmp_path):
    outer = PtdbgDispatch(dump_path=str(tmp_path))
    inner = PtdbgDispatch(dump_path=str(tmp_path))
    with outer, pytest.raises(RuntimeError, match="cannot be nested"), inner:
        pass
    with pytest.raises(RuntimeError, match="create a new PtdbgDispatch"), outer:
        pass


def _no_cpu_kernel(x):
    raise NotImplementedError("no CPU kernel for this op")


def test_special_ops_are_listed_with_reasons(tmp_path):
    a = torch.randn(4, 4)
    sparse = torch.eye(3).to_sparse()
    with PtdbgDispatch(dump_path=str(tmp_path), bench_overrides={f"{NS}::tail_gelu": _no_cpu_kernel}) as od:
        b = a.clone()
        b.mul_(3)                                   # in-place: compared on a copy
        out = torch.empty(4, 4)
        torch.add(a, b, out=out)                    # out= variant
        a.t()                                       # view
        torch.empty(4).bernoulli_(0.5)              # random
        torch.ones(2, device="meta") * 2            # meta
        sparse * 2                                  # sparse
        g = torch.ops.msprobe_od_test.tail_gelu(a)  # bench raises: listed, training goes on
        with pytest.raises(RuntimeError):
            torch.ones(2, 3) @ torch.ones(2, 3)     # the device op itself fails: listed, error re-raised
    assert torch.equal(b, a * 3) and torch.equal(out, a + b) and g.shape == (4, 4)
    rows = {r["NPU Name"]: r for r in read_rows(od.csv_path)}
    assert rows["mul__1_output"]["Accuracy Reached or Not"] == "Yes"
    assert rows["add_1_output"]["Accuracy Reached or Not"] == "Yes" and "add_1_input_out" in rows
    assert "view op" in rows["t_1_output"]["Err_message"]
    assert "random op" in rows["bernoulli__1_output"]["Err_message"]
    assert "in the skip list" in rows["clone_1_output"]["Err_message"]
    assert "meta tensor" in rows["mul_1_output"]["Err_message"]
    assert "layout" in rows["mul_2_output"]["Err_message"]
    assert "the device run raised RuntimeError" in rows["mm_1_output"]["Err_message"]
    failed = rows["tail_gelu_1_output"]
    assert failed["Accuracy Reached or Not"] == "None" and "CPU run failed: NotImplementedError" in failed[
        "Err_message"]


def test_inplace_input_rows_are_pre_op_values(tmp_path):
    a = torch.full((3,), 2.0)
    with PtdbgDispatch(dump_path=str(tmp_path), dump_mode="all") as od:
        a.mul_(5)
    rows = {r["NPU Name"]: r for r in read_rows(od.csv_path)}
    assert float(rows["mul__1_input.0"]["NPU max"]) == 2.0
    assert float(rows["mul__1_output"]["NPU max"]) == 10.0 == float(rows["mul__1_output"]["Bench max"])
    assert np.load(f"{od.run_dir}/npu/mul__1_input.0.npy").tolist() == [2.0, 2.0, 2.0]


def test_debug_lines(tmp_path, capsys):
    with PtdbgDispatch(dump_path=str(tmp_path), debug=True):
        torch.ones(3) * 2
    out = capsys.readouterr().out
    assert "Main pid:" in out and "Dispatch Info: Rank[0]" in out and "Func[mul.Tensor]" in out
    assert "mul_1_output index=2, shape=[3] Pass" in out and "Time[NPU RUN]-EXIT" in out
    assert "Dispatch exit: Device[0], Pid[" in out and "Input[2] Output[2] Total[4] API_Total[2]]" in out


def test_override_keys_and_dropout(tmp_path):
    calls = []

    def mm_ref(a, b):
        calls.append("mm")
        return a @ b

    x = torch.randn(4, 4)
    overrides = {torch.ops.aten.mm.default: mm_ref, torch.ops.aten.mul: lambda a, b: a * b * 2}
    torch.manual_seed(5)
    expected = (torch.ops.aten.native_dropout(torch.ones(20, 20), 0.5, True)[0], torch.rand(2))
    torch.manual_seed(5)
    with PtdbgDispatch(dump_path=str(tmp_path), bench_overrides=overrides) as od:
        drop = torch.ops.aten.native_dropout(torch.ones(20, 20), 0.5, True)[0]
        x @ x
        x * x
    assert torch.equal(drop, expected[0]) and torch.equal(torch.rand(2), expected[1])
    rows = {r["NPU Name"]: r for r in read_rows(od.csv_path)}
    assert calls == ["mm"] and rows["mm_1_output"]["Accuracy Reached or Not"] == "Yes"
    assert rows["mul_1_output"]["Accuracy Reached or Not"] == "No"       # the packet key reached mul.Tensor
    dropped = rows["native_dropout_1_output.0"]
    assert dropped["Accuracy Reached or Not"] == "Yes" and "share of zeros (difference 0.000000)" in dropped[
        "Err_message"]
    assert float(dropped["Cosine"]) == 1.0        # same generator state: the same mask on the CPU
    with pytest.raises(TypeError, match="bench_overrides key"):
        PtdbgDispatch(dump_path=str(tmp_path), bench_overrides={3: mm_ref})


def test_unusual_dtypes_are_compared_and_dumped(tmp_path):
    with PtdbgDispatch(dump_path=str(tmp_path), dump_mode="all") as od:
        torch.full((4,), 2.0, dtype=torch.float8_e4m3fn).abs()
        torch.tensor([1 + 2j, 3 - 1j]) * 2
        torch.ones(3, dtype=torch.float16).exp()
    rows = {r["NPU Name"]: r for r in read_rows(od.csv_path)}
    assert rows["abs_1_output"]["Accuracy Reached or Not"] == "Yes"
    assert rows["mul_1_output"]["NPU Dtype"] == "torch.complex64"
    assert rows["exp_1_output"]["NPU Dtype"] == "torch.float32"     # fp16 up-cast, bench in float32
    assert float(rows["exp_1_output"]["MaxAbsErr"]) > 0              # fp16 rounding is visible
    assert np.load(f"{od.run_dir}/npu/abs_1_output.npy").dtype == np.float32
    assert np.load(f"{od.run_dir}/cpu/mul_1_output.npy").dtype == np.complex64


def test_public_names_resolve_lazily():
    import pytest_msprobe

    assert pytest_msprobe.PtdbgDispatch is PtdbgDispatch
    assert pytest_msprobe.seed_all is seed_all


def test_copy_of_model_unchanged_by_block(tmp_path):
    model = make_model()
    before = copy.deepcopy(model.state_dict())
    with PtdbgDispatch(dump_path=str(tmp_path), bench_overrides=OVERRIDES):
        model(make_batch()[0])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
