"""The API items of a check run: a dump.json becomes a collector and each captured call one item, the selection
decides which of them run, and each sends the controller its payload.

Collection: node ids are ``<path to dump.json>::<call name>`` (``step0/rank/dump.json::Functional.linear.0``), in
dump order, the same on every run and every xdist worker, so ``-k Functional.linear.0``, ``--lf`` and ``-n`` work
as for ordinary tests. A worker on another host collects the controller's dump files (mapped to its host) under
the controller's node ids (its brief, :mod:`.brief`), so they agree on every host. An item runs its case through
the session, makes its payload and takes the outcome that :func:`pytest_msprobe.precision.verdict.item_outcome`
decides in one call.

Selection (:class:`Selection`): white/black lists and ``--msprobe-filter-api`` (a SKIP with the reason), resume
and baseline (deselection and xfail), and ``--lf`` over the API items from the checker's own record. One
:class:`Selection` is registered in every process that collects (the controller without xdist, each worker with
it). With ``--lf`` the API items are judged by :mod:`.resume`'s record of failing APIs, not by pytest's
``cache/lastfailed``: a run killed before its end never writes that file, and its stale entries would then pick
the wrong APIs. So the API items are held back from pytest's own ``--lf`` filter (which still handles every other
test) and put back after it. On xdist workers the API items run largest first (:func:`by_size`), so that no large
call starts last on a busy worker; node ids do not change.

The payload (:class:`ItemPayload`): what travels from the process that ran an item to the controller (xdist
included), one definition, written by :meth:`ItemPayload.of` and read by :meth:`ItemPayload.from_report`. It
rides in the call report's ``user_properties`` under :data:`PROPERTY` (:func:`attach`; that report only, so setup
and teardown reports stay small) as plain JSON-able data: the API's result row as CSV cells and its details rows as
CSV lines (one string a row instead of its 23 cells, which xdist would serialise one by one), its statuses and data
mode, and whether it fails. :meth:`ItemPayload.crash` is the error payload of an API whose worker died before it
could send one. What the item itself keeps in its ``user_properties`` (and so junitxml's ``<properties>`` of its
test case) is :meth:`ItemPayload.properties`.
"""
from __future__ import annotations

import atexit
import dataclasses
import gc
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dumpers import format as fmt

from . import reference
from .precision.verdict import FAILED, SKIPPED, is_failing, item_outcome
from .replay import CaseResult, data_mode, describe, seed_note, skip_result
from .settings import DEFAULT_FAIL_ON, DEFAULT_PRECISION

# --- collection -----------------------------------------------------------------------------------
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
    from a path, so its ``--lf`` file filters leave it to the checker's own (:class:`Selection`)."""

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
        self.payload: ItemPayload | None = None   # for the controller, on the call's report (:func:`attach`)

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


# --- selection ------------------------------------------------------------------------------------
SKIP_LIST_MESSAGE = "API {api} in black list or not in white list. SKIP."
SKIP_FILTER_MESSAGE = "same structure as {kept} (--msprobe-filter-api). SKIP."


