"""The dumper's fast paths give exactly what the plain paths give: entry texts, journal, statistics, files."""
from __future__ import annotations

import io
import json
import math
import os
import random
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dumpers import format as fmt
from dumpers import json_render
from dumpers.journal import JournalWriter, read_journal
from dumpers.torch_dump import PrecisionDebugger
from dumpers.torch_dump.entry_text import dump_json_text, entry_text
from dumpers.torch_dump.stats import StatBatch, _cpu_numbers, reductions

DATA = Path(__file__).parent / "data"
SAMPLE_DUMPS = sorted(DATA.rglob("dump.json"))


@pytest.fixture(autouse=True)
def fresh_debugger():
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


@pytest.mark.parametrize("path", SAMPLE_DUMPS, ids=lambda p: str(p.relative_to(DATA)))
def test_entry_texts_assemble_to_the_reference_dump_json(path):
    dump = json.loads(path.read_text())
    header = {k: v for k, v in dump.items() if k != "data"}
    texts = {key: entry_text(entry) for key, entry in dump["data"].items()}
    assert dump_json_text(header, texts) == fmt.dumps_json(dump)


def test_entry_text_of_awkward_values():
    entry = {"input_args": [{"type": "str", "value": "a\nb\"[{,"}, None, [], {}, [[1, 2], (3.5, math.nan)]],
             "input_kwargs": {"x": {"type": "float", "value": -math.inf}, "n": {"type": "int", "value": True}},
             "output": [{"type": "torch.Size", "value": [2, 3]}, "ünï"]}
    header = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}
    expected = fmt.dumps_json({**header, "data": {"k.0.forward": entry, "k.1.forward": {}}})
    assert dump_json_text(header, {"k.0.forward": entry_text(entry), "k.1.forward": entry_text({})}) == expected
    assert dump_json_text(header, {}) == fmt.dumps_json({**header, "data": {}})


def test_journal_text_records_replay_to_the_entries(tmp_path):
    entry = {"input_args": [{"type": "float", "value": 1e-300}, {"type": "float", "value": math.nan}], "output": []}
    path = str(tmp_path / fmt.JOURNAL)
    writer = JournalWriter(path)
    writer.header("statistics", "L1", "pytorch", None)
    writer.entry_text("Torch.add.0.forward", entry_text(entry), 0)
    writer.entry("Torch.add.1.forward", entry)
    writer.close()
    with open(path, "ab") as fh:
        fh.write(b'{"t":"x","k":"Torch.add.2.forward","x":"{not json"}\n')
    state = read_journal(path)
    assert list(state.data) == ["Torch.add.0.forward", "Torch.add.1.forward"]
    got = state.data["Torch.add.0.forward"]["input_args"]
    assert got[0]["value"] == 1e-300 and math.isnan(got[1]["value"])
    assert state.stacks[0][0] == ["Torch.add.0.forward"]
    assert state.bad_lines == 1


def test_journal_stack_records_from_kept_line_texts_are_the_plain_records(tmp_path):
    """A call stack's lines are encoded once and their JSON kept: the records of the same list written in two
    steps (and of another list) are byte for byte what encoding each whole record gives, and replay."""
    from dumpers import journal

    lines = ["File /a/b.py, line 3, in f, \n x = g('\u00e9')", 'File "q.py", line 9, in <module>, \n\ty = 1']
    path = str(tmp_path / fmt.JOURNAL)
    writer = JournalWriter(path)
    writer.header("statistics", "L1", "pytorch", None)
    for sid, group in ((0, lines), (1, []), (0, lines), (2, list(lines))):
        writer.stack(sid, group)
    writer.close()
    with open(path, "rb") as fh:
        records = fh.read().splitlines(keepends=True)[1:]
    expected = [journal._line({"t": "s", "i": sid, "l": group}) for sid, group in ((0, lines), (1, []), (0, lines),
                                                                                   (2, lines))]
    assert records == expected
    assert read_journal(path).stacks[2][1] == lines


SPECIAL = [torch.tensor([1.0, float("nan"), -2.0]), torch.tensor([float("inf"), -1.0, float("-inf")]),
           torch.tensor([-0.0, 0.0, 3.0]), torch.arange(-5, 7, dtype=torch.int64), torch.arange(200, dtype=torch.uint8),
           torch.randn(64, 33, dtype=torch.float64).t(), torch.randn(17, 5)[:, 1:4],
           torch.randn(9).to(torch.bfloat16), torch.randn(9).to(torch.float16), torch.tensor([True, False]),
           torch.tensor(2.5), torch.randn(3).neg().conj()]


