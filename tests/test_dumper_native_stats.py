"""The compiled one-pass statistics kernel: exact values rounded once, the same bits from every implementation."""
from __future__ import annotations

import ctypes
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dumpers.torch_dump import fastreduce, native
from dumpers.torch_dump.stats import StatBatch, _cpu_numbers, _reductions

ROOT = Path(__file__).resolve().parents[1]
LOW = (torch.bfloat16, torch.float16)
ALL = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
NAME = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.float16: "float16"}
# significant bits and the exponent of the smallest quantum (subnormals) of each dtype
FORMAT = {torch.bfloat16: (8, -133), torch.float16: (11, -24), torch.float32: (24, -149)}

needs_native = pytest.mark.skipif(native.load() is None, reason="no C compiler: the compiled kernel is unavailable")


def rounded(x: float, dtype: torch.dtype) -> float:
    """``x`` rounded to nearest even in ``dtype``, from its float64 value directly (no double rounding)."""
    if dtype == torch.float64 or x == 0 or not math.isfinite(x):
        return x
    bits, qmin = FORMAT[dtype]
    e = math.frexp(x)[1]
    q = max(e - bits, qmin)
    return math.ldexp(round(math.ldexp(x, -q)), q)      # round(): ties to even, exact on these values


def exact(t: torch.Tensor) -> list:
    """Max, Min and the float64 Mean and Norm (float64 sums of values and squares that are exact there)."""
    d = t.double()
    return [d.max().item(), d.min().item(), d.mean().item(), torch.linalg.vector_norm(d).item()]


def data(dtype: torch.dtype, n: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(n, generator=g, dtype=torch.float64) * 0.05 + 0.01) * scale).to(dtype)


@needs_native
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: NAME[d])
@pytest.mark.parametrize("n", [64, 65, 1000, 4099, 300_000])
def test_native_statistics_are_the_exact_values_rounded_once(dtype, n):
    t = data(dtype, n, n)
    got = fastreduce.summarize_memory(t.data_ptr(), n, NAME[dtype])
    ref = exact(t)
    assert got[:2] == ref[:2]
    if dtype == torch.float64:      # compensated float64 sums: within a few units of the last place
        assert got[2] == pytest.approx(ref[2], rel=4e-16, abs=1e-300) and got[3] == pytest.approx(ref[3], rel=4e-16)
    else:                           # float64 sums of exact float64 terms, then one rounding to the dtype
        assert got[2:] == [rounded(ref[2], dtype), rounded(ref[3], dtype)]


@needs_native
@pytest.mark.parametrize("dtype", LOW, ids=lambda d: NAME[d])
def test_low_precision_statistics_match_torch(dtype):
    """bf16/fp16 through the one-pass kernel: torch's Max/Min, and Mean/Norm within one unit of the dtype's
    last place of torch's float32-accumulated values (torch rounds twice and sums in float32)."""
    eps = torch.finfo(dtype).eps
    for n, scale in ((4096, 1.0), (70_000, 30.0), (1_000_003, 1e-3)):
        t = data(dtype, n, 7, scale)
        ours = _cpu_numbers(t, "float")
        ref = [v.item() for v in _reductions(t, "float")]
        assert ours[:2] == ref[:2]
        for a, b in zip(ours[2:], ref[2:]):
            assert abs(a - b) <= max(abs(b), torch.finfo(dtype).smallest_normal) * eps


@needs_native
def test_float16_subnormals_signed_zeros_and_extremes():
    values = [0.0, -0.0, 6e-8, -6e-8, 6.1e-5, -65504.0, 65504.0, 1e-7, 2 ** -24]
    t = torch.tensor(values * 10, dtype=torch.float16)
    got = fastreduce.summarize_memory(t.data_ptr(), t.numel(), "float16")
    assert got is None                           # Norm overflows float16: torch's path gives inf
    t = torch.tensor([v for v in values if abs(v) < 100] * 10, dtype=torch.float16)
    got = fastreduce.summarize_memory(t.data_ptr(), t.numel(), "float16")
    ref = exact(t)
    assert got[:2] == ref[:2] and got[2:] == [rounded(ref[2], torch.float16), rounded(ref[3], torch.float16)]
    tiny = torch.tensor([2 ** -24, -(2 ** -24), 0.0, 2 ** -23] * 20, dtype=torch.float16)
    got = fastreduce.summarize_memory(tiny.data_ptr(), tiny.numel(), "float16")
    assert got[:2] == [2 ** -23, -(2 ** -24)] and got[2] == rounded(2 ** -23 / 4, torch.float16)


