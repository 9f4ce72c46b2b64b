"""What the controller sends an xdist worker: one definition, written by :meth:`WorkerBrief.send` and read by
:meth:`WorkerBrief.read`.

It travels in ``workerinput`` (xdist's documented channel, filled in ``pytest_configure_node``) under one key,
as plain JSON-able data: the run's settings resolved on the controller (paths mapped to the worker's host),
the resume plan's decisions, the baseline's failing APIs, the calls' costs (their order) and the worker's
place (its host, its device slot there, that host's worker count, and on another host the dump files under
the controller's node ids). A worker needs neither the controller's ini file, its ``--msprobe-config`` nor its
caches.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

KEY = "msprobe_brief"


@dataclass
class WorkerBrief:
    """The controller's decisions for one worker."""

    settings: dict = field(default_factory=dict)      # Settings.brief(): the resolved options
    done: list = field(default_factory=list)          # APIs complete in the CSV being continued (deselected)
    timestamp: str = ""                               # of the CSV pair (the error-data directory's name)
    lastfailed: dict | None = None                    # node id -> True of failing API items (None: no record)
    baseline_failing: list = field(default_factory=list)    # APIs failing in --msprobe-baseline (xfail)
    unwritten: list = field(default_factory=list)     # --lf: APIs the CSV being continued lacks (they run too)
    costs: dict | None = None                         # file node id -> each call's cost, in dump order
    host: str | None = None                           # the worker's host, as the controller names it
    slot: int | None = None                           # its device slot on that host
    host_workers: int = 0                             # the workers of that host
    files: list | None = None                         # another host: [path there, controller's node id]

    def send(self, workerinput: dict) -> None:
        """Put the brief into a worker's ``workerinput``."""
        workerinput[KEY] = dataclasses.asdict(self)

    @classmethod
    def read(cls, config: Any) -> WorkerBrief | None:
        """The brief of this worker; None on a process that is no xdist worker of a check run."""
        data = (getattr(config, "workerinput", None) or {}).get(KEY)
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def sent_files(self) -> list | None:
        """(path, node id) of each dump file sent to a worker on another host; None elsewhere.

        Raises:
            ValueError: a file that is not there, naming the host and the option that maps paths.
        """
        if not self.files:
            return None
        for path, _ in self.files:
            if not os.path.isfile(path):
                raise ValueError(f"on host {self.host or '?'}: dump file {path} does not exist; put the dump on "
                                 f"storage that every host reaches at the same path, or give its directory there "
                                 f"with --msprobe-host-path")
        return [(str(path), str(nodeid)) for path, nodeid in self.files]
