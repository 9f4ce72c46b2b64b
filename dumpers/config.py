"""config.json for the dumpers: loading, defaults, validation and precedence.

Shared by the PyTorch and MindSpore debuggers (pass ``framework``). Imports only the standard library,
so it can be used without a framework installed. Rules follow msprobe's config.json (spec section 1):
constructor argument > file value > built-in default, and every bad key or value is one clear
:class:`ConfigError` that names the key and says what to write instead. Every key msprobe 1.x or 26.x
documents is known (:mod:`dumpers.config_keys`): one this project does not act on gives one
:class:`ConfigWarning` naming it and what msprobe does with it; a key no release documents is an error that
suggests the nearest documented one.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from dumpers import config_keys as keys

TASKS = keys.ALL_TASKS
LEVELS = keys.ALL_LEVELS
DATA_MODES = ("all", "forward", "backward", "input", "output")
MINDSPORE_DATA_MODES = ("all", "input", "output")
SUMMARY_MODES = ("statistics", "md5")
FILE_FORMATS = ("npy", "bin")
FRAMEWORKS = ("pytorch", "mindspore")
MODULE_PREFIX = {"pytorch": "Module", "mindspore": "Cell"}

# The packaged default config (used when no config_path is given).
DEFAULT_CONFIG: dict = {"task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1",
                        "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}

TOP_LEVEL_KEYS = (*keys.TOP_LEVEL, *keys.SECTIONS)
DUMP_SECTION_KEYS = {task: tuple(keys.SECTIONS[task]) for task in keys.DUMP_TASKS}
RANGE_MAX = 1_000_000
PATH_PATTERN = re.compile(r"^[a-zA-Z0-9_./-]+\Z")
PATH_MAX = 4096
NAME_MAX = 255


class ConfigError(ValueError):
    """A config.json key or value that the dumper cannot use; the message names it and the fix."""


class ConfigWarning(UserWarning):
    """A documented msprobe config.json key or value that this project accepts and does not act on."""


def warn_ignored(message: str) -> None:
    """Emit one :class:`ConfigWarning` (an ignored key or task, named in ``message``)."""
    warnings.warn(message, ConfigWarning, stacklevel=4)


@dataclass
class DumpConfig:
    """The effective dump configuration after precedence and validation."""

    task: str
    dump_path: Optional[str]
    level: str
    framework: str = "pytorch"
    rank: list = field(default_factory=list)
    step: list = field(default_factory=list)
    scope: list = field(default_factory=list)
    api_list: list = field(default_factory=list)
    data_mode: list = field(default_factory=lambda: ["all"])
    summary_mode: str = "statistics"
    file_format: str = "npy"
    seed: Optional[int] = None
    risk_level: str = keys.RISK_DEFAULT
    raw: dict = field(default_factory=dict)
    source: str = "<default config>"

    @property
    def is_dump_task(self) -> bool:
        """True for the tasks this dumper writes dump.json for (statistics and tensor)."""
        return self.task in ("statistics", "tensor")

    def section(self) -> dict:
        """The raw task section of the file for the effective task ({} when absent)."""
        value = self.raw.get(self.task)
        return dict(value) if isinstance(value, dict) else {}

    def to_dict(self) -> dict:
        """The config back as config.json would write it (raw file, overridden by effective values)."""
        out = dict(self.raw)
        out.update(task=self.task, dump_path=self.dump_path, level=self.level, rank=list(self.rank),
                   step=list(self.step))
        return out


def _fail(source: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: '{key}' {message}")


def parse_int_list(value: Any, key: str = "step", source: str = "config") -> list:
    """Parse a ``rank``/``step`` list: ints >= 0 and ``"a-b"`` inclusive ranges; sorted, de-duplicated."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _fail(source, key, f"is invalid, it should be a list such as [0, 2, \"4-6\"], got {value!r}")
    out = set()
    for item in value:
        if isinstance(item, bool):
            raise _fail(source, key, f"element {item!r} must be an integer >= 0 or a range string \"a-b\"")
        if isinstance(item, int):
            if item < 0 or item > RANGE_MAX:
                raise _fail(source, key, f"element {item} must be in [0, {RANGE_MAX}]")
            out.add(item)
        elif isinstance(item, str):
            m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", item)
            if not m:
                raise _fail(source, key, f"element {item!r} must be a range string like \"2-5\"")
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi or hi > RANGE_MAX:
                raise _fail(source, key, f"range {item!r} must satisfy a <= b <= {RANGE_MAX}")
            out.update(range(lo, hi + 1))
        else:
            raise _fail(source, key, f"element {item!r} must be an integer or a string \"a-b\"")
    return sorted(out)


