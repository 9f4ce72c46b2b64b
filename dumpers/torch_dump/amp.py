"""The autocast state of a captured call, recorded in its forward entry (``dumpers.format.AUTOCAST``).

A :class:`~torch.overrides.TorchFunctionMode` sees a call before autocast casts its inputs: the entry holds the
inputs as the model passed them and the output autocast produced. The state (device type, dtype, enabled) lets
the replay run the call as training ran it. Only calls under an enabled autocast carry the key.
"""
from __future__ import annotations

from typing import Optional

import torch

from dumpers import format as fmt
from dumpers import json_render

_TAIL = json_render.INDENTS[2] + "}"          # how an entry's text ends (an entry sits two levels deep)


def _device_type(args: tuple, kwargs: dict) -> str:
    """The device type of the call's first tensor argument (``cpu`` when it has none at the top level)."""
    for value in args:
        if isinstance(value, torch.Tensor):
            return "cpu" if value.is_cpu else value.device.type
    for value in kwargs.values():
        if isinstance(value, torch.Tensor):
            return "cpu" if value.is_cpu else value.device.type
    return "cpu"


def state(args: tuple, kwargs: dict) -> Optional[dict]:
    """``{"device_type", "dtype", "enabled": True}`` when autocast is on for the call's device, else None."""
    device = _device_type(args, kwargs)
    try:
        if not torch.is_autocast_enabled(device):
            return None
        dtype = torch.get_autocast_dtype(device)
    except RuntimeError:            # a device type autocast does not know
        return None
    return {fmt.AUTOCAST_DEVICE: device, fmt.AUTOCAST_DTYPE: str(dtype), fmt.AUTOCAST_ENABLED: True}


def with_state(text: str, amp: dict) -> str:
    """A forward entry's finished text with the autocast key added last."""
    if not text.endswith(_TAIL):
        raise ValueError("not the text of a dump.json entry")
    value = json_render.dumps_json_fast(amp, 3)
    return f'{text[: -len(_TAIL)]},{json_render.INDENTS[3]}"{fmt.AUTOCAST}": {value}{_TAIL}'
