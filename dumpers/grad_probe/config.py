"""The grad_probe configuration: the ``task: grad_probe`` keys of config.json, with defaults and validation."""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TASK = "grad_probe"
SECTION = "grad_probe"
LEVELS = ("L0", "L1", "L2")
DEFAULT_LEVEL = "L1"
DEFAULT_BOUNDS = (-1, 0, 1)
SECTION_KEYS = ("grad_level", "param_list", "bounds")
INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1
_PATH_CHARS = re.compile(r"^[a-zA-Z0-9_./-]+\Z")
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*\Z")


class GradProbeConfigError(ValueError):
    """A grad_probe config value is invalid; the message names the key and what to write instead."""


@dataclass(frozen=True)
class GradProbeConfig:
    """Validated grad_probe settings.

    ``ranks``/``steps`` are empty tuples for "all"; ``bounds`` keeps the JSON numbers as given (their
    ``str()`` names the L2 interval columns).
    """

    dump_path: str
    grad_level: str = DEFAULT_LEVEL
    param_list: tuple[str, ...] = ()
    bounds: tuple[int | float, ...] = DEFAULT_BOUNDS
    ranks: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    _step_set: frozenset = field(default=frozenset(), repr=False, compare=False)

    def wants_step(self, step: int) -> bool:
        """True if optimizer step ``step`` is exported (``step`` list empty = every step)."""
        return not self.steps or step in self._step_set

    def wants_rank(self, rank: int) -> bool:
        """True if ``rank`` exports (``rank`` list empty = every rank)."""
        return not self.ranks or rank in self.ranks

    @property
    def has_direction(self) -> bool:
        """L1 and L2 write gradient-sign files; L0 does not."""
        return self.grad_level != "L0"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _index_list(value: Any, key: str) -> tuple[int, ...]:
    """A ``rank``/``step`` list: ints >= 0 and "a-b" range strings, expanded and de-duplicated in order."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise GradProbeConfigError(f"config key '{key}' must be a list of integers >= 0 (or \"a-b\" ranges), "
                                   f"got {value!r}; use [] for all")
    out: list = []
    for item in value:
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            out.append(item)
            continue
        m = _RANGE.match(item) if isinstance(item, str) else None
        if m and int(m.group(1)) <= int(m.group(2)):
            out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
            continue
        raise GradProbeConfigError(f"config key '{key}': element {item!r} is not an integer >= 0 or a range "
                                   f"\"a-b\" with a <= b")
    return tuple(dict.fromkeys(out))


def validate_bounds(bounds: Any, *, level: str = "L2") -> tuple[int | float, ...]:
    """Check ``bounds``: numbers (not bool) within int64, strictly ascending; non-empty for L2."""
    if not isinstance(bounds, (list, tuple)):
        raise GradProbeConfigError(f"grad_probe.bounds must be a list of numbers, e.g. [-1, 0, 1]; got {bounds!r}")
    for b in bounds:
        if not _is_number(b):
            raise GradProbeConfigError(f"grad_probe.bounds: bounds element is not int or float: {b!r}")
        if math.isnan(b) or not INT64_MIN <= b <= INT64_MAX:
            raise GradProbeConfigError(f"grad_probe.bounds: bounds element is out of int64 range: {b!r}")
    for a, b in zip(bounds, bounds[1:]):
        if not a < b:
            raise GradProbeConfigError(f"grad_probe.bounds: bounds list is not ascending ({a!r} then {b!r}); "
                                       "sort it and remove duplicates")
    if level == "L2" and not bounds:
        raise GradProbeConfigError("grad_probe.bounds is empty but grad_level L2 needs at least one bound, "
                                   "e.g. [-1, 0, 1]")
    return tuple(bounds)


def parse_config(config: Mapping[str, Any] | str) -> GradProbeConfig:
    """Validate the grad_probe keys of a parsed config.json dict (or the path of one).

    Raises:
        GradProbeConfigError: naming the bad key and what to write instead.
    """
    if isinstance(config, str):
        try:
            with open(config, encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError) as exc:
            raise GradProbeConfigError(f"cannot read grad_probe config file {config}: {exc}") from exc
    if not isinstance(config, Mapping):
        raise GradProbeConfigError(f"config must be a dict parsed from config.json, got {type(config).__name__}")
    task = config.get("task", TASK)
    if task != TASK:
        raise GradProbeConfigError(f"config key 'task' is {task!r}; gradient monitoring needs \"task\": \"{TASK}\"")
    dump_path = config.get("dump_path")
    if not isinstance(dump_path, str) or not dump_path:
        raise GradProbeConfigError("config key 'dump_path' is required: the output directory as a string")
    if not _PATH_CHARS.match(dump_path):
        raise GradProbeConfigError(f"config key 'dump_path' {dump_path!r} has characters outside "
                                   "[a-zA-Z0-9_./-]; choose a plainer path")
    section = config.get(SECTION) or {}
    if not isinstance(section, Mapping):
        raise GradProbeConfigError(f"config key '{SECTION}' must be an object with keys {', '.join(SECTION_KEYS)}")
    unknown = sorted(set(section) - set(SECTION_KEYS))
    if unknown:
        raise GradProbeConfigError(f"unknown key(s) {unknown} in '{SECTION}'; valid keys are {list(SECTION_KEYS)}")
    level = section.get("grad_level", DEFAULT_LEVEL)
    if level not in LEVELS:
        raise GradProbeConfigError(f"grad_probe.grad_level must be one of {list(LEVELS)}, got {level!r}")
    param_list = section.get("param_list", [])
    if param_list is None:
        param_list = []
    if not isinstance(param_list, (list, tuple)) or not all(isinstance(p, str) for p in param_list):
        raise GradProbeConfigError("grad_probe.param_list must be a list of parameter names (strings); "
                                   "use [] to monitor every parameter")
    bounds = validate_bounds(section.get("bounds", list(DEFAULT_BOUNDS)), level=level)
    steps = _index_list(config.get("step"), "step")
    return GradProbeConfig(dump_path=dump_path, grad_level=level, param_list=tuple(param_list), bounds=bounds,
                           ranks=_index_list(config.get("rank"), "rank"), steps=steps,
                           _step_set=frozenset(steps))


def interval_names(bounds: tuple[int | float, ...]) -> list:
    """L2 column names for ``bounds``: ``(-inf, b0]``, ``(b0, b1]``, ..., ``(bk, inf)``."""
    edges = ["-inf", *(str(b) for b in bounds), "inf"]
    names = [f"({lo}, {hi}]" for lo, hi in zip(edges[:-2], edges[1:-1])]
    names.append(f"({edges[-2]}, inf)")
    return names


def csv_header(level: str, bounds: tuple[int | float, ...] | None = None) -> list:
    """The grad_summary CSV header row for ``level``."""
    if level == "L0":
        return ["param_name", "MD5", "max", "min", "norm", "shape"]
    if level == "L1":
        return ["param_name", "max", "min", "norm", "shape"]
    return ["param_name", *interval_names(tuple(bounds or ())), "=0", "max", "min", "norm", "shape"]
