"""The compiled clean-chunk kernel of the metric pass gives numpy's bits, value for value and type for type."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pytest_msprobe.precision import metrics as M
from pytest_msprobe.precision import metrics_engine as E
from dumpers import cbuild
from pytest_msprobe.precision import native_metrics as nm
from pytest_msprobe.precision import standards as S

nm.set_builder(cbuild.build)          # as the checker does (pytest_msprobe/replay/result.py)

needs_kernel = pytest.mark.skipif(nm.library() is None, reason="no C compiler: the metric kernel is unavailable")

F32, F64 = np.float32, np.float64
COMBOS = [(F32, F32), (F64, F64), (F64, F32), (F32, F64)]
SIZES = [1, 7, 65535, 65536, 65537, 3 * 65536 + 5]
SV = S.BENCHMARK_SMALL_VALUE_1_0_4[S.BF16]
ABSOLUTE = S.API_PRECISION_THRESHOLDS["add"][S.BF16]
GROUPS = {
    "legacy": {},
    "legacy+binary": {"binary": True},
    "legacy+benchmark": {"small_value": SV},
    "legacy+absolute": {"absolute": ABSOLUTE},
    "benchmark": {"legacy": False, "small_value": SV},
    "absolute": {"legacy": False, "absolute": ABSOLUTE},
    "everything": {"binary": True, "small_value": SV, "absolute": ABSOLUTE, "ulp": S.ULP_PARAMS[S.BF16]},
}


def _data(kind: str, n: int, tb, td, rng) -> tuple:
    """Bench and device arrays of one flavour (each chosen to reach a branch of the kernel or the engine)."""
    if kind == "noise":
        b = rng.standard_normal(n) * np.exp(rng.uniform(-12, 12, n))
        d = b * (1 + 1e-3 * rng.standard_normal(n))
        d[rng.random(n) < 0.05] = 0.0
        b[rng.random(n) < 0.05] = -0.0
    elif kind == "ties":                        # equal arrays, repeated values, signed zeros
        b = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.0 ** -12, 3.5]), n)
        d = b.copy()
        d[:: 3] = -d[:: 3]
    elif kind == "small":                       # mostly below the small-value thresholds: heavy compaction
        b = rng.standard_normal(n) * 2.0 ** -14
        d = b + rng.standard_normal(n) * 2.0 ** -20
        b[rng.random(n) < 0.2] *= 2.0 ** 20
    elif kind == "subnormal":
        tiny = float(np.finfo(td).smallest_subnormal)
        b = rng.integers(-40, 40, n) * tiny
        d = b + rng.integers(-2, 3, n) * tiny
    elif kind == "huge":                        # squares overflow; some differences overflow (non-clean chunks)
        top = float(np.finfo(np.result_type(tb, td)).max)
        b = rng.uniform(-1, 1, n) * top * 0.75
        d = b * (1 + 1e-3 * rng.standard_normal(n))
        d[rng.random(n) < 1e-4] = -top * 0.75
    elif kind == "bench_over":                  # bench beyond the device type's range in one chunk
        b = rng.standard_normal(n)
        d = b * (1 + 1e-3 * rng.standard_normal(n))
        if n > 3:
            b[n // 2] = 1e300 if tb == F64 else 3e38
    elif kind == "thresholds":                  # relative errors, |bench| and errors exactly on the thresholds
        tae = np.result_type(tb, td)
        eps = float(M.relative_eps(tb, S.BF16 if td == F32 else "torch.float64"))
        cuts = [*E.RATIO_THRESHOLDS.values(), ABSOLUTE.rtol]
        rel = [float(np.nextafter(tae.type(t), tae.type(t) * w)) for t in cuts for w in (0, 1, 2)]   # below, on, above
        b_vals = [0.0] * len(rel) + [SV.sv, -SV.sv, ABSOLUTE.sv, 0.0, 0.0, 0.0, 0.0]
        d_vals = [r * eps for r in rel] + [SV.sv, -SV.sv, ABSOLUTE.sv, SV.atol, -SV.atol, ABSOLUTE.atol,
                                           float(np.nextafter(tae.type(ABSOLUTE.atol), tae.type(1)))]
        pick = rng.integers(0, len(b_vals), n)
        b, d = np.array(b_vals)[pick], np.array(d_vals)[pick]
    elif kind == "nonfinite":
        b = rng.standard_normal(n)
        d = b + 1e-3 * rng.standard_normal(n)
        d[rng.random(n) < 1e-5] = np.nan
        b[-1] = np.inf
    else:
        raise AssertionError(kind)
    with np.errstate(over="ignore"):
        return b.astype(tb), d.astype(td)


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (float, np.floating)) and np.isnan(a):
        return bool(np.isnan(b))
    return bool(a == b) and repr(a) == repr(b)


def _metrics(native: bool, monkeypatch, b, d, **kw):
    monkeypatch.setenv("MSPROBE_METRICS_NATIVE", "1" if native else "0")
    taken = []
    real = E._Engine._native

    def spy(self, *args):
        ok = real(self, *args)
        taken.append(ok)
        return ok

    monkeypatch.setattr(E._Engine, "_native", spy)
    out = M.float_metrics(b, d, **kw)
    monkeypatch.undo()
    return out, taken


def _assert_identical(x, y, where: str) -> None:
    assert list(x.values) == list(y.values), where
    for key in x.values:
        assert _same(x.values[key], y.values[key]), f"{where} {key}: {x.values[key]!r} vs {y.values[key]!r}"
    assert (x.n, x.nonfinite_mismatch, x.nonfinite_agreed) == (y.n, y.nonfinite_mismatch, y.nonfinite_agreed)
    if x.cosine is None:
        assert y.cosine is None
    else:
        assert _same(x.cosine.value, y.cosine.value) and x.cosine[1:] == y.cosine[1:], where


KINDS = ["noise", "ties", "thresholds", "small", "subnormal", "huge", "bench_over", "nonfinite"]


@needs_kernel
@pytest.mark.parametrize("tb,td", COMBOS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("n", SIZES)
def test_native_matches_numpy_bit_for_bit(tb, td, n, monkeypatch):
    rng = np.random.default_rng(n * 7 + COMBOS.index((tb, td)))
    device_dtype = S.BF16 if td == F32 else "torch.float64"
    kinds = KINDS if n <= 65537 else ["noise", "small", "nonfinite"]
    native_chunks = 0
    for kind in kinds:
        b, d = _data(kind, n, tb, td, rng)
        for name, group in GROUPS.items():
            where = f"{kind} {name}"
            want, taken = _metrics(False, monkeypatch, b, d, device_dtype=device_dtype, **group)
            assert not taken, "MSPROBE_METRICS_NATIVE=0 must keep the numpy path"
            got, taken = _metrics(True, monkeypatch, b, d, device_dtype=device_dtype, **group)
            native_chunks += sum(taken)
            _assert_identical(want, got, where)
    assert native_chunks > 0, "the comparison never reached the kernel"


@needs_kernel
@pytest.mark.parametrize("mode", ["numpy sums", "portable compaction"])
def test_fallback_modes_match_numpy(mode, monkeypatch):
    """The kernel without its ordered sums (numpy sums them) and without AVX-512 gives the same bits too."""
    flag = ctypes.c_int.in_dll(nm.library(), "msprobe_scalar_only")
    rng = np.random.default_rng(5)
    try:
        for tb, td in COMBOS:
            for kind in ("noise", "small", "ties"):
                b, d = _data(kind, 2 * 65536 + 17, tb, td, rng)
                for group in GROUPS.values():
                    want, _ = _metrics(False, monkeypatch, b, d, device_dtype=S.BF16, **group)
                    if mode == "numpy sums":
                        monkeypatch.setattr(nm, "_ordered_sums", False)
                    else:
                        flag.value = 1
                    got, taken = _metrics(True, monkeypatch, b, d, device_dtype=S.BF16, **group)
                    assert any(taken)
                    _assert_identical(want, got, f"{mode} {kind}")
    finally:
        flag.value = 0


@needs_kernel
@pytest.mark.parametrize("n", [1, 5, 8, 9, 127, 128, 129, 1000, 8191, 8192, 8193, 20000, 65536])
def test_ordered_sums_are_numpys(n):
    """The C copies of np.sum (pairwise, per 8192-element buffer) and of the float64 einsums agree bit for bit."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))
    y = x * (1 + 1e-2 * rng.standard_normal(n))
    lib = nm.library()
    for a in (x.astype(F32), x):
        assert nm.c_sum(lib, a) == float(np.sum(a))
    for b, d in ((y, x), (y.astype(F32), x.astype(F32)), (y, x.astype(F32)), (y.astype(F32), x)):
        b64, d64 = b.astype(F64), d.astype(F64)
        assert nm.c_dots(lib, b, d) == (float(np.einsum("i,i->", d64, b64)), float(np.einsum("i,i->", d64, d64)),
                                        float(np.einsum("i,i->", b64, b64)))
    assert nm.ordered_sums()


