"""The controller's reporter: CSV pair, resume plan, terminal summary (like junitxml, controller only).

Fed by ``pytest_runtest_logreport``; per-API rows arrive in ``report.user_properties`` (they survive
xdist). A worker that dies mid-item reaches us as a failed report without rows: the API gets an error row
with the reason. Resume state lives in ``config.cache`` under ``msprobe/run``.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

from .items import PROPERTY
from .precision.verdict import FAITHFUL, is_unfaithful
from .settings import Settings
from .report import acc_csv

CACHE_KEY = "msprobe/run"


def dump_key(paths: list) -> list:
    return sorted(os.path.realpath(p) for p in paths)


class ResumePlan:
    """Which CSV pair this run writes and which APIs in it are already complete."""

    def __init__(self, result_csv: str, details_csv: str, timestamp: str, done: set, resumed: bool) -> None:
        self.result_csv = result_csv
        self.details_csv = details_csv
        self.timestamp = timestamp
        self.done = done
        self.resumed = resumed

    @classmethod
    def decide(cls, config: Any, settings: Settings, dump_files: list) -> ResumePlan:
        """New pair, the pair of the last run (``--lf``), or a given result CSV (``--msprobe-result-csv``).

        ``done`` are the APIs that need not run again (deselected); the rows of the APIs that do run again
        are removed once the selection is known (:meth:`CsvReporter.prepare`).
        """
        lf = bool(getattr(config.option, "lf", False))
        cache = getattr(config, "cache", None)
        state = cache.get(CACHE_KEY, None) if cache is not None else None
        if settings.result_csv:
            result = settings.result_csv
            details = acc_csv.details_path_for(result)
            ts = acc_csv.timestamp_of(result) or acc_csv.new_timestamp()
            done = acc_csv.finished_apis(result, include_failing=not lf, fail_on=settings.fail_on)
            resumed = True
        elif (lf and isinstance(state, dict) and state.get("dumps") == dump_key(dump_files)
              and os.path.exists(str(state.get("result_csv")))):
            result, details = state["result_csv"], state["details_csv"]
            ts = state.get("timestamp") or acc_csv.timestamp_of(result) or acc_csv.new_timestamp()
            done = acc_csv.finished_apis(result, include_failing=False, fail_on=settings.fail_on)
            resumed = True
        else:
            ts = acc_csv.new_timestamp()
            result, details = acc_csv.csv_paths(settings.out_dir, ts)
            while os.path.exists(result) or os.path.exists(details):   # two runs within one second
                ts = _next_second(ts)
                result, details = acc_csv.csv_paths(settings.out_dir, ts)
            done = set()
            resumed = False
        if cache is not None:
            cache.set(CACHE_KEY, {"result_csv": os.path.abspath(result),
                                         "details_csv": os.path.abspath(details), "timestamp": ts,
                                         "dumps": dump_key(dump_files), "seed": settings.seed})
            if not lf and not settings.result_csv:
                _forget_last_failed(config, dump_files)
        return cls(os.path.abspath(result), os.path.abspath(details), ts, done, resumed)


def _next_second(ts: str) -> str:
    """``YYYYmmddHHMMSS`` one second later (file names keep msprobe's pattern)."""
    import datetime
    t = datetime.datetime.strptime(ts, "%Y%m%d%H%M%S") + datetime.timedelta(seconds=1)
    return t.strftime("%Y%m%d%H%M%S")


def _forget_last_failed(config: Any, dump_files: list) -> None:
    """A fresh run replaces the last one: drop stale ``--lf`` entries of these dumps now (a killed run
    never writes pytest's own lastfailed, and ``--lf`` must then pick the unfinished APIs from the CSV)."""
    lastfailed = config.cache.get("cache/lastfailed", None)
    if not isinstance(lastfailed, dict):
        return
    prefixes = set()
    for f in dump_files:
        try:
            prefixes.add(os.path.relpath(os.path.realpath(f), str(config.rootpath)).replace(os.sep, "/"))
        except ValueError:
            continue
    kept = {k: v for k, v in lastfailed.items() if k.split("::")[0] not in prefixes}
    if len(kept) != len(lastfailed):
        config.cache.set("cache/lastfailed", kept)


class CsvReporter:
    """Writes rows as results arrive and summarises the run."""

    def __init__(self, config: Any, settings: Settings, plan: ResumePlan) -> None:
        self.config = config
        self.settings = settings
        self.plan = plan
        self.writer: Any = None
        self.written: set = set()
        self.forward = Counter()
        self.backward = Counter()
        self.per_standard: dict = {}
        self.modes = Counter()
        self.worst: list = []
        self.failing = 0
        self.apc_summary: list = []
        self.dump_files: set = set()          # real paths, set by the plugin
        self.device = ""                      # backend name (and ids), set by the plugin
        self.order: dict = {}                 # API -> dump position, when workers write out of order
        self.fidelity = Counter()             # replayed outputs compared with the recording: verdict -> count
        self.unfaithful: list = []            # (row name, Replay Fidelity cell) of every unfaithful replay

    # --- files ------------------------------------------------------------------------------------------
    def prepare(self, selected: set | None) -> None:
        """Open the CSV pair; when continuing one, first drop (atomic rewrite) the rows of the APIs that are
        about to run again, plus duplicates and details rows without a result row, so that the finished pair
        holds every API exactly once. ``selected``: API names of the items that will run (None: unknown,
        then every API not in ``plan.done``)."""
        if self.writer is not None:
            return
        plan = self.plan
        if plan.resumed:
            existing = acc_csv.finished_apis(plan.result_csv, include_failing=True)
            keep = existing - selected if selected is not None else existing & plan.done
            acc_csv.keep_apis(plan.result_csv, plan.details_csv, keep)
        self.writer = acc_csv.AccCsvWriter(plan.result_csv, plan.details_csv, precision=self.settings.precision)

    def is_api_nodeid(self, nodeid: str) -> bool:
        """A node id of one of our dump files (``<dump path>::<call name>``)."""
        if "::" not in nodeid:
            return False
        path = os.path.realpath(os.path.join(str(self.config.rootpath), nodeid.split("::", 1)[0]))
        return path in self.dump_files

    # --- feeding ----------------------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: Any) -> None:
        data = None
        for key, value in getattr(report, "user_properties", ()) or ():
            if key == PROPERTY:
                data = value
        if data is not None and report.when == "call":
            self._write(data)
            return
        crashed = report.failed and data is None and report.when in ("setup", "call", "???")
        if crashed and self.is_api_nodeid(report.nodeid):
            name = report.nodeid.split("::", 1)[1]
            reason = _crash_reason(report)
            self._write_error(name, reason)

    def _write_error(self, name: str, reason: str) -> None:
        from .report.fmt import safe_text
        blank = [acc_csv.BLANK] * 20
        details = [[safe_text(f"{name}.forward.output.0"), *blank, "error", safe_text(reason)]]
        self._write({"name": name, "forward": "error", "backward": None,
                     "result": acc_csv.result_cells(name, "error", None, reason), "details": details,
                     "standards": [], "mode": "", "seed": None, "worst": [name, reason], "failing": True})

    def _write(self, data: dict) -> None:
        name = data["name"]
        if name in self.written:
            return
        self.written.add(name)
        if self.writer is None:
            self.prepare(None)
        fidelity = data.get("fidelity") or []
        self.writer.write_api(data["result"], data["details"], data.get("mode") or "", fidelity)
        for cells, text in zip(data["details"], fidelity):
            if text:
                self.fidelity[text.split(":")[0].split(" ")[0]] += 1
                if is_unfaithful(text):
                    self.unfaithful.append((acc_csv.cell_name(cells[0]), text))
        self.forward[data["forward"]] += 1
        self.backward[data["backward"] or "blank"] += 1
        self.modes[data.get("mode") or "-"] += 1
        for standard, status in data.get("standards", []):
            if standard:
                self.per_standard.setdefault(standard, Counter())[status] += 1
        if data.get("failing"):
            self.failing += 1
            self.worst.append(tuple(data.get("worst") or (name, "")))

    # --- end ----------------------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.writer is None:
            self.prepare(set())
        self.writer.sync()

    def close(self) -> None:
        """Close the pair; after a parallel run, put this run's rows back in dump order."""
        if self.writer is None:
            self.prepare(set())
        self.writer.close()
        if self.order and len(self.written) > 1:
            acc_csv.sort_apis(self.plan.result_csv, self.plan.details_csv, self.order)

    def summary_lines(self) -> list:
        s = self.settings
        lines = [(f"APIs checked: {len(self.written)} (this run); device {self.device or s.device_type or 'default'}; "
                 f"standard {s.standard}; seed {s.seed}")]
        if self.plan.resumed:
            lines.append(f"resumed: {len(self.plan.done)} APIs kept from the earlier run")
        lines.append("forward:  " + _counts(self.forward))
        lines.append("backward: " + _counts(self.backward))
        for standard in sorted(self.per_standard):
            lines.append(f"standard {standard}: {_counts(self.per_standard[standard])} (outputs)")
        if self.modes:
            lines.append("data: " + _counts(self.modes))
        if self.fidelity:
            faithful = sum(n for k, n in self.fidelity.items() if k in FAITHFUL)
            kinds = ", ".join(f"{k} {self.fidelity[k]}" for k in FAITHFUL if self.fidelity[k])
            lines.append(f"replay fidelity: {faithful} faithful ({kinds or 'none'}), {len(self.unfaithful)} unfaithful "
                         "(replayed outputs compared with the recorded ones)")
            for row, text in self.unfaithful[:10]:
                lines.append(f"  unfaithful {row}: {text}")
            if len(self.unfaithful) > 10:
                lines.append(f"  ... {len(self.unfaithful) - 10} more in the details CSV (column Replay Fidelity)")
        if self.worst:
            lines.append(f"APIs failing device vs bench ({len(self.worst)}; the NPU-vs-GPU compare below decides):"
                         if self.settings.gpu_csv else f"failing APIs ({len(self.worst)}):")
            for row, reason in self.worst[:10]:
                lines.append(f"  {row}: {reason}")
            if len(self.worst) > 10:
                lines.append(f"  ... {len(self.worst) - 10} more in the result CSV")
        lines.append(f"result CSV:  {self.plan.result_csv}")
        lines.append(f"details CSV: {self.plan.details_csv}")
        lines.extend(self.apc_summary)
        return lines


def _counts(c: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], str(kv[0])))) or "none"


def _crash_reason(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "crashed" in ln or "timeout" in ln.lower():
            return ln.strip()
    return ("internal error: " + lines[-1].strip()) if lines else "internal error"
