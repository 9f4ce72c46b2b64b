"""Replay of captured calls: one pipeline (:mod:`.pipeline`) and a framework adapter each (torch, MindSpore).

Also what its parts share, the run's options and results (:mod:`.result`), the Hypothesis example loop and
error-data saving (the per-API time limit is the pipeline's). No pytest here; torch, MindSpore and Hypothesis are
imported on first use.
"""
from __future__ import annotations

from .pipeline import run_case, run_with_inputs
from .result import (
    INVALID,
    MULTI_BACKWARD_MESSAGE,
    NO_BACKWARD_MESSAGE,
    OUT_KWARG_MESSAGE,
    RANDOM_DATA,
    REAL_DATA,
    CaseResult,
    RunOptions,
    case_name,
    data_mode,
    describe,
    error_result,
    item_seed,
    judge,
    prepare_compare,
    raise_target,
    reason,
    seed_note,
    skip_result,
)

__all__ = ["INVALID", "MULTI_BACKWARD_MESSAGE", "NO_BACKWARD_MESSAGE", "OUT_KWARG_MESSAGE", "RANDOM_DATA",
           "REAL_DATA", "CaseResult", "RunOptions", "case_name", "data_mode", "describe", "error_result",
           "item_seed", "judge", "prepare_compare", "raise_target", "reason", "run_case", "run_with_inputs",
           "seed_note", "skip_result"]