class _Skewed:
    """The kernel library with one of its ordered sums off by one unit in the last place at one length."""

    def __init__(self, lib, name, length):
        self._lib, self._name, self._length = lib, name, length

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if name != self._name:
            return fn

        def skewed(*args):
            if name.startswith("msprobe_pairwise"):
                got = fn(*args)
                return np.nextafter(got, np.inf) if args[1] == self._length else got
            fn(*args)
            if args[2] == self._length:
                out = np.ctypeslib.as_array(ctypes.cast(args[3], ctypes.POINTER(ctypes.c_double)), (3,))
                out[1] = np.nextafter(out[1], np.inf)
        return skewed


@needs_kernel
@pytest.mark.parametrize("name, length", [("msprobe_pairwise_f32", 8193), ("msprobe_pairwise_f64", 1),
                                          ("msprobe_dots_fd", 65536), ("msprobe_dots_dd", 129)])
def test_a_kernel_whose_sums_differ_from_numpys_anywhere_leaves_them_to_numpy(name, length):
    """The start-up check catches a single bit of difference at any one of its lengths, in any sum."""
    lib = nm.library()
    assert nm.sums_agree(lib)
    assert not nm.sums_agree(_Skewed(lib, name, length))


def test_switch_and_unsupported_dtypes(monkeypatch):
    monkeypatch.setenv("MSPROBE_METRICS_NATIVE", "0")
    assert not nm.enabled() and nm.kernel(np.dtype(F32), np.dtype(F32), nm.LEGACY, [0.0] * 9) is None
    monkeypatch.setenv("MSPROBE_METRICS_NATIVE", "1")
    assert nm.enabled()
    assert nm.kernel(np.dtype(np.float16), np.dtype(F32), nm.LEGACY, [0.0] * 9) is None
    assert nm.kernel(np.dtype(">f4"), np.dtype(F32), nm.LEGACY, [0.0] * 9) is None


