"""Statistics an API's output has by construction, whatever its inputs, and how far one correct run's printed
statistic may be from that value: a check that needs no estimate of how far the inputs differ.

The input gradient of a softmax (``dx = y (g - sum y g)``), a log_softmax (``dx = g - softmax sum g``) and a
cross entropy over logits (``(softmax - target) g``) sums to zero along the softmax dimension, for any incoming
gradient ``g``: its Mean is 0. A correct kernel misses that only by its own rounding: each element is a few
operations of the compute precision ``u_acc`` on terms no larger than ``max|g|`` in size (``|y_i| <= 1``, ``|sum
y g| <= max|g|``), up to ``SOFTMAX_ULPS u_acc 2 max|g|`` each, and is then rounded to the output dtype, up to
``u_out max|dx|``; the mean of the elements is no further from 0 than the largest element error. The dump's Mean
is itself a sum of the ``N`` elements in the compute precision, in blocks of ``REDUCTION_BLOCK`` then a tree: off by
at most ``(REDUCTION_BLOCK + log2 N) u_acc max|dx|`` (the worst case of that order). Two correct runs' Means
therefore differ by at most twice the sum, however far their incoming gradients differ, while a fault that scales
some elements of ``dx`` moves the Mean far beyond it (measured on a bf16 Llama step's float32 softmax backward:
Means of 1e-12 on GEMM noise, 1.6e-7 with the fault, against an allowance of 1.4e-8).

Pure, no I/O; part of :mod:`.expected_error`'s model (the same unit roundoffs and ulps).
"""
from __future__ import annotations

import math

from .expected_error import REDUCTION_BLOCK, SOFTMAX_ULPS, unit_roundoff
from .expected_error_facts import base_name

# input gradients that sum to zero along the reduced dimension (the first input's gradient, index 0)
ZERO_SUM_GRADIENTS = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "softmin", "cross_entropy"})


def conserved_mean(api_name: str, dtype: str, *, direction: str, index: int, grad_max_abs: float,
                   output_max_abs: float, numel: int) -> tuple | None:
    """``(value, allowance)``: the Mean this output has by construction and how far one correct run's Mean may
    be from it, or None when the API fixes no Mean of this output.

    Args:
        api_name: base or dump name of the API.
        dtype: the output's dtype.
        direction, index: a gradient row (``"backward"``) and which input's gradient it is.
        grad_max_abs: the largest magnitude of the incoming gradient.
        output_max_abs: the largest magnitude of this output.
        numel: its number of elements (the Mean's own sum).
    """
    if direction != "backward" or index != 0 or base_name(api_name) not in ZERO_SUM_GRADIENTS:
        return None
    if not (math.isfinite(grad_max_abs) and math.isfinite(output_max_abs)):
        return None
    u_out = unit_roundoff(dtype)
    u_acc = min(u_out, unit_roundoff("float32")) if u_out else 0.0
    summed = REDUCTION_BLOCK + math.log2(max(numel, 1))
    return 0.0, (SOFTMAX_ULPS * u_acc * 2.0 * abs(grad_max_abs) + u_out * abs(output_max_abs)
                 + summed * u_acc * abs(output_max_abs))
