"""pytest hooks of pytest-msprobe: options, configuration, collection of dump files; nothing else.

Nothing heavy is imported here: torch, hypothesis and the generators load only when ``--msprobe-api-info``
is given. ``pytest_configure`` builds the run's objects: in every process a :class:`~.session.CheckSession`
and a :class:`~.select.Selection` (in ``config.stash``), on the controller also the
:class:`~.controller.Controller`, which owns the controller's hooks.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest


from . import hookspec
from .collect import SELECTION_KEY, SESSION_KEY, DumpFile, freeze_long_lived, is_api_item, node_path, settle
from .isolation import DumpCollection, check_option_form, collection_args
from .settings import Settings, add_options

CONTROLLER_KEY = pytest.StashKey["Any"]()
FORK_SERVER_KEY = pytest.StashKey["Any"]()


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: Any) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list) -> None:
    """As early as the options are known, before any conftest: a run with local xdist workers starts its fork
    server, which imports what every worker needs while the controller is still starting (:mod:`.forkserver`);
    this controller has imported pytest and its plugins, and so will the server that it forks from itself."""
    check_option_form(early_config)      # before any conftest: pytest may have rooted the run in a dump
    api_info = getattr(early_config.known_args_namespace, "msprobe_api_info", None)
    if api_info:
        _start_fork_server(early_config, early_config.known_args_namespace, before_fork=lambda: _read_ahead(api_info))


def _read_ahead(api_info: Any) -> None:
    """Before the controller forks its server: read the dumps, so that neither the server nor any worker
    forked from it reads or scans them again (``generators.loader.read_ahead``)."""
    from generators.loader import read_ahead
    read_ahead(api_info)


def _start_fork_server(config: Any, option: Any, controller: bool = False, before_fork: Any = None) -> Any:
    server = config.stash.get(FORK_SERVER_KEY, None)
    if server is None:
        from . import forkserver
        server = forkserver.for_run(option, config.pluginmanager.rewrite_hook, controller, before_fork)
        if server is not None:
            config.stash[FORK_SERVER_KEY] = server
            from .session import CheckSession
            server.send(list(CheckSession.ANY_RUN_MODULES))     # while the controller configures
    return server


def _usage(prefix: str, fn: Callable[[], Any], errors: tuple = (ValueError, OSError)) -> Any:
    """``fn()``, with the errors a user can fix turned into a usage error that names the option."""
    try:
        return fn()
    except errors as exc:
        raise pytest.UsageError(f"{prefix}: {exc}") from None


def pytest_configure(config: Any) -> None:
    if not getattr(config.option, "msprobe_api_info", None):
        return
    from generators.jsonsafe import paused_gc
    from generators.loader import find_dump_files

    from .collect import sent_files
    from .hosts import runs_calls_here, workers_run_calls
    from .resume import ResumePlan, read_lastfailed
    from .select import LastFailedGuard, Selection
    from .session import CheckSession
    settings = _usage("pytest-msprobe", lambda: Settings.from_config(config),
                      (ValueError, TypeError, argparse.ArgumentTypeError, OSError))
    workerinput = getattr(config, "workerinput", None)
    sent = _usage("pytest-msprobe", lambda: sent_files(workerinput))    # a worker on another host
    files = [p for p, _ in sent] if sent else _usage(
        "--msprobe-api-info", lambda: [os.path.abspath(f) for f in find_dump_files(settings.api_info)],
        (Exception,))     # DumpError: a missing path or a directory without dumps
    _set_args(config, files)
    sess = CheckSession(config, settings, files, node_ids=dict(sent or ()))
    config.stash[SESSION_KEY] = sess
    with paused_gc():               # the cases of a large dump are many objects and no garbage
        _usage("--msprobe-api-info", sess.load, (ValueError,))    # a file unreadable as a whole is a usage error
        settle(sum(len(sess.cases_of(f)) for f in files), config)
    # a process that runs no call here (--collect-only, or a controller whose workers run them) checks the
    # device without taking it: no torch import, no thread count set for calls that never run
    in_process = not config.option.collectonly and (workerinput is not None or not workers_run_calls(config))
    if in_process and runs_calls_here(config):
        sess.import_call_modules(config.pluginmanager.rewrite_hook)
    _usage("--msprobe-device-type", lambda: sess.check_backend(runs_calls_here(config), in_process), (ValueError,))
    plan, baseline = None, set()
    if workerinput is not None:
        _usage("pytest-msprobe", sess.check_host_workers, (ValueError,))
        done, timestamp = set(workerinput.get("msprobe_done", ())), workerinput.get("msprobe_timestamp", "")
        lastfailed = workerinput.get("msprobe_lastfailed", read_lastfailed(config))
        baseline = set(workerinput.get("msprobe_baseline_failing", ()))
    else:
        _usage("pytest-msprobe", lambda: sess.check_workers(getattr(config.option, "numprocesses", None)),
               (ValueError,))
        if settings.baseline:
            from .report.acc_csv import failing_apis
            baseline = _usage("--msprobe-baseline", lambda: failing_apis(settings.baseline, fail_on=settings.fail_on))
        if not config.option.collectonly:
            plan = _usage("pytest-msprobe", lambda: ResumePlan.decide(config, settings, files))
        done, timestamp = (plan.done, plan.timestamp) if plan else (set(), "")
        lastfailed = plan.lastfailed if plan else read_lastfailed(config)
    sess.begin(timestamp)
    server = _start_fork_server(config, config.option, controller=True) if workerinput is None else None
    if server is not None:              # what a worker imports to run its calls, then it may fork them
        server.send(sess.worker_modules())
        server.ready()
    costs = None                        # the order of the workers' calls, worked out here once (meanwhile
    if plan is not None and workers_run_calls(config) and not _narrowed(config, plan):  # the server imports
        costs = sess.call_costs(lambda path: node_path(config.rootpath, path))      # torch)
    selection = Selection(settings, is_api_item=is_api_item, done=done, baseline_failing=baseline,
                          baseline=(workerinput or {}).get("msprobe_baseline"),
                          lastfailed=lastfailed if getattr(config, "cache", None) is not None else None,
                          lf=bool(getattr(config.option, "lf", False)),
                          lf_no_failures=getattr(config.option, "last_failed_no_failures", "all"),
                          largest_first=workerinput is not None,
                          costs=(workerinput or {}).get("msprobe_costs"))
    config.stash[SELECTION_KEY] = selection
    config.pluginmanager.register(selection, "msprobe-selection")
    config.pluginmanager.register(LastFailedGuard(selection), "msprobe-lastfailed-guard")
    if plan is not None:
        from .controller import NAME, Controller
        controller = _usage("pytest-msprobe", lambda: Controller.for_session(config, sess, plan, baseline, server,
                                                                             costs))
        config.stash[CONTROLLER_KEY] = controller
        config.pluginmanager.register(controller, NAME)
        if workers_run_calls(config):   # a controller: what it has made so far lives to its end, and the full
            freeze_long_lived(config)   # passes at its end (pytest's among them) come after the last worker


def _narrowed(config: Any, plan: Any) -> bool:
    """Whether the workers may keep only some of the calls (``-k``, ``-m``, ``--lf``, ``--deselect``, node ids
    on the command line, a result CSV being continued): then each worker orders the few it keeps by their
    entries, rather than the controller parsing every entry of the dump to order them all."""
    opt = config.option
    return bool(getattr(opt, "keyword", "") or getattr(opt, "markexpr", "") or getattr(opt, "lf", False)
                or getattr(opt, "deselect", None) or plan.done or any("::" in str(a) for a in config.args))


def _set_args(config: Any, files: list) -> None:
    """The dumps are never collection arguments (a conftest.py near one would be imported): with no test paths
    on the command line nothing but the dumps is collected, and they are added to the session's collection."""
    explicit = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    config.args = collection_args(list(config.args), explicit, files)
    config.pluginmanager.register(DumpCollection(lambda session: _dump_collectors(session, files)),
                                  "msprobe-dump-collection")