@pytest.mark.parametrize("t", SPECIAL, ids=lambda t: f"{t.dtype}-{tuple(t.shape)}")
def test_cpu_numbers_equal_the_torch_reductions(t):
    from dumpers.torch_dump.stats import kind_of
    kind = kind_of(t)
    ours = _cpu_numbers(t, kind)
    ref = [v.item() for v in reductions(t, kind)]
    assert len(ours) == len(ref)
    one_pass = kind == "float" and t.dtype in (torch.float32, torch.float64) and t.numel() >= 64
    for n, (a, b) in enumerate(zip(ours, ref)):
        assert type(a) is type(b)
        if one_pass and n >= 2:               # Mean and Norm: exact values rounded, not torch's float sums
            assert a == pytest.approx(b, rel=1e-6)
        else:
            assert (math.isnan(a) and math.isnan(b)) if isinstance(a, float) and a != a else a == b


def test_same_tensor_twice_in_a_call_is_summarised_once():
    """The inputs of an API call are remembered by the statistics cache: ``x * x`` reads ``x`` once; an
    in-place write bumps the version and the tensor is summarised again."""
    from dumpers.torch_dump.statcache import StatCache
    calls = []
    batch = StatBatch(cache=StatCache(), keep_inputs=True)
    import dumpers.torch_dump.stats as stats_mod
    orig = stats_mod._cpu_numbers

    def counting(t, kind):
        calls.append(t.data_ptr())
        return orig(t, kind)

    stats_mod._cpu_numbers = counting
    try:
        g = torch.randn(50)
        a, b = batch.add(g), batch.add(g)
        g.mul_(2)
        c = batch.add(g, cacheable=True)
        batch.resolve()
    finally:
        stats_mod._cpu_numbers = orig
    assert len(calls) == 2
    assert a == b and a["Max"] == pytest.approx(c["Max"] / 2)


