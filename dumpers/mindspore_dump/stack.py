"""Call stacks for stack.json: the caller's frames, innermost first, without the dumper's own frames."""
from __future__ import annotations

import inspect
import linecache
import os
from typing import Any

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))

def _frame(depth: int) -> Any:
    """The frame ``depth`` levels above the function that calls this one (``sys._getframe(depth)`` there),
    through the public ``inspect.currentframe``; None where the interpreter keeps no frames."""
    frame = inspect.currentframe()
    for _ in range(depth + 1):
        if frame is None:
            break
        frame = frame.f_back
    return frame



def call_stack() -> list:
    """msprobe-style frame lines, innermost first, without the dumper's own frames."""
    lines = []
    frame = _frame(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_OWN_DIR):
            source = linecache.getline(path, frame.f_lineno).strip()
            if source:
                lines.append(f"File {path}, line {frame.f_lineno}, in {frame.f_code.co_name}, \n {source}")
        frame = frame.f_back
    return lines
