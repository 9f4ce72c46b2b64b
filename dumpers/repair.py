"""Finalise a dump whose training process died: rebuild dump.json, stack.json, construct.json from the journal.

A running dump keeps ``dump.journal`` beside dump.json (see :mod:`dumpers.journal`); a clean ``stop()``
removes it. Any rank directory that still has a journal was not finalised. Repair merges what the
files already hold (an earlier ``stop()`` of the same step) with every complete journal line, writes
the three files atomically and removes the journal, half-written tensor files and the temporary files of
interrupted writes (:func:`dumpers.atomic.is_temp_name`). Every error names the file it is about
(:class:`RepairError`). Framework-free.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

from dumpers import atomic
from dumpers import format as fmt
from dumpers.dumpoff import describe
from dumpers.journal import DumpState, read_journal


class RepairError(OSError):
    """A file of the dump could not be read or written while repairing it; the message names it."""


def _named(exc: OSError, path: str, doing: str) -> RepairError:
    error = RepairError(exc.errno or 0, f"cannot {doing} {exc.filename or path} ({describe(exc)}); free disk "
                                        "space (or fix the permissions) and run repair-dump again")
    return error


@dataclass
class RepairResult:
    """What repairing one rank directory did."""

    directory: str
    entries: int = 0
    new_entries: int = 0
    truncated: bool = False
    bad_lines: int = 0
    missing_tensor_files: list = field(default_factory=list)
    removed_partial_files: int = 0

    def summary(self) -> str:
        text = f"{self.directory}: {self.entries} entries ({self.new_entries} recovered from the journal)"
        if self.truncated:
            text += ", last journal line was cut short and skipped"
        if self.bad_lines:
            text += f", {self.bad_lines} unreadable journal lines skipped"
        if self.missing_tensor_files:
            text += f", {len(self.missing_tensor_files)} tensor files were never written"
        return text


def find_unfinished(path: str) -> list:
    """Rank directories under ``path`` (or ``path`` itself) that still hold a journal, sorted."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path!r} is not a directory; pass a dump_path, a step directory or a rank directory")
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != fmt.TENSOR_DIR)
        if fmt.JOURNAL in files:
            found.append(root)
    return sorted(found)


def _load_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def _existing_state(directory: str) -> DumpState:
    state = DumpState()
    dump = _load_json(os.path.join(directory, fmt.DUMP_JSON))
    if dump is not None:
        state.header = {k: dump.get(k) for k in ("task", "level", "framework", "dump_data_dir")}
        if isinstance(dump.get("data"), dict):
            state.data = dict(dump["data"])
    stack = _load_json(os.path.join(directory, fmt.STACK_JSON)) or {}
    for sid, group in stack.items():
        if isinstance(group, list) and len(group) == 2 and str(sid).isdigit():
            state.stacks[int(sid)] = [list(group[0]), list(group[1])]
    construct = _load_json(os.path.join(directory, fmt.CONSTRUCT_JSON))
    if construct:
        state.construct = dict(construct)
    return state


def _data_names(value, out: list) -> None:
    if isinstance(value, dict):
        name = value.get(fmt.DATA_NAME)
        if isinstance(name, str):
            out.append(name)
        for v in value.values():
            _data_names(v, out)
    elif isinstance(value, list):
        for v in value:
            _data_names(v, out)


def _remove_temp_files(directory: str) -> tuple:
    """(names left after removing the temporary files of interrupted writes, number removed)."""
    present, removed = set(), 0
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise _named(exc, directory, "list") from None
    for name in names:
        if atomic.is_temp_name(name):
            path = os.path.join(directory, name)
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise _named(exc, path, "remove") from None
            removed += 1
        else:
            present.add(name)
    return present, removed


def repair_dir(directory: str, keep_journal: bool = False) -> RepairResult:
    """Finalise one rank directory from its journal (see module docstring).

    Raises:
        RepairError: a file could not be read, written or removed (full disk, permissions); the message
            names it. Nothing is left half-written: run it again once the cause is fixed.
    """
    journal = os.path.join(directory, fmt.JOURNAL)
    _, removed = _remove_temp_files(directory)
    state = _existing_state(directory)
    before = len(state.data)
    try:
        state = read_journal(journal, state)
    except OSError as exc:
        raise _named(exc, journal, "read") from None
    result = RepairResult(directory, entries=len(state.data), new_entries=len(state.data) - before,
                          truncated=state.truncated, bad_lines=state.bad_lines, removed_partial_files=removed)
    tensor_dir = os.path.join(directory, fmt.TENSOR_DIR)
    if os.path.isdir(tensor_dir):
        present, removed = _remove_temp_files(tensor_dir)
        result.removed_partial_files += removed
        names: list = []
        _data_names(state.data, names)
        result.missing_tensor_files = [n for n in names if n not in present]
    for name, doc in ((fmt.DUMP_JSON, state.dump_json()), (fmt.STACK_JSON, state.stack_json()),
                      (fmt.CONSTRUCT_JSON, state.construct)):
        path = os.path.join(directory, name)
        try:
            fmt.write_json_atomic(path, doc)
        except OSError as exc:
            raise _named(exc, path, "write") from None
    if not keep_journal:
        try:
            os.remove(journal)
        except OSError as exc:
            raise _named(exc, journal, "remove") from None
    return result


def repair(path: str, keep_journal: bool = False) -> list:
    """Repair every unfinalised rank directory under ``path``; returns one result per directory."""
    return [repair_dir(d, keep_journal) for d in find_unfinished(path)]
