"""Index-taking APIs: which argument is an index tensor, and which dimension of which argument bounds it.

One table, keyed by base API name (the same for ``Torch.``, ``Tensor.`` and ``Functional.`` forms, since a
Tensor method's self is its first positional argument); ``Aten`` entries whose argument order differs have
their own key ``("Aten", name)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dumpers import format as fmt
from generators import dumpjson
from generators.random_data import IndexBound


@dataclass(frozen=True)
class IndexRule:
    """Where the index tensor is and what bounds it.

    index: (position, keyword) of the index tensor.
    source: (position, keyword) of the indexed tensor.
    dim: (position, keyword, default) of the dim argument, or an int for a fixed dimension; "classes" means
        the class dimension of a loss input (1 when the input has 2+ dimensions, else 0); "numel" means the
        flattened source (torch.take).
    ignore: (keyword, default) of an ignore index kept when recorded (losses), or None.
    negative: negative indices are valid (counted from the end).
    """

    index: tuple
    source: tuple
    dim: Any
    ignore: tuple | None = None
    negative: bool = False


_DIM_SRC_INDEX = IndexRule(index=(2, "index"), source=(0, "input"), dim=(1, "dim", None))
_LOSS = IndexRule(index=(1, "target"), source=(0, "input"), dim="classes", ignore=("ignore_index", -100))

INDEX_RULES = {
    **{name: _DIM_SRC_INDEX for name in (
        "gather", "index_select", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce",
        "scatter_reduce_", "index_add", "index_add_", "index_copy", "index_copy_", "index_fill",
        "index_fill_", "index_reduce", "index_reduce_")},
    "take_along_dim": IndexRule(index=(1, "indices"), source=(0, "input"), dim=(2, "dim", None)),
    "embedding": IndexRule(index=(0, "input"), source=(1, "weight"), dim=0),
    ("Aten", "embedding"): IndexRule(index=(1, "indices"), source=(0, "weight"), dim=0),
    "take": IndexRule(index=(1, "index"), source=(0, "input"), dim="numel", negative=True),
    "cross_entropy": _LOSS,
    "nll_loss": _LOSS,
    "multi_margin_loss": IndexRule(index=(1, "target"), source=(0, "input"), dim="classes"),
}


def rule_for(prefix: str, api: str) -> IndexRule | None:
    base = api.split(".")[0]
    return INDEX_RULES.get((prefix, base)) or INDEX_RULES.get(base)


def _arg(forward: dict, where: tuple) -> Any:
    pos, key = where[0], where[1]
    args = forward.get(fmt.INPUT_ARGS) or []
    kwargs = forward.get(fmt.INPUT_KWARGS) or {}
    if key in kwargs:
        return kwargs[key]
    return args[pos] if 0 <= pos < len(args) else None


def _int_value(obj: Any) -> int | None:
    if isinstance(obj, dict) and dumpjson.is_int(obj.get("value")):
        return obj["value"]
    return None


def index_bound(prefix: str, api: str, forward: dict, path: tuple) -> IndexBound | None:
    """The valid range of the tensor at ``path`` ((position,) or (keyword,)) of the call, if it is an index.

    Returns None when the tensor is not an index of this API or the bound cannot be worked out.
    """
    rule = rule_for(prefix, api)
    if rule is None or len(path) != 1 or path[0] not in rule.index:
        return None
    source = _arg(forward, rule.source)
    if not dumpjson.is_tensor_item(source) or not isinstance(source.get("shape"), list):
        return None
    shape = source["shape"]
    if rule.dim == "numel":
        size = dumpjson.element_count(shape)
    elif rule.dim == "classes":
        size = shape[1] if len(shape) >= 2 else (shape[0] if shape else 0)
    elif isinstance(rule.dim, int):
        size = shape[rule.dim] if len(shape) > rule.dim else 0
    else:
        dim = _int_value(_arg(forward, rule.dim[:2]))
        if dim is None:
            dim = rule.dim[2]
        if dim is None or not shape:
            return None
        if not -len(shape) <= dim < len(shape):
            return None
        size = shape[dim]
    if not dumpjson.is_int(size) or size <= 0:
        return None
    ignore = None
    if rule.ignore is not None:
        kw, default = rule.ignore
        value = _int_value((forward.get(fmt.INPUT_KWARGS) or {}).get(kw))
        ignore = value if value is not None else default
    low = -size if rule.negative else 0
    return IndexBound(low=low, high=size - 1, ignore=ignore)
