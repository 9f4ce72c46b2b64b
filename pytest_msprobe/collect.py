"""Collection: a dump.json file becomes a collector, each captured API call one test item.

Node ids are ``<path to dump.json>::<call name>`` (``step0/rank/dump.json::Functional.linear.0``), in dump
order, the same on every run and every xdist worker, so ``-k Functional.linear.0``, ``--lf`` and ``-n``
work as for ordinary tests. A worker on another host collects the controller's dump files (mapped to its
host) under the controller's node ids (its brief, :mod:`.brief`), so they agree on every host. An item runs its
case through the session, sends its payload (:mod:`.wire`) and takes the outcome that
:func:`pytest_msprobe.precision.verdict.item_outcome` decides in one call.
"""
from __future__ import annotations

import atexit
import gc
import os
from pathlib import Path
from typing import Any

import pytest

from . import reference
from .precision.verdict import FAILED, SKIPPED, is_failing, item_outcome
from .replay import CaseResult, data_mode, describe, seed_note, skip_result
from .wire import ItemPayload

SESSION_KEY = pytest.StashKey["Any"]()      # this process's CheckSession
SELECTION_KEY = pytest.StashKey["Any"]()    # this process's Selection
SETTLE_AT = 5000     # cases or items from which the objects made so far are frozen for the garbage collector


class ApiFailure(Exception):
    """An API whose outputs fail the precision standard (the item's failure, shown by repr_failure)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def node_path(rootpath: Any, path: str) -> str:
    """The node-id part of a dump file on the controller (relative to the rootdir, ``/``-separated; the real
    path when the file lies outside it)."""
    real = os.path.realpath(path)
    root = os.path.realpath(str(rootpath))
    rel = os.path.relpath(real, root) if real.startswith(root.rstrip(os.sep) + os.sep) else None
    return (rel or real).replace(os.sep, "/")


class RunHooks:
    """The hooks of a node that stands for a dump: the run's hooks, with every conftest the run loaded (the
    user's, none of the dump's). pytest's default looks the conftests up by the node's path, and older pytest
    imports the ``conftest.py`` files it finds there (``docs/security.md``)."""

    @property
    def ihook(self) -> Any:
        return self.config.hook     # type: ignore[attr-defined]


class DumpCollection:
    """Adds a collector for each dump file to the session's collection (after the tests on the command line),
    instead of the dump files being arguments pytest collects as paths (:mod:`.isolation`)."""

    def __init__(self, files: list) -> None:
        self.files = files

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: Any) -> Any:
        outcome = yield
        if isinstance(collector, pytest.Session):
            report = outcome.get_result()
            if report.result is not None:
                sess = collector.config.stash[SESSION_KEY]
                report.result.extend(DumpFile.for_path(collector, Path(f), sess.node_ids.get(os.path.realpath(f))
                                                       or node_path(collector.config.rootpath, f))
                                     for f in self.files)


class DumpFile(RunHooks, pytest.Collector):
    """A dump.json: one item per API call, in dump order. Not a ``pytest.File``: pytest never collected it
    from a path, so its ``--lf`` file filters leave it to the checker's own (:mod:`.select`)."""

    @classmethod
    def for_path(cls, parent: Any, path: Any, nodeid: str) -> DumpFile:
        """The collector of ``path`` under ``nodeid`` (:func:`node_path`, or the controller's name for it)."""
        return cls.from_parent(parent, name=os.path.basename(str(path)), path=path, nodeid=nodeid)

    def collect(self) -> Any:
        sess = self.config.stash[SESSION_KEY]
        selection = self.config.stash[SELECTION_KEY]
        try:
            cases = sess.cases_of(str(self.path))
        except Exception as exc:  # noqa: BLE001 - DumpError and anything a broken file raises
            raise self.CollectError(f"cannot read dump {self.path}: {exc}") from None
        from generators.dumpjson import paused_gc
        with paused_gc():           # a large dump makes many items and no garbage
            for index, case in enumerate(cases):
                yield ApiItem.from_parent(self, name=case.name, case=case, index=index,
                                          skip_reason=selection.skip_reason(case))
            freeze_if_many(len(cases), self.config)


