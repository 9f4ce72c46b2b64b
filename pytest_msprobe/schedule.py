"""xdist's ``load`` and ``worksteal`` scheduling with the first distribution dealt out one call at a time.

Workers run the API items largest first (:func:`.select.by_size`), but xdist's first distribution hands each
worker a run of consecutive items (``load``: a chunk each; ``worksteal``: an equal block each), so the few
largest calls would all land on the first worker and finish last. Here the items of that first distribution
are dealt like cards: with ``n`` workers, worker ``k`` gets items ``k, k + n, k + 2n, ...`` of it, so each
starts on one of the ``n`` largest calls and they spread evenly. Everything after (refills, stealing, a host
lost mid-run) is xdist's own.
"""
from __future__ import annotations

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


class DealtLoad(_Dealt, LoadScheduling):
    """``--dist load`` with a dealt first distribution."""


class DealtWorksteal(_Dealt, WorkStealingScheduling):
    """``--dist worksteal`` with a dealt first distribution."""


SCHEDULERS = {"load": DealtLoad, "worksteal": DealtWorksteal}


def make(config: Any, log: Any) -> Optional[Any]:
    """The scheduler for ``--dist load`` / ``worksteal`` (None for the other modes: xdist picks)."""
    cls = SCHEDULERS.get(config.getvalue("dist"))
    return cls(config, log) if cls is not None else None
