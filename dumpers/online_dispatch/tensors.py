"""CPU copies of op arguments and results, item walking and statistics (spec sections 4 and 8.2)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map

HALF_TYPES = (torch.float16, torch.bfloat16)
SCALARS = (bool, int, float)


def to_cpu(value: Any) -> Any:
    """Copy one value by the copy-to-CPU rules: tensors detached on the CPU, fp16/bf16 up-cast to fp32,
    ``torch.device`` replaced by ``cpu``, containers copied recursively, anything else unchanged."""
    if isinstance(value, torch.Tensor):
        out = value.detach().clone() if value.device.type == "cpu" else value.detach().cpu()
        return out.float() if out.dtype in HALF_TYPES else out
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


def copy_tree(tree: Any) -> Any:
    """:func:`to_cpu` over every leaf of nested lists, tuples and dicts."""
    return tree_map(to_cpu, tree)


def upcast_tree(tree: Any) -> Any:
    """Cast fp16/bf16 tensors in ``tree`` to float32 (the bench result's up-cast)."""
    return tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype in HALF_TYPES else t,
                    tree)


def leaves(*trees: Any) -> list:
    """All leaves of the given nested structures."""
    return tree_flatten(list(trees))[0]


def walk(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(item_name, leaf)`` for tensors and bool/int/float leaves; lists and tuples add ``.i``."""
    if isinstance(value, torch.Tensor):
        if not value.is_meta:
            yield name, value
    elif isinstance(value, SCALARS):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from walk(item, f"{name}.{i}")


def input_items(base: str, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """Items of an op's inputs: ``{base}_input.{i}`` per positional arg, ``{base}_input_{key}`` per kwarg."""
    items = list(walk(list(args), f"{base}_input"))
    for key, value in kwargs.items():
        items.extend(walk(value, f"{base}_input_{key}"))
    return items


def output_items(base: str, out: Any) -> list[tuple[str, Any]]:
    """Items of an op's result: ``{base}_output`` for a single value, ``{base}_output.{i}`` for sequences."""
    return list(walk(out, f"{base}_output"))


def as_array(leaf: Any) -> np.ndarray:
    """A float64 numpy copy of a tensor or scalar leaf (complex as its real view, bool as 0/1)."""
    if isinstance(leaf, torch.Tensor):
        t = leaf.detach()
        if t.is_complex():
            t = torch.view_as_real(t)
        return t.to(torch.float64).numpy()
    return np.asarray(float(leaf), dtype=np.float64)


def dtype_text(leaf: Any) -> str:
    """``str(dtype)`` for tensors, ``str(type(x))`` for scalars."""
    return str(leaf.dtype) if isinstance(leaf, torch.Tensor) else str(type(leaf))


def shape_text(leaf: Any) -> str:
    """``str(list(shape))``; ``[]`` for scalars."""
    return str(list(leaf.shape)) if isinstance(leaf, torch.Tensor) else "[]"


def stats(leaf: Any) -> tuple[Any, Any, Any]:
    """(max, min, mean) of a leaf as Python floats; Nones for empty tensors."""
    if not isinstance(leaf, torch.Tensor):
        value = float(leaf)
        return value, value, value
    if leaf.numel() == 0:
        return None, None, None
    t = leaf.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    t = t.to(torch.float64)
    return float(t.max()), float(t.min()), float(t.mean())


def save_array(leaf: Any) -> np.ndarray:
    """The array written to a ``.npy`` file (tensors keep their dtype, scalars become 0-d arrays)."""
    if isinstance(leaf, torch.Tensor):
        t = leaf.detach()
        if t.dtype in HALF_TYPES:
            t = t.float()
        try:
            return t.numpy()
        except TypeError:        # float8 and other dtypes numpy lacks: saved as float32
            return t.float().numpy()
    return np.asarray(leaf)


# --- transport to worker processes ------------------------------------------------------------------------

class Packed:
    """A CPU tensor sent to a worker as a numpy array (pickled by value, no shared-memory handles).

    The dimension order of the strides travels too: a transposed weight arrives transposed, as
    ``clone()`` keeps it in the training process, so the worker's kernels (a GEMM's layout, its blocking
    and summation order) are the in-process ones and the results bit-identical on every CPU.
    """

    __slots__ = ("array", "dtype", "order")

    def __init__(self, t: torch.Tensor) -> None:
        self.dtype = t.dtype
        t = t.detach()
        # dimensions from the largest stride to the smallest (ties: in order), as clone() lays them out
        order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), d)))
        if t.is_contiguous() or order == tuple(range(t.dim())):
            self.order: tuple = ()
            self.array = t.contiguous().numpy()
        else:
            self.order = order
            self.array = t.permute(order).contiguous().numpy()

    def unpack(self) -> torch.Tensor:
        out = torch.from_numpy(self.array).to(self.dtype)
        if self.order:
            inverse = [0] * len(self.order)
            for i, d in enumerate(self.order):
                inverse[d] = i
            out = out.permute(inverse)
        return out

    def __getstate__(self) -> tuple:
        return self.array, str(self.dtype).replace("torch.", ""), self.order

    def __setstate__(self, state: tuple) -> None:
        self.array, name, self.order = state
        self.dtype = getattr(torch, name)


def pack(tree: Any) -> Any:
    """Replace numpy-convertible CPU tensors by :class:`Packed`; other tensors travel as they are."""
    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and not x.is_complex() and x.dtype not in HALF_TYPES:
            try:
                return Packed(x)
            except (TypeError, RuntimeError):
                return x
        return x
    return tree_map(one, tree)


def unpack(tree: Any) -> Any:
    """Inverse of :func:`pack`."""
    return tree_map(lambda x: x.unpack() if isinstance(x, Packed) else x, tree,
                    is_leaf=lambda x: isinstance(x, Packed))
