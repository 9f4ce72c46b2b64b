"""The compiled metric pass (dumpers.metrics_kernel / metrics_engine) against the plain numpy reference
(tests/metrics_reference.py): the same numbers bit for bit, for every dtype pair of spec 1.7, inf/nan,
signed zeros, subnormals and chunk edges."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from metrics_reference import RATIOS, reference

from dumpers import metrics_engine as engine

ROOT = Path(__file__).resolve().parents[1]
# (bench, device, ULP compute type) of the prepared arrays: fp32 output, bf16 (both float32), fp16,
# fp64, fp16 type_as, conv's float32 bench
PAIRS = [(np.float64, np.float32, "float64"), (np.float32, np.float32, "float32"),
         (np.float32, np.float16, "float32"), (np.float64, np.float64, "float64"),
         (np.float16, np.float16, "float32")]
ULP = {"float64": (-126, 23, "float64", 32.0), "float32": (-14, 10, "float32", 1.0)}


def same(a, b) -> bool:
    """Equal value and scalar type (NaN equals NaN)."""
    if isinstance(a, (str, type(None))) or isinstance(b, (str, type(None))):
        return a == b
    if type(a) is not type(b):
        return False
    return (math.isnan(a) and math.isnan(b)) or a == b


def check(b: np.ndarray, d: np.ndarray, ulp: str, chunk: int, agree: bool = True) -> None:
    args = {"eps": float(np.finfo(b.dtype).eps), "binary": True, "small_value": (1e-3, 1e-5),
            "absolute": (1e-3, 1e-3, 1e-5, float(np.finfo(d.dtype).max)), "ulp": ULP[ulp]}
    want = reference(b, d, agree_nonfinite=agree, chunk=chunk, **args)
    groups = engine.Groups(ratios=RATIOS, agree_nonfinite=agree, **args)
    if b.size == 0:
        with pytest.raises(ValueError, match="zero-size"):
            engine.run(b, d, groups, chunk)
        return
    got = engine.run(b, d, groups, chunk)
    assert_as_reference(got, want)


def assert_as_reference(got, want):
    """The engine's metric set equals the reference's figures, key by key (a NaN cosine fails alike)."""
    for key, value in want.items():
        if key == "cosine":
            assert (got.cosine.value, got.cosine.passed) == value or (
                math.isnan(value[0]) and math.isnan(got.cosine.value) and not got.cosine.passed), key
        else:
            assert same(got.values[key], value), (key, got.values[key], value)


special = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, 6e-8, 65504.0, 70000.0, 3e38])


@st.composite
def pair_arrays(draw):
    tb, td, ulp = draw(st.sampled_from(PAIRS))
    n = draw(st.integers(0, 300))
    values = st.one_of(st.floats(-1e5, 1e5, allow_nan=False, width=64), special)
    x = draw(hnp.arrays(np.float64, n, elements=values))
    noise = draw(hnp.arrays(np.float64, n, elements=st.one_of(st.floats(-1e-2, 1e-2), special)))
    with np.errstate(all="ignore"):
        return x.astype(tb), (x * (1 + noise)).astype(td), ulp


@settings(max_examples=150, deadline=None)
@given(pair_arrays(), st.sampled_from([1 << 16, 7, 64]), st.booleans())
def test_kernel_equals_the_numpy_reference(arrays, chunk, agree):
    b, d, ulp = arrays
    check(b, d, ulp, chunk, agree)


@pytest.mark.parametrize("tb, td, ulp", PAIRS)
@pytest.mark.parametrize("n", [1, 2, 65535, 65536, 65537, 3 * 65536 + 5])
def test_chunk_edges_and_several_chunks(tb, td, ulp, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-6, 6, n))
    b, d = x.astype(tb), (x * (1 + 1e-3 * rng.standard_normal(n))).astype(td)
    if n > 10:
        d[3], b[7], d[9], b[9] = np.inf, np.nan, -np.inf, -np.inf
    check(b, d, ulp, 1 << 16)


def test_extreme_magnitudes_take_the_normalised_dot_products():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(3 * 65536 + 17) * 1e200
    check(x, x * (1 + 1e-6 * rng.standard_normal(x.size)), "float64", 1 << 16)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.bool_])
def test_integer_and_bool_binary_rate(dtype):
    rng = np.random.default_rng(1)
    b = rng.integers(0, 2 if dtype is np.bool_ else 100, 70_001).astype(dtype)
    d = b.copy()
    d[::7] = (d[::7] + 1) if dtype is not np.bool_ else ~d[::7]
    assert engine.binary_error_rate(b, d) == np.count_nonzero(b != d) / b.size
    assert engine.binary_error_rate(b[:0], d[:0]) == "Nan"


def test_no_compiler_needed(tmp_path):
    """No C compiler on PATH (and ``CC`` pointing at nothing): the kernel serves, with the same numbers."""
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(sys.executable, bare / "python")
    code = ("import numpy as np; from dumpers import metrics_engine as e; "
            "x = np.linspace(-3, 3, 1000); r = e.run(x, x.astype(np.float32) * 1.001, "
            "e.Groups(eps=2.0 ** -52, ratios=(('a', 0.01),), small_value=(1e-6, 1e-9))); "
            "print(repr(float(r.cosine.value)), repr(r.values['rmse']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(bare), "CC": "/bin/false"})
    assert res.returncode == 0, res.stderr
    x = np.linspace(-3, 3, 1000)
    r = engine.run(x, x.astype(np.float32) * 1.001,
                   engine.Groups(eps=2.0 ** -52, ratios=(("a", 0.01),), small_value=(1e-6, 1e-9)))
    assert res.stdout.split() == [repr(float(r.cosine.value)), repr(r.values["rmse"])]


@pytest.mark.parametrize("tb, td, ulp", [PAIRS[0], PAIRS[1], PAIRS[2]])
def test_ulp_exponent_next_to_powers_of_two(tb, td, ulp):
    """Bench values just below, at and above powers of two (where the rounded log2 may reach the next
    integer), subnormals and the mantissa bound of the kernel's shortcut (m = 1.99)."""
    powers = np.ldexp(1.0, np.arange(-30, 30))
    below = np.nextafter(powers.astype(tb), tb(0)).astype(np.float64)
    values = np.concatenate([powers, below, powers * 1.99, powers * np.nextafter(1.99, 2), powers * 1.995,
                             [1e-40, -1e-42, 5e-324 if tb is np.float64 else 1e-45]])
    b = np.concatenate([values, -values]).astype(tb)
    with np.errstate(over="ignore"):     # a float16 device side overflows to inf beyond 65504, as a device would
        device = (b.astype(np.float64) * (1 + 1e-3)).astype(td)
    check(b, device, ulp, 1 << 16)