def test_addcmul_with_one_tensor_twice_dumps_equal_items_and_linked_files(tmp_path):
    g, acc = torch.randn(8, 4), torch.zeros(8, 4)
    dbg = PrecisionDebugger(dump_path=str(tmp_path), task="tensor", level="L1")
    dbg.start()
    acc.addcmul_(g, g, value=0.5)
    dbg.stop()
    dbg.flush()                       # stop() does not wait for the background writer
    rank = tmp_path / "step0" / "rank"
    data = json.loads((rank / "dump.json").read_text())["data"]
    args = data["Tensor.addcmul_.0.forward"]["input_args"]
    assert {k: v for k, v in args[1].items() if k != "data_name"} == \
        {k: v for k, v in args[2].items() if k != "data_name"}
    files = [rank / fmt.TENSOR_DIR / a["data_name"] for a in args[1:]]
    assert os.stat(files[0]).st_ino == os.stat(files[1]).st_ino
    assert torch.equal(torch.load(files[1], weights_only=True), g)
    out = data["Tensor.addcmul_.0.forward"]["output"][0]
    assert torch.equal(torch.load(rank / fmt.TENSOR_DIR / out["data_name"], weights_only=True), acc)
    assert oct(os.stat(files[0]).st_mode & 0o777) == oct(fmt.FILE_MODE & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _exact(t: torch.Tensor) -> list:
    d = t.double()
    return [d.max().item(), d.min().item(), d.mean().item(), torch.linalg.vector_norm(d).item()]


def _gamma(k: int, u: float) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k roundings."""
    return k * u / (1 - k * u)


def exact_sums(t: torch.Tensor) -> tuple:
    """(n, exact mean, exact norm, sum |x|, sum x**2) of ``t``, correctly rounded float64 sums."""
    d = t.double().reshape(-1)
    sq_sum = math.fsum((d * d).tolist())
    return d.numel(), math.fsum(d.tolist()) / d.numel(), math.sqrt(sq_sum), math.fsum(d.abs().tolist()), sq_sum


# float32 elements the one-pass kernel adds in float32 before they reach its float64 sums: none (every float32 value
# and square is exact in float64 and goes straight into a float64 lane)
F32_BLOCK = 1


def summation_error_bounds(t: Any, block: int, float32: bool = True) -> tuple:
    """Worst-case absolute errors of the one-pass kernel's Mean and Norm of ``t``, for any summation order.

    float32 data: each block of ``block`` elements is summed in float32 (at most block - 1 additions,
    in whatever order the compiler vectorises them: 8 or 16 lanes, or none), squares are float32
    products (one rounding each), the block sums and the rest go into float64 running sums; the results
    are rounded once to float32. float64 data: float64 throughout. The bounds use sum(|x|) and sum(x**2)
    of the data itself, so they hold on every CPU, whatever its vector width. ``block`` = n: a float32
    sum in any order (any reduction, torch's own included). ``t``: a tensor, or :func:`exact_sums` of one.
    """
    u32, u64 = 2.0 ** -24, 2.0 ** -53
    if isinstance(t, torch.Tensor):
        float32 = t.dtype == torch.float32
        t = exact_sums(t)
    n, mean, norm, abs_sum, sq_sum = t
    block = min(block, n)
    if float32:
        s_err = (_gamma(block - 1, u32) + _gamma(n, u64)) * abs_sum
        q_rel = _gamma(block, u32) + _gamma(n + 1, u64)
        final = u32                                       # rounded once to float32
    else:
        s_err = _gamma(n, u64) * abs_sum
        q_rel = _gamma(n + 1, u64)
        final = u64
    mean_err = s_err / n * (1 + u64)
    mean_err += final * (abs(mean) + mean_err)
    norm_rel = q_rel / (2 * math.sqrt(1 - q_rel)) + u64   # sqrt(q (1 + d)) = norm (1 + ~d/2), then its rounding
    norm_err = norm * norm_rel
    norm_err += final * (norm + norm_err)
    return mean_err, norm_err


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(64,), (1000,), (3, 77, 5), (256, 1024)])
def test_one_pass_statistics_are_the_exact_values_rounded(dtype, shape):
    """Max/Min exact; Mean/Norm within the float summation error bounds of the one-pass kernel's lanes, rounded once
    to the dtype (the bounds come from the computation, not from the CPU the test was written on)."""
    from dumpers.torch_dump import stat_kernel
    if not stat_kernel.kernels():
        pytest.skip("numba is not installed")
    torch.manual_seed(sum(shape))
    t = (torch.randn(shape, dtype=torch.float64) * 1e3 + 7).to(dtype)
    got = stat_kernel.summarize(t.numpy())
    ref = _exact(t)
    assert got[:2] == ref[:2]
    mean_err, norm_err = summation_error_bounds(t, F32_BLOCK)
    assert abs(got[2] - ref[2]) <= mean_err and abs(got[3] - ref[3]) <= norm_err
    if dtype == torch.float32:                            # results are float32 values (one rounding)
        assert got[2] == float(np.float32(got[2])) and got[3] == float(np.float32(got[3]))


def test_the_summation_bound_catches_a_kernel_that_drops_a_block():
    """The derived bounds are loose (worst case, any order) but still far below what a real bug costs."""
    torch.manual_seed(3)
    t = (torch.randn(256, 1024, dtype=torch.float64) * 1e3 + 7).float()
    mean_err, norm_err = summation_error_bounds(t, F32_BLOCK)
    d = t.double().reshape(-1)
    kept = d[256:]                                          # a block of 256 elements lost
    assert abs(kept.sum().item() / d.numel() - d.mean().item()) > mean_err
    assert abs(torch.linalg.vector_norm(kept).item() - torch.linalg.vector_norm(d).item()) > norm_err


@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
def test_one_pass_statistics_leave_non_finite_data_to_the_nan_aware_path(special):
    from dumpers.torch_dump import stat_kernel
    t = torch.randn(500)
    t[123] = special
    assert stat_kernel.summarize(t.numpy()) is None
    batch = StatBatch()
    item = batch.add(t)
    batch.resolve()
    ref = [v.item() for v in reductions(t, "float")]
    assert [item["Max"], item["Min"]] == pytest.approx(ref[:2], nan_ok=True)
    assert "Max_except_inf_nan" in item


def test_one_pass_statistics_signed_zeros_and_subnormals():
    from dumpers.torch_dump import stat_kernel
    if not stat_kernel.kernels():
        pytest.skip("numba is not installed")
    t = torch.tensor([-0.0, 0.0, 1e-45, -1e-45, -3.0, 2.0] * 20)
    mx, mn, mean, norm = stat_kernel.summarize(t.numpy())
    assert (mx, mn) == (2.0, -3.0)
    for reps in (30, 300):                  # the float64 tail, and float32 blocks that must not square in float32
        t = torch.tensor([-0.0, 1e-45, -1e-45] * reps)
        mx, mn, mean, norm = stat_kernel.summarize(t.numpy())
        assert mx == t.max().item() and mn == t.min().item() and mean == 0.0
        assert norm == float(np.float32(math.sqrt(2 * reps) * 1.401298464324817e-45))


@pytest.mark.parametrize("scale", [1e-25, 1e-19, 3e19, 1e30])
def test_one_pass_statistics_outside_the_float32_square_range_are_still_right(scale):
    """float32 blocks square in float32: values whose squares under- or overflow there take the
    NaN-aware path, and every entry point still gives the exact statistics rounded to float32."""
    from dumpers.torch_dump import stat_kernel
    torch.manual_seed(3)
    t = (torch.randn(5000, dtype=torch.float64) * scale).float()
    ref = _exact(t)
    item = StatBatch().add(t)
    assert [item["Max"], item["Min"]] == ref[:2]
    assert item["Mean"] == pytest.approx(ref[2], rel=1e-5) and item["Norm"] == pytest.approx(ref[3], rel=1e-6)
    got = stat_kernel.summarize(t.numpy())
    if got is not None:
        assert got[:2] == ref[:2] and got[3] == pytest.approx(ref[3], rel=1e-6)


def test_statistics_without_the_jit_match_the_jit(tmp_path):
    """MSPROBE_DUMP_JIT=0 (or no numba) gives the same Max/Min, and Mean/Norm within float32 summation bounds."""
    import subprocess
    import sys
    code = ("import json, sys, torch; from dumpers.torch_dump.stats import StatBatch; torch.manual_seed(0); "
            "b = StatBatch(); ts = [torch.randn(n) * 5 + 1 for n in (70, 4096, 300000)]; "
            "items = [b.add(t) for t in ts]; b.resolve(); torch.save(ts, sys.argv[1]); print(json.dumps(items))")
    root = Path(__file__).resolve().parents[1]
    outs = []
    for jit in ("1", "0"):
        env = dict(os.environ, MSPROBE_DUMP_JIT=jit, PYTHONPATH=str(root))
        saved = tmp_path / f"tensors{jit}.pt"
        outs.append(json.loads(subprocess.run([sys.executable, "-c", code, str(saved)], env=env, check=True,
                                              capture_output=True, text=True).stdout))
        outs[-1] = (outs[-1], torch.load(saved, weights_only=True))
    (jit_items, tensors), (plain_items, _) = outs
    for a, b, t in zip(jit_items, plain_items, tensors):
        assert (a["Max"], a["Min"]) == (b["Max"], b["Min"])
        sums = exact_sums(t)
        # each path against the exact values: the one-pass kernel within its block bounds, torch's float32
        # reductions (whose order is theirs, and CPU-dependent) within the bound of a float32 sum in any order
        for item, block in ((a, F32_BLOCK), (b, t.numel())):
            mean_err, norm_err = summation_error_bounds(sums, block)
            assert abs(item["Mean"] - sums[1]) <= mean_err and abs(item["Norm"] - sums[2]) <= norm_err


@pytest.mark.parametrize("t", [torch.randn(8, 64, 256), torch.randn(3).to(torch.bfloat16), torch.tensor(7),
                               torch.tensor([True, False, True]), torch.randn(4, dtype=torch.complex64),
                               torch.arange(12, dtype=torch.int16).reshape(3, 4), torch.randn(2, 3).half(),
                               torch.tensor(2.5, dtype=torch.float64), torch.randn(5, 0)],
                         ids=lambda t: f"{t.dtype}-{tuple(t.shape)}")
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_tensor_files_load_back_identical(tmp_path, t, kind):
    """Both writers (the writer process and the in-process thread) reuse torch.save's header and give
    files torch.load reads (weights_only) as the very tensor, from a copy, a non-contiguous view or
    a file written before (hard link)."""
    from dumpers.torch_dump.writer import ProcessWriter, TensorWriter, legacy_parts
    writer = ProcessWriter() if kind == "process" else TensorWriter()
    paths = []
    for i in range(3):                # the 1st file of a (dtype, shape) makes its header, the others reuse it
        value = t.clone() + i if t.dtype != torch.bool else t.clone()
        path = str(tmp_path / f"x{i}.pt")
        writer.submit_copy(path, value) if i else writer.submit(path, value)
        paths.append((path, value))
    if t.dim() == 2 and t.numel():
        path = str(tmp_path / "transposed.pt")
        writer.submit_copy(path, t.t())
        paths.append((path, t.t()))
    writer.submit(str(tmp_path / "again.pt"), None, link_to=paths[0][0])
    paths.append((str(tmp_path / "again.pt"), paths[0][1]))
    writer.close()
    assert writer.error is None
    for path, value in paths:
        back = torch.load(path, weights_only=True)
        assert back.dtype == value.dtype and back.shape == value.shape
        assert torch.equal(back, value)
        assert oct(os.stat(path).st_mode & 0o777) == oct(fmt.FILE_MODE & ~_umask())
    assert os.stat(paths[0][0]).st_ino == os.stat(paths[-1][0]).st_ino
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]
    if t.numel():
        assert legacy_parts(t.clone()) is not None
    assert legacy_parts(torch.randn(4, 4).t()) is None          # not contiguous: torch.save writes it


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64, torch.bool, torch.complex128])
def test_a_header_is_made_at_first_sight_without_touching_data(dtype):
    """The header of a (dtype, shape) never seen comes from uninitialised templates whose data is neither
    filled nor read: a 4 GiB shape leaves this process's peak memory where it was (two filled templates,
    or torch.save into memory, would add gigabytes), and the header is what torch.save writes before the
    data of a real tensor of that shape."""
    from dumpers.torch_dump import writer
    elements = (4 << 30) // torch.empty((), dtype=dtype).element_size()
    huge = (elements // 4096, 4096)
    writer._headers.pop((dtype, huge), None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    head = writer.legacy_header(dtype, torch.Size(huge))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 256 * 1024          # KiB
    assert head is not None and head[-8:] == elements.to_bytes(8, sys.byteorder)
    small = torch.ones(3, 5, dtype=dtype)
    writer._headers.pop((dtype, (3, 5)), None)
    header, data = writer.legacy_parts(small)
    blob = io.BytesIO()
    torch.save(small, blob, _use_new_zipfile_serialization=False)
    assert len(header) + data.nbytes == len(blob.getvalue()) and blob.getvalue().endswith(data.tobytes())
    assert torch.equal(torch.load(io.BytesIO(header + data.tobytes()), weights_only=True), small)


def _plain_workload(kind: str):
    torch.manual_seed(3)
    if kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        x = torch.randn(2, 5, 16)
    elif kind == "conv":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3))
        x = torch.randn(2, 3, 8, 8)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        x = torch.randn(4, 8)
    if kind == "bf16":
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        out = model(x)
        values, where = torch.max(out.float(), dim=-1)               # a named tuple result
        parts = torch.split(out.float(), 1, dim=0)                    # a tuple result
        y = torch.cat([p * 2 for p in parts]) + values.unsqueeze(-1)  # a list argument: general path
        z = torch.where(y > 0, y, torch.full_like(y, float("nan")))   # non-finite statistics
        loss = torch.nan_to_num(z).pow(2).mean() + where.sum() * 0 + y.clamp(min=-1.0, max=1.0).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model, step


@pytest.mark.parametrize("kind,level,task,summary", [
    ("mlp", "L1", "statistics", "statistics"), ("transformer", "L1", "statistics", "statistics"),
    ("conv", "L1", "statistics", "statistics"), ("bf16", "L1", "statistics", "statistics"),
    ("mlp", "mix", "statistics", "statistics"), ("transformer", "mix", "statistics", "statistics"),
    ("conv", "mix", "statistics", "statistics"), ("bf16", "mix", "statistics", "statistics"),
    ("mlp", "L1", "tensor", "statistics"), ("transformer", "mix", "tensor", "statistics"),
    ("conv", "L1", "statistics", "md5"), ("mlp", "mix", "tensor", "md5")])
def test_plain_calls_dump_exactly_what_the_general_path_dumps(tmp_path, kind, level, task, summary):
    """Calls with only plain arguments are rendered as encoded: the files are byte-identical."""
    texts = []
    for plain in (True, False):
        PrecisionDebugger.reset()
        model, step = _plain_workload(kind)
        config = tmp_path / f"config{plain}.json"
        config.write_text(json.dumps({"task": task, "level": level, "dump_path": str(tmp_path / str(plain)),
                                      task: {"summary_mode": summary}}))
        dbg = PrecisionDebugger(config_path=str(config), model=model)
        dbg.session.plain = dbg.session.plain_backward = plain
        import dumpers.torch_dump.session as session_mod
        used, orig = [], session_mod.forward_text
        session_mod.forward_text = lambda *a, _u=used, _o=orig: _u.append(1) or _o(*a)   # after the stack is taken
        torch.manual_seed(11)
        try:
            dbg.start()
            step()
            dbg.stop()
            dbg.flush()
        finally:
            session_mod.forward_text = orig
        rank = tmp_path / str(plain) / "step0" / "rank"
        files = sorted(os.listdir(rank / fmt.TENSOR_DIR)) if task == "tensor" else []
        dump_text = (rank / "dump.json").read_text().replace(str(tmp_path / str(plain)), "ROOT")
        texts.append([dump_text, (rank / "stack.json").read_text(), (rank / "construct.json").read_text(), files])
        assert (len(used) > 20) if plain else not used
    assert texts[0][0] == texts[1][0]
    assert texts[0][1:] == texts[1][1:]
    if task == "tensor":
        assert len(texts[0][3]) > 50 and all(name.endswith(".pt") for name in texts[0][3])
    if summary == "md5":
        assert '"md5": "' in texts[0][0]
    assert '"Tensor.addcdiv_.0.forward"' in texts[0][0] and "Max_except_inf_nan" in texts[0][0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_pass_statistics_by_address_equal_the_array_entry_point(dtype):
    from dumpers.torch_dump import stat_kernel
    if not stat_kernel.kernels():
        pytest.skip("numba is not installed")
    torch.manual_seed(5)
    for n in (64, 999, 70000):
        t = (torch.randn(n, dtype=torch.float64) * 50 - 3).to(dtype)
        assert stat_kernel.summarize_memory(t.data_ptr(), n, dtype == torch.float32) == stat_kernel.summarize(t.numpy())
    view = torch.randn(4, 300, dtype=dtype)[1:3]               # contiguous, starts inside its storage
    assert stat_kernel.summarize_memory(view.data_ptr(), view.numel(), dtype == torch.float32) == \
        stat_kernel.summarize(view.numpy())
    t = torch.randn(200, dtype=dtype)
    t[17] = math.inf
    assert stat_kernel.summarize_memory(t.data_ptr(), 200, dtype == torch.float32) is None
    assert stat_kernel.summarize_memory(t.data_ptr(), 10, dtype == torch.float32) is None    # below the minimum


def test_one_pass_statistics_of_permuted_dense_tensors():
    """A transpose is summarised over its memory block: the same numbers as its contiguous copy (Mean and
    Norm up to the order of the float32 block sums)."""
    from dumpers.torch_dump.stats import _cpu_numbers
    t = torch.randn(8, 33, 70).permute(2, 0, 1)
    assert not t.is_contiguous()
    got, ref = _cpu_numbers(t, "float"), _cpu_numbers(t.contiguous(), "float")
    assert got[:2] == ref[:2]                       # Mean and Norm: float32 block sums in another order
    assert got[2] == pytest.approx(ref[2], abs=1e-8) and got[3] == pytest.approx(ref[3], rel=2e-7)
    sliced = torch.randn(40, 70)[:, 5:60]                     # not dense: the general reductions
    ref = [v.item() for v in reductions(sliced, "float")]
    assert _cpu_numbers(sliced, "float")[:2] == ref[:2]


def _reference_at(obj, level: int) -> str:
    """json.dumps(indent=1) of ``obj`` as it would stand ``level`` levels deep in a document."""
    return fmt.dumps_json(obj).replace("\n", "\n" + " " * level)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_renderer_fast_paths_equal_json_dumps(data):
    """Tensor items, {"type", "value"} items and shapes take fast paths; the text stays json.dumps's."""
    number = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                       st.floats(allow_nan=True, allow_infinity=True), st.just(-0.0))
    item = st.fixed_dictionaries(
        {"type": st.sampled_from(["torch.Tensor", "mindspore.Tensor", 'x"y']),
         "dtype": st.sampled_from(["torch.float32", "torch.bfloat16", "Float16", "\u00e9"]),
         "shape": st.lists(st.one_of(st.integers(0, 4096), st.just(True), st.just(1.5)), max_size=4),
         "Max": number, "Min": number, "Mean": number, "Norm": number, "requires_grad": st.booleans()},
        optional={"data_name": st.text(max_size=8), "md5": st.just("0badf00d")})
    scalar = st.fixed_dictionaries({"type": st.sampled_from(["int", "float", "str", "bool"]),
                                    "value": st.one_of(number, st.text(max_size=6))})
    leaf = st.one_of(item, scalar, number, st.text(max_size=5))
    tree = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                        max_leaves=8)
    obj = data.draw(st.dictionaries(st.sampled_from(["input_args", "input_kwargs", "output", "input"]), tree,
                                    max_size=3))
    level = data.draw(st.integers(0, 3))
    assert json_render.dumps_json_fast(obj, level) == _reference_at(obj, level)