class Selection:
    """The selection rules of one run; ``done``, ``lastfailed`` and ``baseline_failing`` are API names / node
    ids decided on the controller (and sent to xdist workers)."""

    def __init__(self, settings: Any, *, is_api_item: Any, done: set | None = None,
                 baseline_failing: set | None = None,
                 lastfailed: dict | None = None, lf: bool = False, lf_no_failures: str = "all",
                 largest_first: bool = False, costs: dict | None = None, unwritten: Any = ()) -> None:
        self.settings = settings
        self.is_api_item = is_api_item
        self.done = set(done or ())                  # APIs complete in the CSV being continued: deselected
        self.baseline_failing = set(baseline_failing or ())
        self.baseline = settings.baseline            # the baseline CSV, as the controller names it
        self.largest_first = largest_first
        self.costs = costs or {}                     # file node id -> cost of each call (the controller's)
        self.lastfailed = lastfailed                 # node id -> True of failing API items (None: no record)
        self.lf = lf and lastfailed is not None
        self.lf_no_failures = lf_no_failures
        self.unwritten = set(unwritten)              # --lf: APIs the CSV being continued lacks (they run too)
        self._filter_seen: dict = {}
        self._held: list | None = None

    # --- per case: a SKIP with its reason ---------------------------------------------------------------
    def skip_reason(self, case: Any) -> str | None:
        return self.list_skip_reason(case.api) or self.filter_skip_reason(case)

    def list_skip_reason(self, api: str) -> str | None:
        """White/black list (spec 7.1), on the base API name; 26.2's SKIP message."""
        s = self.settings
        if (s.black_list and api in s.black_list) or (s.white_list and api not in s.white_list):
            return SKIP_LIST_MESSAGE.format(api=api)
        return None

    def filter_skip_reason(self, case: Any) -> str | None:
        """``--msprobe-filter-api`` (spec 7.2): a call identical in structure to a kept one is SKIP."""
        if not self.settings.filter_api or not isinstance(case.forward, dict):
            return None
        group = f"{case.prefix}.{case.api}"
        args = case.forward.get(fmt.INPUT_ARGS) or []
        sig_args = [{k: v for k, v in a.items() if k not in ("Max", "Min")} for a in args if isinstance(a, dict)]
        try:
            sig = json.dumps([sig_args, case.forward.get(fmt.INPUT_KWARGS) or {}], sort_keys=True, default=str)
        except (TypeError, ValueError):
            return None
        kept = self._filter_seen.setdefault(group, {})
        if sig in kept:
            return SKIP_FILTER_MESSAGE.format(kept=kept[sig])
        kept[sig] = case.name
        return None

    # --- per run: deselection ---------------------------------------------------------------------------
    def _keep(self, apis: list) -> list:
        """The API items that run: with ``--lf``, the recorded failures among them and the APIs the CSV lacks
        (all when neither, as pytest does), less the APIs already complete."""
        keep = apis
        if self.lf:
            failed = [it for it in apis if it.nodeid in self.lastfailed or it.name in self.unwritten]
            if failed:
                keep = failed
            elif not self.lastfailed and self.lf_no_failures == "none":
                keep = []
        return [it for it in keep if it.name not in self.done]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: Any, items: list) -> None:
        apis = [it for it in items if self.is_api_item(it)]
        if not apis:
            return
        keep = self._keep(apis)
        kept = set(keep)
        drop = [it for it in apis if it not in kept]
        if drop:
            config.hook.pytest_deselected(items=drop)
        for item in keep:
            if item.name in self.baseline_failing:
                item.add_marker(pytest.mark.xfail(reason=f"already failing in the baseline "
                                                         f"{self.baseline}", strict=False))
        if self.lf:
            self._held = [list(items), kept]         # pytest's --lf filter sees the other tests only
            items[:] = [it for it in items if not self.is_api_item(it)]
        else:
            items[:] = [it for it in items if not self.is_api_item(it) or it in kept]
            self._order(items)

    def _order(self, items: list) -> None:
        if self.largest_first:
            items[:] = by_size(items, self.costs)

    def restore(self, items: list) -> None:
        """Put the held-back API items back, in collection order, among the tests pytest's filter kept."""
        if self._held is not None:
            order, kept = self._held
            others = set(items)
            items[:] = [it for it in order if it in kept or it in others]
            self._held = None
            self._order(items)


def call_cost(case: Any) -> int:
    """The bytes of a call's inputs, from the dump (0 for a malformed entry: it is SKIP with its reason)."""
    from generators.inputs import required_bytes
    try:
        return int(required_bytes(case)[1])
    except Exception:  # noqa: BLE001 - DumpError, GenerationError, anything a broken entry raises
        return 0


def by_size(items: list, costs: dict | None = None) -> list:
    """``items`` with the calls of the largest inputs (bytes from dump.json) first; others keep their order.
    ``costs``: file node id -> the cost of each of its calls in dump order, as the controller worked them out
    (:func:`call_cost`), so that a worker parses no entry of a call it does not run; an item it lacks costs
    what its own case says (the same number)."""
    costs = costs or {}

    def cost(item: Any) -> int:
        known = costs.get(getattr(getattr(item, "parent", None), "nodeid", None))
        index = getattr(item, "index", None)
        if known is not None and isinstance(index, int) and 0 <= index < len(known):
            return int(known[index])
        case = getattr(item, "case", None)
        return call_cost(case) if case is not None else 0

    return sorted(items, key=lambda item: -cost(item))