@pytest.mark.parametrize("tb, td, ulp", [PAIRS[0], PAIRS[1], PAIRS[2], PAIRS[3]])
def test_ulp_exponent_at_the_bounds_of_the_bit_shortcut(tb, td, ulp):
    """Mantissas at and next to the kernel's bounds (2 - 2**-14 for a float32 compute type, 2 - 2**-30 for
    float64), the largest mantissa below 2 at every exponent of the compute type (where the rounded log2 of
    a float32 value above 2**8 reaches the next integer), and exponents whose 2**(exponent_num - eb) leaves
    the normal range."""
    tc = np.dtype(ulp).type
    info = np.finfo(tc)
    bound = 2.0 - (2.0 ** -14 if ulp == "float32" else 2.0 ** -30)
    exps = np.arange(info.minexp, info.maxexp)
    top = np.ldexp(np.float64(np.nextafter(tc(2), tc(0))), exps)
    near = np.concatenate([np.ldexp(m, exps) for m in (bound, np.nextafter(bound, 2.0), np.nextafter(bound, 0.0))])
    with np.errstate(over="ignore"):
        b = np.concatenate([top, -top, near]).astype(tb)
        d = (b.astype(np.float64) * (1 - 1e-3)).astype(td)
    keep = np.isfinite(b) & np.isfinite(d) & (b != 0) & (d != 0)      # an inf would hide every other error
    check(b[keep], d[keep], ulp, 1 << 16)


@settings(max_examples=60, deadline=None)
@given(pair_arrays(), st.sampled_from([1 << 16, 7, 64]), st.booleans())
def test_bfloat16_bits_read_by_the_kernel_equal_the_float32_reference(arrays, chunk, agree):
    """A bfloat16 device output read as its bits gives the numbers of its float32 values, specials included."""
    b, d, _ = arrays
    with np.errstate(over="ignore"):      # float64 values beyond float32's range become inf, as a device's would
        b = b.astype(np.float32)
        d = (d.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)   # bfloat16 values
    assert np.array_equal(engine.Bf16BitsSource(d).read_bits(0, d.size).view(np.uint16).astype(np.uint32) << 16,
                          d.view(np.uint32))
    args = {"eps": 2.0 ** -8, "binary": True, "small_value": (1e-3, 1e-5),
            "absolute": (1e-3, 1e-3, 1e-5, 3.3895313892515355e38), "ulp": (-126, 7, "float32", 1.0)}
    if b.size == 0:
        return
    want = reference(b, d, agree_nonfinite=agree, chunk=chunk, **args)
    got = engine.run(b, engine.Bf16BitsSource(d), engine.Groups(ratios=RATIOS, agree_nonfinite=agree, **args), chunk)
    assert_as_reference(got, want)


