"""The per-API payload that travels from the process that ran an item to the controller (xdist included).

It rides in the call report's ``user_properties`` under :data:`PROPERTY` (:func:`attach`; that report
only, so setup and teardown reports stay small): the API's result row as CSV cells and its details rows as
CSV lines (:func:`sent`), its statuses and data mode, and whether it fails. :func:`build` makes it from a
:class:`~pytest_msprobe.replay.CaseResult`, :func:`parse` finds it in a report, and :func:`crash` makes the
error payload of an API whose worker died before it could send one. What the item itself keeps in its
``user_properties`` (and so junitxml's ``<properties>`` of its test case) is :func:`properties`: its
statuses and data mode as plain strings.
"""
from __future__ import annotations

from typing import Any

from .settings import DEFAULT_FAIL_ON, DEFAULT_PRECISION

PROPERTY = "msprobe"     # key of the per-API payload in report.user_properties


def build(result: Any, *, fail_on: str, precision: int = DEFAULT_PRECISION) -> dict:
    """JSON-able record of one API for the controller (survives xdist)."""
    from .replay.expected import multiple_cell, rounding_of
    from .report.acc_csv import detail_cells, result_cells
    worst_row, worst_reason = result.worst()
    return {
        "name": result.name,
        "forward": result.forward,
        "backward": result.backward,
        "result": result_cells(result.name, result.forward, result.backward, result.message),
        "details": [detail_cells(r, precision=precision) for r in result.details],
        "fidelity": [getattr(result, "fidelity", {}).get(r.name, "") for r in result.details],
        "expected": [multiple_cell(getattr(result, "multiples", {}).get(r.name)) for r in result.details],
        "rounding": rounding_of(result) if result.failing(fail_on) else "",
        "standards": [[str(getattr(r, "standard", "") or ""), str(r.status)] for r in result.details],
        "mode": result.data_mode,
        "kind": result.kind,
        "seed": result.seed,
        "worst": [worst_row, worst_reason],
        "failing": result.failing(fail_on),
    }


def properties(payload: dict) -> list:
    """The item's own properties (junitxml writes them per test case): ``msprobe_forward``,
    ``msprobe_backward``, ``msprobe_data_mode`` and, for an API that fails the run, ``msprobe_worst`` (the
    worst row and why)."""
    props = [("msprobe_forward", payload["forward"] or ""), ("msprobe_backward", payload["backward"] or ""),
             ("msprobe_data_mode", payload.get("mode") or "")]
    if payload.get("failing"):
        row, reason = (payload.get("worst") or ("", ""))[:2]
        props.append(("msprobe_worst", f"{row}: {' '.join(str(reason).split())}" if reason else str(row)))
    return props


def attach(report: Any, payload: dict) -> None:
    """Put ``payload`` on this report alone (pytest hands every report of an item the item's own list), in
    the form it travels in (:func:`sent`)."""
    report.user_properties = [*report.user_properties, (PROPERTY, sent(payload))]


def sent(payload: dict) -> dict:
    """The payload as the controller takes it: each details row as its CSV line (``rows``, one string a row
    instead of its 23 cells, which xdist would serialise one by one) and its name cell (``names``)."""
    from .report.acc_csv import row_text
    data = {key: value for key, value in payload.items() if key != "details"}
    data["rows"] = [row_text(cells) for cells in payload["details"]]
    data["names"] = [cells[0] for cells in payload["details"]]
    return data


def parse(report: Any) -> dict | None:
    """The payload a report carries (the last one), or None."""
    data = None
    for key, value in getattr(report, "user_properties", ()) or ():
        if key == PROPERTY:
            data = value
    return data


def crash(name: str, reason: str) -> dict:
    """The payload of an API whose process died or broke before it sent one: an error row with the reason,
    no data mode (nothing was replayed), the API itself as the worst row."""
    from .replay import error_result
    data = build(error_result(name, reason), fail_on=DEFAULT_FAIL_ON)
    data.update(standards=[], mode="", kind="", seed=None, worst=[name, reason], failing=True)
    return sent(data)


def crash_reason(report: Any) -> str:
    """Why an item failed without a payload: the crash or timeout line of its report, else its last line."""
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "crashed" in ln or "timeout" in ln.lower():
            return ln.strip()
    return ("internal error: " + lines[-1].strip()) if lines else "internal error"
