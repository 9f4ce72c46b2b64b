"""dump.json -> replayable cases: loading, real data, random data (Hypothesis strategies).

Public names are imported lazily (PEP 562): importing this package imports neither torch nor hypothesis.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DumpError": "generators.loader",
    "ApiCase": "generators.loader",
    "DumpSet": "generators.loader",
    "load_dump": "generators.loader",
    "Inputs": "generators.inputs",
    "InputError": "generators.inputs",
    "build_inputs": "generators.inputs",
    "inputs_strategy": "generators.inputs",
    "required_bytes": "generators.inputs",
    "resolve_api": "generators.inputs",
    "UnknownApiError": "generators.inputs",
    "GenParams": "generators.random_data",
    "default_max_bytes": "generators.budget",
}

__all__ = [
    "ApiCase",
    "DumpError",
    "DumpSet",
    "GenParams",
    "InputError",
    "Inputs",
    "UnknownApiError",
    "build_inputs",
    "default_max_bytes",
    "inputs_strategy",
    "load_dump",
    "required_bytes",
    "resolve_api",
]


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'generators' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
