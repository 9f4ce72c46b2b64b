"""Where a call sits in the user's model, for the HTML report: its module path (the dump's construct.json) and
its call stack with the user's own frames first (stack.json lists the framework's frames first)."""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

MAX_JSON_BYTES = 256 * 1024 * 1024
# frames of the framework and the interpreter: paths as the dumpers write them (site-packages/..., or absolute)
_LIBRARY_MARKERS = ("site-packages/", "dist-packages/", "/lib/python", "<frozen ", "torch/", "mindspore/",
                    "msprobe/", "dumpers/", "pytest_msprobe/")


def load_construct(dump_dir: Optional[str]) -> Dict[str, str]:
    """Entry key -> the module (or Cell) entry it was called in, from the dump's construct.json; {} without."""
    if not dump_dir:
        return {}
    folder = dump_dir if os.path.isdir(dump_dir) else os.path.dirname(dump_dir)
    path = os.path.join(folder, "construct.json")
    try:
        if os.path.getsize(path) > MAX_JSON_BYTES:
            return {}
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str) and v}


def module_path(construct: Dict[str, str], call: str, limit: int = 64) -> List[str]:
    """The modules around ``call`` (``Functional.linear.0``), outermost first, following construct.json's parent
    links from the call's forward entry."""
    chain: List[str] = []
    key = construct.get(f"{call}.forward") or construct.get(call)
    while key and key not in chain and len(chain) < limit:
        chain.append(key)
        key = construct.get(key)
    return chain[::-1]


def is_library_frame(line: str) -> bool:
    head = line.split(",", 1)[0].replace("\\", "/")
    return any(marker in head for marker in _LIBRARY_MARKERS)


def user_frames_first(lines: List[str]) -> tuple:
    """(the user's own frames, the framework's), each in the order stack.json gives them."""
    return [ln for ln in lines if not is_library_frame(ln)], [ln for ln in lines if is_library_frame(ln)]
