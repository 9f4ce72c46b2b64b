"""Compare two runs API by API (msprobe's ``compare``), name the first divergence, find the first inf/nan.

``runner.compare_runs`` pairs the ranks of a target and a golden dump and writes msprobe's
``compare_result_{rank}_{timestamp}.csv`` for each; ``diverge`` walks the compared calls in execution order
for the first one whose outputs differ beyond what its inputs and its dtype explain.
"""
from __future__ import annotations
