"""The PyTorch dumper: ``PrecisionDebugger`` writes msprobe-compatible dumps (see docs/dump.md)."""
from __future__ import annotations

from dumpers.torch_dump.debugger import PrecisionDebugger
from dumpers.torch_dump.session import DumpPathError

__all__ = ["PrecisionDebugger", "DumpPathError"]