def check_dump_path(path: Any, source: str = "config") -> str:
    """Validate a dump_path string (characters, total length, component length)."""
    if not isinstance(path, str) or not path:
        raise _fail(source, "dump_path", f"is invalid, it should be a non-empty string, got {path!r}")
    if not PATH_PATTERN.match(path):
        bad = sorted({c for c in path if not PATH_PATTERN.match(c)})
        raise _fail(source, "dump_path", f"{path!r} contains characters {bad}; use only letters, digits and _ . / -")
    if len(os.path.abspath(path)) > PATH_MAX:
        raise _fail(source, "dump_path", f"is longer than {PATH_MAX} characters")
    if any(len(part) > NAME_MAX for part in path.split("/")):
        raise _fail(source, "dump_path", f"has a directory name longer than {NAME_MAX} characters")
    return path


def _str_list(value: Any, key: str, source: str) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _fail(source, key, f"must be a list of strings, got {value!r}")
    return list(value)


def _check_scope(scope: list, framework: str, source: str) -> list:
    if len(scope) > 2:
        raise _fail(source, "scope", f"[msprobe] Invalid scope: give 1 or 2 entry names, got {len(scope)}")
    module = MODULE_PREFIX[framework]
    kinds = {s.split(".", 1)[0] == module for s in scope}
    if len(kinds) > 1:
        raise _fail(source, "scope", f"[msprobe] Invalid scope: both names must be {module} names or both API "
                                     f"names, got {scope!r}")
    return scope


def _check_known_keys(raw: dict, source: str) -> None:
    """Every key, top level and in each task section, must be one that some msprobe release documents."""
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            raise _fail(source, key, "is not a config.json key of any msprobe release"
                        + keys.did_you_mean(key, TOP_LEVEL_KEYS) + f"; known keys: {list(TOP_LEVEL_KEYS)}")
    for task, known in keys.SECTIONS.items():
        section = raw.get(task)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise _fail(source, task, f"must be a JSON object (the '{task}' task section)")
        for key in section:
            if key not in known:
                raise _fail(source, f"{task}.{key}", f"is not a key of the '{task}' section"
                            + keys.did_you_mean(key, known) + f"; known keys: {list(known)}")


def _warn_ignored_keys(raw: dict, task: str, source: str) -> None:
    """One warning per ignored key (top level, and the effective dump task's section) whose value matters."""
    for key, value in raw.items():
        info = keys.TOP_LEVEL.get(key)
        if info is not None and info.kind == keys.IGNORED and not info.is_quiet(value):
            warn_ignored(keys.ignored_message(source, key, info, value))
    if task not in keys.DUMP_TASKS:
        return
    for key, value in (raw.get(task) or {}).items():
        info = keys.SECTIONS[task][key]
        if info.kind == keys.IGNORED and not info.is_quiet(value):
            warn_ignored(keys.ignored_message(source, f"{task}.{key}", info, value))


def _check_task(task: Any, source: str) -> str:
    if task in keys.ALL_TASKS:
        if task in keys.INERT_TASKS:
            warn_ignored(f"{source}: task {task!r} is ignored: msprobe {keys.INERT_TASKS[task]}; this debugger "
                         f"dumps nothing for it (start/stop/step do nothing). Dump with one of "
                         f"{list(keys.DUMP_TASKS)}, or monitor gradients with 'grad_probe'.")
        return task
    raise _fail(source, "task", f"is invalid: {task!r}" + keys.did_you_mean(str(task), keys.ALL_TASKS)
                + f"; use one of {list(keys.WORKING_TASKS)}")


def _check_level(level: Any, task: str, framework: str, source: str) -> str:
    accepted = keys.LEVELS[framework]
    if task not in keys.DUMP_TASKS and level in keys.ALL_LEVELS:
        return level                      # a task that dumps nothing: the level is never used
    if level in accepted:
        return level
    if level in keys.UNAVAILABLE_LEVELS:
        raise _fail(source, "level", f"{level!r} {keys.UNAVAILABLE_LEVELS[level]}; it is not available for "
                    f"{framework}: use one of {list(accepted)}")
    raise _fail(source, "level", f"is invalid: {level!r}" + keys.did_you_mean(str(level), accepted)
                + f"; use one of {list(accepted)}")


