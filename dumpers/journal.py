"""The crash-safe journal beside dump.json: one JSON line per recorded fact, written as it happens.

Each line is written with one ``os.write`` on an ``O_APPEND`` descriptor, so a process killed at any
point (SIGKILL included) leaves every completed line in the file; at most the last line is cut short.
A clean ``stop()`` writes dump.json, stack.json and construct.json in full and removes the journal;
:mod:`dumpers.repair` rebuilds the three files from a journal left by a run that died.

Record kinds (``"t"``):

| t | fields | meaning |
|---|---|---|
| ``m`` | task, level, framework, dump_data_dir | dump.json header, first line |
| ``e`` | k (entry key), v (entry), s (stack id, optional) | one dump.json entry |
| ``x`` | k (entry key), x (the entry's dump.json text), s (stack id, optional) | an entry as text (still read) |
| ``s`` | i (stack id), l (formatted frame lines) | a new call stack |
| ``c`` | k (name), p (parent name or null) | one construct.json node |

Framework-free: used by the PyTorch and MindSpore dumpers and by the repair tool.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from dumpers import format as fmt


try:                                        # one C encoder, reused: json.dumps builds a new one per call
    _ENCODE = json.encoder.c_make_encoder(None, None, json.encoder.encode_basestring_ascii, None, ":", ",",
                                          False, False, True)
except (AttributeError, TypeError):         # pragma: no cover - interpreters without the C accelerator
    _ENCODE = None


_ESCAPE = json.encoder.encode_basestring_ascii
_NL, _TAB = "\n", "\t"


def _line(record: dict) -> bytes:
    if _ENCODE is not None:
        try:
            return ("".join(_ENCODE(record, 0)) + "\n").encode("ascii")
        except (TypeError, ValueError):
            pass
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=True, allow_nan=True) + "\n").encode("ascii")


_lines_memo: dict = {}      # id(lines) -> (lines, their JSON): the list is kept, so its id stays its own


def _lines_json(lines: list) -> str:
    """The compact JSON of a list of frame lines (never changed once made), remembered by the list."""
    hit = _lines_memo.get(id(lines))
    if hit is not None and hit[0] is lines:
        return hit[1]
    text = _line(lines)[:-1].decode("ascii")
    if len(_lines_memo) >= 4096:
        _lines_memo.clear()
    _lines_memo[id(lines)] = (lines, text)
    return text


class JournalWriter:
    """Append-only writer of journal records; every record reaches the kernel before ``write`` returns."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, fmt.FILE_MODE)

    def write(self, record: dict) -> None:
        if self._fd is None:
            return
        data = _line(record)
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def header(self, task: str, level: str, framework: str, dump_data_dir: Optional[str]) -> None:
        self.write({"t": "m", "task": task, "level": level, "framework": framework, "dump_data_dir": dump_data_dir})

    def entry(self, key: str, value: Any, stack_id: Optional[int] = None) -> None:
        rec = {"t": "e", "k": key, "v": value}
        if stack_id is not None:
            rec["s"] = stack_id
        self.write(rec)

    def entry_text(self, key: str, text: str, stack_id: Optional[int] = None) -> None:
        """An ``e`` record for an entry whose dump.json text is already made, without encoding it again.

        The text's newlines are structural (JSON escapes those inside strings), and so are its tabs:
        none. Turned into tabs, which JSON also reads as whitespace, the text becomes the one-line value
        of ``v`` as it stands.
        """
        if self._fd is None:
            return
        sid = "" if stack_id is None else f',"s":{int(stack_id)}'
        data = f'{{"t":"e","k":{_ESCAPE(key)}{sid},"v":{text.replace(_NL, _TAB)}}}\n'.encode("ascii")
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def stack(self, stack_id: int, lines: list) -> None:
        """An ``s`` record; the JSON of ``lines`` is made once per list (a call stack comes back every step)."""
        if self._fd is None:
            return
        data = f'{{"t":"s","i":{int(stack_id)},"l":{_lines_json(lines)}}}\n'.encode("ascii")
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def construct(self, key: str, parent: Optional[str]) -> None:
        self.write({"t": "c", "k": key, "p": parent})

    def close(self, remove: bool = False) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass


@dataclass
class DumpState:
    """What a journal (optionally on top of an existing dump.json) says the dump contains."""

    header: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    stacks: dict = field(default_factory=dict)      # stack id -> [keys, lines]
    construct: dict = field(default_factory=dict)
    records: int = 0
    truncated: bool = False                          # the last line was cut short (process died mid-write)
    bad_lines: int = 0

    def dump_json(self) -> dict:
        out = {k: self.header.get(k) for k in ("task", "level", "framework", "dump_data_dir")}
        out["data"] = self.data
        return out

    def stack_json(self) -> dict:
        return {str(i): [keys, lines] for i, (keys, lines) in self.stacks.items() if keys}


def read_journal(path: str, state: Optional[DumpState] = None) -> DumpState:
    """Replay a journal into ``state`` (a new one by default); a cut-short last line is skipped."""
    state = state if state is not None else DumpState()
    with open(path, "rb") as fh:
        raw = fh.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        state.truncated = True                       # no newline at the end: the last write never finished
    for n, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            if n == len(lines) - 1:
                state.truncated = True
            else:
                state.bad_lines += 1
            continue
        state.records += 1
        kind = rec.get("t")
        if kind == "m":
            state.header = {k: rec.get(k) for k in ("task", "level", "framework", "dump_data_dir")}
        elif kind in ("e", "x"):
            try:
                state.data[rec["k"]] = rec["v"] if kind == "e" else json.loads(rec["x"])
            except (KeyError, TypeError, ValueError):
                state.bad_lines += 1
                continue
            sid = rec.get("s")
            if sid is not None:
                state.stacks.setdefault(sid, [[], []])[0].append(rec["k"])
        elif kind == "s":
            state.stacks.setdefault(rec["i"], [[], []])[1] = rec["l"]
        elif kind == "c":
            state.construct[rec["k"]] = rec.get("p")
    return state
