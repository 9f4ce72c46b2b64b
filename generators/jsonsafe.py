"""Reading a dump's JSON files as untrusted input: size limit, duplicate keys, NaN/Infinity literals.

:func:`load_file` parses a whole file. :func:`scan_object` is the lean way through a large dump.json: it checks
the text as :func:`loads` would, but keeps only where each member of one object lies, so that a member is
parsed (:func:`loads` of its span) only when it is needed.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import re
from collections.abc import Iterator
from typing import Any, Callable

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
    return loads(read_text(path, max_bytes=max_bytes), what=path)


def read_text(path: str, *, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> str:
    """The text of one JSON file, refusing files above ``max_bytes`` before reading them.

    Raises:
        JSONFileError: unreadable, too large, grown while read or not UTF-8; the message names ``path``.
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
    return text


_WS = re.compile(r"[ \t\n\r]*")            # JSON's whitespace, as json's own scanner skips it
_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_AFTER = re.compile(r"[ \t\n\r]*(?:(\})|,[ \t\n\r]*)")   # after a member: the object's end, or the next one
# after a member, the next one's plain key (no escape: its text is its value) up to its value
_NEXT = re.compile(r'[ \t\n\r]*,[ \t\n\r]*"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
_PLAIN = json.JSONDecoder()                   # no hook: checks and measures a value, which is then dropped
_HEADROOM = 100     # frames above the scan: a value it accepts also parses in the deeper stack of a test


def loads_member(text: str, start: int, end: int, *, what: str = "JSON text") -> Any:
    """:func:`loads` of ``text[start:end]``, a value that :func:`scan_object` has checked.

    json's C scanner parses it without the hook; that is the hook's result too when no key repeats, which holds
    when every ``:`` of the text is a member of some object (a repeated key, or a ``:`` inside a string, makes
    the objects hold fewer members than the text has colons, and :func:`loads` parses it again)."""
    part = text[start:end]
    try:
        value = _PLAIN.decode(part)
    except (ValueError, RecursionError):
        return loads(part, what=what)
    return value if _members_of(value) == part.count(":") else loads(part, what=what)


def _members_of(value: Any) -> int:
    count, todo = 0, [value]
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is dict:
            count += len(item)
            todo.extend(item.values())
        elif kind is list:
            todo.extend(item)
    return count


def scan_object(text: str, pos: int, *, inner: str | None = None) -> tuple | None:
    """Where the members of the JSON object at ``text[pos]`` lie, checked as :func:`loads` would check them.

    Returns ``(members, end, inner_members)``: ``members`` is ``[(key, start, end)]`` in order, repeated keys
    included (``text[start:end]`` is the value), ``end`` the index after the object. The object value of the
    member named ``inner`` is scanned the same way (its members, the last such member's, are
    ``inner_members``; else that is None). Every other value is parsed once by json's C scanner (the check)
    and dropped, so memory stays low.

    None when the text is not valid JSON there, whatever the reason: the caller then parses it with
    :func:`loads`, whose error says what is wrong.
    """
    with paused_gc():             # JSON values hold no cycles: collecting while millions are made is waste
        try:
            return _at_depth(_HEADROOM, lambda: _members(text, pos, inner))
        except (ValueError, RecursionError, IndexError, StopIteration):     # JSONDecodeError is a ValueError
            return None


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No automatic garbage collection inside (restored after): for code that makes many long-lived objects
    and no reference cycles, where each automatic pass would walk all of them again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _at_depth(frames: int, fn: Callable[[], Any]) -> Any:
    return fn() if frames <= 0 else _at_depth(frames - 1, fn)


def _members(text: str, pos: int, inner: str | None) -> tuple | None:
    key_at, value_at, colon, after, following = (json.decoder.scanstring, _PLAIN.scan_once, _COLON.match,
                                                 _AFTER.match, _NEXT.match)
    if text[pos] != "{":
        return None
    out: list = []
    append = out.append
    nested = None
    i = _WS.match(text, pos + 1).end()
    if text[i] == "}":
        return out, i + 1, nested
    if text[i] != '"':
        return None
    key, i = key_at(text, i + 1, True)
    sep = colon(text, i)
    while True:
        if sep is None:
            return None
        start = sep.end()
        if key == inner and text[start] == "{":
            found = _members(text, start, None)
            if found is None:
                return None
            nested, end = found[0], found[1]
        else:
            end = value_at(text, start)[1]      # StopIteration where no value starts
        append((key, start, end))
        sep = following(text, end)              # the common case: a next member with a plain key
        if sep is not None:
            key = sep.group(1)
            continue
        sep = after(text, end)
        if sep is None:
            return None
        if sep.group(1):
            return out, sep.end(), nested
        i = sep.end()
        if text[i] != '"':
            return None
        key, i = key_at(text, i + 1, True)
        sep = colon(text, i)


def skip_space(text: str, pos: int) -> int:
    """The index of the first character at or after ``pos`` that is not JSON whitespace."""
    return _WS.match(text, pos).end()


def at_end(text: str, pos: int) -> bool:
    """Whether only whitespace follows ``pos`` (json refuses anything else after the document)."""
    return _WS.match(text, pos).end() == len(text)
