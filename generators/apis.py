"""From a dump name's prefix and API name to the framework callable, refusing what is not safe to call.

A dump names the function to run, so the name is untrusted: only the namespaces msprobe wraps are looked
up, private names and functions that touch files, the network, global state or code loading are refused.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import re
from typing import Any, Callable

from dumpers import format as fmt

# prefix -> (module holding the callables, how to describe it)
TORCH_NAMESPACES = {
    "Functional": ("torch.nn.functional", "torch.nn.functional"),
    "Tensor": ("torch", "torch.Tensor"),
    "Torch": ("torch", "torch"),
    "Aten": ("torch", "torch.ops.aten"),
    "NPU": ("torch_npu", "torch_npu"),
}
REPLAYABLE_PREFIXES = tuple(TORCH_NAMESPACES)

# sub-namespaces a dotted Torch name may enter (torch.linalg.norm, torch.fft.fft, torch.special.erf)
TORCH_SUBMODULES = frozenset({"linalg", "fft", "special"})

# top-level torch names a dump may never make us call: files, code loading, global state
DENIED_NAMES = frozenset({
    "load", "save", "from_file", "hub", "compile", "jit", "manual_seed", "seed", "initial_seed",
    "use_deterministic_algorithms", "library", "ops", "classes", "utils", "backends", "cuda", "npu",
    "distributed", "multiprocessing", "export", "onnx", "package", "profiler", "serialization", "autograd",
    "testing", "overrides", "fx", "storage", "random", "get_rng_state", "fork_rng", "tofile",
    "register_hook", "register_post_accumulate_grad_hook", "share_memory_", "pin_memory", "backward",
})
DENIED_PREFIXES = {            # per namespace: private names, and torch.set_* (global state)
    "torch": ("set_", "_"), "torch.nn.functional": ("_",), "torch_npu": ("_",), "torch.Tensor": ("_",),
    "torch.ops.aten": (),      # aten ops are pure kernels; many are private-looking (_softmax, _to_copy)
}

# dunder methods of torch.Tensor that are plain operators (everything else with '__' is refused)
_OPERATORS = """add radd iadd sub rsub isub mul rmul imul div rdiv idiv truediv rtruediv itruediv floordiv
rfloordiv ifloordiv mod rmod imod pow rpow ipow matmul rmatmul imatmul and rand iand or ror ior xor rxor ixor
lshift rlshift ilshift rshift rrshift irshift eq ne lt le gt ge neg pos abs invert getitem setitem bool nonzero
float int len"""
OPERATOR_DUNDERS = frozenset(f"__{name}__" for name in _OPERATORS.split())

_NAME_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class UnknownApiError(LookupError):
    """An API name that cannot be resolved to a callable; the message says why."""


def prefix_problem(prefix: str) -> str | None:
    """Why PyTorch calls with this prefix cannot be replayed here, or None. Cheap: imports nothing."""
    if prefix in fmt.COMMUNICATION_PREFIXES:
        return f"communication op ({prefix}): it needs the other ranks and is not replayed on one process"
    if prefix == "NPU" and importlib.util.find_spec("torch_npu") is None:
        return "NPU custom op: torch_npu is not installed here, so it cannot run"
    if prefix not in REPLAYABLE_PREFIXES:
        return (f"prefix {prefix!r} is not replayable; only {', '.join(REPLAYABLE_PREFIXES)} calls are "
                "re-run (msprobe does the same)")
    return None


def _refused(name: str, namespace: str) -> str | None:
    if name in OPERATOR_DUNDERS and namespace == "torch.Tensor":
        return None
    if name.startswith("__") or name in DENIED_NAMES or name.startswith(DENIED_PREFIXES.get(namespace, ("_",))):
        return f"{namespace}.{name} is refused: a dump may not call private or side-effecting functions"
    return None


@functools.lru_cache(maxsize=4096)
def _resolve(prefix: str, api: str) -> Callable:
    try:
        module_name, namespace = TORCH_NAMESPACES[prefix]
    except KeyError:
        raise UnknownApiError(f"prefix {prefix!r} is not replayable; use one of "
                              f"{', '.join(REPLAYABLE_PREFIXES)}") from None
    parts = api.split(".")
    if not api or not all(_NAME_PART.match(p) for p in parts):
        raise UnknownApiError(f"{api!r} is not a valid API name")
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError:
        raise UnknownApiError(f"{module_name} is not installed here, so {prefix}.{api} cannot run") from None
    if prefix == "Aten":
        if len(parts) > 2:
            raise UnknownApiError(f"Aten name {api!r} must be 'op' or 'op.overload'")
        base: Any = module.ops.aten
    elif prefix == "Tensor":
        if len(parts) != 1:
            raise UnknownApiError(f"Tensor method name {api!r} may not contain dots")
        base = module.Tensor
    else:
        if len(parts) > 2 or (len(parts) == 2 and (prefix != "Torch" or parts[0] not in TORCH_SUBMODULES)):
            raise UnknownApiError(f"{prefix}.{api}: dotted names are only allowed into torch."
                                  f"{{{', '.join(sorted(TORCH_SUBMODULES))}}}")
        base = module
    for i, part in enumerate(parts):
        if not (prefix == "Aten" and i == 1):
            reason = _refused(part, namespace)
            if reason:
                raise UnknownApiError(reason)
        try:
            base = getattr(base, part)
        except (AttributeError, RuntimeError):  # torch.ops raises either for unknown ops
            raise UnknownApiError(f"{namespace}.{api} does not exist in this framework version") from None
    if not callable(base) or isinstance(base, type(importlib)):
        raise UnknownApiError(f"{namespace}.{api} is not a callable")
    return base


def resolve_api(case_or_prefix: Any, api: str | None = None) -> Callable:
    """The framework callable for a case (or a prefix and an API name).

    ``Functional`` -> ``torch.nn.functional.X``, ``Tensor`` -> ``torch.Tensor.X`` (self is the first
    positional argument), ``Torch`` -> ``torch.X`` (``torch.linalg.X`` etc. for dotted names),
    ``Aten`` -> ``torch.ops.aten.X`` (``add.Tensor`` is an overload), ``NPU`` -> ``torch_npu.X``.

    Raises:
        UnknownApiError: prefix not replayable, name refused, or not present in the installed framework.
    """
    if api is None:
        prefix, api = case_or_prefix.prefix, case_or_prefix.api
    else:
        prefix = case_or_prefix
    return _resolve(str(prefix), str(api))
