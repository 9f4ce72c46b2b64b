"""Replay fidelity: exact / close / differs, and the integer ULP distance done the numpy.testing way."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_msprobe.precision import fidelity as F

FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _python_ulp(x: float, y: float, np_dtype) -> int:
    """Reference: the integer distance of two floats in plain Python integers (sign mirrored, -0.0 == 0.0)."""
    bits = np.finfo(np_dtype).bits

    def ordered(v):
        i = int(np.array([v], np_dtype).view(f"u{bits // 8}")[0])
        return (1 << (bits - 1)) - i if i >= 1 << (bits - 1) else i    # negatives mirrored below zero
    return abs(ordered(x) - ordered(y))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(sorted(FLOATS)))
def test_ulp_distance_is_the_integer_distance(data, dtype):
    np_dtype = FLOATS[dtype]
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=5))
    elements = st.floats(width=np.finfo(np_dtype).bits, allow_nan=False)
    a = data.draw(hnp.arrays(np_dtype, shape, elements=elements))
    b = data.draw(hnp.arrays(np_dtype, shape, elements=elements))
    dist = F.ulp_distance(a, b)
    assert dist.dtype == np.uint64 and dist.shape == a.shape
    for x, y, d in zip(a.reshape(-1), b.reshape(-1), dist.reshape(-1)):
        assert int(d) == _python_ulp(x, y, np_dtype)


@pytest.mark.parametrize("dtype", sorted(FLOATS))
def test_ulp_distance_agrees_with_numpy_testing(dtype):
    """numpy.testing.assert_array_max_ulp accepts our distance and refuses one less (small distances, where its
    float arithmetic is exact)."""
    np_dtype = FLOATS[dtype]
    a = np.array([1.0, -3.5, 0.0, 100.0, -0.0, 7e-3], np_dtype)
    b = a.copy()
    for k in range(1, 40):
        b[k % a.size] = np.nextafter(b[k % a.size], np_dtype(np.inf if k % 2 else -np.inf))
    b[2] = -np.nextafter(np_dtype(0), np_dtype(1)) * 3        # across zero: 3 steps below -0.0
    worst = int(F.ulp_distance(a, b).max())
    assert worst >= 3
    np.testing.assert_array_max_ulp(a, b, maxulp=worst, dtype=np_dtype)
    with pytest.raises(AssertionError):
        np.testing.assert_array_max_ulp(a, b, maxulp=worst - 1, dtype=np_dtype)


@settings(max_examples=40, deadline=None)
@given(x=st.floats(width=32, allow_nan=False, allow_infinity=False), steps=st.integers(0, 50),
       up=st.booleans())
@example(x=float(np.finfo(np.float32).max), steps=2, up=True)      # one step to inf, then no further
def test_k_nextafter_steps_are_k_ulp(x, steps, up):
    a = np.array([x], np.float32)
    b = a.copy()
    moved = 0
    with np.errstate(over="ignore"):
        for _ in range(steps):
            if np.isinf(b[0]):          # the largest float's next one is inf, and inf has no next one
                break
            b = np.nextafter(b, np.float32(np.inf if up else -np.inf))
            moved += 1
    assert int(F.ulp_distance(a, b)[0]) == moved
    # the ordering holds across zero: -0.0 and +0.0 are one value
    assert int(F.ulp_distance(np.array([-0.0], np.float32), np.array([0.0], np.float32))[0]) == 0


def test_bfloat16_is_measured_on_its_own_16_bits():
    a = torch.tensor([1.0, -2.0, 0.0], dtype=torch.bfloat16)
    b = torch.tensor([1.0078125, -2.0, -0.0], dtype=torch.bfloat16)     # 1 + 2**-7: the next bf16 after 1
    assert F.ulp_distance(a, b).tolist() == [1, 0, 0]
    fid = F.compare_tensors(a, b)
    assert fid.verdict == F.CLOSE and fid.text == "close (max 1 ulp, limit 1)"
    b2 = torch.tensor([1.015625, -2.0, 0.0], dtype=torch.bfloat16)
    fid = F.compare_tensors(a, b2)
    assert fid.verdict == F.DIFFERS and fid.max_ulp == 2 and fid.fraction == pytest.approx(1 / 3)


def test_nan_alike_and_nan_against_a_number():
    nan1 = torch.tensor([float("nan")])
    nan2 = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)    # another payload
    assert F.ulp_distance(nan1, nan2).tolist() == [0]
    assert F.compare_tensors(nan1, nan2).verdict == F.CLOSE
    assert F.compare_tensors(nan1, nan1.clone()).verdict == F.EXACT
    fid = F.compare_tensors(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0]))
    assert fid.verdict == F.DIFFERS and "NaN against a number at 1 element" in fid.text
    inf = torch.tensor([float("inf")])
    assert F.compare_tensors(inf, inf.clone()).verdict == F.EXACT


def test_close_limit_comes_from_the_dtype():
    assert F.close_ulp(torch.float32) == 4 and F.close_ulp("float64") == 4
    assert F.close_ulp(torch.float16) == 1 and F.close_ulp(torch.bfloat16) == 1
    assert F.close_ulp(torch.int64) == 0 and F.close_ulp(torch.bool) == 0
    x = torch.ones(10, dtype=torch.float16)
    one_up = torch.nextafter(x, torch.tensor(2.0, dtype=torch.float16))
    two_up = torch.nextafter(one_up, torch.tensor(2.0, dtype=torch.float16))
    assert F.compare_tensors(x, one_up).verdict == F.CLOSE
    assert F.compare_tensors(x, two_up).verdict == F.DIFFERS
    y = torch.ones(10)
    for _ in range(4):
        y = torch.nextafter(y, torch.tensor(2.0))
    assert F.compare_tensors(torch.ones(10), y).text == "close (max 4 ulp, limit 4)"


def test_differs_text_has_the_figures():
    rec = torch.linspace(1.0, 2.0, 200)
    rep = rec.clone()
    rep[:50] *= 1.005
    fid = F.compare_tensors(rep, rec)
    assert fid.verdict == F.DIFFERS and not fid.faithful
    assert fid.fraction == pytest.approx(0.25)
    assert fid.max_abs == pytest.approx(float((rep - rec).abs().max()))
    assert fid.text == f"differs: max abs diff {fid.max_abs:.3e}, max {fid.max_ulp} ulp, 25% of elements"


def test_large_tensor_goes_in_chunks(monkeypatch):
    monkeypatch.setattr(F, "CHUNK", 7)
    rec = torch.arange(100, dtype=torch.float64)
    rep = rec.clone()
    rep[93] += 0.5
    fid = F.compare_tensors(rep, rec)
    assert fid.max_abs == 0.5 and fid.fraction == pytest.approx(0.01)


def test_dtype_shape_integers_values_and_containers():
    assert F.compare_tensors(torch.zeros(2), torch.zeros(2, dtype=torch.float64)).text == \
        "differs: dtype float32, recorded float64"
    assert F.compare_tensors(torch.zeros(2, 3), torch.zeros(3, 2)).text == "differs: shape (2, 3), recorded (3, 2)"
    ints = F.compare_tensors(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 3, 9]))
    assert ints.text == "differs: max abs diff 5, 25% of elements" and ints.max_ulp is None
    assert F.compare_tensors(torch.tensor([True, False]), torch.tensor([True, False])).verdict == F.EXACT
    assert F.compare_values(3, 3).verdict == F.EXACT and F.compare_values(None, None).verdict == F.EXACT
    assert F.compare_values(3, 4).text == "differs: 3 replayed, 4 recorded"
    assert F.compare_values(torch.zeros(1), 0.0).verdict == F.DIFFERS
    a = torch.ones(3)
    close = torch.nextafter(a, torch.tensor(2.0))
    assert F.compare_values((a, torch.tensor([1])), (a.clone(), torch.tensor([1]))).verdict == F.EXACT
    assert F.compare_values([a, a], [a, close]).verdict == F.CLOSE
    mixed = F.compare_values([a, torch.tensor([1])], [close, torch.tensor([2])])
    assert mixed.text == "differs: [1] max abs diff 1, 100% of elements"
    assert F.compare_values({"x": a}, {"y": a}).verdict == F.DIFFERS
    assert F.compare_values([a], [a, a]).text == "differs: 1 elements, recorded 2"
    assert F.compare_values(np.ones(3, np.float32), torch.ones(3)).verdict == F.EXACT
    empty = F.compare_tensors(torch.zeros(0), torch.zeros(0))
    assert empty.verdict == F.EXACT


# --- judged by the expected error of the call ------------------------------------------------------------------
def _np(t):
    return t.detach().to(torch.float64).numpy()


def test_hf32_replay_of_a_conv_is_within_rounding():
    """The checker rounds fp32 conv inputs to HF32; the recording came from the unrounded ones."""
    from generators.inputs import _hf32
    from pytest_msprobe.precision import expected_error as ee
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 8, 12, 12, generator=gen), torch.randn(16, 8, 3, 3, generator=gen)
    recorded = torch.nn.functional.conv2d(x, w)
    replayed = torch.nn.functional.conv2d(_hf32(x), _hf32(w))
    assert F.compare_values(replayed, recorded).verdict == F.DIFFERS          # the ULP rule cries wolf
    expected = ee.expected_error("conv2d", torch.float32, [_np(_hf32(x)), _np(_hf32(w))], _np(replayed),
                                 input_dtype="hf32")
    fid = F.compare_expected(replayed, recorded, expected)
    assert fid.verdict == F.WITHIN and fid.text.startswith("within rounding (") and 0 < fid.multiple <= ee.WITHIN
    assert "x expected): max abs diff" in fid.text and "% of elements" in fid.text
    planted = F.compare_expected(replayed, recorded * 1.005, expected)
    assert planted.verdict == F.DIFFERS and planted.text.startswith("differs (") and planted.multiple > 4 * ee.WITHIN
    asked = []
    lazy = F.compare_expected(replayed, recorded, lambda: asked.append(1) or expected)
    assert lazy == fid and asked == [1]                       # an estimate made on request judges the same
    assert F.compare_expected(recorded, recorded.clone(), lambda: asked.append(2) or expected).text == "exact"
    assert asked == [1]                                       # bitwise equal: no estimate is made
    assert F.compare_expected(replayed, recorded, lambda: None) == F.compare_values(replayed, recorded)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduction_split_like_two_threads_is_within_rounding(dtype):
    """layer_norm's weight gradient summed over rows in one run or as two halves (two threads)."""
    from pytest_msprobe.precision import expected_error as ee
    gen = torch.Generator().manual_seed(1)
    x, g = torch.randn(4096, 64, generator=gen), torch.randn(4096, 64, generator=gen)
    xhat = torch.nn.functional.layer_norm(x, (64,))
    terms = (g * xhat).float()
    recorded = (terms[:2048].sum(0) + terms[2048:].sum(0)).to(dtype)
    replayed = terms.sum(0).to(dtype)
    w, b = torch.ones(64), torch.zeros(64)
    expected = ee.expected_error("layer_norm", dtype, [_np(x), _np(w), _np(b)], _np(replayed),
                                 kwargs={"normalized_shape": (64,)}, direction="backward", index=1, grad_output=_np(g))
    assert expected.reduction_length == 4096
    fid = F.compare_expected(replayed, recorded, expected)
    assert fid.verdict in (F.EXACT, F.WITHIN), fid.text
    # a fault: 0.5% in float32; in bf16, where torch sums these rows in bf16 itself (an error of several
    # percent over 4096 rows), ten times the threshold of the expected two-run difference
    rel = 0.005 if dtype == torch.float32 else \
        10 * ee.WITHIN * expected.pair().mean_abs / replayed.double().abs().mean().item()
    assert F.compare_expected(replayed, (replayed.double() * (1 + rel)).to(dtype), expected).verdict == F.DIFFERS


