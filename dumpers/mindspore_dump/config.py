"""config.json for the MindSpore dumper.

The common keys are read and validated by :mod:`dumpers.config` with ``framework="mindspore"``, which applies
MindSpore's rules too (dump_path made absolute; ``data_mode`` is one element of all/input/output, and an
omitted data_mode means "all" rather than msprobe's dump-nothing default). This module adds what only the
MindSpore debugger needs: the tasks it runs and a flat view of the effective settings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dumpers import config as shared

DUMP_TASKS = ("tensor", "statistics")
ConfigError = shared.ConfigError


@dataclass
class MsDumpConfig:
    """The effective dump configuration of one MindSpore debugger."""

    task: str = "statistics"
    dump_path: str = ""
    level: str = "L1"
    rank: list = field(default_factory=list)
    step: list = field(default_factory=list)
    scope: list = field(default_factory=list)
    list: list = field(default_factory=list)
    data_mode: list = field(default_factory=lambda: ["all"])
    summary_mode: str = "statistics"
    file_format: str = "npy"
    source: str = "<default config>"
    raw: dict = field(default_factory=dict)

    @property
    def is_tensor(self) -> bool:
        return self.task == "tensor"


def _from_shared(cfg: shared.DumpConfig) -> MsDumpConfig:
    return MsDumpConfig(task=cfg.task, dump_path=cfg.dump_path or "", level=cfg.level, rank=list(cfg.rank),
                        step=list(cfg.step), scope=list(cfg.scope), list=list(cfg.api_list),
                        data_mode=list(cfg.data_mode), summary_mode=cfg.summary_mode,
                        file_format=cfg.file_format, source=cfg.source, raw=dict(cfg.raw))


def from_dict(raw: Any, source: str = "<config>") -> MsDumpConfig:
    """Validate a parsed config.json object.

    Raises:
        dumpers.config.ConfigError: a key has a wrong type or value; the message names the key.
    """
    return _from_shared(shared.parse_config(raw, framework="mindspore", source=source))


def load_config(config_path: Any = None) -> MsDumpConfig:
    """Read config.json (or the packaged default when ``config_path`` is None) and validate it.

    Raises:
        dumpers.config.ConfigError: the file is missing, is not JSON, or has a bad key (the message names it).
    """
    return _from_shared(shared.load_config(config_path, framework="mindspore"))
