"""config.json for the MindSpore dumper.

The common keys are read and validated by :mod:`dumpers.config` with ``framework="mindspore"``, which applies
MindSpore's rules too (dump_path made absolute; ``data_mode`` is one element of all/input/output, and an
omitted data_mode means "all" rather than msprobe's dump-nothing default). This module adds what only the
MindSpore debugger needs: the tasks it runs.
"""
from __future__ import annotations

from typing import Any

from dumpers import config as shared

DUMP_TASKS = ("tensor", "statistics")
ConfigError = shared.ConfigError


# The MindSpore debugger uses the shared configuration as is (``api_list`` holds config.json's ``list``).
MsDumpConfig = shared.DumpConfig


def _normalised(cfg: shared.DumpConfig) -> shared.DumpConfig:
    cfg.dump_path = cfg.dump_path or ""
    return cfg


def from_dict(raw: Any, source: str = "<config>") -> MsDumpConfig:
    """Validate a parsed config.json object.

    Raises:
        dumpers.config.ConfigError: a key has a wrong type or value; the message names the key.
    """
    return _normalised(shared.parse_config(raw, framework="mindspore", source=source))


def load_config(config_path: Any = None) -> MsDumpConfig:
    """Read config.json (or the packaged default when ``config_path`` is None) and validate it.

    Raises:
        dumpers.config.ConfigError: the file is missing, is not JSON, or has a bad key (the message names it).
    """
    return _normalised(shared.load_config(config_path, framework="mindspore"))
