"""The per-API payload that travels from the process that ran an item to the controller (xdist included): one
definition, :class:`ItemPayload`, written by :meth:`ItemPayload.of` and read by :meth:`ItemPayload.from_report`.

It rides in the call report's ``user_properties`` under :data:`PROPERTY` (:func:`attach`; that report only, so
setup and teardown reports stay small) as plain JSON-able data: the API's result row as CSV cells and its
details rows as CSV lines (one string a row instead of its 23 cells, which xdist would serialise one by one),
its statuses and data mode, and whether it fails. :meth:`ItemPayload.crash` is the error payload of an API
whose worker died before it could send one. What the item itself keeps in its ``user_properties`` (and so
junitxml's ``<properties>`` of its test case) is :meth:`ItemPayload.properties`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .settings import DEFAULT_FAIL_ON, DEFAULT_PRECISION

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