@needs_native
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: NAME[d])
@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
def test_non_finite_data_is_left_to_the_nan_aware_path(dtype, special):
    t = data(dtype, 300, 1)
    t[200] = special
    assert fastreduce.summarize_memory(t.data_ptr(), 300, NAME[dtype]) is None
    item = StatBatch().add(t)
    assert "Max_except_inf_nan" in item


@needs_native
def test_bfloat16_norm_overflow_takes_torchs_path():
    t = torch.full((100,), 3e38, dtype=torch.bfloat16)
    assert fastreduce.summarize_memory(t.data_ptr(), 100, "bfloat16") is None
    item = StatBatch().add(t)
    assert item["Norm"] == torch.linalg.vector_norm(t).item() == math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=lambda d: NAME[d])
def test_native_and_numba_give_the_same_bits(dtype):
    pytest.importorskip("numba")
    if native.load() is None:
        pytest.skip("no C compiler")
    numba_kernels = fastreduce._build_numba()
    out = (ctypes.c_double * 4)()
    where = ctypes.addressof(out)
    name = NAME[dtype]
    for seed, n in enumerate((64, 100, 1023, 5000, 100_001)):
        for scale in (1e-30, 1.0, 1e25):
            t = data(dtype, n, seed, scale)
            a = native.load()["msprobe_stats_" + {"float32": "f32", "float64": "f64"}[name]](t.data_ptr(), n, where)
            a_out = list(out)
            b = numba_kernels[name](t.data_ptr(), n, where)
            assert (a, a_out) == (b, list(out))


def _scalar_build(tmp_path: Path) -> ctypes.CDLL:
    """The kernel's source built without optimisation, per-CPU clones or the hand-written vector loop."""
    cc = native._compiler()
    src = tmp_path / "k.c"
    src.write_text(native.SOURCE)
    lib_path = tmp_path / "k.so"
    subprocess.run([cc, "-O0", "-ffp-contract=off", "-DMSPROBE_NO_CLONES", "-fPIC", "-shared", "-o", str(lib_path),
                    str(src), "-lm"], check=True, capture_output=True)
    return ctypes.CDLL(str(lib_path))


