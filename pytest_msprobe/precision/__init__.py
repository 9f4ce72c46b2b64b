"""The new precision standard: API tables, per-output metrics, verdicts and roll-up.

Modules:
  standards  API lists, thresholds and the named standard versions, all as data
  compare    per-output metrics (the standard's parameters handed to the one metric pass of
             dumpers.metrics_engine) and verdicts (details rows), dropout rule and the roll-up
  apc_rules  the NPU-vs-GPU ratio rules of api_precision_compare

Importing this package imports nothing heavy; ``compare`` imports torch only when it meets a tensor.
"""
from __future__ import annotations

from .standards import DEFAULT_STANDARD, STANDARDS, StandardVersion, get_standard, standard_for

__all__ = ["DEFAULT_STANDARD", "STANDARDS", "StandardVersion", "get_standard", "standard_for"]