@pytest.mark.parametrize("tb", [np.float32, np.float64])
def test_ulp_factor_outside_the_normal_range(tb):
    """bfloat16's ULP parameters (min_eb -126, 7 mantissa bits) on bench values near 2**-126, where
    2**(7 - eb) leaves float32's normal range, and on subnormals and zeros."""
    x = np.ldexp(np.linspace(1.0, 1.99, 9), np.arange(-130, -112)[:, None]).ravel()
    b = np.concatenate([x, -x, [0.0, -0.0, 1e-45, 3e-39]]).astype(tb)
    d = (b.astype(np.float64) * (1 + 1e-2)).astype(np.float32)
    args = {"eps": 2.0 ** -8, "ulp": (-126, 7, "float32", 1.0)}
    want = reference(b, d, **args)
    got = engine.run(b, d, engine.Groups(ratios=RATIOS, **args)).values
    for key in ("ulp_max", "ulp_mean", "ulp_above_threshold_ratio"):
        assert same(got[key], want[key]), (key, got[key], want[key])


def test_kept_relative_errors_in_order_whatever_the_masked_pattern():
    """Masked elements sparse, in runs, everywhere and nowhere, across whole blocks of the compaction and its
    tail: the kept relative errors keep their order (their sum is numpy's of the kept ones)."""
    rng = np.random.default_rng(5)
    n = 3 * 65536 + 300
    x = rng.standard_normal(n).astype(np.float32)
    for frac in (0.0, 0.0008, 0.05, 0.5, 1.0):
        b = x.copy()
        b[rng.random(n) < frac] = 1e-6                     # small values: masked in the benchmark group
        b[1000:1400] = 1e-7                                # a run across block borders
        check(b, (b * (1 + 1e-3 * rng.standard_normal(n))).astype(np.float32), "float32", 1 << 16)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 1000, 8191, 8192, 8193, 16385, 20001, 65535])
@pytest.mark.parametrize("bufsize", [8192, 4096])
def test_array_sums_are_numpys_bits(n, bufsize):
    """The chunk's sums the kernel makes (masked squares, kept relative errors, ULP errors) equal np.sum of the
    array, bit for bit, in float64, float32 and float16 (whose values the kernel holds in float32), for any
    numpy buffer size."""
    from dumpers import metrics_sums as S
    x = np.random.default_rng(n).standard_normal(n) * 30
    old = np.getbufsize()
    np.setbufsize(bufsize)
    try:
        for values, held, zero in ((x, x, np.float64(0)), (x.astype(np.float32), x.astype(np.float32), np.float32(0)),
                                   (x.astype(np.float16), x.astype(np.float16).astype(np.float32), np.uint16(0))):
            got = S.array_sum(held, n, np.getbufsize(), zero)
            assert got == values.sum(), (values.dtype, got, values.sum())
    finally:
        np.setbufsize(old)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 15, 17, 511, 512, 513, 8191, 8192, 8193, 8199, 20001, 65536])
@pytest.mark.parametrize("bufsize", [8192, 4096])
def test_dot_products_are_einsums_bits(n, bufsize):
    """The cosine's dot products of a chunk (d.b, d.d, b.b of the float64 values; scaled: divided by the
    maxima; agreed non-finite positions zeroed) equal np.einsum's of the float64 arrays, bit for bit, for every
    element type the kernel reads and any numpy buffer size."""
    import torch

    from dumpers import metrics_kernel as K
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-4, 4, n))
    y = x * (1 + 1e-2 * rng.standard_normal(n))
    if n > 9:
        x[[2, 5, 9]], y[[2, 5, 9]] = [np.inf, np.nan, 1.0], [np.inf, np.nan, np.nan]   # two agree, one does not
    brain = torch.from_numpy(x.astype(np.float32)).bfloat16()
    half = x.astype(np.float16)
    reads = [(y.astype(np.float32), x.astype(np.float32), x.astype(np.float32)), (y, x, x),
             (y, half.view(np.uint16), half), (y.astype(np.float32), brain.view(torch.int16).numpy(),
                                               brain.float().numpy())]
    old = np.getbufsize()
    np.setbufsize(bufsize)
    try:
        for b, d, d_values in reads:
            for scaled in (False, True):
                for agree in (False, True):
                    b64, d64 = b.astype(np.float64), d_values.astype(np.float64)
                    if agree:
                        with np.errstate(invalid="ignore"):
                            zero = ~np.isfinite(d64 - b64) & ((np.isnan(d64) & np.isnan(b64)) | (d64 == b64))
                        b64[zero] = d64[zero] = 0.0
                    sd, sb = (3.0, 0.7) if scaled else (1.0, 1.0)
                    b64, d64 = b64 / sb, d64 / sd
                    want = [float(np.einsum("i,i->", d64, b64)), float(np.einsum("i,i->", d64, d64)),
                            float(np.einsum("i,i->", b64, b64))]
                    par = np.zeros(K.N_PAR)
                    par[K.P_SCALE_D], par[K.P_SCALE_B] = sd, sb
                    flags = K.DOTS | (K.SCALED if scaled else 0) | (K.AGREE if agree else 0)
                    out = np.zeros(3)
                    K.chunk_pass(b, d, flags, par, np.empty(0, np.float32 if b.dtype == np.float32 else b.dtype),
                                 np.empty(0, np.float32 if b.dtype == np.float32 else b.dtype),
                                 np.empty(0, np.float32), np.zeros(K.N_CNT, np.int64), np.full(K.N_MAX, -1.0),
                                 np.empty(0), out)
                    got = out.tolist()
                    assert all(g == w or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want)), \
                        (b.dtype, d.dtype, scaled, agree, got, want)
    finally:
        np.setbufsize(old)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 1000, 8191, 8192, 8193, 20000, 65539])
