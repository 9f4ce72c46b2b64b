"""pytest hooks of pytest-msprobe: options, collection of dump files, xdist wiring, report lifecycle.

Nothing heavy is imported here: torch, hypothesis and the generators load only when
``--msprobe-api-info`` is given. State lives in objects kept in ``config.stash`` (per process) and a
reporter plugin registered on the controller only.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from . import hookspec
from .items import SESSION_KEY, DumpFile
from .settings import Settings, add_options

REPORTER_KEY = pytest.StashKey["Any"]()
REPORTER_NAME = "msprobe-reporter"


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: Any) -> None:
    add_options(parser)


def pytest_configure(config: Any) -> None:
    if not getattr(config.option, "msprobe_api_info", None):
        return
    from .session import CheckSession
    try:
        settings = Settings.from_config(config)
    except (ValueError, TypeError, argparse.ArgumentTypeError, OSError) as exc:
        raise pytest.UsageError(f"pytest-msprobe: {exc}") from None
    from generators.loader import find_dump_files
    try:
        files = [os.path.abspath(f) for f in find_dump_files(settings.api_info)]
    except Exception as exc:  # noqa: BLE001 - DumpError: a missing path or a directory without dumps
        raise pytest.UsageError(f"--msprobe-api-info: {exc}") from None
    _set_args(config, files)
    sess = CheckSession(config, settings)
    sess.dump_files = {os.path.realpath(f) for f in files}
    sess.dump_paths = files
    config.stash[SESSION_KEY] = sess
    try:
        if files:
            sess.cases_of(files[0])     # loads every dump once: a file unreadable as a whole is a usage error
    except Exception as exc:  # noqa: BLE001 - DumpError, or anything else a damaged file raises
        from generators.loader import DumpError
        detail = str(exc) if isinstance(exc, DumpError) else (f"cannot load {', '.join(files)}: "
                                                               f"{type(exc).__name__} {exc}".rstrip())
        raise pytest.UsageError(f"--msprobe-api-info: {detail}") from None
    try:
        backend, _ = sess.backend()
    except ValueError as exc:
        raise pytest.UsageError(f"--msprobe-device-type: {exc}") from None
    from .replay.recorded import usage_problem
    problem = usage_problem(backend, [c for f in files for c in sess.cases_of(f)])
    if problem:
        raise pytest.UsageError(f"--msprobe-device-type recorded: {problem}")
    if settings.baseline:
        from .report.acc_csv import failing_apis
        try:
            sess.baseline_failing = failing_apis(settings.baseline, fail_on=settings.fail_on)
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--msprobe-baseline: {exc}") from None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        sess.done = set(workerinput.get("msprobe_done", ()))
        sess.timestamp = workerinput.get("msprobe_timestamp", "")
        return
    _check_workers(config, sess, backend)
    if config.option.collectonly:
        return
    from .reporter import CsvReporter, ResumePlan
    try:
        plan = ResumePlan.decide(config, settings, files)
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"pytest-msprobe: cannot continue the result CSV: {exc}") from None
    sess.done = plan.done
    sess.timestamp = plan.timestamp
    reporter = CsvReporter(config, settings, plan)
    reporter.dump_files = sess.dump_files
    reporter.device = sess.backend_name() + (f" {settings.devices}" if settings.devices else "")
    config.stash[REPORTER_KEY] = reporter
    config.pluginmanager.register(reporter, REPORTER_NAME)


def _set_args(config: Any, files: list) -> None:
    """With no test paths on the command line, collect just the dumps; otherwise add them."""
    explicit = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    args = list(config.args) if explicit else []
    have = {os.path.realpath(a.split("::")[0]) for a in args}
    args += [f for f in files if os.path.realpath(f) not in have]
    config.args = args


def _check_workers(config: Any, sess: Any, backend: Any) -> None:
    from .devices import check_worker_limit
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers <= 0:
        return
    ids = sess.settings.devices or list(range(max(1, backend.device_count())))
    try:
        check_worker_limit(backend, workers, ids, sess.settings.max_workers_per_device)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-msprobe: {exc}") from None


def pytest_unconfigure(config: Any) -> None:
    sess = config.stash.get(SESSION_KEY, None)
    if sess is not None:
        sess.close()
    reporter = config.stash.get(REPORTER_KEY, None)
    if reporter is not None:
        reporter.close()
        config.pluginmanager.unregister(reporter)
        del config.stash[REPORTER_KEY]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: workers learn the resume plan from the controller, so every worker collects alike."""
    sess = node.config.stash.get(SESSION_KEY, None)
    if sess is not None:
        node.workerinput["msprobe_done"] = sorted(sess.done)
        node.workerinput["msprobe_timestamp"] = sess.timestamp