def test_stack_capture_reuse_matches_a_fresh_walk_for_loops_generators_and_callers(tmp_path):
    """capture() remembers the frames above the calling frame; every stack it returns must equal the
    stack a fresh walk gives: one frame calling from several lines, a function reached from two call
    sites, and a generator resumed from two different frames."""
    import sys as _sys
    from dumpers.torch_dump import stack as stacklib

    got = []

    def probe():                     # what the dumper's own frames do: capture from inside the dumper
        fresh, _ = stacklib._walk(_sys._getframe(1), None)
        got.append((stacklib.capture(None), tuple(fresh)))

    probe.__code__ = probe.__code__.replace(co_filename=os.path.join(stacklib._OWN_DIR, "probe.py"))

    def loop():
        for _ in range(3):
            probe()
            probe()

    def gen():
        while True:
            probe()
            yield

    def site_a(g):
        next(g)

    def site_b(g):
        next(g)

    loop()
    loop()
    g = gen()
    for _ in range(2):
        site_a(g)
        site_b(g)
    stacklib.release()
    assert len(got) == 16
    for captured, fresh in got:
        assert captured == fresh
    assert got[-1][0] != got[-2][0]                   # the generator's two callers are told apart


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 1.0])),
                min_size=4, max_size=4))
def test_finite_tensor_items_render_as_json_dumps_from_the_kept_float_texts(values):
    """The one-pass statistics' renderer keeps the text of each float it formats; rendered again (and with
    0.0 and -0.0, which are one dict key, in either order) the item is still json.dumps's text."""
    for order in (values, values[::-1], [-v for v in values]):
        item = {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [2, 3], "Max": order[0],
                "Min": order[1], "Mean": order[2], "Norm": order[3], "requires_grad": True}
        for _ in range(2):
            text = json_render.finite_tensor_text("torch.bfloat16", torch.Size([2, 3]), *order, True, 4)
            assert text == _reference_at(item, 4)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(st.text(max_size=12), max_size=3), st.lists(st.text(max_size=30), max_size=4)),
                max_size=4))
