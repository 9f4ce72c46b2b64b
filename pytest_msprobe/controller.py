"""The controller of a check run: registered on the controller process only (like xdist's DSession).

It owns every hook that runs there: the header, xdist's worker set-up and collection, each item's report
(its payload becomes CSV rows, or an error row when the worker died), the NPU-vs-GPU compare at the end that
decides the exit status, and the terminal summary. It writes the CSV pair (flushing every row, so a killed
run leaves valid files) and keeps the resume record (:mod:`.resume`). With xdist workers, its collaborator
:class:`~.host_controller.HostController` places them on their hosts and handles hosts that go away.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable

import pytest

from . import reference, resume
from .precision.verdict import FAITHFUL, is_unfaithful
from .report import acc_csv, rounding
from .report.claim import sort_written
from .report.acc_csv import held, stop_run
from .api_items import ItemPayload, crash_reason

NAME = "msprobe-controller"


def _counts(c: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], str(kv[0])))) or "none"


class Controller:
    """CSV rows as results arrive, the resume record, and the summary of the run."""

    def __init__(self, config: Any, settings: Any, plan: resume.ResumePlan, *, dump_files: set,
                 device: str, baseline_failing: set | None = None, dump_order: Callable[[], list] | None = None,
                 hosts: Any = None, costs: dict | None = None, unwritten: list | None = None) -> None:
        self.config = config
        self.settings = settings
        self.plan = plan
        self.dump_files = dump_files          # real paths of the dump.json files being checked
        self._api_files: dict = {}            # node-id file part -> whether it is one of dump_files
        self.device = device                  # backend name (and ids)
        self.baseline_failing = set(baseline_failing or ())    # failing in --msprobe-baseline (sent to workers)
        self.dump_order = dump_order          # -> every API name in dump order
        self.hosts = hosts                    # HostController of a run with xdist workers, else None
        self.costs = costs                    # file node id -> each call's cost, for the workers' order
        self.unwritten = list(unwritten or ())    # --lf: APIs the CSV being continued lacks
        self.lastfailed = dict(plan.lastfailed) if plan.lastfailed is not None else None
        self.writer: Any = None
        self.io_error: OSError | None = None  # a CSV that could not be written: the run stopped, said once
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
        self.rounding: dict = {}              # failing API -> beyond / within the rounding of a correct kernel
        self.reference_writer: Any = None     # --msprobe-reference: the reference backend's CSV pair

    @classmethod
    def for_session(cls, config: Any, sess: Any, plan: resume.ResumePlan, baseline_failing: set,
                    costs: dict | None = None, unwritten: list | None = None) -> Controller:
        """The controller of ``sess``'s run. Raises ValueError: too many workers for a host's devices."""
        from .host_controller import HostController
        s = sess.settings
        hosts = HostController.for_run(config, sess)
        if hosts is not None:
            hosts.check_limits()
        return cls(config, s, plan, dump_files=sess.dump_files,
                   device=sess.backend_name() + (f" {s.devices}" if s.devices else ""),
                   baseline_failing=baseline_failing, hosts=hosts, costs=costs, unwritten=unwritten,
                   dump_order=lambda: [case.name for path in sess.dump_paths for case in sess.cases_of(path)])

    # --- files ------------------------------------------------------------------------------------------
    def prepare(self, selected: set | None) -> None:
        """Open the CSV pair; when continuing one, first drop (atomic rewrite) the rows of the APIs that are
        about to run again, plus duplicates and details rows without a result row, so that the finished pair
        holds every API exactly once. ``selected``: API names of the items that will run (None: unknown,
        then every API not in ``plan.done``)."""
        if self.writer is not None or self.io_error is not None:
            return
        plan = self.plan
        try:
            if plan.resumed:
                existing = acc_csv.finished_apis(plan.result_csv, include_failing=True)
                keep = existing - selected if selected is not None else existing & plan.done
                with held(plan.result_csv):         # no other check is writing the pair being rewritten
                    acc_csv.keep_apis(plan.result_csv, plan.details_csv, keep)
            self.writer = acc_csv.AccCsvWriter(plan.result_csv, plan.details_csv, precision=self.settings.precision)
        except OSError as exc:
            self.io_error = exc
            stop_run(exc)

    def is_api_nodeid(self, nodeid: str) -> bool:
        """A node id of one of our dump files (``<dump path>::<call name>``)."""
        if "::" not in nodeid:
            return False
        file_part = nodeid.split("::", 1)[0]
        known = self._api_files.get(file_part)
        if known is None:           # one real-path look-up per file, not per item and report
            path = os.path.realpath(os.path.join(str(self.config.rootpath), file_part))
            known = self._api_files[file_part] = path in self.dump_files
        return known

    def close(self) -> None:
        """Close the pair; after a parallel run, put this run's rows back in dump order."""
        if self.writer is None:
            self.prepare(set())
        if self.writer is None:                     # the pair could not be opened (said when it happened)
            return
        try:
            if self.order and len(self.written) > 1 and self.writer.failed is None:
                sort_written(self.writer, self.plan.result_csv, self.plan.details_csv, self.order)
            self.writer.close()                     # sorted while this run holds the pair, if still its own
        except OSError:
            pass                                    # the rows written so far stay as they are, whole

    # --- hooks: set-up and collection -----------------------------------------------------------------------
    def pytest_report_header(self, config: Any) -> list:
        s = self.settings
        return [f"msprobe: device {self.device}, standard {s.standard}, "
                f"seed {s.seed}, fail on {s.fail_on}" + (", random data" if s.random else ""),
                f"msprobe: writing {self.plan.result_csv}"
                + (f" (resumed, {len(self.plan.done)} APIs kept)" if self.plan.resumed else "")] + \
            ([f"msprobe: {s.standard_reason}"] if s.standard_reason else []) + \
            ([f"msprobe: hosts {self.hosts.describe()}"] if self.hosts is not None and self.hosts.describe() else [])

    # --- hooks: xdist workers and their hosts -----------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: Any, specs: Any) -> None:
        if self.hosts is not None:
            self.hosts.setup_nodes(specs)

    @pytest.hookimpl(optionalhook=True, trylast=True)
    def pytest_xdist_make_scheduler(self, config: Any, log: Any) -> Any:
        """xdist: ``--dist load`` by our scheduler (:mod:`.schedule`): the largest calls dealt out one per
        worker first, each local worker started once it has collected."""
        from .schedule import make
        return make(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        if self.hosts is not None:
            self.hosts.new_gateway(gateway)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist: each worker's brief (:mod:`.brief`): the settings, the resume plan, the baseline and the calls'
        costs (their order), so every worker (on any host) collects alike, and its host and device slot."""
        from .brief import WorkerBrief
        place = self.hosts.brief(node) if self.hosts is not None else {}
        brief = WorkerBrief(settings=place.pop("settings", None) or self.settings.brief(), done=sorted(self.plan.done),
                            timestamp=self.plan.timestamp, lastfailed=self.plan.lastfailed,
                            baseline_failing=sorted(self.baseline_failing), costs=self.costs or None,
                            unwritten=self.unwritten, **place)
        brief.send(node.workerinput)

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> Any:
        """A host that cannot start a worker, or is lost, reaches pytest as xdist's internal error: one line
        naming the host instead (:meth:`.host_controller.HostController.internal_error`)."""
        line = self.hosts.internal_error(excinfo.value) if self.hosts is not None else None
        if line is None:
            return None
        if self.hosts.lost:
            pytest.exit(line, returncode=pytest.ExitCode.TESTS_FAILED)
        dsession = self.config.pluginmanager.getplugin("dsession")
        manager = getattr(dsession, "nodemanager", None)
        if manager is not None:             # the run ends before its session starts: nothing else stops them
            manager.teardown_nodes()
        pytest.exit(line, returncode=pytest.ExitCode.USAGE_ERROR)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        if self.hosts is not None:
            self.hosts.node_ready(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if self.hosts is not None:
            self.hosts.node_down(node, error)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        if self.hosts is not None:
            self.hosts.crash_item(crashitem, report)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: Any) -> None:
        from .api_items import ApiItem
        self.prepare({item.name for item in session.items if isinstance(item, ApiItem)})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list) -> None:
        """xdist: the workers' collection (after deselection) tells which APIs run again; the CSV rows go
        back into dump order at the end (workers run the largest calls first)."""
        if not self.order:
            names = [nid.split("::", 1)[1] for nid in ids if self.is_api_nodeid(nid)]
            position = {name: i for i, name in enumerate(self.dump_order() if self.dump_order else names)}
            self.order = {name: position.get(name, len(position)) for name in names}
            self.prepare(set(names))

    # --- hooks: results ---------------------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.lastfailed is not None and self.is_api_nodeid(report.nodeid):
            resume.record(self.lastfailed, report)
        payload = ItemPayload.from_report(report)
        if payload is not None and report.when == "call":
            self._write(payload)
            return
        crashed = report.failed and payload is None and report.when in ("setup", "call", "???")
        if crashed and self.is_api_nodeid(report.nodeid):
            self._write(ItemPayload.crash(report.nodeid.split("::", 1)[1], crash_reason(report)))

    def _write(self, data: ItemPayload) -> None:
        if data.name in self.written:
            return
        self.written.add(data.name)
        if self.writer is None:
            self.prepare(None)
        if self.writer is None:
            return
        try:
            self.writer.write_rows(data.result, data.rows,
                                   acc_csv.mark_data_mode(data.mode or "", self.settings.standard),
                                   data.fidelity, data.expected)
        except OSError as exc:
            if self.io_error is None:
                self.io_error = exc
                stop_run(exc)
            return
        if data.reference:
            self._write_reference(data.reference)
        for row_name, text in zip(data.names, data.fidelity):
            if text:
                self.fidelity[text.split(":")[0].split(" ")[0]] += 1
                if is_unfaithful(text):
                    self.unfaithful.append((acc_csv.cell_name(row_name), text))
        self.forward[data.forward] += 1
        self.backward[data.backward or "blank"] += 1
        self.kinds[data.kind or data.mode or "-"] += 1
        for standard, status in data.standards:
            if standard:
                self.per_standard.setdefault(standard, Counter())[status] += 1
        if data.failing:
            self.worst.append(tuple(data.worst or (data.name, "")))
            self.rounding[data.name] = data.rounding or ""

    def _write_reference(self, ref: dict) -> None:
        """The reference backend's rows of one API, into its own CSV pair (``reference.paths``)."""
        if self.reference_writer is None:
            result, details = reference.paths(self.plan.details_csv, self.settings.out_dir, self.settings.reference)
            self.reference_writer = acc_csv.AccCsvWriter(result, details)
        self.reference_writer.write_rows(ref["result"], ref["rows"],
                                         acc_csv.mark_data_mode(ref.get("mode") or "", self.settings.standard),
                                         ref.get("fidelity") or [], ref.get("expected") or [])

    # --- hooks: the end ---------------------------------------------------------------------------------------
    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        if self.writer is None:
            self.prepare(set())
        try:
            if self.writer is not None:
                self.writer.sync()
        except OSError as exc:
            self.io_error = self.io_error or exc
        if self.lastfailed is not None:
            resume.write_lastfailed(self.config, self.lastfailed)
        ended = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
        if exitstatus in ended and self.io_error is None and not (self.hosts is not None and self.hosts.lost):
            resume.mark_finished(self.config, sorted(self.dump_files))
        gpu_csv = self.settings.gpu_csv
        if self.reference_writer is not None:
            self.reference_writer.close()
            gpu_csv = self.reference_writer.details_path
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
        lost = self.hosts.summary_lines() if self.hosts is not None else []
        if lost:
            terminalreporter.section("msprobe hosts")
            for line in lost:
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
                         if self.settings.gpu_csv or self.settings.reference else f"failing APIs ({len(self.worst)}):")
            for row, reason in self.worst[:10]:
                lines.append(f"  {row}: {reason}")
            if len(self.worst) > 10:
                lines.append(f"  ... {len(self.worst) - 10} more in the result CSV")
            lines.extend(rounding.summary_lines(self.rounding))
        if self.io_error is not None:
            lines.append(f"stopped: {self.io_error}")
        lines.append(f"result CSV:  {self.plan.result_csv}")
        lines.append(f"details CSV: {self.plan.details_csv}")
        lines.extend(self.apc_summary)
        return lines