def _check_risk_level(raw: dict, source: str) -> str:
    """``risk_level``: absent is msprobe 26.2's default ("FOCUS"), an empty value "ALL", else one of the levels."""
    if "risk_level" not in raw:
        return keys.RISK_DEFAULT
    value = raw["risk_level"]
    level = keys.risk_level_of(value)
    if level is not None:
        return level
    hint = ""
    if isinstance(value, str) and value.strip().upper() in keys.RISK_LEVELS:
        hint = f" (did you mean {value.strip().upper()!r}? the levels are upper case)"
    raise _fail(source, "risk_level", f"is invalid: {value!r}{hint}; use one of {list(keys.RISK_LEVELS)}: \"ALL\" "
                "records every API, \"FOCUS\" (the default) all but low-risk ones such as reshape, view and cat, "
                "\"CORE\" only matrix products, convolutions, normalisations, attention and collectives")


def _check_section(section: dict, task: str, framework: str, source: str) -> dict:
    if task not in keys.DUMP_TASKS:
        return {}
    out: dict = {}
    out["scope"] = _check_scope(_str_list(section.get("scope"), f"{task}.scope", source), framework, source)
    out["api_list"] = _str_list(section.get("list"), f"{task}.list", source)
    data_mode = _str_list(section.get("data_mode"), f"{task}.data_mode", source) or ["all"]
    allowed = MINDSPORE_DATA_MODES if framework == "mindspore" else DATA_MODES
    bad = [m for m in data_mode if m not in allowed]
    if bad or (framework == "mindspore" and len(data_mode) > 1):
        raise _fail(source, f"{task}.data_mode", f"{data_mode!r} is invalid; use a list of {list(allowed)}"
                    + (" with one element" if framework == "mindspore" else ""))
    out["data_mode"] = data_mode
    summary = section.get("summary_mode", "statistics") or "statistics"
    if summary == "xor" and framework == "pytorch":
        warn_ignored(f"{source}: '{task}.summary_mode' = 'xor' is ignored (26.x msprobe value): msprobe writes an "
                     f"XOR check value instead of the statistics; here the statistics are written.")
        summary = "statistics"
    if summary not in SUMMARY_MODES:
        raise _fail(source, f"{task}.summary_mode", f"is invalid: {summary!r}; use one of {list(SUMMARY_MODES)}")
    out["summary_mode"] = summary
    file_format = section.get("file_format", "npy") or "npy"
    if file_format not in FILE_FORMATS:
        raise _fail(source, f"{task}.file_format", f"is invalid: {file_format!r}; use one of {list(FILE_FORMATS)}")
    out["file_format"] = file_format
    return out


def parse_config(raw: dict, *, framework: str = "pytorch", source: str = "<dict>", task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None,
                 step: Optional[Sequence] = None, rank: Optional[Sequence] = None) -> DumpConfig:
    """Validate a parsed config.json and apply constructor overrides (argument > file > default).

    Documented msprobe keys that are not implemented here each give one :class:`ConfigWarning`.

    Raises:
        ConfigError: a key or value is invalid; the message names the key and the accepted values.
    """
    if framework not in FRAMEWORKS:
        raise ConfigError(f"framework must be one of {list(FRAMEWORKS)}, got {framework!r}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the config must be a JSON object, got {type(raw).__name__}")
    _check_known_keys(raw, source)
    eff_task = _check_task(task if task is not None else (raw.get("task") or "statistics"), source)
    eff_level = _check_level(level if level is not None else (raw.get("level") or "L1"), eff_task, framework,
                             source)
    eff_path = dump_path if dump_path is not None else raw.get("dump_path")
    if eff_path is None:
        raise _fail(source, "dump_path", "is missing: add \"dump_path\": \"./dump_path\" to the config or pass "
                                         "dump_path=... to PrecisionDebugger")
    eff_path = check_dump_path(os.fspath(eff_path) if isinstance(eff_path, os.PathLike) else eff_path, source)
    if framework == "mindspore":
        eff_path = os.path.abspath(eff_path)
    eff_rank = parse_int_list(rank if rank is not None else raw.get("rank"), "rank", source)
    eff_step = parse_int_list(step if step is not None else raw.get("step"), "step", source)
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**32 - 1):
        raise _fail(source, "seed", f"must be an integer in [0, 4294967295], got {seed!r}")
    for key in ("is_deterministic", "enable_dataloader", "async_dump", "extra_info", "dump_enable"):
        if key in raw and not isinstance(raw[key], bool):
            raise _fail(source, key, f"must be true or false, got {raw[key]!r}")
    risk_level = _check_risk_level(raw, source)
    section_raw = raw.get(eff_task) or {}
    section = _check_section(section_raw, eff_task, framework, source)
    _warn_ignored_keys(raw, eff_task, source)
    return DumpConfig(task=eff_task, dump_path=eff_path, level=eff_level, framework=framework, rank=eff_rank,
                      step=eff_step, scope=section.get("scope", []), api_list=section.get("api_list", []),
                      data_mode=section.get("data_mode", ["all"]),
                      summary_mode=section.get("summary_mode", "statistics"),
                      file_format=section.get("file_format", "npy"), seed=seed, risk_level=risk_level, raw=dict(raw),
                      source=source)


