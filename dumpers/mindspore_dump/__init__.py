"""The MindSpore dumper: msprobe's PyNative dump (L0 cells, L1 APIs and primitives, mix) and L2 kernel dump.

Public names are imported lazily, so importing this package does not import MindSpore.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "PrecisionDebugger": "dumpers.mindspore_dump.debugger",
    "MsprobeStep": "dumpers.mindspore_dump.debugger",
    "load_config": "dumpers.mindspore_dump.config",
    "repair": "dumpers.mindspore_dump.writer",
    "kernel_statistics": "dumpers.mindspore_dump.kernel_dump",
}

__all__ = ["MsprobeStep", "PrecisionDebugger", "kernel_statistics", "load_config", "repair"]


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'dumpers.mindspore_dump' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
