"""Online dispatch: compare every aten op of a training step with a CPU re-run, on any device.

``PtdbgDispatch`` is a ``TorchDispatchMode``; ``seed_all`` fixes the random generators first.
"""
from __future__ import annotations

from .config import OnlineDispatchError
from .dispatch import PtdbgDispatch
from .output import COMPARE_RESULT_HEADER
from .seed import seed_all
from .workers import shutdown_workers

__all__ = ["COMPARE_RESULT_HEADER", "OnlineDispatchError", "PtdbgDispatch", "seed_all", "shutdown_workers"]
