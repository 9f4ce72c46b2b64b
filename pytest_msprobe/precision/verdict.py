"""Statuses and verdicts: the one place that decides whether a status, an API or a run fails.

Everything else (the item outcome, the exit status, the CSV roll-up of a result row, the NPU-vs-GPU decision
and the reports) reads its answer here and spells statuses with these constants. Pure Python, no imports.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

# status strings as msprobe writes them (the warning spelling is per standard: StandardVersion.warning)
PASS = "pass"
ERROR = "error"
WARNING = "warning"
SKIP = "SKIP"
# lower-case keys that compare statuses of any spelling (norm() of each status)
PASS_KEY, ERROR_KEY, WARNING_KEY, SKIP_KEY = PASS, ERROR, WARNING, "skip"
# worst first: an API shows the worst of its statuses
SEVERITY = (ERROR_KEY, WARNING_KEY, SKIP_KEY, PASS_KEY)
# --msprobe-fail-on: an API fails on error, or on error and warning
FAIL_ON_CHOICES = (ERROR, WARNING)
DEFAULT_FAIL_ON = ERROR

# replay fidelity (the Replay Fidelity cell starts with one of these; strict fails an unfaithful replay)
FAITHFUL = ("exact", "within", "close")      # first word of the cell ("within rounding (...)")
UNFAITHFUL = "differs"
STRICT_FIDELITY = "strict"

# item outcomes (what pytest reports)
PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"


def norm(status: object) -> str:
    """A status cell or value in its comparable form: stripped, lower case, None -> ""."""
    return str(status or "").strip().lower()


def bad_statuses(fail_on: str = DEFAULT_FAIL_ON) -> frozenset:
    """The statuses (lower case) that make an API fail under ``fail_on``."""
    return frozenset({ERROR_KEY, WARNING_KEY}) if norm(fail_on) == WARNING_KEY else frozenset({ERROR_KEY})


def is_failing(forward: object, backward: object = None, *, fail_on: str = DEFAULT_FAIL_ON) -> bool:
    """True when the forward or the backward status fails under ``fail_on`` (any spelling, blanks ignored)."""
    bad = bad_statuses(fail_on)
    return norm(forward) in bad or norm(backward) in bad


def is_skip(status: object) -> bool:
    return norm(status) == SKIP_KEY


def is_bad_row(status: object) -> bool:
    """A details row worth explaining: error or warning (any spelling)."""
    return norm(status) in (ERROR_KEY, WARNING_KEY)


def worst(statuses: Iterable[object]) -> str:
    """The worst of ``statuses`` as a lower-case key (``SEVERITY`` order); no known status -> pass. The one
    "worst status" of the package: a roll-up, the compare's API status and the reports ask it."""
    present = {norm(s) for s in statuses}
    for key in SEVERITY:
        if key in present:
            return key
    return PASS_KEY


def worst_judged(statuses: Iterable[object]) -> str | None:
    """The worst of the judged statuses (error, warning, pass; SKIP, blanks and others left out) as a lower-case
    key, or None when none was judged."""
    judged = [s for s in (norm(x) for x in statuses) if s in (ERROR_KEY, WARNING_KEY, PASS_KEY)]
    return worst(judged) if judged else None


def item_outcome(forward: object, backward: object, *, fail_on: str = DEFAULT_FAIL_ON,
                 reference: tuple | None = None, fidelity: Iterable[object] = (), fidelity_mode: str = "") -> str:
    """PASSED, FAILED or SKIPPED for one API: the one decision of an item's outcome.

    ``forward``, ``backward``: its device-vs-bench statuses. ``reference``: the (forward, backward) statuses of
    the NPU-vs-GPU compare of this API, which decide when given (``--msprobe-gpu-csv``): any failing one fails,
    all SKIP (blanks aside) skips, else it passes. An API the device-vs-bench run skipped is SKIPPED either
    way. ``fidelity``: its Replay Fidelity cells; under ``fidelity_mode`` strict an unfaithful replay fails an
    API that would pass.
    """
    if is_skip(forward):
        return SKIPPED
    if reference is not None:
        if is_failing(*reference, fail_on=fail_on):
            return FAILED
        if all(is_skip(s) for s in reference if norm(s)):
            return SKIPPED
    elif is_failing(forward, backward, fail_on=fail_on):
        return FAILED
    return FAILED if fidelity_fails(fidelity, fidelity_mode) else PASSED


def is_unfaithful(fidelity: object) -> bool:
    """A Replay Fidelity cell saying the replay did not reproduce the recorded output."""
    return str(fidelity or "").startswith(UNFAITHFUL)


def fidelity_fails(fidelity_cells: Iterable[object], mode: str) -> bool:
    """Whether an API fails for its replay fidelity: ``strict`` mode and at least one unfaithful row."""
    return norm(mode) == STRICT_FIDELITY and any(is_unfaithful(c) for c in fidelity_cells)


def compare_status(forward: object, backward: object) -> str:
    """The one status an API of an NPU-vs-GPU compare is counted under: error, else warning, else pass, else SKIP."""
    return worst_judged((forward, backward)) or SKIP


# the order a compare summary counts its statuses in
COMPARE_STATUSES = (PASS, WARNING, ERROR, SKIP)


def compare_failures(verdicts: Mapping[str, tuple]) -> list:
    """API names that fail the NPU-vs-GPU compare (any error), sorted: a non-empty list fails the run."""
    return sorted(name for name, pair in verdicts.items() if is_failing(*pair, fail_on=ERROR))