def _dump_collectors(session: Any, files: list) -> list:
    sess = session.config.stash[SESSION_KEY]
    return [DumpFile.for_path(session, Path(f), sess.node_ids.get(os.path.realpath(f))
                              or node_path(session.config.rootpath, f)) for f in files]


def pytest_unconfigure(config: Any) -> None:
    server = config.stash.get(FORK_SERVER_KEY, None)
    if server is not None:
        del config.stash[FORK_SERVER_KEY]
        server.close()
    sess = config.stash.get(SESSION_KEY, None)
    if sess is not None:
        sess.close()
    controller = config.stash.get(CONTROLLER_KEY, None)
    if controller is not None:
        controller.close()
        config.pluginmanager.unregister(controller)
        del config.stash[CONTROLLER_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: Any) -> None:
    if session.config.stash.get(SESSION_KEY, None) is not None:
        _leave_out_idle_hypothesis(session.config)


def _leave_out_idle_hypothesis(config: Any) -> None:
    """Hypothesis' pytest plugin imports all of Hypothesis for its terminal summary. In a run that never
    imported Hypothesis (no Hypothesis test, option or example ran), that summary has nothing to say, so the
    plugin is left out of the rest of the session rather than paying the import for nothing."""
    if "hypothesis" in sys.modules:
        return
    plugin = config.pluginmanager.get_plugin("hypothesispytest")
    if plugin is not None:
        config.pluginmanager.unregister(plugin)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    """An API item's payload goes to the controller on its call report (:func:`.wire.attach`)."""
    outcome = yield
    if call.when == "call" and is_api_item(item) and item.payload is not None:
        from . import wire
        wire.attach(outcome.get_result(), item.payload)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: Any) -> None:
    if session.config.stash.get(SESSION_KEY, None) is not None:
        _reorder_only_parametrized(session.config)


def _reorder_only_parametrized(config: Any) -> None:
    """pytest's fixture manager reorders the collected items so that the tests sharing a parametrized fixture of
    a wider scope run together. A list with no parametrized item (a ``callspec``) comes out of it as it went in,
    after a walk of every item at every scope, about a second for 100 k API items; such a list is left as it is
    here, and any other is reordered by pytest as before. Where pytest's manager is not found as expected, it is
    left alone."""
    manager = config.pluginmanager.get_plugin("funcmanage")
    for impl in config.hook.pytest_collection_modifyitems.get_hookimpls():
        if impl.plugin is not manager or manager is None or tuple(impl.argnames) != ("items",):
            continue
        reorder = impl.function

        def reorder_parametrized(items: list, reorder: Callable = reorder) -> None:
            if any(hasattr(item, "callspec") for item in items):
                reorder(items)

        try:
            impl.function = reorder_parametrized
        except (AttributeError, TypeError):
            pass


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: Any) -> None:
    if session.config.stash.get(SESSION_KEY, None) is not None:
        settle(len(session.items), session.config)   # before the terminal lists them: its collections walk them

