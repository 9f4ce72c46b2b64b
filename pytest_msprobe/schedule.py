"""``--dist load`` with the first distribution dealt out one call at a time: a scheduler of our own behind
xdist's scheduler protocol (``pytest_xdist_make_scheduler``; it subclasses nothing of xdist).

Workers run the API items largest first (:func:`.api_items.by_size`), but xdist's first distribution hands each
worker a run of consecutive items (a chunk each), so the few largest calls would all land on the first worker
and finish last. Here the items of that first distribution are dealt like cards: with ``n`` workers, worker
``k`` gets items ``k, k + n, k + 2n, ...`` of it, so each starts on one of the ``n`` largest calls and they
spread evenly. Besides:

* when every worker runs on this machine, it starts a worker as soon as that worker has collected. xdist waits
  for every worker's collection, and workers start one after another (each gateway waits for the previous
  one to answer), so with ``-n 32`` the first worker would idle until the 32nd has collected. A worker whose
  collection differs from the first one's gets nothing to run, and the difference is reported as a
  collection error. With workers on other hosts the run starts once all have collected, as xdist's does:
  hosts come up seconds apart, and a fast one would take every call of a small dump before the others (and
  their devices) take part;
* it keeps a worker's queue deep enough for the controller's round trip. A worker runs an item only once it
  knows the next one (its teardown needs it), so with two queued, the least xdist keeps near the end, it
  runs one and waits for the controller's answer: a round trip per item (5-10 ms on a busy 2-core machine)
  where the small calls that come last take 2-3 ms. Each worker keeps at least three items and about
  :data:`QUEUED_S` of work queued, estimated from its last item, never more than a fair share of what is left.

Other ``--dist`` modes (``worksteal`` among them) are xdist's own.
"""
from __future__ import annotations

import difflib
import math
from typing import Any, Optional

import pytest

QUEUED_S = 0.05        # seconds of work a worker keeps queued beyond the item it runs
MIN_QUEUED = 3         # the item it runs, the next one (for its teardown), and one to cover the round trip
MAX_QUEUED = 64        # items, whatever the estimate


def _runs(window: list, n: int) -> list:
    """``window`` dealt to ``n`` hands like cards: hand ``k`` holds items ``k, k + n, k + 2n, ...`` of it."""
    return [window[k::n] for k in range(n)]


def collection_diff(first: list, other: list, first_id: str, other_id: str) -> str:
    """The message of a worker that collected other items than the first one."""
    diff = difflib.unified_diff(first, other, fromfile=first_id, tofile=other_id, lineterm="", n=1)
    return (f"Different tests were collected between {first_id} and {other_id}. The difference is:\n"
            + "\n".join(list(diff)[:60]))


