"""grad_probe: per-step gradient statistics export and cross-run gradient-direction comparison.

Names are imported lazily, so importing this package does not import torch, mindspore or matplotlib.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GradientMonitor": ".monitor",
    "GradComparator": ".comparator",
    "GradProbeConfig": ".config",
    "GradProbeConfigError": ".config",
    "parse_config": ".config",
    "find_anomalies": ".anomaly",
}

__all__ = ["GradComparator", "GradProbeConfig", "GradProbeConfigError", "GradientMonitor",
           "find_anomalies", "parse_config"]


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'dumpers.grad_probe' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
