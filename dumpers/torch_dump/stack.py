"""Call stacks for stack.json: cheap frame capture per call, formatting once per distinct stack."""
from __future__ import annotations

import inspect
import linecache
import os
from typing import Any, Optional
from dumpers.frames import frame_above as _frame

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_DUMPERS_DIR = os.path.dirname(_OWN_DIR)
_LEADING_SKIP = (os.path.join("torch", "overrides.py"), os.path.join("torch", "utils", "_python_dispatch.py"),
                 os.path.join("torch", "_jit_internal.py"))


_known: dict = {}            # cheap key of a stack -> its (file, line, function) tuples
_pinned: list = []           # the code objects of every known key, kept alive so their ids stay unique
_chains: dict = {}           # (code id, offset) pairs of the frames above an anchor -> that same tuple
_KNOWN_LIMIT = 65536
_NOT_PLAIN = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_last: tuple = (None, None)  # (anchor frame, interned chain above it) of the latest capture




def capture(skip_code: Optional[object] = None) -> tuple:
    """The caller's stack as ``(file, line, function)`` tuples, innermost first.

    Frames of the dumper itself are dropped everywhere; ``torch/overrides.py`` frames and frames of
    the API's own Python implementation (``skip_code`` and its file) are dropped while they are
    innermost, so the first frame is the line that called the API.

    A call site seen before is recognised without line-number look-ups, from the code object and
    instruction offset of the first frame outside the dumper (the anchor) and the (code, offset)
    chain of the frames above it. While an ordinary function's frame runs, the frames above it are
    suspended in the calls that lead to it, so that chain cannot change: consecutive API calls made
    from one frame (an optimizer's loop over its parameters) walk the stack once. Only a new call
    site builds the tuples.
    """
    anchor = _frame(1)
    while anchor is not None and anchor.f_code.co_filename.startswith(_OWN_DIR):
        anchor = anchor.f_back
    if anchor is None:
        return ()
    last_anchor, chain = _last
    if last_anchor is not anchor:
        chain = _chain_above(anchor)
    key = (id(skip_code), id(anchor.f_code), anchor.f_lasti, id(chain))
    known = _known.get(key)
    if known is not None:
        return known
    frames, codes = _walk(_frame(1), skip_code)
    if len(_known) >= _KNOWN_LIMIT:
        _known.clear()
        _pinned.clear()
        _chains.clear()
        chain = _chain_above(anchor)
        key = (id(skip_code), id(anchor.f_code), anchor.f_lasti, id(chain))
    _known[key] = frames
    _pinned.append((skip_code, codes))
    return frames


def _chain_above(anchor: Any) -> tuple:
    """The interned (code id, offset) chain of the frames above ``anchor``; remembered with the anchor
    while it is an ordinary function's frame (a generator's may be resumed from elsewhere)."""
    global _last
    parts = []
    add = parts.append
    frame = anchor.f_back
    codes = []
    while frame is not None:
        code = frame.f_code
        codes.append(code)
        add(id(code))
        add(frame.f_lasti)
        frame = frame.f_back
    key = tuple(parts)
    chain = _chains.get(key)
    if chain is None:
        chain = _chains[key] = key
        _pinned.append((None, tuple(codes)))
    _last = (anchor, chain) if not anchor.f_code.co_flags & _NOT_PLAIN else (None, None)
    return chain


def release() -> None:
    """Forget the remembered anchor frame (it keeps its locals alive): called when a dump stops."""
    global _last
    _last = (None, None)


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
