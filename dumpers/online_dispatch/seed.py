"""``seed_all``: fix every random generator before a run compared with online dispatch."""
from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

MAX_SEED = 2**32 - 1


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every accelerator present) and set deterministic flags.

    Args:
        seed: an int in [0, 2**32 - 1].
        mode: passed to ``torch.use_deterministic_algorithms`` (True also raises for nondeterministic ops).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an int in [0, {MAX_SEED}], got {seed!r}.")
    if not isinstance(mode, bool):
        raise TypeError(f"mode must be a bool, got {mode!r}.")
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)          # also seeds every CUDA device
    if mode or torch.are_deterministic_algorithms_enabled():   # the first call costs seconds: skip a no-op
        torch.use_deterministic_algorithms(mode)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    npu = getattr(torch, "npu", None) if "torch_npu" in sys.modules else None
    if npu is not None:
        npu.manual_seed_all(seed)
