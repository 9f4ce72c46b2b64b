"""Public helpers of generated regression suites and hand-written tests: the import path generated files use.

Every suite written by ``pytest-msprobe generate`` (older ones included) imports this module; the code lives
in :mod:`pytest_msprobe.suite.runtime`.
"""
from __future__ import annotations

from .suite.runtime import (
    DEFAULT_SEED,
    backend_for,
    check_call,
    describe_case,
    exit_status,
    format_result,
    get_backend,
    load_case,
    options_for,
    reproduce_parser,
    run_call,
)

__all__ = ["DEFAULT_SEED", "backend_for", "check_call", "describe_case", "exit_status", "format_result",
           "get_backend", "load_case", "options_for", "reproduce_parser", "run_call"]
