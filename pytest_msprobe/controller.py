"""The controller of a check run: registered on the controller process only (like xdist's DSession).

It owns every hook that runs there: the header, xdist's worker set-up and collection, each item's report
(its payload becomes CSV rows, or an error row when the worker died), the NPU-vs-GPU compare at the end that
decides the exit status, and the terminal summary. It writes the CSV pair (flushing every row, so a killed
run leaves valid files) and keeps the resume record (:mod:`.resume`).
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from . import resume, wire
from .precision.verdict import FAITHFUL, is_unfaithful
from .report import acc_csv

NAME = "msprobe-controller"


def _counts(c: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], str(kv[0])))) or "none"


class Controller:
    """CSV rows as results arrive, the resume record, and the summary of the run."""

    def __init__(self, config: Any, settings: Any, plan: resume.ResumePlan, *, dump_files: set,
                 device: str) -> None:
        self.config = config
        self.settings = settings
        self.plan = plan
        self.dump_files = dump_files          # real paths of the dump.json files being checked
        self.device = device                  # backend name (and ids)
        self.lastfailed = dict(plan.lastfailed) if plan.lastfailed is not None else None
        self.writer: Any = None
        self.written: set = set()
        self.forward: Counter = Counter()
        self.backward: Counter = Counter()
        self.per_standard: dict = {}
        self.kinds: Counter = Counter()
        self.worst: list = []
        self.apc_summary: list = []
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

    def close(self) -> None:
        """Close the pair; after a parallel run, put this run's rows back in dump order."""
        if self.writer is None:
            self.prepare(set())
        self.writer.close()
        if self.order and len(self.written) > 1:
            acc_csv.sort_apis(self.plan.result_csv, self.plan.details_csv, self.order)

    # --- hooks: set-up and collection -----------------------------------------------------------------------
    def pytest_report_header(self, config: Any) -> list:
        s = self.settings
        return [f"msprobe: device {self.device}, standard {s.standard}, "
                f"seed {s.seed}, fail on {s.fail_on}" + (", random data" if s.random else ""),
                f"msprobe: writing {self.plan.result_csv}"
                + (f" (resumed, {len(self.plan.done)} APIs kept)" if self.plan.resumed else "")]

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist: workers learn the resume plan from the controller, so every worker collects alike."""
        node.workerinput["msprobe_done"] = sorted(self.plan.done)
        node.workerinput["msprobe_timestamp"] = self.plan.timestamp
        node.workerinput["msprobe_lastfailed"] = self.plan.lastfailed

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: Any) -> None:
        from .collect import ApiItem
        self.prepare({item.name for item in session.items if isinstance(item, ApiItem)})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list) -> None:
        """xdist: the workers' collection (after deselection) tells which APIs run again."""
        if not self.order:
            names = [nid.split("::", 1)[1] for nid in ids if self.is_api_nodeid(nid)]
            self.order = {name: i for i, name in enumerate(names)}
            self.prepare(set(names))

    # --- hooks: results ---------------------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.lastfailed is not None and self.is_api_nodeid(report.nodeid):
            resume.record(self.lastfailed, report)
        data = wire.parse(report)
        if data is not None and report.when == "call":
            self._write(data)
            return
        crashed = report.failed and data is None and report.when in ("setup", "call", "???")
        if crashed and self.is_api_nodeid(report.nodeid):
            self._write(wire.crash(report.nodeid.split("::", 1)[1], wire.crash_reason(report)))

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
        self.kinds[data.get("kind", data.get("mode")) or "-"] += 1
        for standard, status in data.get("standards", []):
            if standard:
                self.per_standard.setdefault(standard, Counter())[status] += 1
        if data.get("failing"):
            self.worst.append(tuple(data.get("worst") or (name, "")))

    # --- hooks: the end ---------------------------------------------------------------------------------------
    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        if self.writer is None:
            self.prepare(set())
        self.writer.sync()
        if self.lastfailed is not None:
            resume.write_lastfailed(self.config, self.lastfailed)
        gpu_csv = self.settings.gpu_csv
        if gpu_csv and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = self._compare_against_gpu(gpu_csv)

    def _compare_against_gpu(self, gpu_csv: str) -> Any:
        """The NPU-vs-GPU compare of the whole run (msprobe's final verdict): the CSVs, the exit status."""
        from .precision.verdict import compare_failures
        from .report.apc import run_compare
        try:
            verdicts = run_compare(self.plan.details_csv, gpu_csv, self.settings.out_dir,
                                   version=self.settings.standard)
        except (OSError, ValueError) as exc:
            self.apc_summary.append(f"api_precision_compare against {gpu_csv} failed: {exc}")
            return pytest.ExitCode.TESTS_FAILED
        bad = compare_failures(verdicts)
        self.apc_summary.append(f"api_precision_compare against {gpu_csv}: {len(verdicts)} APIs, "
                                f"{len(bad)} error; this verdict decides the exit status")
        if getattr(verdicts, "result_csv", None):
            self.apc_summary.append(f"compare result CSV: {verdicts.result_csv}")
        self.apc_summary.extend(f"  compare error: {name}" for name in bad[:10])
        return pytest.ExitCode.TESTS_FAILED if bad else pytest.ExitCode.OK

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: Any, config: Any) -> None:
        terminalreporter.section("msprobe accuracy check")
        for line in self.summary_lines():
            terminalreporter.write_line(line)

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
        if self.kinds:
            lines.append("data: " + _counts(self.kinds))
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
