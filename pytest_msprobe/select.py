"""Which APIs run: white/black lists and ``--msprobe-filter-api`` (a SKIP with the reason), resume and
baseline (deselection and xfail), and ``--lf`` over the API items from the checker's own record.

One :class:`Selection` is registered in every process that collects (the controller without xdist, each
worker with it). With ``--lf`` the API items are judged by :mod:`.resume`'s record of failing APIs, not by
pytest's ``cache/lastfailed``: a run killed before its end never writes that file, and its stale entries would
then pick the wrong APIs. So the API items are held back from pytest's own ``--lf`` filter (which still
handles every other test) and put back after it. On xdist workers the API items run largest first
(:func:`by_size`), so that no large call starts last on a busy worker; node ids do not change.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from dumpers import format as fmt

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
