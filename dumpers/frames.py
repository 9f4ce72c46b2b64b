"""Who called: the frame some levels above a function, through the interpreter's public ``inspect`` face."""
from __future__ import annotations

import inspect
from typing import Any


def frame_above(depth: int) -> Any:
    """The frame ``depth`` levels above the function that calls this one (0: that function's own frame);
    None where the interpreter keeps no frames."""
    frame = inspect.currentframe()
    for _ in range(depth + 1):
        if frame is None:
            break
        frame = frame.f_back
    return frame
