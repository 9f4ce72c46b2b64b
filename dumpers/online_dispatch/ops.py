"""Which aten ops online dispatch compares, and why it skips the others (spec online-dispatch.md section 5).

Every table here is data. A skipped op still runs on its device and still gets a CSV row that names the
reason, so nothing executed in a ``with`` block silently disappears.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# msprobe 1.1.0 ``aten_ops_blacklist`` (de-duplicated): creation/random, copy/view/layout, device-specific
# kernels with known legitimate mismatches, and two in-place ops.
ATEN_OPS_BLACKLIST = frozenset({
    "empty", "new_empty", "new_empty_strided", "new_full", "new_ones", "new_zeros", "ones", "ones_like",
    "zeros", "zeros_like", "zero", "zero_", "rand", "rand_like", "randint", "randint_like", "randn",
    "randn_like", "randperm", "scalar_tensor",
    "_to_copy", "to", "clone", "contiguous", "copy_", "detach", "lift_fresh", "_unsafe_view", "view",
    "permute", "transpose", "select", "unbind", "split_with_sizes", "_pin_memory", "_local_scalar_dense",
    "_cudnn_rnn", "cudnn_batch_norm", "cudnn_batch_norm_backward", "native_batch_norm_backward",
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max", "npu_rotary_mul",
    "npu_dtype_cast", "allreduce_",
    "add_", "index_put_",
})

# Ops whose output is uninitialised memory or whose job is to change storage: a re-run cannot agree.
UNINITIALISED = frozenset({
    "empty_like", "empty_strided", "empty_permuted", "new_empty", "resize_", "resize_as_", "set_",
})

# Random ops without a ``Generator`` argument in their schema (those with one are found from the schema).
RANDOM = frozenset({
    "bernoulli", "bernoulli_", "uniform_", "normal", "normal_", "exponential_", "geometric_", "cauchy_",
    "log_normal_", "random_", "multinomial", "poisson", "rrelu_with_noise", "rrelu_with_noise_",
    "randint", "randn", "rand", "randperm", "native_dropout", "dropout", "feature_dropout",
    "alpha_dropout", "feature_alpha_dropout", "fused_dropout", "_fused_dropout",
})

SKIP_LIST = "in the skip list (aten_ops_blacklist)"
VIEW = "view op: its output aliases an input, nothing is computed"
UNINIT = "output is uninitialised memory or a storage change"
RANDOM_OP = "random op: a re-run draws different numbers"
META = "meta tensor: there is no data to compare"
NO_NAME = "cannot parse the op name"


def split_name(func: Any) -> tuple[str, str, str]:
    """``(namespace, packet, overload)`` of an OpOverload, e.g. ``("aten", "add", "Tensor")``."""
    name = getattr(func, "__name__", "")
    if "." not in name:
        raise ValueError(f"Please check the func name {name}!")
    packet, overload = name.split(".", 1)
    namespace = getattr(func, "namespace", None) or "aten"
    return namespace, packet, overload


def qualified_name(namespace: str, packet: str, overload: str) -> str:
    """``"ns::packet.overload"``, the key of bench overrides and of worker-side op resolution."""
    return f"{namespace}::{packet}.{overload}"


def resolve(qualname: str) -> Any:
    """The OpOverload called ``"ns::packet.overload"`` in this process (AttributeError if unknown)."""
    namespace, rest = qualname.split("::", 1)
    packet, overload = rest.split(".", 1)
    return getattr(getattr(getattr(__import__("torch").ops, namespace), packet), overload)


def is_dropout(packet: str) -> bool:
    """Dropout-family ops are judged by the share of zeros (spec section 6.1)."""
    return "dropout" in packet


def is_random(func: Any, packet: str) -> bool:
    """True for ops that draw random numbers (listed, or with a Generator argument)."""
    if packet in RANDOM:
        return True
    schema = getattr(func, "_schema", None)
    if schema is None:
        return False
    return any("Generator" in str(arg.type) for arg in schema.arguments)


def is_mutable(func: Any) -> bool:
    """True for in-place and out= overloads (their schema writes to an argument)."""
    schema = getattr(func, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def tensor_reason(leaves: Iterable[Any]) -> str | None:
    """Why tensors among ``leaves`` cannot be compared (meta, sparse, subclasses), or None."""
    import torch

    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            continue
        if leaf.is_meta or leaf.device.type == "meta":
            return META
        if leaf.layout != torch.strided:
            return f"non-dense tensor (layout {leaf.layout}): no CPU copy rule"
        if type(leaf) not in (torch.Tensor, torch.nn.Parameter):
            return f"tensor subclass {type(leaf).__name__}: no CPU copy rule"
    return None


def skip_reason(func: Any, packet: str, leaves: list, skip_ops: frozenset) -> str | None:
    """Why this call is not re-run on the CPU, or None when it is compared."""
    if packet in skip_ops:
        return SKIP_LIST
    if getattr(func, "is_view", False):
        return VIEW
    if packet in UNINITIALISED:
        return UNINIT
    if is_random(func, packet) and not is_dropout(packet):
        return RANDOM_OP
    return tensor_reason(leaves)
