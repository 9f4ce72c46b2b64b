"""Hypothesis strategies for tensors described by dump statistics, in the style of ``hypothesis.extra.numpy``.

Every strategy draws only a seed and a few generation knobs (:class:`~generators.random_data.GenParams`);
:func:`~generators.random_data.generate` fills the elements in one vectorised numpy pass and
:func:`~generators.random_data.to_tensor` makes the torch tensor: the same two steps random-data mode runs
(:mod:`generators.inputs` seeds each tensor from the case instead of drawing the seed). A 10-million-element
tensor costs what numpy costs, and shrinking works on the knobs: toward seed 0, smaller magnitudes and plain
uniform values. Arguments are keyword-only and validated when the strategy is built, with messages that say
what to pass instead.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from dumpers import format as fmt
from generators import dumpjson
from generators.random_data import GenerationError, GenParams, IndexBound, TensorSpec, generate, to_tensor

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
    if not isinstance(shape, Sequence) or not all(dumpjson.is_int(s) and s >= 0 for s in shape):
        raise InvalidArgument(f"shape={shape!r} must be a tuple of non-negative integers, e.g. (8, 16) or ()")
    return tuple(shape)


def _canonical(dtype: Any) -> str:
    name = dtype if dtype in fmt.DTYPE_FACTS else fmt.canonical_dtype(dtype)
    if name is None or name not in fmt.DTYPE_FACTS:
        raise InvalidArgument(f"dtype={dtype!r} is not supported; pass one of {', '.join(sorted(fmt.DTYPE_FACTS))} "
                              "or a dumped dtype string such as 'torch.float16'")
    return name


def _check_spec(spec: TensorSpec) -> None:
    """The checks of recorded statistics, for keyword arguments and dump items alike."""
    for label, value in (("min_value", spec.min), ("max_value", spec.max), ("mean", spec.mean), ("norm", spec.norm)):
        _check_number(label, value)
    _check_number("min_finite", spec.min_finite, allow_non_finite=False)
    _check_number("max_finite", spec.max_finite, allow_non_finite=False)
    if (dumpjson.finite(spec.min) and dumpjson.finite(spec.max) and not isinstance(spec.min, bool)
            and spec.min > spec.max):
        raise InvalidArgument(f"min_value={spec.min!r} is above max_value={spec.max!r}; swap them")
    if spec.norm is not None and dumpjson.finite(spec.norm) and spec.norm < 0:
        raise InvalidArgument(f"norm={spec.norm!r} must be non-negative")


def _draw(spec: TensorSpec, index: IndexBound | None, seed: int, params: GenParams) -> np.ndarray:
    return generate(spec, np.random.default_rng(seed), params, index=index)


def _arrays(spec: TensorSpec, *, index: IndexBound | None = None, edge_values: bool = False) -> st.SearchStrategy:
    """The one strategy shape: a seed and the knobs drawn, the array generated from ``spec``."""
    return st.builds(functools.partial(_draw, spec, index), seeds(), generation_params(edge_values=edge_values))


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
    spec = TensorSpec(_canonical(dtype), _check_shape(shape), min_value, max_value, mean, norm, min_finite,
                      max_finite)
    _check_spec(spec)
    return _arrays(spec, edge_values=edge_values)


def arrays_from_item(item: dict, *, edge_values: bool = False) -> st.SearchStrategy:
    """Arrays for one dump.json tensor item (``dtype``, ``shape``, ``Max``/``Min``/``Mean``/``Norm``).

    The item is read as random-data mode reads it: checked by the dump reader's own rule, then
    :meth:`TensorSpec.from_item <generators.random_data.TensorSpec.from_item>`.
    """
    if not dumpjson.is_tensor_item(item):
        raise InvalidArgument(f"item={item!r} is not a dump tensor item (needs type 'torch.Tensor' or "
                              "'mindspore.Tensor')")
    problem = dumpjson.check_tensor_item(item, "item")
    if problem:
        raise InvalidArgument(problem)
    try:
        spec = TensorSpec.from_item(item)
    except GenerationError:
        _canonical(item.get("dtype"))       # says which dtypes are supported
        raise
    _check_spec(spec)
    return _arrays(spec, edge_values=edge_values)


def index_arrays(*, shape: Any, size: int, dtype: Any = "int64", min_value: int | None = None,
                 max_value: int | None = None, ignore_index: int | None = None,
                 negative: bool = False) -> st.SearchStrategy:
    """Index arrays valid for a dimension of ``size``: values in [0, size - 1] ([-size, size - 1] with
    ``negative``), within [min_value, max_value] where that overlaps. ``ignore_index`` (e.g. -100 for
    cross_entropy) is kept at element 0 when ``min_value`` equals it, so class-id targets stay meaningful."""
    name = _canonical(dtype)
    if fmt.DTYPE_FACTS[name].kind != "int":
        raise InvalidArgument(f"dtype={dtype!r} must be an integer dtype for indices, e.g. 'int64'")
    shape = _check_shape(shape)
    if not dumpjson.is_int(size) or size <= 0:
        raise InvalidArgument(f"size={size!r} must be a positive integer: the length of the indexed dimension")
    for label, value in (("min_value", min_value), ("max_value", max_value), ("ignore_index", ignore_index)):
        if value is not None and not dumpjson.is_int(value):
            raise InvalidArgument(f"{label}={value!r} must be an integer or None")
    bound = IndexBound(low=-size if negative else 0, high=size - 1, ignore=ignore_index)
    lo = bound.low if min_value is None else min_value
    hi = bound.high if max_value is None else max_value
    return _arrays(TensorSpec(name, shape, lo, hi), index=bound)


def tensors_from_stats(**kwargs: Any) -> st.SearchStrategy:
    """Like :func:`arrays_from_stats`, as CPU torch tensors of the exact dtype (bfloat16 included)."""
    name = _canonical(kwargs.get("dtype"))
    return arrays_from_stats(**kwargs).map(functools.partial(to_tensor, dtype=name))
