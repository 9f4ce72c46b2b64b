"""Statistics an output has by construction (pytest_msprobe.precision.expected_error_stats): a softmax's input
gradient sums to zero, so its Mean is 0 up to the kernel's and the dump's own rounding, whatever the incoming
gradient; held against torch's own kernels."""
from __future__ import annotations

import math

import pytest
import torch

from pytest_msprobe.precision.expected_error_stats import conserved_mean


def test_only_the_input_gradient_of_the_softmax_family_is_fixed():
    kw = {"grad_max_abs": 1.0, "output_max_abs": 1.0, "numel": 64}
    assert conserved_mean("Functional.softmax.0", "torch.float32", direction="forward", index=0, **kw) is None
    assert conserved_mean("Functional.softmax.0", "torch.float32", direction="backward", index=1, **kw) is None
    assert conserved_mean("Functional.silu.0", "torch.float32", direction="backward", index=0, **kw) is None
    assert conserved_mean("log_softmax", "bf16", direction="backward", index=0, grad_max_abs=math.inf,
                          output_max_abs=1.0, numel=64) is None
    value, allowance = conserved_mean("cross_entropy", "torch.bfloat16", direction="backward", index=0, **kw)
    # 5 ulps of float32 on terms up to 2 max|g|, the bf16 rounding of each element, the Mean's own sum of 64
    assert value == 0.0
    assert allowance == pytest.approx(5 * 2.0 ** -24 * 2 + 2.0 ** -8 + (32 + 6) * 2.0 ** -24)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("api", ["softmax", "log_softmax"])
def test_a_correct_kernel_stays_within_and_a_scaled_gradient_does_not(dtype, api):
    gen = torch.Generator().manual_seed(0)
    for rows, n in ((16, 8), (64, 128), (8, 1024)):
        x = (torch.randn(rows, n, generator=gen) * 3).to(dtype).requires_grad_()
        g = torch.randn(rows, n, generator=gen).to(dtype)
        y = getattr(torch.nn.functional, api)(x, dim=-1)
        (dx,) = torch.autograd.grad(y, x, g)
        mean = float(dx.float().mean())
        value, allowance = conserved_mean(api, str(dtype), direction="backward", index=0,
                                          grad_max_abs=float(g.float().abs().max()),
                                          output_max_abs=float(dx.float().abs().max()), numel=dx.numel())
        assert abs(mean - value) <= allowance, (rows, n, mean, allowance)
        if dtype == torch.float32 and n == 8:
            # short rows (attention over 8 tokens, as the compare fixtures): the fault's shift of the Mean is far
            # beyond; over long rows the shift is a sum of many small terms of both signs and may not be
            faulty = dx.clone()
            faulty.view(-1)[::2] *= 1.0625          # the fault the compare fixtures plant
            assert abs(float(faulty.mean()) - float(dx.mean())) > 2 * allowance
