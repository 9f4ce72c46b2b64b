"""xdist's ``load`` and ``worksteal`` scheduling with the first distribution dealt out one call at a time.

Workers run the API items largest first (:func:`.select.by_size`), but xdist's first distribution hands each
worker a run of consecutive items (``load``: a chunk each; ``worksteal``: an equal block each), so the few
largest calls would all land on the first worker and finish last. Here the items of that first distribution
are dealt like cards: with ``n`` workers, worker ``k`` gets items ``k, k + n, k + 2n, ...`` of it, so each
starts on one of the ``n`` largest calls and they spread evenly.

``load`` then refills a worker when its queue drops below a few items, down to two near the end. A worker runs an
item only once it knows the next one (its teardown needs it), so with two queued it runs one and waits for the
controller's answer: a round trip per item (5-10 ms on a busy 2-core machine) when the items last a few
milliseconds, as the small calls that come last do. Here a ``load`` worker also keeps :data:`QUEUED_S` of work
queued, estimated from its last item, at most a fair share of what is left. Stealing and a host lost mid-run are
xdist's own.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from xdist.scheduler import LoadScheduling, WorkStealingScheduling


class _Dealt:
    """Mixin: reorders the pending items once, at the first send, so that the consecutive runs xdist sends to
    each worker in turn are the dealt ones."""

    _dealt = False

    def _send_tests(self, node: Any, num: int) -> None:
        if not self._dealt:
            self._dealt = True
            nodes = list(self.node2pending)
            n = len(nodes)
            window = self.pending[: n * num]
            if n > 1 and nodes[0] is node and len(window) == n * num:
                self.pending[: n * num] = [i for k in range(n) for i in window[k::n]]
        super()._send_tests(node, num)


QUEUED_S = 0.05        # seconds of work a ``load`` worker keeps queued beyond the item it runs
MAX_QUEUED = 64        # items, whatever the estimate


class DealtLoad(_Dealt, LoadScheduling):
    """``--dist load`` with a dealt first distribution and a queue that covers the controller's round trip."""

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        super().check_schedule(node, duration)
        if node.shutting_down or not self.pending or node not in self.node2pending:
            return
        queued = self.node2pending[node]
        # items run largest first, so the last one's duration bounds the next ones': the estimate errs long
        want = min(MAX_QUEUED, max(2, math.ceil(QUEUED_S / max(duration, 1e-4))),
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
