"""Reading a dump's JSON files as untrusted input: size limit, duplicate keys, NaN/Infinity literals."""
from __future__ import annotations

import json
import os
from typing import Any

DEFAULT_MAX_JSON_BYTES = 2 * 1024 ** 3   # a dump.json above 2 GiB is refused as a whole

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class JSONFileError(ValueError):
    """A JSON file that cannot be read as a whole; the message names the file and what to do."""


class DuplicateKeyDict(dict):
    """A JSON object in which at least one key occurred more than once.

    The dict holds the last value for each key, as :func:`json.loads` does; ``duplicates`` names the keys
    that were repeated, and ``pairs`` keeps every (key, value) pair in file order.
    """

    duplicates: list
    pairs: list


def _object_pairs(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set = set()
    dups: list = []
    for key, _ in pairs:
        if key in seen and key not in dups:
            dups.append(key)
        seen.add(key)
    out = DuplicateKeyDict(obj)
    out.duplicates = dups
    out.pairs = list(pairs)
    return out


def _parse_constant(name: str) -> float:
    return _CONSTANTS[name]


def loads(text: str, *, what: str = "JSON text") -> Any:
    """Parse JSON text; duplicated keys are kept visible as :class:`DuplicateKeyDict`.

    Raises:
        JSONFileError: the text is not valid JSON (message says where), or nests too deeply.
    """
    try:
        return json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise JSONFileError(
            f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "the file is truncated or damaged: re-copy it, or rebuild it with 'pytest-msprobe repair-dump'"
        ) from None
    except RecursionError:
        raise JSONFileError(f"{what} nests JSON arrays/objects too deeply to be a dump file") from None


def load_file(path: str, *, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> Any:
    """Read and parse one JSON file, refusing files above ``max_bytes`` before reading them.

    Raises:
        JSONFileError: unreadable, too large, not UTF-8 or not valid JSON; the message names ``path``.
    """
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise JSONFileError(f"cannot read {path}: {exc.strerror}") from None
    if size > max_bytes:
        raise JSONFileError(
            f"{path} is {size} bytes, above the limit of {max_bytes} bytes for a dump file; "
            "raise the limit (max_json_bytes) if the file is genuine")
    try:
        with open(path, "rb") as fh:
            # ask only for what the file holds (+1 to notice growth): a read(max_bytes) would allocate the limit
            raw = fh.read(min(size, max_bytes) + 1)
    except OSError as exc:
        raise JSONFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > size:
        raise JSONFileError(f"{path} grew while being read (is a training process still writing it?); "
                            "run again once the dump is finished")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONFileError(f"{path} is not UTF-8 text (bad byte at offset {exc.start}); "
                            "it is not a dump.json") from None
    del raw
    return loads(text, what=path)