@pytest.mark.parametrize("bufsize", [8192, 4096])
def test_fused_float64_sums_are_numpys_bits(dtype, n, bufsize):
    """The kernel's float64 sums (of |x - y|, |x|, x) equal numpy's, bit for bit, for any buffer size."""
    from dumpers import metrics_sums as K
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * rng.uniform(0.1, 1e3, n)).astype(dtype)
    y = (x + rng.standard_normal(n) * 1e-3).astype(dtype)
    old = np.getbufsize()
    np.setbufsize(bufsize)
    try:
        run = np.getbufsize()
        assert K.float64_sum(x, y, K.T_ABS_DIFF, run) == float(np.abs(np.subtract(x, y, dtype=np.float64)).sum())
        assert K.float64_sum(x, x, K.T_ABS, run) == float(np.abs(x).sum(dtype=np.float64))
        assert K.float64_sum(x, x, K.T_VALUE, run) == float(x.sum(dtype=np.float64))
    finally:
        np.setbufsize(old)
    if n:
        assert K.abs_diff_max(x, y) == float(np.abs(np.subtract(x, y, dtype=np.float64)).max())
        x[n // 2] = np.nan
        assert math.isnan(K.abs_diff_max(x, y)) and all(math.isnan(v) for v in K.magnitude_sums(x, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 5, 8, 100, 129, 8193, 20000])
@pytest.mark.parametrize("bufsize", [8192, 4096])
def test_fused_magnitude_sums_are_numpys_bits(dtype, n, bufsize):
    """One read gives numpy's float64 sums of x**2, |x| and x and max |x|, bit for bit, for any buffer size;
    float16 and bfloat16 read as their bits give the figures of their values."""
    import torch

    from dumpers import metrics_sums as K
    x = (np.random.default_rng(n).standard_normal(n) * 300).astype(dtype)
    old = np.getbufsize()
    np.setbufsize(bufsize)
    try:
        run = np.getbufsize()
        views = [(x, x)]
        if dtype is np.float32:
            half = x.astype(np.float16)
            brain = torch.from_numpy(x).bfloat16()
            views += [(half.view(np.uint16), half.astype(np.float32)),
                      (brain.view(torch.int16).numpy(), brain.float().numpy())]
        for read, v in views:
            got = K.magnitude_sums(read, run)
            want = (float(np.square(v, dtype=np.float64).sum()), float(np.abs(v).sum(dtype=np.float64)),
                    float(v.sum(dtype=np.float64)), float(np.abs(v).max()) if n else -1.0)
            assert got == want, (read.dtype, got, want)
    finally:
        np.setbufsize(old)


def test_no_compiled_function_calls_itself():
    """numba caches no recursive function safely: with a cold cache, processes compiling at once left a cached
    recursive kernel whose self-call was an unresolved symbol (a float16 magnitude sum crashed its process).
    Every compiled function of the project walks its recursion with an explicit stack instead."""
    import ast

    found = []
    for package in ("dumpers", "generators", "pytest_msprobe"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(fn, ast.FunctionDef):
                    continue
                decorators = [ast.unparse(d) for d in fn.decorator_list]
                if not any("jit" in d or "inline" in d or "overload" in d for d in decorators):
                    continue
                if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == fn.name
                       for c in ast.walk(fn)):
                    found.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}")
    assert not found, found