@needs_native
def test_the_same_bits_without_vectors_or_optimisation(tmp_path):
    """Unoptimised scalar code (no vector lanes at all) gives exactly what the cached, vectorised build gives:
    the numbers depend on neither the vector width nor the compiler's choices."""
    plain = _scalar_build(tmp_path)
    fast = native.load()
    out = (ctypes.c_double * 4)()
    where = ctypes.addressof(out)
    for dtype, suffix in ((torch.float32, "f32"), (torch.float64, "f64"), (torch.bfloat16, "bf16"),
                          (torch.float16, "f16")):
        fn = getattr(plain, "msprobe_stats_" + suffix)
        fn.restype, fn.argtypes = ctypes.c_int, (ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
        for n in (64, 77, 4096 + 5, 250_000):
            t = data(dtype, n, n, 3.0)
            ok = fn(t.data_ptr(), n, where)
            slow = list(out)
            assert (fast["msprobe_stats_" + suffix](t.data_ptr(), n, where), list(out)) == (ok, slow)


@needs_native
def test_bfloat16_vector_loop_gives_the_scalar_loops_bits_on_any_bit_pattern(tmp_path):
    """Every finite bfloat16 bit pattern (subnormals, signed zeros, the largest values), lengths around the
    64-byte blocks and starts off the block boundary: the cached build (on an AVX-512 CPU the hand-written loop
    with its unpacked lane order and fused square additions) returns exactly the unoptimised scalar loop's
    status and numbers."""
    plain = _scalar_build(tmp_path)
    slow = plain.msprobe_stats_bf16
    slow.restype, slow.argtypes = ctypes.c_int, (ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
    vector = native.load()["_lib"].msprobe_stats_vector()
    fast = native.load()["msprobe_stats_bf16"]
    out = (ctypes.c_double * 4)()
    where = ctypes.addressof(out)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 16, 200_000, dtype=np.uint16)
    bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF          # inf and NaN patterns made finite
    # 70 binades with both signs: the float64 sums round and cancel, so a lane out of place changes the bits
    wide = (bits & 0x807F) | (rng.integers(100, 170, bits.size, dtype=np.uint16) << 7)
    ranges = {"any finite": bits, "subnormal and zero": bits & 0x807F, "one binade": (bits & 0x807F) | 0x3F80,
              "large": (bits & 0x80FF) | 0x7E00, "wide": wide}
    checked = overflowed = 0
    for label, pool in ranges.items():
        pool = np.ascontiguousarray(pool)
        for n in (64, 65, 95, 96, 97, 127, 128, 1000, 4099, 65_536 + 33, 150_000):
            for start in (0, 1, 7, 31):
                address = pool.ctypes.data + 2 * start
                ok = slow(address, n, where)
                expected = (ok, list(out))
                assert (fast(address, n, where), list(out)) == expected, (label, n, start)
                checked += 1
                overflowed += not ok
    assert checked == 5 * 11 * 4 and overflowed        # the large values overflow the Norm: status compared too
    # 2**60, -2**60 and 1 among zeros: whether the 1 survives depends on which lanes the three fall in and
    # in which order the lanes are added, so an element in the wrong lane changes the Mean
    spikes = np.zeros(200, dtype=np.uint16)
    means = set()
    for trial in range(600):
        n = (64, 109, 160)[trial % 3]
        spikes[:] = 0
        a, b, c = rng.choice(n, 3, replace=False)
        spikes[a], spikes[b], spikes[c] = 0x5D80, 0xDD80, 0x3F80
        ok = slow(spikes.ctypes.data, n, where)
        expected = (ok, list(out))
        assert (fast(spikes.ctypes.data, n, where), list(out)) == expected, (n, a, b, c)
        means.add(out[2])
    assert len(means) > 3                               # the 1 was lost in some orders and kept in others
    assert vector in (0, 1)


def _in_child(code: str, env: dict) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


CHILD = ("import json; from dumpers.torch_dump import fastreduce, native; "
         "print(json.dumps([fastreduce.backend(), native.library_path()]))")


def test_compiled_once_into_a_private_cache_directory_and_reused(tmp_path):
    if native._compiler() is None:
        pytest.skip("no C compiler")
    cache = tmp_path / "cache"
    backend, path = json.loads(_in_child(CHILD, {"MSPROBE_CACHE_DIR": str(cache)}))
    assert backend == "native" and Path(path).parent == cache and Path(path).is_file()
    assert stat.S_IMODE(cache.stat().st_mode) & 0o077 == 0
    stamp = Path(path).stat().st_mtime_ns
    assert json.loads(_in_child(CHILD, {"MSPROBE_CACHE_DIR": str(cache)}))[0] == "native"
    assert Path(path).stat().st_mtime_ns == stamp                  # loaded, not compiled again
    assert [p.name for p in cache.iterdir()] == [Path(path).name]  # no temporary files left


def test_a_cache_directory_others_may_write_is_not_trusted(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    code = ("import json; from dumpers.torch_dump import native; "
            "print(json.dumps([native.load() is None, native.library_path()]))")
    refused, path = json.loads(_in_child(code, {"MSPROBE_CACHE_DIR": str(cache)}))
    assert refused and not Path(path).exists()


def test_without_a_compiler_numba_or_the_plain_path_serves(tmp_path):
    env = {"MSPROBE_CACHE_DIR": str(tmp_path / "empty"), "CC": "no-such-compiler", "PATH": str(tmp_path)}
    code = ("import json, torch; from dumpers.torch_dump import fastreduce; from dumpers.torch_dump.stats import "
            "StatBatch; torch.manual_seed(0); t = torch.randn(5000).to(torch.bfloat16); b = StatBatch(); "
            "item = b.add(t); print(json.dumps([fastreduce.backend(), item['Max'], item['Min']]))")
    backend, mx, mn = json.loads(_in_child(code, env))
    assert backend in ("numba", None)
    torch.manual_seed(0)
    t = torch.randn(5000).to(torch.bfloat16)
    assert [mx, mn] == [t.max().item(), t.min().item()]


def test_disabled_by_the_environment():
    assert json.loads(_in_child(CHILD, {"MSPROBE_DUMP_JIT": "0"}))[0] is None


def test_the_debugger_loads_the_kernel_when_built(tmp_path):
    code = ("import json; from dumpers.torch_dump import fastreduce; from dumpers.torch_dump import PrecisionDebugger; "
            "before = fastreduce._kernels is None; "
            f"PrecisionDebugger(task='statistics', dump_path={str(tmp_path / 'dump')!r}, level='L1'); "
            "print(json.dumps([before, fastreduce._kernels is not None]))")
    assert json.loads(_in_child(code, {})) == [True, True]


def test_numpy_entry_point_agrees_with_the_memory_entry_point():
    if not fastreduce.kernels():
        pytest.skip("no one-pass kernel")
    a = np.random.default_rng(3).standard_normal(3000).astype(np.float32)
    assert fastreduce.summarize(a) == fastreduce.summarize_memory(a.ctypes.data, a.size, "float32")
    assert fastreduce.summarize(a[::2]) == fastreduce.summarize(np.ascontiguousarray(a[::2]))
    assert fastreduce.summarize(a.astype(np.int32)) is None
