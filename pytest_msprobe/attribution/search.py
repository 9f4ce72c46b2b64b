"""Adaptive group testing over sets of calls: which calls explain the drift, in few runs of the step.

The whole candidate set explains all the drift (it is the ideal run). A set that explains at least
``min_share`` of it is split in two halves, in execution order, and each half is run corrected alone; a half
that still explains ``min_share`` is split again, down to single calls. With k such calls among n, that costs
about ``2 k log2(n)`` runs. The most promising set (the largest share) is split first, so a budget of runs
that ends the search early ends it where it matters least. A set whose halves both fall under ``min_share``
while it explains more (calls that matter only together, or drift spread thin over many calls) is reported
as a group.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class SetRun:
    """A set of calls run corrected alone, and what that run gave."""

    names: tuple
    share: Optional[float]
    outcome: object = None


@dataclass
class SearchResult:
    culprits: list = field(default_factory=list)       # SetRun, one call each
    groups: list = field(default_factory=list)         # SetRun sets that matter while no half does
    unsearched: list = field(default_factory=list)     # SetRun sets left when the budget ran out
    tested: list = field(default_factory=list)         # every set run, in order
    budget_hit: bool = False


def search(names: list, evaluate: Callable, *, min_share: float, budget: int,
           whole: Optional[SetRun] = None) -> SearchResult:
    """Find the calls among ``names`` that explain at least ``min_share`` of the drift each.

    Args:
        names: the candidates, in execution order.
        evaluate: ``evaluate(names) -> SetRun``: one run of the step with those calls corrected.
        budget: the most runs ``evaluate`` may be called for.
        whole: the result for every name corrected (the ideal run, already made), if known.
    """
    result = SearchResult()
    if not names:
        return result
    top = whole if whole is not None else SetRun(tuple(names), 1.0)
    heap: list = []
    order = 0

    def push(t: SetRun) -> None:
        nonlocal order
        heapq.heappush(heap, (-(t.share or 0.0), order, t))
        order += 1

    push(top)
    used = 0
    while heap:
        _, _, tested = heapq.heappop(heap)
        if len(tested.names) == 1:
            result.culprits.append(tested)
            continue
        if used + 2 > budget:
            result.unsearched.append(tested)
            result.budget_hit = True
            continue
        mid = len(tested.names) // 2
        halves = [evaluate(tested.names[:mid]), evaluate(tested.names[mid:])]
        used += 2
        result.tested.extend(halves)
        kept = [h for h in halves if h.share is not None and h.share >= min_share]
        for half in kept:
            push(half)
        if not kept:
            result.groups.append(tested)
    position = {name: i for i, name in enumerate(names)}
    result.culprits.sort(key=lambda t: (-(t.share or 0.0), position[t.names[0]]))
    return result
