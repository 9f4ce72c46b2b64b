"""The new precision standard: API tables, per-output metrics, verdicts and roll-up.

Modules:
  standards  API lists, thresholds and the named standard versions, all as data
  metrics    pure numpy metric functions (chunked for large outputs)
  compare    per-output verdicts (details rows), dropout rule and the roll-up
  apc_rules  the NPU-vs-GPU ratio rules of api_precision_compare

Importing this package imports nothing heavy; ``compare`` imports torch only when it meets a tensor.
"""
from __future__ import annotations

from .standards import DEFAULT_STANDARD, STANDARDS, StandardVersion, get_standard, standard_for

__all__ = ["DEFAULT_STANDARD", "STANDARDS", "StandardVersion", "get_standard", "standard_for"]
