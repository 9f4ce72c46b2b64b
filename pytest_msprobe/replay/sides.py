"""What both framework adapters and the pipeline share: the per-API seed, nested values, the bench dtype and
copies (spec precision-standard.md 1.2), and the records of one call and of one side of it."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

BENCH = "bench"
DEVICE = "device"


def item_seed(name: str, seed: int) -> int:
    """Per-API seed from the run seed and the API's dump name: the same on every worker and every run."""
    return zlib.crc32(f"{seed}:{name}".encode()) & 0x7FFFFFFF


# --- nested values ----------------------------------------------------------------------------------------
def map_leaves(fn: Any, obj: Any) -> Any:
    """``obj`` (nested lists, tuples, dicts) with ``fn`` applied to every leaf."""
    from torch.utils._pytree import tree_map
    return tree_map(fn, obj)


def leaves(obj: Any) -> list:
    """Every leaf of the nested ``obj``, in order (None included)."""
    from torch.utils._pytree import tree_leaves
    return tree_leaves(obj)


def raise_target(args: Any, kwargs: dict, api: str) -> Any:
    """The bench dtype of spec 1.2: None (no cast), torch.float32 or torch.float64."""
    import torch

    from ..precision.standards import HF32_APIS, NO_RAISE_APIS
    if api in NO_RAISE_APIS:
        return None
    floats = (torch.float16, torch.bfloat16, torch.float32)
    found = {x.dtype for x in leaves([list(args), kwargs]) if isinstance(x, torch.Tensor) and x.dtype in floats}
    if not found:
        return None
    if found == {torch.float32}:
        return None if api in HF32_APIS else torch.float64
    return torch.float32


def copy_tensor(x: Any, target: Any, api: str, clone: bool = True) -> Any:
    """Detached copy (spec 1.2.5: a few in-place view APIs keep the graph), raised to ``target``; with
    ``clone`` False an unraised tensor is not copied (the caller's next step copies it)."""
    import torch

    from ..precision.standards import HF32_APIS, NO_DETACH_APIS
    if not isinstance(x, torch.Tensor):
        return x
    raisable = x.dtype in (torch.float16, torch.bfloat16, torch.float32) and x.dtype != target
    raise_it = target is not None and raisable and not (api in HF32_APIS and x.dtype == torch.float32)
    if api in NO_DETACH_APIS:
        y = x.clone() if clone or raise_it else x
        return y.to(target) if raise_it else y
    # a cast to another dtype is a copy already: one pass over the data, not a clone and then a cast
    if raise_it:
        return x.detach().to(target)
    return x.detach().clone() if clone else x.detach()


def copy_leaves(obj: Any, target: Any, api: str, clone: bool = True) -> Any:
    """``obj`` (nested) with every tensor copied by :func:`copy_tensor`."""
    return map_leaves(lambda x: copy_tensor(x, target, api, clone), obj)


def cpu_leaves(obj: Any) -> Any:
    """``obj`` (nested) with every torch tensor detached and on the CPU."""
    import torch

    return map_leaves(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, obj)


def cast_leaves(obj: Any, target: Any) -> Any:
    """``obj`` (nested) with every float16, bfloat16 and float32 tensor detached and cast to ``target`` (float64
    tensors and everything else as they are)."""
    import torch

    eligible = (torch.float16, torch.bfloat16, torch.float32)

    def cast(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in eligible and x.dtype != target:
            return x.detach().to(target)
        return x
    return map_leaves(cast, obj)


def first_grad(grad: Any) -> Any:
    """The dumped output gradient that backward is fed: a tensor, or the first of a list."""
    if isinstance(grad, (list, tuple)):
        return grad[0] if grad else None
    return grad


@dataclass
class Call:
    """What both sides of one call share."""

    name: str
    api: str
    func: Any
    args: list
    kwargs: dict
    grad_output: Any            # the dumped output gradient (None: no backward)
    plan: Any                   # the adapter's backward plan (None: no backward)
    seed: int
    autocast: Any = None        # the AutocastState the device side runs under (None: none)


@dataclass
class Side:
    """One side's results, as CPU torch values: outputs, input gradients, the gradient it was fed."""

    out: Any
    grads: list
    grad_in: Any = None
    message: str = ""           # why backward could not run ("" : it ran, or was not asked for)
    backward_ran: bool = False
    node_grads: list = field(default_factory=list)   # the gradients in the layout the dumper records them
    node_name: str = ""         # the autograd node they are the input gradients of (PyTorch)
