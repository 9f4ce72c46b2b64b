"""The dumpers' answer to their own I/O errors: report the first one once, switch the dump off, never stop training.

A full disk, a quota, a read-only or vanished directory or a file size limit makes a write of the dump fail.
The PyTorch and MindSpore dumpers hand the first such error to :class:`DumpOff`, which logs one message (the
path, the errno, what was kept and how to finish the cut-short step) and remembers that the dump is off; from
then on the debugger's ``start()``, ``stop()`` and ``step()`` do nothing, and training runs on. Steps written
before the error stay as they are; the step it cut short keeps its journal, which ``repair-dump`` turns into
dump.json once there is space.
"""
from __future__ import annotations

import errno as errno_names
import logging
import os
from typing import Optional

from dumpers import format as fmt


def describe(exc: BaseException) -> str:
    """``[Errno 28] ENOSPC: No space left on device`` for an OSError (text of anything else)."""
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code:
        name = errno_names.errorcode.get(code, "")
        return f"[Errno {code}] {name}: {exc.strerror or os.strerror(code)}"
    return str(exc) or type(exc).__name__


class DumpOff:
    """The first I/O error of one dump run and its single report."""

    def __init__(self, logger: logging.Logger, dump_path: str) -> None:
        self.log = logger
        self.dump_path = dump_path
        self.error: Optional[BaseException] = None
        self.message = ""

    @property
    def off(self) -> bool:
        """Whether an I/O error has switched the dump off."""
        return self.error is not None

    def trip(self, exc: BaseException, path: Optional[str] = None, step: Optional[int] = None,
             step_dir: Optional[str] = None) -> None:
        """Record ``exc`` (the first call only), log the one message, and switch the dump off."""
        if self.error is not None:
            return
        self.error = exc
        where = path or getattr(exc, "filename", None)
        what = f"cannot write {where} ({describe(exc)})" if where else f"cannot write the dump ({describe(exc)})"
        if step is None:
            kept = f"files written before stay readable under {self.dump_path}"
        elif step == 0:
            kept = "no step was finished before"
        else:
            kept = f"steps finished before step {step} stay readable under {self.dump_path}"
        if step_dir and os.path.isfile(os.path.join(step_dir, fmt.JOURNAL)):
            cut = (f"; step {step} is cut short: once there is space, `pytest-msprobe repair-dump {step_dir}` "
                   "finishes it from its journal")
        elif step is not None:
            cut = f"; nothing of step {step} was kept"
        else:
            cut = ""
        self.message = (f"msprobe dump: {what}; dumping is switched off for the rest of the run, training goes on. "
                        f"Kept: {kept}{cut}. Free disk space or choose another dump_path.")
        self.log.error("%s", self.message)
