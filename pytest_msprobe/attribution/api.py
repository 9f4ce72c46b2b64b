"""``attribute(step)``: which API calls explain the drift of a training step, found by correcting them live."""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from . import candidates as cand
from .drift import Distance, distance, shares
from .errors import is_dominant, measure, measure_backward
from .mode import CorrectionMode
from .runner import StepError, StepResult, StepRunner
from .search import SearchResult, SetRun, search

DEFAULT_MIN_SHARE = 0.1


@dataclass
class Row:
    """One reported call (or group of calls)."""

    name: str
    share: Optional[float]
    loss_share: Optional[float]
    grad_share: Optional[float]
    distance: Optional[Distance]
    rest_share: Optional[float] = None      # share of the drift left when every other candidate is corrected
    dominant: bool = False
    device_err: Optional[float] = None
    expected_err: Optional[float] = None
    multiple: Optional[float] = None        # device_err / expected_err (the shared error model's multiple)
    backward_multiple: Optional[float] = None   # the same for the call's device backward
    dtype: str = ""
    runs: int = 0
    message: str = ""
    calls: int = 1


@dataclass
class AttributionResult:
    """What :func:`attribute` found; ``rows`` most impactful first, then the calls left as they are."""

    rows: list
    plain: Distance
    loss: float
    ideal_loss: float
    together_share: Optional[float]
    together_loss_share: Optional[float]
    runs: int
    seconds: float
    n_calls: int
    n_candidates: int
    uncorrectable: list = field(default_factory=list)     # (name, reason)
    statuses: dict = field(default_factory=dict)          # API -> status, from a checker/compare CSV
    budget_hit: bool = False
    csv_path: str = ""
    html_path: str = ""
    min_share: float = DEFAULT_MIN_SHARE

    @property
    def culprits(self) -> list:
        return [r for r in self.rows if r.share is not None and r.calls == 1]

    @property
    def dominant(self) -> list:
        return [r for r in self.rows if r.dominant]

    def exit_status(self, fail_share: Optional[float]) -> int:
        """1 when a dominant call explains more than ``fail_share`` of the drift, else 0."""
        if fail_share is None:
            return 0
        return int(any(r.dominant and (r.share or 0.0) > fail_share for r in self.rows))


def _progress(enabled: bool) -> Callable:
    def say(text: str) -> None:
        if enabled:
            print(f"attribute: {text}", file=sys.stderr, flush=True)
    return say


def _same(a: StepResult, b: StepResult) -> tuple:
    """(identical, largest gradient difference) of two plain runs."""
    worst = 0.0
    for name, g in a.grads.items():
        h = b.grads.get(name)
        if (g is None) != (h is None):
            return False, math.inf
        if g is not None:
            worst = max(worst, float((g - h).abs().max()) if g.numel() else 0.0)
    same_loss = a.loss == b.loss or (math.isnan(a.loss) and math.isnan(b.loss))
    return same_loss and worst == 0.0, worst


def _default_budget(n: int) -> int:
    return 2 + 2 * 10 * max(1, math.ceil(math.log2(max(2, n)))) + 10


def attribute(step: Callable, *, candidates: Optional[Iterable[str]] = None, out_dir: str = ".",
              budget: Optional[int] = None, device: Any = None, model: Any = None, parameters: Any = None,
              min_share: float = DEFAULT_MIN_SHARE, check_result: Optional[str] = None, progress: bool = True,
              write: bool = True, backward: bool = True) -> AttributionResult:
    """Attribute the drift of ``step()`` (one forward and backward, returning the loss) to its API calls.

    Args:
        step: runs one forward and backward pass and returns the loss; run many times from the same state.
        candidates: None (every call), or names, glob patterns and result/compare CSV paths.
        out_dir: where ``attribution_result_{timestamp}.csv`` and its HTML page go.
        budget: the most runs of the step (default: room for ten culprits).
        device: the device backend (name or object) the step runs on: its RNG is restored before each run and
            it is synchronised after each; default: the first available accelerator, else cpu.
        model: the ``torch.nn.Module`` trained (its parameters' gradients are compared, its buffers restored);
            without it and ``parameters``, the leaves of the loss's graph.
        parameters: ``(name, tensor)`` pairs whose gradients are compared, instead of the model's.
        min_share: a set of calls is searched further while it explains at least this share of the drift.
        check_result: a checker result CSV (or an output folder: its newest) whose flagged APIs are shown with
            their share in the HTML report.
        write: write the CSV and the HTML page (False: only return the result).
        backward: a corrected call's backward is the bench's too (False: its forward output only).

    Raises:
        StepError: the step changes the parameters, returns no loss, or is not deterministic.
    """
    from .devices import resolve_backend

    say = _progress(progress)
    backend, index = resolve_backend(device)
    runner = StepRunner(step, model=model, parameters=parameters,
                        device_type=getattr(backend, "torch_device", "cpu"),
                        synchronize=lambda: backend.synchronize(index))
    started = time.perf_counter()
    try:
        def make(names: Any, **kw: Any) -> CorrectionMode:
            return CorrectionMode(frozenset(names), backward=backward, **kw)
        return _attribute(runner, make, candidates, out_dir, budget, min_share, check_result, say, write, started)
    finally:
        runner.finish()


