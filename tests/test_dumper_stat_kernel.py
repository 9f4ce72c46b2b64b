"""The compiled one-pass statistics kernel (numba): torch's Max/Min, exact Mean/Norm rounded once, fixed lanes."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dumpers.torch_dump import stat_kernel
from dumpers.torch_dump.stats import StatBatch, _cpu_numbers, reductions

ROOT = Path(__file__).resolve().parents[1]
LOW = (torch.bfloat16, torch.float16)
ALL = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
NAME = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.float16: "float16"}
BITS = {torch.float32: (torch.int32, np.uint32), torch.float64: (torch.int64, np.uint64),
        torch.bfloat16: (torch.int16, np.uint16), torch.float16: (torch.int16, np.uint16)}
# significant bits and the exponent of the smallest quantum (subnormals) of each dtype
FORMAT = {torch.bfloat16: (8, -133), torch.float16: (11, -24), torch.float32: (24, -149)}


def rounded(x: float, dtype: torch.dtype) -> float:
    """``x`` rounded to nearest even in ``dtype``, from its float64 value directly (no double rounding)."""
    if dtype == torch.float64 or x == 0 or not math.isfinite(x):
        return x
    bits, qmin = FORMAT[dtype]
    e = math.frexp(x)[1]
    q = max(e - bits, qmin)
    r = math.ldexp(round(math.ldexp(x, -q)), q)         # round(): ties to even, exact on these values
    return r if abs(r) <= torch.finfo(dtype).max else math.copysign(math.inf, r)


def exact(t: torch.Tensor) -> list:
    """Max, Min and the float64 Mean and Norm (float64 sums of values and squares that are exact there)."""
    d = t.double()
    return [d.max().item(), d.min().item(), d.mean().item(), torch.linalg.vector_norm(d).item()]


def data(dtype: torch.dtype, n: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(n, generator=g, dtype=torch.float64) * 0.05 + 0.01) * scale).to(dtype)


def lanes_reference(t: torch.Tensor) -> list:
    """The kernel's sums written with numpy: element i added to lane i % 32 in order, the lanes combined in
    the fixed tree (16, 8, 4, 2, 1), Mean and Norm then rounded once to the dtype (float32/bf16/fp16)."""
    v = t.double().numpy()
    n = v.size
    s, q = np.zeros(32), np.zeros(32)
    whole = n // 32 * 32
    if whole:
        rows = v[:whole].reshape(-1, 32)
        s = np.add.reduce(rows, axis=0)             # row after row: each lane adds its elements in order
        q = np.add.reduce(rows * rows, axis=0)
    tail = v[whole:]
    s[:tail.size] += tail
    q[:tail.size] += tail * tail
    w = 16
    while w:
        s[:w] += s[w:2 * w]
        q[:w] += q[w:2 * w]
        w //= 2
    return [rounded(float(s[0]) / n, t.dtype), rounded(math.sqrt(q[0]), t.dtype)]


def kernel(t: torch.Tensor):
    return stat_kernel.summarize_memory(t.data_ptr(), t.numel(), NAME[t.dtype])


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: NAME[d])
@pytest.mark.parametrize("n", [64, 65, 1000, 4099, 300_000])
def test_statistics_are_the_exact_values_rounded_once(dtype, n):
    t = data(dtype, n, n)
    got = kernel(t)
    ref = exact(t)
    assert got[:2] == ref[:2]
    if dtype == torch.float64:      # compensated float64 sums: within a few units of the last place
        assert got[2] == pytest.approx(ref[2], rel=4e-16, abs=1e-300) and got[3] == pytest.approx(ref[3], rel=4e-16)
    else:                           # float64 sums of exact float64 terms, then one rounding to the dtype
        assert got[2:] == [rounded(ref[2], dtype), rounded(ref[3], dtype)]
        assert got[2:] == lanes_reference(t)


finite_bits = st.integers(0, (1 << 16) - 1)


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
       words=st.lists(finite_bits, min_size=64, max_size=700), start=st.integers(0, 3))
def test_any_finite_bit_pattern_matches_torch_and_the_lane_reference(dtype, words, start):
    """Any finite bit patterns (subnormals, signed zeros, the largest values), any length, any start: Max and
    Min are torch's; Mean and Norm are the lane sums of :func:`lanes_reference` bit for bit, or None when the
    Norm overflows the dtype (then torch's path gives inf)."""
    raw = np.array(words, np.uint16)
    if dtype == torch.float32:
        raw = (raw.astype(np.uint32) << 16) | raw[::-1].astype(np.uint32)
    t = torch.from_numpy(raw.view(np.int16 if raw.itemsize == 2 else np.int32)).view(dtype)[start:]
    t = t[torch.isfinite(t)].contiguous()
    if t.numel() < stat_kernel.MIN_ELEMENTS:
        assert kernel(t) is None
        return
    got = kernel(t)
    ref = lanes_reference(t)
    if not math.isfinite(ref[1]):
        assert got is None
        return
    assert got[:2] == [t.max().item(), t.min().item()]
    assert got[2:] == ref


@pytest.mark.parametrize("dtype", LOW, ids=lambda d: NAME[d])
def test_low_precision_statistics_match_torch(dtype):
    """bf16/fp16: torch's Max/Min, and Mean/Norm within one unit of the dtype's last place of torch's
    float32-accumulated values (torch rounds twice and sums in float32)."""
    eps = torch.finfo(dtype).eps
    for n, scale in ((4096, 1.0), (70_000, 30.0), (1_000_003, 1e-3)):
        t = data(dtype, n, 7, scale)
        ours = _cpu_numbers(t, "float")
        ref = [v.item() for v in reductions(t, "float")]
        assert ours[:2] == ref[:2]
        for a, b in zip(ours[2:], ref[2:]):
            assert abs(a - b) <= max(abs(b), torch.finfo(dtype).smallest_normal) * eps


def test_float16_subnormals_signed_zeros_and_extremes():
    values = [0.0, -0.0, 6e-8, -6e-8, 6.1e-5, -65504.0, 65504.0, 1e-7, 2 ** -24]
    t = torch.tensor(values * 10, dtype=torch.float16)
    assert kernel(t) is None                     # Norm overflows float16: torch's path gives inf
    t = torch.tensor([v for v in values if abs(v) < 100] * 10, dtype=torch.float16)
    got = kernel(t)
    ref = exact(t)
    assert got[:2] == ref[:2] and got[2:] == [rounded(ref[2], torch.float16), rounded(ref[3], torch.float16)]
    tiny = torch.tensor([2 ** -24, -(2 ** -24), 0.0, 2 ** -23] * 20, dtype=torch.float16)
    got = kernel(tiny)
    assert got[:2] == [2 ** -23, -(2 ** -24)] and got[2] == rounded(2 ** -23 / 4, torch.float16)
    zeros = torch.tensor([-0.0, 0.0] * 40, dtype=torch.float32)
    assert math.copysign(1, kernel(zeros)[0]) == 1 and math.copysign(1, kernel(zeros)[1]) == -1


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: NAME[d])
@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
def test_non_finite_data_is_left_to_torchs_reductions(dtype, special):
    t = data(dtype, 300, 1)
    t[200] = special
    assert kernel(t) is None
    item = StatBatch().add(t)
    assert "Max_except_inf_nan" in item
    mn, mx = torch.aminmax(t)
    assert (item["Max"], item["Min"]) == (mx.item(), mn.item()) or math.isnan(item["Max"])