class LastFailedGuard:
    """Puts the API items held back by :class:`Selection` after pytest's ``--lf`` filter (registered after
    pytest's cache plugin, so that its wrapper encloses that plugin's)."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list) -> Any:
        res = yield
        self.selection.restore(items)
        return res


# --- the payload ----------------------------------------------------------------------------------
PROPERTY = "msprobe"     # key of the per-API payload in report.user_properties


@dataclass
class ItemPayload:
    """One API's rows and statuses, as the controller takes them."""

    name: str
    forward: str
    backward: str | None
    result: list                    # the result row's cells
    rows: list                      # each details row as its CSV line
    names: list                     # each details row's name cell
    fidelity: list                  # each details row's Replay Fidelity cell ("" without a recording)
    standards: list                 # [standard, status] of each details row
    mode: str                       # data mode: real_data, random_data ("" when nothing was replayed)
    kind: str                       # how the summary counts it: its data mode, or invalid
    seed: int | None
    worst: list                     # [row name, reason] of the row that fails it
    failing: bool                   # whether it fails under --msprobe-fail-on
    expected: list = field(default_factory=list)   # each details row's Error / Expected cell
    rounding: str = ""              # a failing API: beyond or within the rounding of a correct kernel
    reference: dict | None = None   # --msprobe-reference: the reference backend's payload (its wire form)
    cells: list = field(default_factory=list, repr=False)   # the details rows' cells (this process only)

    @classmethod
    def of(cls, result: Any, *, fail_on: str, precision: int = DEFAULT_PRECISION) -> ItemPayload:
        """The payload of a :class:`~pytest_msprobe.replay.CaseResult`."""
        from .replay.expected import multiple_cell, rounding_of
        from .report.acc_csv import detail_cells, result_cells, row_text
        cells = [detail_cells(r, precision=precision) for r in result.details]
        return cls(name=result.name, forward=result.forward, backward=result.backward,
                   result=result_cells(result.name, result.forward, result.backward, result.message),
                   rows=[row_text(c) for c in cells], names=[c[0] for c in cells],
                   fidelity=[getattr(result, "fidelity", {}).get(r.name, "") for r in result.details],
                   standards=[[str(getattr(r, "standard", "") or ""), str(r.status)] for r in result.details],
                   mode=result.data_mode, kind=result.kind, seed=result.seed, worst=list(result.worst()),
                   failing=result.failing(fail_on),
                   expected=[multiple_cell(getattr(result, "multiples", {}).get(r.name)) for r in result.details],
                   rounding=rounding_of(result) if result.failing(fail_on) else "", cells=cells)

    @classmethod
    def crash(cls, name: str, reason: str) -> ItemPayload:
        """The payload of an API whose process died or broke before it sent one: an error row with the reason,
        no data mode (nothing was replayed), the API itself as the worst row."""
        from .replay import error_result
        payload = cls.of(error_result(name, reason), fail_on=DEFAULT_FAIL_ON)
        return dataclasses.replace(payload, standards=[], mode="", kind="", seed=None, worst=[name, reason],
                                   failing=True)

    @classmethod
    def from_report(cls, report: Any) -> ItemPayload | None:
        """The payload a report carries (the last one), or None."""
        data = None
        for key, value in getattr(report, "user_properties", ()) or ():
            if key == PROPERTY:
                data = value
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def wire(self) -> dict:
        """The payload as it travels (the cells stay in this process): its fields as they are, plain JSON-able
        values already, so no deep copy of every row (``dataclasses.asdict``) per item."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "cells"}

    def properties(self) -> list:
        """The item's own properties (junitxml writes them per test case): ``msprobe_forward``,
        ``msprobe_backward``, ``msprobe_data_mode`` and, for an API that fails the run, ``msprobe_worst`` (the
        worst row and why)."""
        props = [("msprobe_forward", self.forward or ""), ("msprobe_backward", self.backward or ""),
                 ("msprobe_data_mode", self.mode or "")]
        if self.failing:
            row, reason = (self.worst or ["", ""])[:2]
            props.append(("msprobe_worst", f"{row}: {' '.join(str(reason).split())}" if reason else str(row)))
        return props


def attach(report: Any, payload: ItemPayload) -> None:
    """Put ``payload`` on this report alone (pytest hands every report of an item the item's own list)."""
    report.user_properties = [*report.user_properties, (PROPERTY, payload.wire())]


def crash_reason(report: Any) -> str:
    """Why an item failed without a payload: the crash or timeout line of its report, else its last line."""
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "crashed" in ln or "timeout" in ln.lower():
            return ln.strip()
    return ("internal error: " + lines[-1].strip()) if lines else "internal error"