def checker_section(data: Any, source: str) -> dict:
    """The accuracy checker's settings from a config.json: its ``acc_check`` (26.x) or ``run_ut`` (1.x) section.

    The rest of the file (a dump config) is accepted as it is. Online run_ut keys give one
    :class:`ConfigWarning` each.

    Raises:
        TypeError, ValueError: the section or a value has the wrong type, or a key no msprobe release documents.
    """
    if not isinstance(data, dict):
        raise TypeError(f"{source}: the top level must be an object with an 'acc_check' or 'run_ut' key")
    name = "acc_check" if "acc_check" in data else "run_ut"
    section = data.get(name, {})
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise TypeError(f"{source}: 'acc_check'/'run_ut' must be an object")
    known = keys.SECTIONS[name]
    for key, value in section.items():
        info = known.get(key)
        if info is None:
            raise ValueError(f"{source}: '{name}.{key}' is not a key of the '{name}' section"
                             + keys.did_you_mean(key, known) + f"; known keys: {list(known)}")
        if info.kind == keys.IGNORED and not info.is_quiet(value):
            warn_ignored(keys.ignored_message(source, f"{name}.{key}", info, value))
    if name == "acc_check" and isinstance(data.get("run_ut"), dict) and data["run_ut"] != section:
        warn_ignored(f"{source}: the 'run_ut' section is ignored: the file also has an 'acc_check' section (msprobe "
                     f"26.x's name), which is the one read.")
    out = {}
    for key in ("white_list", "black_list"):
        value = section.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{source}: {key} must be a list of API names, like [\"linear\", \"gelu\"]")
        out[key] = value
    edp = section.get("error_data_path", "./")
    if not isinstance(edp, str):
        raise TypeError(f"{source}: error_data_path must be a directory path string")
    out["error_data_path"] = edp
    return out


def read_config_file(config_path: Any) -> dict:
    """Read and parse a config.json file, with errors that name the file."""
    if not isinstance(config_path, (str, os.PathLike)):
        raise ConfigError(f"config_path must be a path to a .json file, got {config_path!r}")
    path = os.fspath(config_path)
    if not path.endswith(".json"):
        raise ConfigError(f"config_path {path!r} must name a .json file")
    if not os.path.isfile(path):
        raise ConfigError(f"config_path {path!r} does not exist or is not a file")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); fix the file or pass no config_path") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None


def load_config(config_path: Any = None, *, framework: str = "pytorch", task: Optional[str] = None,
                dump_path: Optional[str] = None, level: Optional[str] = None,
                step: Optional[Sequence] = None, rank: Optional[Sequence] = None) -> DumpConfig:
    """Load config.json (or the packaged default when ``config_path`` is None) and validate it."""
    if config_path is None:
        raw, source = json.loads(json.dumps(DEFAULT_CONFIG)), "<default config>"
    else:
        raw, source = read_config_file(config_path), os.fspath(config_path)
    return parse_config(raw, framework=framework, source=source, task=task, dump_path=dump_path, level=level,
                        step=step, rank=rank)
