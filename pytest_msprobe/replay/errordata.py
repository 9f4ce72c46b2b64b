"""``--msprobe-save-error-data``: the inputs and both outputs of a failing API as ``.pt`` files (spec 7.3)."""
from __future__ import annotations

import os

from .result import leaves


def save_error_data(directory: str, name: str, saved: dict) -> list:
    """``torch.save`` every tensor of a failing API as ``{name}.{role}.{k}.pt``, numbering the leaves of each
    role (args then kwargs) without restarting, so nothing is overwritten. Returns the written paths."""
    import torch

    from ..report.acc_csv import make_dirs
    make_dirs(directory)
    flat = name.replace("/", "_").replace("\\", "_")    # "step0/rank::Functional.gelu.0": one file, no subdirs
    written = []
    for role, value in saved.items():
        for k, leaf in enumerate(leaves(value)):
            if isinstance(leaf, torch.Tensor):
                path = os.path.join(directory, f"{flat}.{role}.{k}.pt")
                # created 0o640 through the umask (a chmod after the fact would widen a stricter umask)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
                with os.fdopen(fd, "wb") as fh:
                    torch.save(leaf.detach().cpu().contiguous(), fh)
                written.append(path)
    return written
