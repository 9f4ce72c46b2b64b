"""xdist's ``load`` and ``worksteal`` scheduling with the first distribution dealt out one call at a time.

Workers run the API items largest first (:func:`.select.by_size`), but xdist's first distribution hands each
worker a run of consecutive items (``load``: a chunk each; ``worksteal``: an equal block each), so the few
largest calls would all land on the first worker and finish last. Here the items of that first distribution
are dealt like cards: with ``n`` workers, worker ``k`` gets items ``k, k + n, k + 2n, ...`` of it, so each
starts on one of the ``n`` largest calls and they spread evenly.

``load`` does more (:class:`DealtLoad`):

* when every worker runs on this machine, it starts a worker as soon as that worker has collected. xdist waits
  for every worker's collection, and workers start one after another (each gateway waits for the previous
  one to answer), so with ``-n 32`` the first worker would idle until the 32nd has collected. A worker whose
  collection differs from the first one's gets nothing to run, and the difference is reported as a
  collection error, as xdist reports it. With workers on other hosts the run starts once all have
  collected, as xdist's does: hosts come up seconds apart, and a fast one would take every call of a small
  dump before the others (and their devices) take part;
* it keeps a worker's queue deep enough for the controller's round trip. A worker runs an item only once it
  knows the next one (its teardown needs it), so with two queued, the least xdist keeps near the end, it
  runs one and waits for the controller's answer: a round trip per item (5-10 ms on a busy 2-core machine)
  where the small calls that come last take 2-3 ms. Each worker keeps at least three items and about
  :data:`QUEUED_S` of work queued, estimated from its last item, never more than a fair share of what is left.

Stealing and a host lost mid-run are xdist's own.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import pytest
from xdist.scheduler import LoadScheduling, WorkStealingScheduling


def _runs(window: list, n: int) -> list:
    """``window`` dealt to ``n`` hands like cards: hand ``k`` holds items ``k, k + n, k + 2n, ...`` of it."""
    return [window[k::n] for k in range(n)]


def _deal(pending: list, n: int, num: int) -> None:
    """Reorder the first ``n * num`` items in place so that its consecutive runs of ``num`` are the dealt
    hands (:func:`_runs`)."""
    window = pending[: n * num]
    if n > 1 and len(window) == n * num:
        pending[: n * num] = [i for run in _runs(window, n) for i in run]


class _Dealt:
    """Mixin: reorders the pending items once, at the first send, so that the consecutive runs xdist sends to
    each worker in turn are the dealt ones."""

    _dealt = False

    def _send_tests(self, node: Any, num: int) -> None:
        if not self._dealt:
            self._dealt = True
            nodes = list(self.node2pending)
            if nodes[0] is node:
                _deal(self.pending, len(nodes), num)
        super()._send_tests(node, num)


QUEUED_S = 0.05        # seconds of work a ``load`` worker keeps queued beyond the item it runs
MIN_QUEUED = 3         # the item it runs, the next one (for its teardown), and one to cover the round trip
MAX_QUEUED = 64        # items, whatever the estimate


class DealtLoad(LoadScheduling):
    """``--dist load``: each worker starts once it has collected, on its dealt share of the largest calls, and
    keeps a queue that covers the controller's round trip.

    The dealt shares of workers that have not started yet are held back while the started ones have other
    items to take; when nothing else is left, the started workers take them too (a late or lost worker
    holds nothing up). No worker is stopped while another still holds calls it might lose: the session
    stops them all once every one holds its last call."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._started: set = set()          # workers that have had their first share
        self._shares: list = []             # the dealt first shares not handed out yet
        from .hosts import is_remote, tx_specs
        self._early = not any(is_remote(spec) for spec in tx_specs(config)[0])   # all on this machine

    @property
    def collection_is_completed(self) -> bool:
        if self._early:
            return bool(self.node2collection)   # the first worker's collection starts the run
        return super().collection_is_completed

    @property
    def tests_finished(self) -> bool:
        return not self._shares and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self._shares) or super().has_pending

    def add_node_collection(self, node: Any, collection: Any) -> None:
        assert node in self.node2pending
        if self.collection is not None and list(collection) != self.collection:
            self._refuse(node, collection)
            return
        self.node2collection[node] = list(collection)

    def _refuse(self, node: Any, collection: Any) -> None:
        """A worker that collected other items than the first: a collection error, and nothing to run."""
        from xdist.report import report_collection_diff
        first = next(iter(self.node2collection))
        msg = report_collection_diff(self.collection, list(collection), first.gateway.id, node.gateway.id)
        self.log(msg)
        self.config.hook.pytest_collectreport(
            report=pytest.CollectReport(nodeid=node.gateway.id, outcome="failed", longrepr=msg, result=[]))
        if not node.shutting_down:
            node.shutdown()

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:         # the first collection: the run's items, dealt for every worker
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
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
            self._shares = [run for run in _runs(window, n) if run]
        for node in self.nodes:
            self.check_schedule(node)

    def _start(self, node: Any) -> None:
        self._started.add(node)
        share = self._shares.pop(0) if self._shares else []
        if share:
            self.node2pending[node].extend(share)
            node.send_runtest_some(share)
        if len(self.node2pending[node]) < 2:      # it runs an item only once it knows the next, or is stopped
            self._release_shares()
            self._send_tests(node, MIN_QUEUED - len(self.node2pending[node]))

    def _release_shares(self) -> None:
        """Nothing else left to send: the shares of workers not started yet go to whoever asks."""
        if not self.pending and self._shares:
            self.pending.extend(i for share in self._shares for i in share)
            self._shares.clear()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node not in self.node2collection or node.shutting_down:
            return                          # not collected yet, or refused: nothing is sent to it
        if node not in self._started:
            self._start(node)
            return
        self._release_shares()
        if not self.pending:
            # nothing left to send: xdist would stop this worker now, but the calls of a worker lost later
            # would then find none to take them; the session stops every worker once each holds its last
            # call (tests_finished), and the last calls are the smallest
            return
        super().check_schedule(node, duration)      # xdist's refill
        if node.shutting_down or not self.pending or node not in self.node2pending:
            return
        queued = self.node2pending[node]
        # items run largest first, so the last one's duration bounds the next ones': the estimate errs long;
        # without one (a new worker collected, another was lost) the queue keeps its minimum
        per_item = max(duration, 1e-4) if duration > 0 else QUEUED_S
        want = min(MAX_QUEUED, max(MIN_QUEUED, math.ceil(QUEUED_S / per_item)),
                   1 + len(self.pending) // len(self.node2pending))
        if len(queued) < want:
            self._send_tests(node, want - len(queued))


class DealtWorksteal(_Dealt, WorkStealingScheduling):
    """``--dist worksteal`` with a dealt first distribution."""


SCHEDULERS = {"load": DealtLoad, "worksteal": DealtWorksteal}


def make(config: Any, log: Any) -> Optional[Any]:
    """The scheduler for ``--dist load`` / ``worksteal`` (None for the other modes: xdist picks)."""
    cls = SCHEDULERS.get(config.getvalue("dist"))
    return cls(config, log) if cls is not None else None
