"""Drift between two runs of a step, and how much of it a correction removes.

The drift of the step as run is measured against the "ideal device" run (every candidate corrected), on the
loss and on the gradients: the loss's absolute difference, the gradients' relative norm
``||g - g*|| / ||g*||`` over all parameters together, their cosine, and the parameter whose own gradient
moved most (relative norm). A set of corrections *explains* the share ``1 - residual / drift`` of each: the
part of the distance to the ideal run that correcting the set alone removes. The share of a call is the larger
of its loss share and its gradient share, so a fault the loss hides still counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class Distance:
    """How far one run is from the ideal run."""

    loss: float                 # |loss - loss*|
    grad: float                 # ||g - g*|| / ||g*|| over every parameter
    cosine: float               # cos(g, g*)
    worst_param: str = ""       # the parameter whose gradient moved most, relatively
    worst_param_rel: float = 0.0


def distance(run, ideal) -> Distance:
    """:class:`Distance` of ``run`` from ``ideal`` (both :class:`~.runner.StepResult`)."""
    diff2 = ref2 = own2 = dot = 0.0
    worst, worst_rel = "", 0.0
    for name, ref in ideal.grads.items():
        got = run.grads.get(name)
        if ref is None and got is None:
            continue
        ref = torch.zeros_like(got) if ref is None else ref.double()
        got = torch.zeros_like(ref) if got is None else got.double()
        d2 = float((got - ref).square().sum())
        r2 = float(ref.square().sum())
        diff2 += d2
        ref2 += r2
        own2 += float(got.square().sum())
        dot += float((got * ref).sum())
        rel = math.sqrt(d2 / r2) if r2 > 0 else (math.inf if d2 > 0 else 0.0)
        if rel > worst_rel:
            worst, worst_rel = name, rel
    grad = math.sqrt(diff2 / ref2) if ref2 > 0 else (math.inf if diff2 > 0 else 0.0)
    cosine = dot / math.sqrt(own2 * ref2) if own2 > 0 and ref2 > 0 else (1.0 if own2 == ref2 == 0 else 0.0)
    return Distance(abs(run.loss - ideal.loss), grad, cosine, worst, worst_rel)


def change(run, base) -> Distance:
    """How far correcting a set moved the step from ``base`` (the step as run)."""
    return distance(run, base)


def share(residual: float, drift: float) -> Optional[float]:
    """``1 - residual / drift``: 1 when the correction removes all the drift, 0 when none, negative when it
    moves the step further away. None when there is no drift to explain."""
    if not drift > 0 or not math.isfinite(drift):
        return None
    return 1.0 - residual / drift


def shares(run_dist: Distance, plain_dist: Distance) -> tuple:
    """(loss share, gradient share, share) of a run against the step as run; share = the larger known one."""
    loss = share(run_dist.loss, plain_dist.loss)
    grad = share(run_dist.grad, plain_dist.grad)
    known = [s for s in (loss, grad) if s is not None]
    return loss, grad, (max(known) if known else None)