def pytest_collect_file(file_path: Any, parent: Any) -> Any:
    sess = parent.config.stash.get(SESSION_KEY, None)
    if sess is None or os.path.realpath(file_path) not in sess.dump_files:
        return None
    return DumpFile.from_parent(parent, path=file_path)


def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    sess = config.stash.get(SESSION_KEY, None)
    if sess is None:
        return
    from .items import ApiItem
    if sess.done:
        keep, drop = [], []
        for item in items:
            (drop if isinstance(item, ApiItem) and item.name in sess.done else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    if sess.baseline_failing:
        for item in items:
            if isinstance(item, ApiItem) and item.name in sess.baseline_failing:
                item.add_marker(pytest.mark.xfail(reason=f"already failing in the baseline "
                                                         f"{sess.settings.baseline}", strict=False))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: Any) -> None:
    reporter = session.config.stash.get(REPORTER_KEY, None)
    if reporter is not None:
        from .items import ApiItem
        reporter.prepare({item.name for item in session.items if isinstance(item, ApiItem)})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list) -> None:
    """xdist controller: the workers' collection (after deselection) tells which APIs run again."""
    reporter = node.config.stash.get(REPORTER_KEY, None)
    if reporter is not None and not reporter.order:
        names = [nid.split("::", 1)[1] for nid in ids if reporter.is_api_nodeid(nid)]
        reporter.order = {name: i for i, name in enumerate(names)}
        reporter.prepare(set(names))


def pytest_report_header(config: Any) -> Any:
    sess = config.stash.get(SESSION_KEY, None)
    reporter = config.stash.get(REPORTER_KEY, None)
    if sess is None or reporter is None:
        return None
    s = sess.settings
    return [f"msprobe: device {sess.backend_name()}{s.devices or ''}, standard {s.standard}, "
            f"seed {s.seed}, fail on {s.fail_on}" + (", random data" if s.random else ""),
            f"msprobe: writing {reporter.plan.result_csv}"
            + (f" (resumed, {len(reporter.plan.done)} APIs kept)" if reporter.plan.resumed else "")]


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    config = session.config
    reporter = config.stash.get(REPORTER_KEY, None)
    if reporter is None:
        return
    reporter.sync()
    gpu_csv = reporter.settings.gpu_csv
    if gpu_csv and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        from .report.apc import run_compare
        try:
            verdicts = run_compare(reporter.plan.details_csv, gpu_csv, reporter.settings.out_dir,
                                   version=reporter.settings.standard)
        except (OSError, ValueError) as exc:
            reporter.apc_summary.append(f"api_precision_compare against {gpu_csv} failed: {exc}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        from .precision.verdict import compare_failures
        bad = compare_failures(verdicts)
        reporter.apc_summary.append(f"api_precision_compare against {gpu_csv}: {len(verdicts)} APIs, "
                                    f"{len(bad)} error; this verdict decides the exit status")
        if getattr(verdicts, "result_csv", None):
            reporter.apc_summary.append(f"compare result CSV: {verdicts.result_csv}")
        reporter.apc_summary.extend(f"  compare error: {name}" for name in bad[:10])
        session.exitstatus = pytest.ExitCode.TESTS_FAILED if bad else pytest.ExitCode.OK


def pytest_terminal_summary(terminalreporter: Any, exitstatus: Any, config: Any) -> None:
    reporter = config.stash.get(REPORTER_KEY, None)
    if reporter is None:
        return
    terminalreporter.section("msprobe accuracy check")
    for line in reporter.summary_lines():
        terminalreporter.write_line(line)
