"""Validation of PtdbgDispatch's constructor arguments (spec section 2)."""
from __future__ import annotations

import logging
import os
import re
from typing import Any

LOG = logging.getLogger("pytest_msprobe.online_dispatch")

DUMP_MODES = ("all", "list", "auto", "OFF")
PATH_CHARS = re.compile(r"^[a-zA-Z0-9_.:/-]+\Z")
MAX_PATH = 4096
MAX_NAME = 255


class OnlineDispatchError(ValueError):
    """A PtdbgDispatch argument is invalid; the message says which and what to pass."""


def check_dump_mode(dump_mode: Any) -> str:
    if dump_mode not in DUMP_MODES:
        raise OnlineDispatchError(
            f'The parameter "dump mode" can only be one of {list(DUMP_MODES)}, got {dump_mode!r}.')
    return dump_mode


def check_api_list(api_list: Any, dump_mode: str) -> list[str]:
    """The ATen packet names to dump in ``list`` mode; unknown names are dropped with a warning."""
    if dump_mode != "list":
        return []
    if api_list is None:
        return []
    if not isinstance(api_list, (list, tuple)):
        raise OnlineDispatchError(f"api_list must be a list of aten op names, got {type(api_list).__name__}.")
    import torch

    known = set(dir(torch.ops.aten))
    kept = []
    for name in api_list:
        if isinstance(name, str) and name in known:
            kept.append(name)
        else:
            LOG.warning("%s is not aten api will not dump, please refer to torch.ops.aten", name)
    return kept


def check_dump_path(dump_path: Any) -> str:
    """An existing, writable, non-symlink directory with safe characters; returned as a real path."""
    if dump_path is None:
        raise OnlineDispatchError("Please set dump_path when dump_mode is config! "
                                  "Pass dump_path= an existing writable directory.")
    if not isinstance(dump_path, (str, os.PathLike)):
        raise OnlineDispatchError(f"dump_path must be a str, got {type(dump_path).__name__}.")
    path = os.fspath(dump_path)
    if len(path) > MAX_PATH or any(len(part) > MAX_NAME for part in path.split(os.sep)):
        raise OnlineDispatchError(f"dump_path {path!r} is too long (at most {MAX_PATH} characters, "
                                  f"{MAX_NAME} per name).")
    if not PATH_CHARS.match(path):
        raise OnlineDispatchError(f"dump_path {path!r} has characters outside [a-zA-Z0-9_.:/-]; "
                                  "choose a plain directory name.")
    if os.path.islink(path):
        raise OnlineDispatchError(f"dump_path {path!r} is a symbolic link; pass the real directory.")
    if not os.path.isdir(path):
        raise OnlineDispatchError(f"dump_path {path!r} is not an existing directory; create it first.")
    if not os.access(path, os.W_OK | os.X_OK):
        raise OnlineDispatchError(f"dump_path {path!r} is not writable.")
    return os.path.abspath(path)


def check_tag(tag: Any) -> str | None:
    if tag is None:
        return None
    if not isinstance(tag, str) or not tag:
        LOG.warning("There is not tag or the type of tag is not string.")
        return None
    if not PATH_CHARS.match(tag) or "/" in tag:
        raise OnlineDispatchError(f"tag {tag!r} becomes part of a directory name: use [a-zA-Z0-9_.:-] only.")
    return tag


def check_process_num(process_num: Any) -> int:
    if isinstance(process_num, bool) or not isinstance(process_num, int) or process_num < 0:
        raise OnlineDispatchError('The type of parameter "process_num" can only be int and it should not '
                                  f"be less than 0 (got {process_num!r}).")
    return process_num


def check_debug(debug: Any) -> bool:
    if not isinstance(debug, bool):
        raise OnlineDispatchError(f'The type of parameter "debug" can only be bool (got {debug!r}).')
    return debug
