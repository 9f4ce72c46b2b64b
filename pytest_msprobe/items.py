"""Collection: a dump.json file becomes a collector, each captured API call one test item.

Node ids are ``<path to dump.json>::<call name>`` (``step0/rank/dump.json::Functional.linear.0``), in dump
order, the same on every run and every xdist worker, so ``-k Functional.linear.0``, ``--lf`` and ``-n``
work as for ordinary tests.
"""
from __future__ import annotations

from typing import Any

import pytest

from .precision.verdict import FAILED, SKIPPED, is_bad_row, item_outcome
from .replay import CaseResult, reason

PROPERTY = "msprobe"     # key of the per-API payload in report.user_properties
SESSION_KEY = pytest.StashKey["Any"]()


class ApiFailure(Exception):
    """An API whose outputs fail the precision standard (the item's failure, shown by repr_failure)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class DumpFile(pytest.File):
    """A dump.json: one item per API call, in dump order."""

    def collect(self) -> Any:
        sess = self.config.stash[SESSION_KEY]
        try:
            cases = sess.cases_of(str(self.path))
        except Exception as exc:  # noqa: BLE001 - DumpError and anything a broken file raises
            raise self.CollectError(f"cannot read dump {self.path}: {exc}") from None
        for case in cases:
            item = ApiItem.from_parent(self, name=case.name, case=case)
            item.skip_reason = sess.list_skip_reason(case.api) or sess.filter_skip_reason(case)
            yield item


class ApiItem(pytest.Item):
    """One captured API call: run on the bench and the device, judged by the precision standard."""

    def __init__(self, *, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.skip_reason: str | None = None
        self.result: CaseResult | None = None

    def runtest(self) -> None:
        sess = self.config.stash[SESSION_KEY]
        if self.skip_reason:
            from .replay import data_mode, skip_result
            result = skip_result(self.name, self.skip_reason,
                                 data_mode=data_mode(self.case, sess.run_options(str(self.path))))
        else:
            result = sess.run(self.case, str(self.path))
        self.result = result
        self.user_properties.append((PROPERTY, payload(result, sess.settings)))
        seed_note = f" (random data, seed {result.seed})" if result.data_mode == "random_data" else ""
        if result.skipped:
            pytest.skip(f"{result.message}{seed_note}")
        unfaithful = result.fidelity_failure(sess.settings.fidelity)
        if sess.settings.gpu_csv:
            self._judge_against_gpu(sess, result, seed_note)
        elif result.failing(sess.settings.fail_on):
            raise ApiFailure(describe(result, seed_note) + (f"\n{unfaithful}" if unfaithful else ""))
        if unfaithful:
            raise ApiFailure(unfaithful)

    def _judge_against_gpu(self, sess: Any, result: CaseResult, seed_note: str) -> None:
        """With --msprobe-gpu-csv the NPU-vs-GPU compare decides the item (msprobe's final verdict)."""
        gpu = sess.gpu_reference()
        rows = self.user_properties[-1][1]["details"]
        if not rows:      # dropout-like APIs have no details rows: their own rule decides (spec 3.5)
            if result.failing(sess.settings.fail_on):
                raise ApiFailure(describe(result, seed_note))
            return
        verdict = gpu.judge(self.name, rows)
        if verdict is None:
            pytest.skip(f"NPU-vs-GPU compare: {self.name} has no rows in {sess.settings.gpu_csv}")
        outcome = item_outcome(result.forward, result.backward, fail_on=sess.settings.fail_on,
                               reference=(verdict.forward, verdict.backward))
        if outcome == FAILED:
            raise ApiFailure(f"NPU-vs-GPU compare: forward {verdict.forward}, backward {verdict.backward or '-'}"
                             f"{(': ' + verdict.message.strip()) if verdict.message.strip() else ''}\n"
                             f"device vs bench: {describe(result, seed_note)}")
        if outcome == SKIPPED:
            pytest.skip(f"NPU-vs-GPU compare: SKIP {verdict.message.strip()}")

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, ApiFailure):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple:
        return self.path, None, f"{self.path.name}::{self.name}"


def describe(result: CaseResult, seed_note: str = "") -> str:
    """The failure text of an item: statuses, every failing output with its reason."""
    lines = [f"{result.name}: forward {result.forward}, backward {result.backward or '-'}{seed_note}"]
    for row in result.details:
        status = str(row.status)
        if is_bad_row(status):
            lines.append(f"  {row.name}: {status}: {reason(row)}")
    if result.summary and result.data_mode == "random_data" and result.summary not in result.note:
        lines.append(f"  inputs: {result.summary}")
    if result.note:
        lines.append(result.note.strip())
    return "\n".join(lines)


def payload(result: CaseResult, settings: Any) -> dict:
    """JSON-able record of one API for the controller's reporter (survives xdist)."""
    from .report.acc_csv import detail_cells, result_cells
    worst_row, worst_reason = result.worst()
    return {
        "name": result.name,
        "forward": result.forward,
        "backward": result.backward,
        "result": result_cells(result.name, result.forward, result.backward, result.message),
        "details": [detail_cells(r, precision=settings.precision) for r in result.details],
        "fidelity": [result.fidelity.get(r.name, "") for r in result.details],
        "standards": [[str(getattr(r, "standard", "") or ""), str(r.status)] for r in result.details],
        "mode": result.data_mode,
        "seed": result.seed,
        "worst": [worst_row, worst_reason],
        "failing": result.failing(settings.fail_on),
    }
