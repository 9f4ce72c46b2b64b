"""Call stacks for stack.json: cheap frame capture per call, formatting once per distinct stack."""
from __future__ import annotations

import linecache
import os
import sys
from typing import Any, Optional

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_DUMPERS_DIR = os.path.dirname(_OWN_DIR)
_LEADING_SKIP = (os.path.join("torch", "overrides.py"), os.path.join("torch", "utils", "_python_dispatch.py"),
                 os.path.join("torch", "_jit_internal.py"))


_known: dict = {}            # cheap key of a stack -> its (file, line, function) tuples
_pinned: list = []           # the code objects of every known key, kept alive so their ids stay unique
_KNOWN_LIMIT = 65536


def capture(skip_code: Optional[object] = None) -> tuple:
    """The caller's stack as ``(file, line, function)`` tuples, innermost first.

    Frames of the dumper itself are dropped everywhere; ``torch/overrides.py`` frames and frames of
    the API's own Python implementation (``skip_code`` and its file) are dropped while they are
    innermost, so the first frame is the line that called the API.

    A call site seen before is recognised from the code objects and instruction offsets of its frames
    (no line-number lookups); only a new one walks the frames again to build the tuples.
    """
    frame = sys._getframe(1)
    parts = [id(skip_code)]
    add = parts.append
    while frame is not None:
        add(id(frame.f_code))
        add(frame.f_lasti)
        frame = frame.f_back
    key = tuple(parts)
    known = _known.get(key)
    if known is not None:
        return known
    frames, codes = _walk(sys._getframe(1), skip_code)
    if len(_known) >= _KNOWN_LIMIT:
        _known.clear()
        _pinned.clear()
    _known[key] = frames
    _pinned.append((skip_code, codes))
    return frames


def _walk(frame: Any, skip_code: Optional[object]) -> tuple:
    out = []
    codes = []
    leading = True
    skip_files = {getattr(skip_code, "co_filename", None)}
    impl_pending = True
    while frame is not None:
        code = frame.f_code
        codes.append(code)
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
    return tuple(out), tuple(codes)


def format_frames(frames: tuple) -> list:
    """stack.json lines: ``File <path>, line <n>, in <func>, \\n <source>``; frames without source skipped."""
    lines = []
    for filename, lineno, func in frames:
        src = linecache.getline(filename, lineno).strip()
        if not src:
            continue
        lines.append(f"File {filename}, line {lineno}, in {func}, \n {src}")
    return lines