def test_stack_json_from_kept_line_texts_equals_json_dumps(groups):
    """stack.json is assembled from each call stack's lines rendered once (kept across steps): the text is
    json.dumps's for the same dict, empty and escaped strings included."""
    from dumpers.torch_dump.entry_text import lines_text, stack_json_text

    stack = {str(sid): [keys, lines] for sid, (keys, lines) in enumerate(groups)}
    text = stack_json_text([(sid, keys, lines_text(lines)) for sid, (keys, lines) in enumerate(groups)])
    assert text == json_render.dumps_json_fast(stack) == fmt.dumps_json(stack)


def test_renderer_caches_never_confuse_true_with_one():
    """Shape texts and item parts are cached by value, and True == 1 as a dict key: a shape holding a
    bool after the same shape of ints (and the other way round) must still render as json.dumps does."""
    for shapes in (([1], [True]), ([True], [1]), ([0, 2], [False, 2])):
        for shape in shapes:
            obj = {"output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": 1.0,
                               "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": False}]}
            assert json_render.dumps_json_fast(obj, 1) == _reference_at(obj, 1)


def test_process_writer_ring_wraps_waits_and_writes_oversized_tensors_itself(tmp_path):
    """A ring far smaller than the data: the training side waits for space, records never straddle the
    end, and a tensor larger than the whole ring is written by the training side directly."""
    from dumpers.torch_dump.writer import ProcessWriter
    writer = ProcessWriter(budget=1 << 20)
    values = [torch.randn(70_000) + i for i in range(40)] + [torch.randn(600_000)]     # 280 KB each, then 2.4 MB
    originals = [v.clone() for v in values]
    for i, v in enumerate(values):
        writer.submit_copy(str(tmp_path / f"v{i}.pt"), v)
        v.add_(1000.0)                # changed right after: the file must hold the value at submit time
    writer.close()
    assert writer.error is None and writer.dropped == 0
    for i, v in enumerate(originals):
        assert torch.equal(torch.load(tmp_path / f"v{i}.pt", weights_only=True), v)


