"""The objects of a check run, built from pytest's config (called by :mod:`.plugin`'s hooks).

In every process a :class:`~.session.CheckSession` and a :class:`~.api_items.Selection` (in ``config.stash``), on
the controller also the :class:`~.controller.Controller`, which owns the controller's hooks. An xdist worker
takes what the controller decided from its brief (:mod:`.brief`) instead of deciding it again.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

import pytest

from .api_items import SELECTION_KEY, SESSION_KEY, freeze_if_many, freeze_long_lived, is_api_item, node_path
from .settings import Settings

CONTROLLER_KEY = pytest.StashKey["Any"]()


def usage(prefix: str, fn: Callable[[], Any], errors: tuple = (ValueError, OSError)) -> Any:
    """``fn()``, with the errors a user can fix turned into a usage error that names the option."""
    try:
        return fn()
    except errors as exc:
        raise pytest.UsageError(f"{prefix}: {exc}") from None


def configure(config: Any) -> None:
    """Build the run's objects (nothing without ``--msprobe-api-info``)."""
    from generators.dumpjson import paused_gc
    from generators.loader import find_dump_files

    from .brief import WorkerBrief
    from .hosts import runs_calls_here, workers_run_calls
    from .resume import ResumePlan, read_lastfailed
    from .api_items import LastFailedGuard, Selection
    from .session import CheckSession
    brief = WorkerBrief.read(config)
    settings = Settings.from_brief(brief.settings) if brief is not None else usage(
        "pytest-msprobe", lambda: Settings.from_config(config),
        (ValueError, TypeError, argparse.ArgumentTypeError, OSError))
    sent = usage("pytest-msprobe", brief.sent_files) if brief is not None else None   # a worker on another host
    files = [p for p, _ in sent] if sent else usage(
        "--msprobe-api-info", lambda: [os.path.abspath(f) for f in find_dump_files(settings.api_info)],
        (Exception,))     # DumpError: a missing path or a directory without dumps
    _set_args(config, files)
    sess = CheckSession(config, settings, files, node_ids=dict(sent or ()), brief=brief)
    config.stash[SESSION_KEY] = sess
    with paused_gc():               # the cases of a large dump are many objects and no garbage
        usage("--msprobe-api-info", sess.load, (ValueError,))    # a file unreadable as a whole is a usage error
        freeze_if_many(sum(len(sess.cases_of(f)) for f in files), config)
    worker = hasattr(config, "workerinput")
    # a process that runs no call here (--collect-only, or a controller whose workers run them) checks the
    # device without taking it: no torch import, no thread count set for calls that never run
    in_process = not config.option.collectonly and (worker or not workers_run_calls(config))
    if in_process and runs_calls_here(config):
        sess.import_call_modules()
    usage("--msprobe-device-type", lambda: sess.check_backend(runs_calls_here(config), in_process), (ValueError,))
    plan = None
    if brief is not None:
        usage("pytest-msprobe", sess.check_host_workers, (ValueError,))
        done, timestamp, baseline, unwritten = set(brief.done), brief.timestamp, set(brief.baseline_failing), \
            brief.unwritten
        lastfailed = brief.lastfailed if brief.lastfailed is not None else read_lastfailed(config)
    else:
        if not worker:
            usage("pytest-msprobe", lambda: sess.check_workers(getattr(config.option, "numprocesses", None)),
                  (ValueError,))
        baseline = set()
        if settings.baseline:
            from .report.acc_csv import failing_apis
            baseline = usage("--msprobe-baseline", lambda: failing_apis(settings.baseline, fail_on=settings.fail_on))
        if not config.option.collectonly and not worker:
            plan = usage("pytest-msprobe",
                         lambda: ResumePlan.decide(config, settings, files))
        done, timestamp = (plan.done, plan.timestamp) if plan else (set(), "")
        unwritten = plan.unwritten(c.name for f in files for c in sess.cases_of(f)) if plan else []
        lastfailed = plan.lastfailed if plan else read_lastfailed(config)
    sess.timestamp = timestamp       # of the run's CSV pair (the controller decided it, or told this worker)
    costs = None                        # the order of the workers' calls, worked out here once
    if plan is not None and workers_run_calls(config) and not _narrowed(config, plan):
        costs = sess.call_costs(lambda path: node_path(config.rootpath, path))
    selection = Selection(settings, is_api_item=is_api_item, done=done, baseline_failing=baseline,
                          lastfailed=lastfailed if getattr(config, "cache", None) is not None else None,
                          lf=bool(getattr(config.option, "lf", False)),
                          lf_no_failures=getattr(config.option, "last_failed_no_failures", "all"),
                          largest_first=worker, costs=brief.costs if brief is not None else None,
                          unwritten=unwritten)
    config.stash[SELECTION_KEY] = selection
    config.pluginmanager.register(selection, "msprobe-selection")
    config.pluginmanager.register(LastFailedGuard(selection), "msprobe-lastfailed-guard")
    if plan is not None:
        from .controller import NAME, Controller
        controller = usage("pytest-msprobe", lambda: Controller.for_session(config, sess, plan, baseline, costs,
                                                                            unwritten))
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
    from .api_items import DumpCollection
    from .isolation import collection_args
    explicit = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    config.args = collection_args(list(config.args), explicit, files)
    config.pluginmanager.register(DumpCollection(files), "msprobe-dump-collection")


def unconfigure(config: Any) -> None:
    sess = config.stash.get(SESSION_KEY, None)
    if sess is not None:
        sess.close()
    controller = config.stash.get(CONTROLLER_KEY, None)
    if controller is not None:
        controller.close()
        config.pluginmanager.unregister(controller)
        del config.stash[CONTROLLER_KEY]


def leave_out_idle_hypothesis(config: Any) -> None:
    """Hypothesis' pytest plugin imports all of Hypothesis for its terminal summary. In a run that never
    imported Hypothesis (no Hypothesis test, option or example ran), that summary has nothing to say, so the
    plugin is left out of the rest of the session rather than paying the import for nothing."""
    if "hypothesis" in sys.modules:
        return
    plugin = config.pluginmanager.get_plugin("hypothesispytest")
    if plugin is not None:
        config.pluginmanager.unregister(plugin)
