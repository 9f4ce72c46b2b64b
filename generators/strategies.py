"""Hypothesis strategies for tensors described by dump statistics, in the style of ``hypothesis.extra.numpy``.

Every strategy draws only a seed and a few generation knobs (:class:`~generators.random_data.GenParams`);
numpy fills the elements in one vectorised pass, so a 10-million-element tensor costs what numpy costs, and
shrinking works on the knobs: toward seed 0, smaller magnitudes and plain uniform values. Arguments are
keyword-only and validated when the strategy is built, with messages that say what to pass instead.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from dumpers import format as fmt
from generators import entries
from generators.dtypes import DTYPES
from generators.random_data import GenParams, IndexBound, TensorSpec, generate

MAX_SEED = 2 ** 32 - 1


def seeds() -> st.SearchStrategy:
    """Seeds of numpy generators; shrink toward 0."""
    return st.integers(min_value=0, max_value=MAX_SEED)


def generation_params(*, edge_values: bool = False) -> st.SearchStrategy:
    """Generation knobs. ``magnitude`` shrinks toward 0 (interior values collapse toward the simplest value
    in range), ``match_stats`` toward False (uniform data), ``edge_values`` toward False."""
    if not isinstance(edge_values, bool):
        raise InvalidArgument(f"edge_values={edge_values!r} must be True or False")
    return st.builds(
        GenParams,
        # the full, statistics-matched spread is drawn often; shrinking goes to the floats branch, toward 0
        magnitude=st.one_of(st.floats(min_value=0.0, max_value=1.0), st.just(1.0)),
        match_stats=st.booleans(),
        edge_values=st.booleans() if edge_values else st.just(False),
    )


def _check_number(name: str, value: Any, *, allow_non_finite: bool = True) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name}={value!r} must be a number or None")
    if not allow_non_finite and not math.isfinite(value):
        raise InvalidArgument(f"{name}={value!r} must be finite")


def _check_shape(shape: Any) -> tuple:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, Sequence) or not all(entries.is_int(s) and s >= 0 for s in shape):
        raise InvalidArgument(f"shape={shape!r} must be a tuple of non-negative integers, e.g. (8, 16) or ()")
    return tuple(shape)


def _canonical(dtype: Any) -> str:
    name = dtype if dtype in DTYPES else fmt.canonical_dtype(dtype)
    if name is None or name not in DTYPES:
        raise InvalidArgument(f"dtype={dtype!r} is not supported; pass one of {', '.join(sorted(DTYPES))} "
                              "or a dumped dtype string such as 'torch.float16'")
    return name


def arrays_from_stats(*, dtype: Any, shape: Any, min_value: Any = None, max_value: Any = None,
                      mean: float | None = None, norm: float | None = None,
                      min_finite: float | None = None, max_finite: float | None = None,
                      edge_values: bool = False) -> st.SearchStrategy:
    """Arrays of ``dtype``/``shape`` with values in [min_value, max_value], both extremes included.

    ``mean``/``norm`` are approximated when given (see :mod:`generators.random_data` for how close).
    A non-finite ``min_value``/``max_value`` (inf, NaN) is placed as recorded and the finite values are
    bounded by ``min_finite``/``max_finite`` (the dump's ``*_except_inf_nan``). bfloat16 and float8 arrays
    come back as float32 arrays holding values of that dtype's range; see :func:`tensors_from_stats`.
    """
    name = _canonical(dtype)
    shape = _check_shape(shape)
    for label, value in (("min_value", min_value), ("max_value", max_value), ("mean", mean), ("norm", norm)):
        _check_number(label, value)
    _check_number("min_finite", min_finite, allow_non_finite=False)
    _check_number("max_finite", max_finite, allow_non_finite=False)
    if (entries.finite(min_value) and entries.finite(max_value) and not isinstance(min_value, bool)
            and min_value > max_value):
        raise InvalidArgument(f"min_value={min_value!r} is above max_value={max_value!r}; swap them")
    if norm is not None and entries.finite(norm) and norm < 0:
        raise InvalidArgument(f"norm={norm!r} must be non-negative")
    spec = TensorSpec(name, shape, min_value, max_value, mean, norm, min_finite, max_finite)
    return st.builds(lambda seed, params: generate(spec, np.random.default_rng(seed), params),
                     seeds(), generation_params(edge_values=edge_values))


def arrays_from_item(item: dict, *, edge_values: bool = False) -> st.SearchStrategy:
    """Arrays for one dump.json tensor item (``dtype``, ``shape``, ``Max``/``Min``/``Mean``/``Norm``)."""
    if not entries.is_tensor_item(item):
        raise InvalidArgument(f"item={item!r} is not a dump tensor item (needs type 'torch.Tensor' or "
                              "'mindspore.Tensor')")
    problem = entries.check_tensor_item(item, "item")
    if problem:
        raise InvalidArgument(problem)
    return arrays_from_stats(dtype=item["dtype"], shape=tuple(item["shape"]), min_value=item.get("Min"),
                             max_value=item.get("Max"), mean=item.get("Mean"), norm=item.get("Norm"),
                             min_finite=item.get("Min_except_inf_nan"),
                             max_finite=item.get("Max_except_inf_nan"), edge_values=edge_values)


def index_arrays(*, shape: Any, size: int, dtype: Any = "int64", min_value: int | None = None,
                 max_value: int | None = None, ignore_index: int | None = None,
                 negative: bool = False) -> st.SearchStrategy:
    """Index arrays valid for a dimension of ``size``: values in [0, size - 1] ([-size, size - 1] with
    ``negative``), within [min_value, max_value] where that overlaps. ``ignore_index`` (e.g. -100 for
    cross_entropy) is kept at element 0 when ``min_value`` equals it, so class-id targets stay meaningful."""
    name = _canonical(dtype)
    if DTYPES[name].kind != "int":
        raise InvalidArgument(f"dtype={dtype!r} must be an integer dtype for indices, e.g. 'int64'")
    shape = _check_shape(shape)
    if not entries.is_int(size) or size <= 0:
        raise InvalidArgument(f"size={size!r} must be a positive integer: the length of the indexed dimension")
    for label, value in (("min_value", min_value), ("max_value", max_value), ("ignore_index", ignore_index)):
        if value is not None and not entries.is_int(value):
            raise InvalidArgument(f"{label}={value!r} must be an integer or None")
    bound = IndexBound(low=-size if negative else 0, high=size - 1, ignore=ignore_index)
    lo = bound.low if min_value is None else min_value
    hi = bound.high if max_value is None else max_value
    spec = TensorSpec(name, shape, lo, hi)
    return st.builds(lambda seed, params: generate(spec, np.random.default_rng(seed), params, index=bound),
                     seeds(), generation_params())


def tensors_from_stats(**kwargs: Any) -> st.SearchStrategy:
    """Like :func:`arrays_from_stats`, as CPU torch tensors of the exact dtype (bfloat16 included)."""
    name = _canonical(kwargs.get("dtype"))

    def to_tensor(array: np.ndarray) -> Any:
        import torch

        tensor = torch.from_numpy(np.require(array, requirements="C"))
        return tensor.to(getattr(torch, name)) if str(tensor.dtype) != f"torch.{name}" else tensor

    return arrays_from_stats(**kwargs).map(to_tensor)