def test_process_writer_takes_a_record_larger_than_either_side_of_an_empty_ring(tmp_path):
    """A record that fits neither after the ring's head nor in the bytes before it: once nothing is in
    flight it starts at the ring's beginning. (It used to wait forever for room, stopping training.)"""
    from dumpers.torch_dump.writer import ProcessWriter
    writer = ProcessWriter(budget=1 << 20)
    first, big = torch.randn(100_000), torch.randn(175_000)        # 400 KB, then 700 KB of a 1 MiB ring
    writer.submit_copy(str(tmp_path / "first.pt"), first)
    assert writer.flush(timeout=30)
    done = threading.Event()

    def submit():
        writer.submit_copy(str(tmp_path / "big.pt"), big)
        done.set()
    threading.Thread(target=submit, daemon=True).start()
    assert done.wait(30), "the training thread waits forever for room in an empty ring"
    writer.close(timeout=30)
    assert writer.error is None and writer.dropped == 0
    assert torch.equal(torch.load(tmp_path / "big.pt", weights_only=True), big)
    assert torch.equal(torch.load(tmp_path / "first.pt", weights_only=True), first)


def test_process_writer_ring_under_a_random_mix_of_sizes_and_flushes(tmp_path):
    """Sizes from a few bytes to most of the ring, flushes at random (an empty ring restarts at its
    beginning, a busy one wraps): every file holds its tensor as it was at submit time."""
    from dumpers.torch_dump.writer import ProcessWriter
    rng = random.Random(7)
    writer = ProcessWriter(budget=1 << 20)
    expected = []
    for i in range(120):
        n = rng.choice([1, 10, 1000, 30_000, 70_000, 140_000, 200_000])
        value = torch.full((n,), float(i))
        path = tmp_path / f"m{i}.pt"
        writer.submit_copy(str(path), value)
        value.add_(1.0)
        expected.append((path, n, float(i)))
        if rng.random() < 0.2:
            assert writer.flush(timeout=30)
    writer.close(timeout=60)
    assert writer.error is None and writer.dropped == 0
    for path, n, fill in expected:
        assert torch.equal(torch.load(path, weights_only=True), torch.full((n,), fill))