CHILD = ("import json, numpy as np; from pytest_msprobe.precision import native_metrics as nm, metrics as M; "
         "from dumpers import cbuild; nm.set_builder(cbuild.build); "
         "lib = nm.library(); b = np.linspace(-1, 1, 70000, dtype=np.float32); "
         "print(json.dumps([lib is not None, nm.ordered_sums(), M.float_metrics(b, b * 1.001, "
         "device_dtype='torch.bfloat16').values['cosine']]))")


@needs_kernel
def test_workers_racing_to_compile_share_one_kernel(tmp_path):
    """Two processes compiling into an empty cache at once both end with a working kernel, one file installed."""
    env = {**os.environ, "MSPROBE_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert results[0] == results[1] and results[0][:2] == [True, True]
    assert [f.name for f in (tmp_path / "cache").iterdir()] == [os.path.basename(
        cbuild.library_path("metrics", nm.SOURCE, nm.FLAGS))]


def test_no_compiler_falls_back_to_numpy(tmp_path):
    env = {**os.environ, "MSPROBE_CACHE_DIR": str(tmp_path / "cache"), "CC": "no-such-compiler",
           "PATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[:2] == [False, False]


@needs_kernel
@pytest.mark.parametrize("tb,td", COMBOS, ids=lambda t: np.dtype(t).name)
def test_relative_error_on_the_absolute_rtol(tb, td, monkeypatch):
    """An rtol equal to a relative error that occurs: the strict comparison of 2.6 decides those elements."""
    rng = np.random.default_rng(11)
    b, d = _data("noise", 70000, tb, td, rng)
    tae = np.result_type(tb, td)
    eps = M.relative_eps(tb, S.BF16)
    with np.errstate(all="ignore"):
        re = np.abs(d.astype(tae) - b.astype(tae)) / (np.abs(b) + np.dtype(tb).type(eps)).astype(tae)
    big = np.flatnonzero(np.abs(b) > 1e-3)
    for j in big[:3]:
        threshold = S.AbsoluteThreshold(rtol=float(re[j]), sv=1e-3, atol=1e-5)
        want, _ = _metrics(False, monkeypatch, b, d, device_dtype=S.BF16, absolute=threshold)
        got, taken = _metrics(True, monkeypatch, b, d, device_dtype=S.BF16, absolute=threshold)
        assert all(taken)
        _assert_identical(want, got, f"rtol {threshold.rtol!r}")


def test_the_pure_core_compiles_nothing_without_a_builder(tmp_path):
    """precision/ does no I/O of its own: without the checker's builder the metrics run on numpy, nothing is built."""
    code = ("import json, numpy as np; from pytest_msprobe.precision import native_metrics as nm, metrics as M; "
            "b = np.linspace(-1, 1, 70000, dtype=np.float32); "
            "v = M.float_metrics(b, b * 1.001, device_dtype='torch.bfloat16').values['cosine']; "
            "print(json.dumps([nm.library() is None, v]))")
    env = {**os.environ, "MSPROBE_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0] is True
    assert not (tmp_path / "cache").exists()


def test_the_checker_hands_the_kernel_its_builder():
    from pytest_msprobe.replay import result

    nm.set_builder(None)
    result._compare.cache_clear()
    result._compare()
    assert nm._builder is cbuild.build
