"""Where a dump's tensor files are, and joining untrusted file names so they stay inside it."""
from __future__ import annotations

import functools
import os
from typing import Any

from dumpers import format as fmt


class PathRefused(ValueError):
    """A path from a dump that would lead outside the dump's tensor directory."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_tensor_dir(dump_json: str, dump_data_dir: Any) -> tuple:
    """The real path of the dump's tensor directory, and why there is none.

    Rule (msprobe 26.2): ``<dir of dump.json>/dump_tensor_data`` whenever it exists; ``dump_data_dir`` is
    what the training process wrote relative to *its* working directory, so it is only used when it is a
    relative path without ``..`` that resolves inside the dump's own directory.

    Returns:
        (tensor_dir or None, problem or None): problem says why the files cannot be found.
    """
    base = os.path.realpath(os.path.dirname(os.path.abspath(dump_json)))
    beside = os.path.join(base, fmt.TENSOR_DIR)
    if os.path.isdir(beside):
        real = os.path.realpath(beside)
        if not _inside(real, base):
            return None, (f"{beside} is a link to {real}, outside the dump directory {base}; "
                          "copy the tensor files into the dump instead of linking them")
        return real, None
    if dump_data_dir is None:
        return None, None
    if not isinstance(dump_data_dir, str) or not dump_data_dir:
        return None, f"{dump_json}: dump_data_dir must be a string or null, got {dump_data_dir!r}"
    if os.path.isabs(dump_data_dir) or ".." in dump_data_dir.replace("\\", "/").split("/"):
        return None, (f"{dump_json}: dump_data_dir {dump_data_dir!r} is refused (absolute or contains '..'); "
                      f"put the tensor files in {beside}")
    candidate = os.path.realpath(os.path.join(base, dump_data_dir))
    if not _inside(candidate, base):
        return None, (f"{dump_json}: dump_data_dir {dump_data_dir!r} resolves to {candidate}, outside the "
                      f"dump directory; put the tensor files in {beside}")
    if os.path.isdir(candidate):
        return candidate, None
    return None, (f"tensor files not found: neither {beside} nor dump_data_dir {dump_data_dir!r} "
                  f"(relative to {base}) exists; copy dump_tensor_data next to dump.json, "
                  "or use random data (--msprobe-random)")


@functools.lru_cache(maxsize=64)
def _real_root(root: str) -> str:
    """The real path of a tensor directory, resolved once per process (every file of a dump is joined to one
    of a few); a directory re-pointed later is not followed: its files are read where it first led."""
    return os.path.realpath(root)


def safe_join(root: str, name: str) -> str:
    """The real path of ``name`` inside ``root``; refuses names and links that lead outside.

    Raises:
        PathRefused: absolute name, '..', a separator, or a symlink that resolves outside ``root``.
    """
    if (not name or os.path.isabs(name) or "/" in name or "\\" in name or "\x00" in name
            or name in (".", "..")):
        raise PathRefused(f"file name {name!r} is refused: it must be a bare name inside {root}")
    real_root = _real_root(root)
    path = os.path.join(real_root, name)          # real already, unless the name itself is a link
    if os.path.islink(path):
        path = os.path.realpath(path)
    if not _inside(path, real_root) or path == real_root:
        raise PathRefused(f"{os.path.join(root, name)} resolves to {path}, outside the tensor directory "
                          f"{real_root}; the link is refused")
    return path
