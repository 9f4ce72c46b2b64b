"""Call stacks for stack.json: cheap frame capture per call, formatting once per distinct stack."""
from __future__ import annotations

import linecache
import os
import sys
from typing import Optional

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_DUMPERS_DIR = os.path.dirname(_OWN_DIR)
_LEADING_SKIP = (os.path.join("torch", "overrides.py"), os.path.join("torch", "utils", "_python_dispatch.py"),
                 os.path.join("torch", "_jit_internal.py"))


def capture(skip_code: Optional[object] = None) -> tuple:
    """The caller's stack as ``(file, line, function)`` tuples, innermost first.

    Frames of the dumper itself are dropped everywhere; ``torch/overrides.py`` frames and frames of
    the API's own Python implementation (``skip_code`` and its file) are dropped while they are
    innermost, so the first frame is the line that called the API.
    """
    frame = sys._getframe(1)
    out = []
    leading = True
    skip_files = {getattr(skip_code, "co_filename", None)}
    impl_pending = True
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        if name.startswith(_OWN_DIR):
            frame = frame.f_back
            continue
        if leading and name.endswith(_LEADING_SKIP):
            frame = frame.f_back
            continue
        if leading and skip_code is not None and impl_pending:
            # a Python-level API: the function that dispatched to the mode is its implementation;
            # frames of its file (and of the public wrapper) are the API itself, not its caller
            impl_pending = False
            skip_files.add(name)
        if leading and (code is skip_code or name in skip_files):
            frame = frame.f_back
            continue
        leading = False
        out.append((name, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return tuple(out)


def format_frames(frames: tuple) -> list:
    """stack.json lines: ``File <path>, line <n>, in <func>, \\n <source>``; frames without source skipped."""
    lines = []
    for filename, lineno, func in frames:
        src = linecache.getline(filename, lineno).strip()
        if not src:
            continue
        lines.append(f"File {filename}, line {lineno}, in {func}, \n {src}")
    return lines