def test_bfloat16_norm_overflow_takes_torchs_path():
    t = torch.full((100,), 3e38, dtype=torch.bfloat16)
    assert kernel(t) is None
    item = StatBatch().add(t)
    assert item["Norm"] == torch.linalg.vector_norm(t).item() == math.inf


def test_permuted_dense_tensors_are_read_as_one_block():
    t = data(torch.float32, 64 * 33, 5).reshape(64, 33)
    assert _cpu_numbers(t.t(), "float") == _cpu_numbers(t, "float") == kernel(t)
    strided = t[:, ::2]                          # not one block: torch's reductions
    ref = [v.item() for v in reductions(strided, "float")]
    assert _cpu_numbers(strided, "float") == ref


def test_numpy_entry_point_agrees_with_the_memory_entry_point():
    a = np.random.default_rng(3).standard_normal(3000).astype(np.float32)
    assert stat_kernel.summarize(a) == stat_kernel.summarize_memory(a.ctypes.data, a.size, "float32")
    assert stat_kernel.summarize(a[::2]) == stat_kernel.summarize(np.ascontiguousarray(a[::2]))
    assert stat_kernel.summarize(a.astype(np.int32)) is None
    assert stat_kernel.summarize(a.astype(np.float16)) == kernel(torch.from_numpy(a).half())


def _in_child(code: str, env: dict) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_no_compiler_needed(tmp_path):
    """With no C compiler on PATH (and ``CC`` pointing at nothing) the kernel serves and gives the same
    numbers: numba compiles through LLVM in process."""
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(sys.executable, bare / "python")
    code = ("import json, torch; from dumpers.torch_dump import stat_kernel; torch.manual_seed(0); "
            "t = torch.randn(5000).to(torch.bfloat16); "
            "print(json.dumps(stat_kernel.summarize_memory(t.data_ptr(), t.numel(), 'bfloat16')))")
    got = json.loads(_in_child(code, {"CC": "/bin/false", "PATH": str(bare)}))
    torch.manual_seed(0)
    assert got == kernel(torch.randn(5000).to(torch.bfloat16))


def test_disabled_by_the_environment():
    code = "import json; from dumpers.torch_dump import stat_kernel; print(json.dumps(stat_kernel.kernels()))"
    assert json.loads(_in_child(code, {"MSPROBE_DUMP_JIT": "0"})) == {}


def test_the_debugger_loads_the_kernel_when_built(tmp_path):
    code = ("import json; from dumpers.torch_dump import stat_kernel; from dumpers.torch_dump import "
            "PrecisionDebugger; before = stat_kernel._entries is None; "
            f"PrecisionDebugger(task='statistics', dump_path={str(tmp_path / 'dump')!r}, level='L1'); "
            "print(json.dumps([before, bool(stat_kernel._entries)]))")
    assert json.loads(_in_child(code, {})) == [True, True]
