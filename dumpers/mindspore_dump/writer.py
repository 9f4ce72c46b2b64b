"""The files of one step and rank: dump.json, stack.json, construct.json, and the crash-safe journal.

Each recorded entry goes to ``dump.journal`` (:mod:`dumpers.journal`, shared with the PyTorch dumper) when it
is committed (the MindSpore service commits every entry at once), so a killed process loses nothing it
captured; :func:`repair` (or the project's ``repair-dump`` command) turns a journal into the final files.
``stop()`` rewrites the three JSON files atomically (temporary file + rename); ``step()`` does it once more
and removes the journal.

No method raises on an I/O error (full disk, quota, a vanished directory): the first one goes to the
``on_error`` callback (the service reports it once and switches the dump off) and the writer does nothing more.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from dumpers import format as fmt
from dumpers.journal import JournalWriter
from dumpers.repair import repair_dir

FRAMEWORK = "mindspore"


class StepWriter:
    """Collects the entries of one ``step{N}/rank{R}`` directory and writes its files."""

    def __init__(self, dump_path: str, step: int, rank: int | None, task: str, level: str,
                 on_error: Optional[Callable[[OSError, str], None]] = None) -> None:
        self.dir = fmt.step_rank_dir(dump_path, step, rank)
        self.on_error = on_error
        self.failed = False
        self.tensor_dir = os.path.join(self.dir, fmt.TENSOR_DIR) if task == "tensor" else None
        self.header = {"task": task, "level": level, "framework": FRAMEWORK, "dump_data_dir": self.tensor_dir}
        self.data: dict = {}
        self.construct: dict = {}
        self._stack_ids: dict = {}         # tuple(frame lines) -> stack id
        self._stack_keys: list = []        # stack id -> [keys]
        self._sid: dict = {}               # entry key -> stack id
        self._queued: list = []            # (key, entry) added but not yet journaled
        self._flushed: tuple = (-1, -1)    # sizes of data and construct at the last flush
        self._journal: JournalWriter | None = None
        path = self.dir
        try:
            os.makedirs(self.dir, mode=fmt.DIR_MODE, exist_ok=True)
            if self.tensor_dir:
                path = self.tensor_dir
                os.makedirs(self.tensor_dir, mode=fmt.DIR_MODE, exist_ok=True)
            self._write_files()
            path = os.path.join(self.dir, fmt.JOURNAL)
            self._journal = JournalWriter(path)
            self._journal.header(task, level, FRAMEWORK, self.tensor_dir)
        except OSError as exc:
            self.fail(exc, path)

    def fail(self, exc: OSError, path: str) -> None:
        """An I/O error: handed to ``on_error`` (the first only, by default raised), then nothing more is written."""
        if self.failed:
            return
        self.failed = True
        if self._journal is not None:       # what it holds stays for repair-dump
            try:
                self._journal.close()
            except OSError:
                pass
            self._journal = None
        if self.on_error is None:
            raise exc
        self.on_error(exc, exc.filename or path)

    def add(self, key: str, entry: dict, stack: list | None = None) -> None:
        """Record one entry; ``stack`` (frame lines) is grouped with identical stacks for stack.json.

        The entry reaches the journal at the next :meth:`commit`.
        """
        self.data[key] = entry
        self._queued.append((key, entry))
        sid = None
        if stack is not None:
            lines = tuple(stack)
            sid = self._stack_ids.get(lines)
            if sid is None:
                sid = self._stack_ids[lines] = len(self._stack_keys)
                self._stack_keys.append([])
                if self._journal is not None:
                    try:
                        self._journal.stack(sid, list(lines))
                    except OSError as exc:
                        self.fail(exc, self._journal.path)
            self._stack_keys[sid].append(key)
        self._sid[key] = sid

    def commit(self) -> None:
        """Journal the entries added since the last commit (call once their statistics are final)."""
        queued, self._queued = self._queued, []
        if self._journal is not None:
            try:
                for key, entry in queued:
                    self._journal.entry(key, entry, self._sid.get(key))
            except OSError as exc:
                self.fail(exc, self._journal.path)

    def set_parent(self, key: str, parent: str | None) -> None:
        if key not in self.construct:
            self.construct[key] = parent
            if self._journal is not None:
                try:
                    self._journal.construct(key, parent)
                except OSError as exc:
                    self.fail(exc, self._journal.path)

    def stack_json(self) -> dict:
        """stack.json in msprobe's grouped form: ``{"0": [[keys sharing a stack], [frame lines]], ...}``."""
        out = {}
        for lines, sid in self._stack_ids.items():
            if self._stack_keys[sid]:
                out[str(sid)] = [self._stack_keys[sid], list(lines)]
        return out

    def _write_files(self) -> None:
        """The three JSON files (raises OSError: callers hand it to :meth:`fail`)."""
        for name, doc in ((fmt.DUMP_JSON, {**self.header, "data": self.data}), (fmt.STACK_JSON, self.stack_json()),
                          (fmt.CONSTRUCT_JSON, self.construct)):
            path = os.path.join(self.dir, name)
            try:
                fmt.write_json_atomic(path, doc)
            except OSError as exc:
                if not exc.filename:
                    exc.filename = path
                raise

    def flush(self) -> None:
        """Rewrite the three JSON files in full (the journal stays until :meth:`close`)."""
        self.commit()
        if self.failed:
            return
        try:
            self._write_files()
        except OSError as exc:
            self.fail(exc, self.dir)
            return
        self._flushed = (len(self.data), len(self.construct))

    def close(self) -> None:
        """Final write (skipped when nothing changed since :meth:`flush`), then remove the journal."""
        self.commit()
        if self.failed:
            return
        if self._flushed != (len(self.data), len(self.construct)):
            try:
                self._write_files()
            except OSError as exc:
                self.fail(exc, self.dir)
                return
        if self._journal is not None:
            self._journal.close(remove=True)
            self._journal = None


def repair(step_rank_dir: str) -> int:
    """Finish a dump directory whose process died: rebuild the JSON files from its journal.

    This is :func:`dumpers.repair.repair_dir` (shared with the PyTorch dumper and the ``repair-dump`` command).

    Returns:
        The number of entries in the repaired dump.json (0 when there was no journal).
    """
    if not os.path.isfile(os.path.join(step_rank_dir, fmt.JOURNAL)):
        return 0
    return repair_dir(step_rank_dir).entries
