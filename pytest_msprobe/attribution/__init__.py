"""Attribution of a training step's drift to its API calls, by correcting calls in the live step.

:func:`attribute` (also ``pytest_msprobe.attribute``) runs the user's step repeatedly with chosen calls given
the bench's output (:mod:`.mode`), measures the loss and gradient drift (:mod:`.drift`), searches the calls
that explain it by group testing (:mod:`.search`) and writes the CSV, the terminal table and the HTML page
(:mod:`.report`, :mod:`.html`).
"""
from __future__ import annotations

from .api import AttributionResult, Row, attribute
from .runner import StepError

__all__ = ["AttributionResult", "Row", "StepError", "attribute"]