def test_process_writer_process_allocates_the_ring_as_it_starts():
    """The writer process gives the shared ring its memory itself, so the training thread's first copies
    find the pages allocated."""
    from dumpers.torch_dump.writer import ProcessWriter
    writer = ProcessWriter(budget=64 << 20)
    try:
        size, fds = writer._size, f"/proc/{writer._proc.pid}/fd"
        deadline, allocated = time.monotonic() + 30, 0
        while time.monotonic() < deadline and allocated < size:
            for name in os.listdir(fds):
                target = os.readlink(os.path.join(fds, name))
                if target.startswith("/memfd:msprobe-tensor-files"):
                    allocated = os.stat(os.path.join(fds, name)).st_blocks * 512
            time.sleep(0.02)
        assert allocated >= size
    finally:
        writer.close(timeout=30)


def test_process_writer_reports_the_first_error_and_drops_the_rest(tmp_path, caplog):
    from dumpers.torch_dump.writer import ProcessWriter
    writer = ProcessWriter()
    missing = tmp_path / "gone"
    writer.submit_copy(str(missing / "a.pt"), torch.randn(100))
    assert writer.flush(timeout=30)
    assert isinstance(writer.error, OSError) and "a.pt" in str(writer.error)
    writer.submit_copy(str(tmp_path / "b.pt"), torch.randn(100))
    writer.close()
    assert writer.dropped == 1 and not (tmp_path / "b.pt").exists()
    assert "further tensor files are skipped" in caplog.text