def test_without_an_estimate_the_ulp_rule_answers():
    a = torch.ones(4)
    assert F.compare_expected(a, a.clone(), None).text == "exact"
    assert F.compare_expected(a, torch.nextafter(a, torch.tensor(2.0)), None).verdict == F.CLOSE


def test_not_compared_cell():
    fid = F.not_compared("x.pt: not a tensor file")
    assert fid.text == "not compared: x.pt: not a tensor file" and fid.faithful


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("offset, length", [(0, 4096), (1, 4095), (3, 4097), (0, 3), (2, 1)])
def test_one_changed_bit_anywhere_is_seen(dtype, offset, length):
    """Bit equality holds whatever the length and storage offset (the bulk is compared in 8-byte words, the
    rest in the dtype's own width): one element one step away, at the start, inside or at the end, is seen,
    and so are -0 against +0 and a NaN of another payload."""
    base = torch.randn(offset + length, generator=torch.Generator().manual_seed(3)).to(dtype)[offset:]
    assert F.compare_tensors(base, base.clone()).verdict == F.EXACT
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}[dtype]
    for where in sorted({0, length // 2, length - 1}):
        changed = base.clone()
        changed.view(bits)[where] += 1
        assert F.compare_tensors(changed, base).verdict != F.EXACT, where
    zeros = torch.zeros(length, dtype=dtype)
    assert F.compare_tensors(-zeros, zeros).verdict != F.EXACT
