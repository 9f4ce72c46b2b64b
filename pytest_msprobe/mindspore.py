"""MindSpore entry points: ``from pytest_msprobe.mindspore import PrecisionDebugger, MsprobeStep``.

Importing this module does not import MindSpore; building a ``PrecisionDebugger`` (or an ``MsprobeStep``) does.
See docs/dump-mindspore.md.
"""
from __future__ import annotations

from dumpers.mindspore_dump.debugger import MsprobeStep, PrecisionDebugger
from dumpers.mindspore_dump.kernel_dump import kernel_statistics
from dumpers.mindspore_dump.writer import repair

__all__ = ["MsprobeStep", "PrecisionDebugger", "kernel_statistics", "repair"]