def test_process_writer_finishes_the_files_of_a_killed_training_process(tmp_path):
    """SIGKILL right after the last submit: the writer process still writes every file it was sent."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, torch
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from dumpers.torch_dump.writer import ProcessWriter
        writer = ProcessWriter()
        for i in range(30):
            writer.submit_copy({str(tmp_path)!r} + f"/t{{i}}.pt", torch.full((50_000,), float(i)))
        print(writer._proc.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    child = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}"):
        time.sleep(0.05)
    for i in range(30):
        assert torch.equal(torch.load(tmp_path / f"t{i}.pt", weights_only=True), torch.full((50_000,), float(i)))


def test_process_writer_in_a_forked_child_writes_nothing_and_keeps_the_pipe_closable(tmp_path):
    """A fork (DataLoader workers) must not write into the parent's ring or hold its pipe open."""
    from dumpers.torch_dump.writer import ProcessWriter
    writer = ProcessWriter()
    pid = os.fork()
    if pid == 0:                                          # the child: its copy is switched off
        code = 0 if writer._pipe is None and writer.error is not None else 1
        writer.submit_copy(str(tmp_path / "child.pt"), torch.randn(10))
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    writer.submit_copy(str(tmp_path / "parent.pt"), torch.ones(10))
    writer.close(timeout=30)
    assert writer._proc.returncode == 0 and writer.error is None
    assert torch.equal(torch.load(tmp_path / "parent.pt", weights_only=True), torch.ones(10))
    assert not (tmp_path / "child.pt").exists()


def test_process_writer_whose_process_died_reports_it_and_training_goes_on(tmp_path, caplog):
    from dumpers.torch_dump.writer import ProcessWriter
    writer = ProcessWriter(budget=1 << 20)
    writer.submit_copy(str(tmp_path / "a.pt"), torch.randn(1000))
    assert writer.flush(timeout=30)
    writer._proc.kill()
    writer._proc.wait()
    for i in range(8):                       # more than the ring holds: nothing waits forever, nothing raises
        writer.submit_copy(str(tmp_path / f"b{i}.pt"), torch.randn(70_000))
    assert writer.flush(timeout=30)
    writer.close(timeout=30)
    assert isinstance(writer.error, OSError) and writer.dropped >= 1
    assert (tmp_path / "a.pt").exists() and "further tensor files are skipped" in caplog.text
    dropped = writer.dropped
    writer.submit_copy(str(tmp_path / "late.pt"), torch.randn(10))     # after close(): dropped, no error
    assert writer.flush() and writer.dropped == dropped + 1
    writer.close()


def test_finite_data_whose_norm_overflows_is_written_as_json_infinity(tmp_path):
    from pytest_msprobe import PrecisionDebugger

    big = torch.full((4, 64), torch.finfo(torch.float32).min)   # finite values, float32 Norm overflows
    big[:, 0] = 0.25
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(dump_path=str(tmp_path), task="statistics")
    dbg.start()
    torch.relu(big)
    torch.relu(big)                    # the second look-up comes from the statistics cache
    dbg.stop()
    dbg.step()
    PrecisionDebugger.reset()
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    for key in ("Torch.relu.0.forward", "Torch.relu.1.forward"):
        item = data[key]["input_args"][0]
        assert item["Norm"] == math.inf and item["Max"] == 0.25 and item["Min"] == torch.finfo(torch.float32).min