class ApiItem(RunHooks, pytest.Item):
    """One captured API call: run on the bench and the device, judged by the precision standard."""

    def __init__(self, *, case: Any, index: int | None = None, skip_reason: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.index = index                    # the call's position in its dump file
        self.skip_reason = skip_reason
        self.result: CaseResult | None = None
        self.payload: ItemPayload | None = None   # for the controller, on the call's report (see wire)

    def runtest(self) -> None:
        sess = self.config.stash[SESSION_KEY]
        settings = sess.settings
        if self.skip_reason:
            result = skip_result(self.name, self.skip_reason,
                                 data_mode=data_mode(self.case, sess.run_options(str(self.path))))
        else:
            result = sess.run(self.case, str(self.path))
        self.result = result
        payload = self.payload = ItemPayload.of(result, fail_on=settings.fail_on, precision=settings.precision)
        self.user_properties.extend(payload.properties())
        note = seed_note(result)
        if result.skipped:
            pytest.skip(f"{result.message}{note}")
        gpu = None
        if settings.gpu_csv and payload.cells:      # dropout-like APIs have no rows: their own rule decides
            gpu = sess.gpu_reference().judge(self.name, payload.cells)
            if gpu is None:
                pytest.skip(f"NPU-vs-GPU compare: {self.name} has no rows in {settings.gpu_csv}")
        elif settings.reference and payload.cells:
            gpu = reference.judge(sess, self.case, str(self.path), self.name, payload)
            if gpu is None:
                pytest.skip(f"NPU-vs-GPU compare: {self.name} has no rows on the reference {settings.reference}")
        outcome = item_outcome(result.forward, result.backward, fail_on=settings.fail_on,
                               reference=(gpu.forward, gpu.backward) if gpu is not None else None,
                               fidelity=result.fidelity.values(), fidelity_mode=settings.fidelity)
        if outcome == SKIPPED and gpu is not None:
            pytest.skip(f"NPU-vs-GPU compare: SKIP {gpu.message.strip()}")
        if outcome != FAILED:
            return
        unfaithful = result.fidelity_failure(settings.fidelity)
        if gpu is not None and is_failing(gpu.forward, gpu.backward, fail_on=settings.fail_on):
            raise ApiFailure(f"NPU-vs-GPU compare: forward {gpu.forward}, backward {gpu.backward or '-'}"
                             f"{(': ' + gpu.message.strip()) if gpu.message.strip() else ''}\n"
                             f"device vs bench: {describe(result, note)}")
        if gpu is None and result.failing(settings.fail_on):
            raise ApiFailure(describe(result, note) + (f"\n{unfaithful}" if unfaithful else ""))
        raise ApiFailure(unfaithful)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, ApiFailure):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple:
        return self.path, None, f"{self.path.name}::{self.name}"


_THAWED_AT_CLEANUP = pytest.StashKey[bool]()
_AT_EXIT: list = []


def freeze_long_lived(config: Any) -> None:
    """Move every object made so far out of the garbage collector's way (``gc.freeze``).

    What a run makes before its calls (torch's modules, pytest's, the cases and items) lives to the end of the
    run and holds no garbage; each later collection, the ones between items and pytest's final ``gc.collect``
    calls included, would walk it all again for nothing, and so would the interpreter's teardown (about 0.2 s
    per process with torch). Freezing frees nothing and keeps nothing that would otherwise go. The run's cleanup
    thaws them (the plugin may run inside a longer-lived process, as under pytester); an exit handler freezes
    again just before the interpreter tears down."""
    gc.freeze()
    if not config.stash.get(_THAWED_AT_CLEANUP, False):
        config.stash[_THAWED_AT_CLEANUP] = True
        config.add_cleanup(gc.unfreeze)
    if not _AT_EXIT:
        atexit.register(gc.freeze)
        _AT_EXIT.append(True)


def freeze_if_many(count: int, config: Any) -> None:
    """With :data:`SETTLE_AT` or more cases or items, :func:`freeze_long_lived`. Called with automatic
    collection paused, it also spares the one pass that would follow the pause."""
    if count >= SETTLE_AT:
        freeze_long_lived(config)


def is_api_item(item: Any) -> bool:
    return isinstance(item, ApiItem)
