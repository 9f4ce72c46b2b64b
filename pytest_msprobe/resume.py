"""Resume state of the checker, in pytest's cache under its own keys.

``msprobe/run/<digest of the dumps' real paths>``: the CSV pair of the last run on that set of dumps (``--lf``
continues it, whatever other dumps were checked since). ``msprobe/lastfailed``:
the node ids of failing API items, kept as pytest keeps ``cache/lastfailed`` (read at the start, a failure
adds, a pass or a skip removes, written at the session end); in addition a fresh run writes it at once without
its dumps' entries, so that a run killed before its end leaves a record that fits its new CSV (the CSV then
says what finished). pytest's own file is never rewritten.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any

from .report import acc_csv, claim

RUN_KEY = "msprobe/run"                 # + "/<digest>": one record per set of dumps
LASTFAILED_KEY = "msprobe/lastfailed"


def dump_key(paths: list) -> list:
    return sorted(os.path.realpath(p) for p in paths)


def run_key(paths: list) -> str:
    """The cache key of the last run on these dumps."""
    digest = hashlib.sha256("\0".join(dump_key(paths)).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{RUN_KEY}/{digest}"


def _finished(result: str, **kwargs: Any) -> set:
    """The finished APIs of a result CSV being continued (errors name it)."""
    try:
        return acc_csv.finished_apis(result, **kwargs)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot continue the result CSV {result}: {exc}") from None


def _node_prefixes(config: Any, dump_files: list) -> set:
    """The node-id path parts (relative to the root dir) of the dump files."""
    prefixes = set()
    for f in dump_files:
        try:
            prefixes.add(os.path.relpath(os.path.realpath(f), str(config.rootpath)).replace(os.sep, "/"))
        except ValueError:
            continue
    return prefixes


class ResumePlan:
    """Which CSV pair this run writes, which APIs in it are already complete, and the failing API items."""

    def __init__(self, result_csv: str, details_csv: str, timestamp: str, done: set, resumed: bool,
                 lastfailed: dict | None = None, written: set | None = None) -> None:
        self.result_csv = result_csv
        self.details_csv = details_csv
        self.timestamp = timestamp
        self.done = done
        self.resumed = resumed
        self.lastfailed = lastfailed          # None: no cache in this run
        self.written = written                # --lf continuing a CSV: every API it holds (None otherwise)

    def unwritten(self, names: Any) -> list:
        """Of ``names``, the APIs the CSV continued by ``--lf`` lacks (a run stopped before it checked them):
        ``--lf`` runs them besides the recorded failures."""
        return [] if self.written is None else [n for n in names if n not in self.written]

    @classmethod
    def decide(cls, config: Any, settings: Any, dump_files: list) -> ResumePlan:
        """New pair, the pair of the last run (``--lf``), or a given result CSV (``--msprobe-result-csv``).

        ``done`` are the APIs that need not run again (deselected); the rows of the APIs that do run again
        are removed once the selection is known (:meth:`Controller.prepare`).
        """
        lf = bool(getattr(config.option, "lf", False))
        written = None
        cache = getattr(config, "cache", None)
        state = cache.get(run_key(dump_files), None) if cache is not None else None
        if settings.result_csv:
            result = settings.result_csv
            details = acc_csv.details_path_for(result)
            ts = acc_csv.timestamp_of(result) or acc_csv.new_timestamp()
            done = _finished(result, include_failing=not lf, fail_on=settings.fail_on)
            resumed = True
        elif (lf and isinstance(state, dict) and state.get("dumps") == dump_key(dump_files)
              and os.path.exists(str(state.get("result_csv")))):
            result, details = state["result_csv"], state["details_csv"]
            ts = state.get("timestamp") or acc_csv.timestamp_of(result) or acc_csv.new_timestamp()
            done = _finished(result, include_failing=False, fail_on=settings.fail_on)
            if state.get("unfinished"):        # the run stopped before it checked every call it selected
                written = _finished(result, include_failing=True)
            resumed = True
        else:
            ts, result, details = claim.claim_pair(settings.out_dir)   # created here: no other run takes it
            done = set()
            resumed = False
        lastfailed = None
        if cache is not None:
            cache.set(run_key(dump_files), {"result_csv": os.path.abspath(result),
                                            "details_csv": os.path.abspath(details), "timestamp": ts,
                                            "dumps": dump_key(dump_files), "seed": settings.seed,
                                            "unfinished": True})
            lastfailed = read_lastfailed(config)
            if not lf and not settings.result_csv:       # a fresh run replaces the last one on these dumps
                prefixes = _node_prefixes(config, dump_files)
                kept = {k: v for k, v in lastfailed.items() if k.split("::")[0] not in prefixes}
                if len(kept) != len(lastfailed):
                    cache.set(LASTFAILED_KEY, kept)      # what a run killed before its end leaves behind
        return cls(os.path.abspath(result), os.path.abspath(details), ts, done, resumed, lastfailed, written)


def mark_finished(config: Any, dump_files: list) -> None:
    """The run checked every call it selected: a later ``--lf`` repeats its failures only (until then the
    record says ``unfinished``, and ``--lf`` also runs the calls missing from its CSV)."""
    cache = getattr(config, "cache", None)
    key = run_key(dump_files)
    state = cache.get(key, None) if cache is not None else None
    if isinstance(state, dict) and state.get("unfinished"):
        cache.set(key, {**state, "unfinished": False})


def read_lastfailed(config: Any) -> dict:
    """The recorded failing API items (node id -> True); empty without a record."""
    cache = getattr(config, "cache", None)
    value = cache.get(LASTFAILED_KEY, None) if cache is not None else None
    return {str(k): True for k in value} if isinstance(value, dict) else {}


def record(lastfailed: dict, report: Any) -> None:
    """Update the record with one report of an API item, as pytest updates its own."""
    if (report.when == "call" and report.passed) or report.skipped:
        lastfailed.pop(report.nodeid, None)
    elif report.failed:
        lastfailed[report.nodeid] = True


def write_lastfailed(config: Any, lastfailed: dict) -> None:
    cache = getattr(config, "cache", None)
    if cache is not None and read_lastfailed(config) != lastfailed:
        cache.set(LASTFAILED_KEY, lastfailed)