def _attribute(runner: StepRunner, make: Callable, spec: Any, out_dir: str, budget: Optional[int], min_share: float,
               check_result: Optional[str], say: Callable, write: bool, started: float) -> AttributionResult:
    plain = runner.run(make(()))
    again = runner.run(make(()))
    same, worst = _same(plain, again)
    if not same:
        raise StepError(f"the step is not deterministic: two plain runs gave the losses {plain.loss!r} and "
                        f"{again.loss!r} and gradients up to {worst:.3g} apart; seed or switch off what varies "
                        "(dropout with a generator of its own, non-deterministic kernels, data loading) and retry")
    calls = plain.log.calls
    all_names = [c.name for c in calls]
    chosen, statuses, unmatched = cand.select(all_names, spec)
    if unmatched:
        say(f"{len(unmatched)} candidate name(s) or pattern(s) match no call of the step: "
            f"{', '.join(unmatched[:5])}")
    if check_result:
        statuses.update(cand.read_csv_apis(cand.newest_result(check_result) if os.path.isdir(check_result)
                                           else check_result)[1])
    reasons = {c.name: c.reason for c in calls}
    names = [n for n in chosen if not reasons[n]]
    uncorrectable = [(n, reasons[n]) for n in chosen if reasons[n]]
    say(f"{len(all_names)} calls in the step, {len(chosen)} candidates, {len(names)} correctable")
    ideal_mode = make(names, expected=measure, expected_backward=measure_backward)
    ideal = runner.run(ideal_mode)
    ideal_calls = {c.name: c for c in ideal.log.calls}
    late = [n for n in names if ideal_calls.get(n) is not None and ideal_calls[n].reason]
    if late:                        # the bench could not run them: left as they are
        uncorrectable += [(n, ideal_calls[n].reason) for n in late]
        names = [n for n in names if n not in set(late)]
    drift = distance(plain, ideal)
    say(f"drift of the step as run from the ideal run: loss {drift.loss:.4g}, gradients {drift.grad:.4g} "
        f"(relative norm), cosine {drift.cosine:.6f}")
    used: dict = {}

    def evaluate(subset: tuple) -> SetRun:
        for n in subset:
            used[n] = used.get(n, 0) + 1
        run = runner.run(make(subset))
        dist = distance(run, ideal)
        loss_s, grad_s, s = shares(dist, drift)
        label = subset[0] if len(subset) == 1 else f"{subset[0]} .. {subset[-1]} ({len(subset)} calls)"
        say(f"run {runner.runs} (at most {limit}): {label}: share {_pct(s)}")
        return SetRun(tuple(subset), s, (dist, loss_s, grad_s))

    limit = budget if budget is not None else _default_budget(len(names))
    whole = SetRun(tuple(names), 1.0, (Distance(0.0, 0.0, 1.0), 1.0, 1.0))
    found = search(names, evaluate, min_share=min_share, budget=max(0, limit - runner.runs), whole=whole) \
        if (drift.loss > 0 or drift.grad > 0) else SearchResult()
    rows = _rows(found, runner, make, ideal, names, drift, used, say, limit)
    together = together_loss = None
    culprits = [r.name for r in rows if r.calls == 1]
    if culprits and runner.runs < limit:
        run = runner.run(make(culprits))
        together_loss, _, together = shares(distance(run, ideal), drift)
    result = AttributionResult(rows, drift, plain.loss, ideal.loss, together, together_loss, runner.runs,
                               time.perf_counter() - started, len(all_names), len(names), uncorrectable,
                               statuses, found.budget_hit, min_share=min_share)
    if write:
        from .report import write_outputs
        write_outputs(result, out_dir)
    return result


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _rows(found: SearchResult, runner: StepRunner, make: Callable, ideal: StepResult, names: list, drift: Distance,
          used: dict, say: Callable, limit: int) -> list:
    ideal_calls = {c.name: c for c in ideal.log.calls}
    rows = []
    for t in found.culprits:
        name = t.names[0]
        dist, loss_s, grad_s = t.outcome
        rec = ideal_calls.get(name)
        row = Row(name, t.share, loss_s, grad_s, dist, runs=used.get(name, 0),
                  device_err=getattr(rec, "device_err", None), expected_err=getattr(rec, "expected_err", None),
                  multiple=getattr(rec, "multiple", None), backward_multiple=getattr(rec, "backward_multiple", None),
                  dtype=getattr(rec, "dtype", ""),
                  message=getattr(rec, "note", ""))
        row.dominant = is_dominant(row.multiple, row.backward_multiple)
        if runner.runs < limit:         # confirmed: every other candidate corrected, this one left as it ran
            rest = runner.run(make([n for n in names if n != name]))
            loss_s, grad_s, _ = shares(distance(rest, ideal), drift)
            left = [1.0 - v for v in (loss_s, grad_s) if v is not None]
            row.rest_share = max(left) if left else None
            row.runs += 1
            say(f"run {runner.runs}: {name} confirmed: explains {_pct(row.rest_share)} of the drift with every "
                "other candidate corrected")
        rows.append(row)
    for t in found.groups:
        dist, loss_s, grad_s = t.outcome if t.outcome is not None else (None, None, None)
        rows.append(Row(f"{t.names[0]} .. {t.names[-1]}", t.share, loss_s, grad_s, dist, calls=len(t.names),
                        message=f"{len(t.names)} calls: no half of them explains the minimum share alone"))
    for t in found.unsearched:
        dist, loss_s, grad_s = t.outcome if t.outcome is not None else (None, None, None)
        rows.append(Row(f"{t.names[0]} .. {t.names[-1]}", t.share, loss_s, grad_s, dist, calls=len(t.names),
                        message=f"{len(t.names)} calls not searched further: the budget of runs was spent"))
    rows.sort(key=lambda r: (-(r.share if r.share is not None else -math.inf), r.calls))
    return rows
