"""From a MindSpore dump name's prefix and API name to the MindSpore callable.

Only the names the MindSpore dumper wraps (``dumpers/mindspore_dump/api_table.py``) are ever looked up, so a
dump cannot make the checker call anything outside those lists. Checking a name imports nothing; resolving it
imports MindSpore.
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable

from dumpers.mindspore_dump.api_table import MINT, MINT_FUNCTIONAL, OPS, TENSOR
from generators.inputs import UnknownApiError

# prefix -> (namespace the callables live in, the names the dumper wraps there)
MS_NAMESPACES = {
    "Functional": ("mindspore.ops", frozenset(OPS)),
    "Tensor": ("mindspore.Tensor", frozenset(TENSOR)),
    "Mint": ("mindspore.mint", frozenset(MINT)),
    "MintFunctional": ("mindspore.mint.nn.functional", frozenset(MINT_FUNCTIONAL)),
}
MS_REPLAYABLE_PREFIXES = tuple(MS_NAMESPACES)

# prefixes a MindSpore dump holds that are never replayed, and why
MS_NOT_REPLAYED = {
    "Primitive": ("MindSpore Primitive call: a primitive held by a cell carries its own attributes (set at "
                  "construction), which the dump does not record, so it cannot be rebuilt and replayed"),
    "Jit": ("a Jit entry is a whole jitted function or cell, which cannot be replayed as one API call; "
            "dump it at L1 without jit, or use L2 for its kernels"),
    "Cell": "a Cell entry is a whole network layer, not one API call (dump at L1 to check its APIs)",
    "Distributed": "communication op (Distributed): it needs the other ranks and is not replayed on one process",
}


def ms_prefix_problem(prefix: str) -> str | None:
    """Why MindSpore calls with this prefix cannot be replayed, or None. Imports nothing."""
    if prefix in MS_NAMESPACES:
        return None
    return MS_NOT_REPLAYED.get(prefix) or (
        f"prefix {prefix!r} is not a replayable MindSpore prefix; only "
        f"{', '.join(MS_REPLAYABLE_PREFIXES)} calls are re-run")


def check_ms_api(prefix: str, api: str) -> None:
    """Refuse a name that is not in the dumper's wrap list of its namespace. Imports nothing.

    Raises:
        UnknownApiError: the prefix is not replayable or the name is not wrapped there.
    """
    try:
        namespace, names = MS_NAMESPACES[prefix]
    except KeyError:
        raise UnknownApiError(ms_prefix_problem(prefix) or prefix) from None
    if api not in names:
        raise UnknownApiError(f"{namespace}.{api} is not in the MindSpore API lists this tool replays "
                              "(dumpers/mindspore_dump/api_table.py)")


@functools.lru_cache(maxsize=2048)
def resolve_ms_api(prefix: str, api: str) -> Callable:
    """The MindSpore callable: ``Functional`` -> ``mindspore.ops.X``, ``Tensor`` -> ``mindspore.Tensor.X``
    (self is the first positional argument), ``Mint`` -> ``mindspore.mint.X``, ``MintFunctional`` ->
    ``mindspore.mint.nn.functional.X``.

    Raises:
        UnknownApiError: not replayable, not wrapped, MindSpore missing, or absent from this MindSpore version.
    """
    check_ms_api(prefix, api)
    namespace = MS_NAMESPACES[prefix][0]
    try:
        if namespace == "mindspore.Tensor":
            import mindspore
            owner: object = mindspore.Tensor
        else:
            owner = importlib.import_module(namespace)
    except ImportError:
        raise UnknownApiError(f"MindSpore is not installed here, so {prefix}.{api} cannot run; "
                              "pip install 'pytest-msprobe[mindspore]'") from None
    func = getattr(owner, api, None)
    func = getattr(func, "__msprobe_original__", func)     # never a dumper's wrapper left installed
    if func is None or not callable(func):
        raise UnknownApiError(f"{namespace}.{api} does not exist in this MindSpore version")
    return func
