"""The figures of the Error / Expected column that the metric pass measures while it reads an output
(:class:`dumpers.metrics_engine.Figures`, summed in the pass's order) against the reference that reads the arrays
(``profile_array`` and ``observe`` of :mod:`pytest_msprobe.precision.expected_error_facts`, numpy's order),
within a bound derived from the summation length; and a call's multiples from the pass's figures against those
read from the tensors.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dumpers import format as fmt
from dumpers.metrics_engine import CHUNK
from pytest_msprobe.precision import compare
from pytest_msprobe.precision import expected_error as ee
from pytest_msprobe.precision.expected_error_facts import from_pass, profile_array
from pytest_msprobe.replay.expected import device_multiples
from pytest_msprobe.replay.result import Call

U = 2.0 ** -53


def _gamma(m: int) -> float:
    return m * U / (1.0 - m * U)


def bound(n: int, chunk: int) -> float:
    """How far two float64 sums of the same ``n`` terms may be apart, relative to the sum of the terms'
    magnitudes: the pass (any order inside a chunk, the chunk sums in order, a rounded term) and numpy's pairwise
    sum (runs of at most a buffer, in order: no more additions per term) each within gamma of that depth of the
    exact sum; plus a few roundings of the division by ``n`` and the square root."""
    depth = min(n, chunk) + math.ceil(n / chunk) + 1
    return 2.0 * _gamma(depth) + 4.0 * U


def _np(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()


def _pair(dtype: torch.dtype, n: int, nonfinite: str, seed: int) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    bench = torch.randn(n, generator=gen, dtype=wide) * torch.exp(3 * torch.randn(n, generator=gen, dtype=wide))
    device = (bench * (1 + 1e-2 * torch.randn(n, generator=gen, dtype=wide))).to(dtype)
    if nonfinite in ("agreed", "mismatch"):
        bench[5], device[5] = math.nan, math.nan
        bench[n // 2], device[n // 2] = math.inf, math.inf
        bench[n - 1], device[n - 1] = -math.inf, -math.inf
    if nonfinite == "mismatch":
        device[7], bench[n // 3] = math.inf, math.nan
    if nonfinite == "overflow":                 # finite on both sides, their float64 difference is not
        bench[3], device[3] = 1e308, -1e308
    return bench, device


def _close(got: float, want: float, scale: float, rel: float) -> bool:
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= rel * scale


CASES = [(torch.bfloat16, "finite"), (torch.bfloat16, "agreed"), (torch.bfloat16, "mismatch"),
         (torch.float16, "finite"), (torch.float16, "agreed"), (torch.float32, "finite"),
         (torch.float32, "mismatch"), (torch.float64, "finite"), (torch.float64, "overflow")]
SIZES = [(1, CHUNK), (300, CHUNK), (2 * CHUNK + 77, CHUNK), (5003, 1000)]      # (elements, chunk)


@pytest.mark.parametrize("dtype,nonfinite,n,chunk", [(t, k, n, c) for t, k in CASES for n, c in SIZES
                                                     if n > 10 or k == "finite"])
def test_the_pass_figures_are_the_references_within_the_summation_bound(dtype, nonfinite, n, chunk):
    bench, device = _pair(dtype, n, nonfinite, seed=n + len(nonfinite))
    row = compare.compare_output("linear", "x", bench, device)
    figures = row.figures
    if chunk != CHUNK:                         # the same pass in small chunks: the chunk sums added in order
        bf16 = dtype == torch.bfloat16           # the sources the checker hands the pass (1.7)
        bs, ds = (compare._source(t, compare._np_dtype_of(t, bf16)) for t in (bench, device))
        figures = compare.float_metrics(bs, ds, device_dtype=str(dtype), chunk=chunk, figures=True).figures
    assert figures is not None and figures.n == n
    profile, observed = from_pass(figures, tuple(device.shape))
    want, seen = profile_array(device), ee.observe(_np(device), _np(bench))
    rel = bound(n, chunk)
    assert (profile.numel, profile.shape, profile.max_abs) == (want.numel, want.shape, want.max_abs)
    assert _close(profile.rms, want.rms, want.rms, rel)
    assert _close(profile.mean_abs, want.mean_abs, want.mean_abs, rel)
    assert _close(profile.mean, want.mean, want.mean_abs, rel)          # a sum of values: relative to |values|
    assert (observed.max_abs, observed.mismatched_nonfinite) == (seen.max_abs, seen.mismatched_nonfinite)
    assert _close(observed.mean_abs, seen.mean_abs, seen.mean_abs, rel)
    if nonfinite == "mismatch":
        assert observed == ee.Observed(math.inf, math.inf, 2)
    if nonfinite == "overflow":
        assert observed.max_abs == observed.mean_abs == math.inf and observed.mismatched_nonfinite == 0


def test_figures_only_when_asked():
    bench, device = _pair(torch.bfloat16, 100, "finite", 1)
    bs, ds = compare._source(bench, np.dtype(np.float32)), compare._source(device, np.dtype(np.float32))
    assert compare.float_metrics(bs, ds, device_dtype="torch.bfloat16").figures is None
    assert compare.float_metrics(bs, ds, device_dtype="torch.bfloat16", figures=True).figures.n == 100


def test_multiples_from_the_pass_figures_are_those_from_the_tensors():
    """A bf16 linear with a backward: every output and gradient row takes its figures from the pass, and its
    multiple is the one the tensors give, up to the figures' summation bound (the multiple is a ratio of
    quantities linear in them, the expected error the root of a sum of their squares: twice the bound)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 96, generator=gen).bfloat16()
    w = (torch.randn(48, 96, generator=gen) / 10).bfloat16()
    g = torch.randn(64, 48, generator=gen).bfloat16()
    call = Call("Functional.linear.0", "linear", torch.nn.functional.linear, [x, w], {}, g, None, 0)

    def side(dtype: torch.dtype) -> tuple:
        a, b = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
        out = torch.nn.functional.linear(a, b)
        out.backward(g.to(dtype))
        return out.detach(), [a.grad, b.grad]

    (bench_out, bench_grads), (device_out, device_grads) = side(torch.float32), side(torch.bfloat16)
    rows = (compare.compare_outputs("linear", lambda i: fmt.output_row_name(call.name, fmt.FORWARD, i), bench_out,
                                    device_out)
            + compare.compare_outputs("linear", lambda i: fmt.output_row_name(call.name, fmt.BACKWARD, i),
                                      bench_grads, device_grads))
    assert len(rows) == 3 and all(r.figures is not None for r in rows)
    measured = device_multiples(call, bench_out, device_out, bench_grads, device_grads, rows)
    read = device_multiples(call, bench_out, device_out, bench_grads, device_grads)
    assert set(measured) == set(read) == {r.name for r in rows}
    for name, m in measured.items():
        assert m > 0 and abs(m - read[name]) <= 2 * bound(x.numel(), CHUNK) * read[name], name
