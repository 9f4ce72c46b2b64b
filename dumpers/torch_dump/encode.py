"""Arguments and results as dump.json items (spec 7.3 tensors, 7.4 everything else)."""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_leaves

from dumpers import format as fmt
from dumpers.torch_dump.stats import StatBatch

log = logging.getLogger("pytest_msprobe.dump")

MAX_DEPTH = 10
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}
_warned_types: set = set()

TensorHook = Callable[[torch.Tensor, dict, tuple], None]


def _numpy_scalar(value: Any) -> Optional[dict]:
    np = type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "shape", None) == ()
    if not np:
        return None
    return {"type": type(value).__name__, "value": value.item()}


def _device_str(device: torch.device) -> str:
    return f"{device.type}:{device.index}"


class Encoder:
    """Encodes nested call arguments; each tensor goes through one :class:`StatBatch`.

    ``on_tensor(tensor, item, path)`` is called for every tensor (the tensor task saves it there);
    ``path`` is the tensor's position, starting with its category (``input``, ``kwargs``, ``output``).
    """

    __slots__ = ("batch", "on_tensor")

    def __init__(self, batch: StatBatch, on_tensor: Optional[TensorHook] = None) -> None:
        self.batch = batch
        self.on_tensor = on_tensor

    def encode(self, value: Any, path: tuple, key: Optional[str] = None, depth: int = 0) -> Any:
        if isinstance(value, torch.Tensor):
            item = self.batch.add(value, path[0] == fmt.CAT_OUTPUT or value.requires_grad)
            if self.on_tensor is not None:
                self.on_tensor(value, item, path)
            return item
        if value is None:
            return None
        kind = _SCALARS.get(type(value))
        if kind is not None:
            return {"type": kind, "value": value}
        if key == "dtype" and isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        if key == "device" and isinstance(value, (torch.device, str)):
            return {"type": "torch.device", "value": value if isinstance(value, str) else _device_str(value)}
        if isinstance(value, (torch.dtype, torch.device)):
            return {}
        if isinstance(value, torch.Size):
            return {"type": "torch.Size", "value": list(value)}
        if depth >= MAX_DEPTH:
            return None
        if isinstance(value, (list, tuple)):
            return [self.encode(v, (*path, i), None, depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.encode(v, (*path, k), str(k), depth + 1) for k, v in value.items()}
        if isinstance(value, slice):
            return {"type": "slice", "value": [_slice_part(value.start), _slice_part(value.stop),
                                               _slice_part(value.step)]}
        if value is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        for base, name in _SCALARS.items():     # subclasses of the builtins (IntEnum, numpy bool_ aside)
            if isinstance(value, base):
                return {"type": name, "value": base(value)}
        np_item = _numpy_scalar(value)
        if np_item is not None:
            return np_item
        tname = type(value).__name__
        if tname not in _warned_types:
            _warned_types.add(tname)
            log.debug("Data type %s is not supported; written as null.", tname)
        return None

    def args(self, args: tuple) -> list:
        return [self.encode(v, (fmt.CAT_INPUT, i)) for i, v in enumerate(args)]

    def kwargs(self, kwargs: dict) -> dict:
        return {str(k): self.encode(v, (fmt.CAT_KWARGS, k), str(k)) for k, v in kwargs.items()}

    def outputs(self, result: Any, category: str = fmt.CAT_OUTPUT) -> list:
        """A result as the ``output`` list: tuples/lists item-wise, anything else wrapped in a list."""
        if isinstance(result, (tuple, list)) and not isinstance(result, torch.Size):
            return [self.encode(v, (category, i)) for i, v in enumerate(result)]
        return [self.encode(result, (category, 0))]


def _slice_part(v: Any) -> Any:
    if v is None or isinstance(v, int):
        return v
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return None
    return None


def first_tensor(value: Any) -> Optional[torch.Tensor]:
    """The tensor a legacy backward hook attaches to: first dict value / first item, recursively."""
    if type(value) is torch.Tensor:   # the common result, without the tree walk
        return value
    first = next(iter(tree_leaves(value, is_leaf=_ends_descent)), None)
    return first if isinstance(first, torch.Tensor) else None


def _ends_descent(value: Any) -> bool:
    """None and empty containers are leaves: the first leaf is then the first item at every level."""
    return value is None or (isinstance(value, (list, tuple, dict)) and not value)
