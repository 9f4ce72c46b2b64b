"""pytest-msprobe: accuracy debugging for deep-learning training, on pytest.

Public names are imported lazily (PEP 562) so that importing this package, or the pytest plugin,
never imports torch, mindspore or hypothesis.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "PrecisionDebugger": ("dumpers.torch_dump", "PrecisionDebugger"),
    "PtdbgDispatch": ("dumpers.online_dispatch", "PtdbgDispatch"),
    "seed_all": ("dumpers.online_dispatch", "seed_all"),
    "GradComparator": ("dumpers.grad_probe", "GradComparator"),
    "load_dump": ("generators.loader", "load_dump"),
    "attribute": ("pytest_msprobe.attribution", "attribute"),
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'pytest_msprobe' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
