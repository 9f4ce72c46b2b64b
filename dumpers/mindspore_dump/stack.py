"""Call stacks for stack.json: the caller's frames, innermost first, without the dumper's own frames."""
from __future__ import annotations

import linecache
import os
from dumpers.frames import frame_above as _frame

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))




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