class DealtLoad:
    """``--dist load``: each worker starts once it has collected, on its dealt share of the largest calls, and
    keeps a queue that covers the controller's round trip.

    The dealt shares of workers that have not started yet are held back while the started ones have other
    items to take; when nothing else is left, the started workers take them too (a late or lost worker
    holds nothing up). No worker is stopped while another still holds calls it might lose: the session
    stops them all once every one holds its last call (:attr:`tests_finished`)."""

    def __init__(self, config: Any, log: Any = None) -> None:
        from .hosts import is_remote, tx_specs
        specs = tx_specs(config, whatever_dist=True)[0]
        self.config = config
        self.log = log if callable(log) else (lambda *args: None)
        self.numnodes = len(specs)
        self.early = not any(is_remote(spec) for spec in specs)    # all on this machine: start each at once
        self.maxschedchunk = config.getoption("maxschedchunk", None)
        self.node2collection: dict = {}     # worker -> its collection (node ids)
        self.queued_by_worker: dict = {}        # worker -> indices of the items sent to it and not finished
        self.pending: list = []             # indices not sent yet
        self.collection: list | None = None
        self.started: set = set()           # workers that have had their first share
        self.shares: list = []              # the dealt first shares not handed out yet

    # --- xdist's scheduler protocol ----------------------------------------------------------------------
    @property
    def nodes(self) -> list:
        return list(self.queued_by_worker)

    @property
    def collection_is_completed(self) -> bool:
        if self.early:
            return bool(self.node2collection)       # the first worker's collection starts the run
        return len(self.node2collection) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.shares or self.pending:
            return False
        return all(len(queued) < 2 for queued in self.queued_by_worker.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.shares or self.pending or any(self.queued_by_worker.values()))

    def add_node(self, node: Any) -> None:
        assert node not in self.queued_by_worker
        self.queued_by_worker[node] = []

    def add_node_collection(self, node: Any, collection: Any) -> None:
        assert node in self.queued_by_worker
        first = self.collection if self.collection is not None else next(iter(self.node2collection.values()), None)
        if first is not None and list(collection) != first:
            self._refuse(node, list(collection), first)
            return
        self.node2collection[node] = list(collection)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.queued_by_worker[node].remove(item_index)
        self.check_schedule(node, duration)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        self.pending.insert(0, self.collection.index(item))
        for node in self.nodes:
            self.check_schedule(node)

    def remove_pending_tests_from_node(self, node: Any, indices: Any) -> None:
        raise NotImplementedError("--dist load does not steal")

    def remove_node(self, node: Any) -> Optional[str]:
        """A worker finished or went down: the item it was running (None if none), its queue to the others."""
        queued = self.queued_by_worker.pop(node)
        self.node2collection.pop(node, None)
        self.started.discard(node)
        if not queued:
            return None
        assert self.collection is not None
        crashed = self.collection[queued.pop(0)]
        self.pending.extend(queued)
        for other in self.nodes:
            self.check_schedule(other)
        return crashed

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:         # the first collection: the run's items, dealt for every worker
            self.collection = list(next(iter(self.node2collection.values())))
            self.pending[:] = range(len(self.collection))
            if self.maxschedchunk is None:
                self.maxschedchunk = len(self.collection)
            n = max(self.numnodes, 1)
            # a first share is a quarter of a worker's fair share, as xdist's first chunk, and at least two
            # items (a worker runs one only once it knows the next)
            share = max(2, min(len(self.collection) // n // 4, self.maxschedchunk))
            window = self.pending[: n * share]
            del self.pending[: n * share]
            self.shares = [run for run in _runs(window, n) if run]
        for node in self.nodes:
            self.check_schedule(node)

    # --- sending -----------------------------------------------------------------------------------------
    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node not in self.node2collection or node.shutting_down:
            return                          # not collected yet, or refused: nothing is sent to it
        if node not in self.started:
            self._start(node)
            return
        self._release_shares()
        if not self.pending:
            # nothing left to send: xdist would stop this worker now, but the calls of a worker lost later
            # would then find none to take them; the session stops every worker once each holds its last
            # call (tests_finished), and the last calls are the smallest
            return
        self._refill(node, duration)
        if node.shutting_down or not self.pending or node not in self.queued_by_worker:
            return
        queued = self.queued_by_worker[node]
        # items run largest first, so the last one's duration bounds the next ones': the estimate errs long;
        # without one (a new worker collected, another was lost) the queue keeps its minimum
        per_item = max(duration, 1e-4) if duration > 0 else QUEUED_S
        want = min(MAX_QUEUED, max(MIN_QUEUED, math.ceil(QUEUED_S / per_item)),
                   1 + len(self.pending) // len(self.queued_by_worker))
        if len(queued) < want:
            self._send(node, want - len(queued))

    def _refill(self, node: Any, duration: float) -> None:
        """xdist's own refill: below a quarter of its share of what is left, a worker gets up to half of it
        (a worker whose last item took 0.1 s or more waits while it holds two)."""
        per_node = len(self.pending) // len(self.queued_by_worker)
        low, high = max(2, per_node // 4), max(2, per_node // 2)
        queued = self.queued_by_worker[node]
        if len(queued) < low and not (duration >= 0.1 and len(queued) >= 2):
            self._send(node, min(high - len(queued), max(2 - len(queued), self.maxschedchunk or 0)))

    def _start(self, node: Any) -> None:
        self.started.add(node)
        share = self.shares.pop(0) if self.shares else []
        if share:
            self.queued_by_worker[node].extend(share)
            node.send_runtest_some(share)
        if len(self.queued_by_worker[node]) < 2:      # it runs an item only once it knows the next, or is stopped
            self._release_shares()
            self._send(node, MIN_QUEUED - len(self.queued_by_worker[node]))

    def _release_shares(self) -> None:
        """Nothing else left to send: the shares of workers not started yet go to whoever asks."""
        if not self.pending and self.shares:
            self.pending.extend(i for share in self.shares for i in share)
            self.shares.clear()

    def _send(self, node: Any, num: int) -> None:
        items = self.pending[:num]
        if items:
            del self.pending[:num]
            self.queued_by_worker[node].extend(items)
            node.send_runtest_some(items)

    def _refuse(self, node: Any, collection: list, first: list) -> None:
        """A worker that collected other items than the first: a collection error, and nothing to run."""
        first_node = next(iter(self.node2collection), None)
        msg = collection_diff(first, collection, getattr(getattr(first_node, "gateway", None), "id", "?"),
                              node.gateway.id)
        self.log(msg)
        self.config.hook.pytest_collectreport(
            report=pytest.CollectReport(nodeid=node.gateway.id, outcome="failed", longrepr=msg, result=[]))
        if not node.shutting_down:
            node.shutdown()


def make(config: Any, log: Any) -> Optional[Any]:
    """The scheduler for ``--dist load`` (None for the other modes: xdist picks)."""
    return DealtLoad(config, log) if config.getvalue("dist") == "load" else None
