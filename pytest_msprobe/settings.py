"""Command-line and ini options of the accuracy check, their validators, the resolved settings and every default.

Registering options imports nothing heavy. ``Settings.from_config`` merges, in this order of priority,
the command line, the ``acc_check``/``run_ut`` section of ``--msprobe-config``, and the ini file. The defaults
below are the only ones: the precision standard's and the CSV cells' are named here from the modules that own
them, every other module takes them from here.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from dumpers.config import checker_section

from .precision.standards import DEFAULT_STANDARD, STANDARDS
from .precision.verdict import DEFAULT_FAIL_ON, FAIL_ON_CHOICES
from dumpers.format import DEFAULT_PRECISION

# --- defaults ---------------------------------------------------------------------------------------
DEFAULT_SEED = 1234                      # random-data mode; each API derives its own (replay.item_seed)
DEFAULT_OUT_DIR = "."
DEFAULT_THREADS = 1                      # CPU threads per process: results identical whatever -n is
DEFAULT_EXAMPLES = 1                     # Hypothesis examples per API in random-data mode
# msprobe's multi_run_ut documents at most 8 parallel runs per accelerator device.
DEFAULT_MAX_WORKERS_PER_DEVICE = 8
# replay fidelity: 'report' writes the Replay Fidelity column only; 'strict' also fails an unfaithful replay
FIDELITY_CHOICES = ("report", "strict")
RECORDED_DEVICE = "recorded"             # the device type whose device side is the dump's recorded outputs
DEFAULT_FIDELITY = "report"
STANDARD_CHOICES = tuple(STANDARDS)
__all__ = ["DEFAULT_EXAMPLES", "DEFAULT_FAIL_ON", "DEFAULT_FIDELITY", "FIDELITY_CHOICES",
           "RECORDED_DEVICE", "DEFAULT_MAX_WORKERS_PER_DEVICE", "DEFAULT_OUT_DIR",
           "DEFAULT_PRECISION", "DEFAULT_SEED", "DEFAULT_STANDARD", "DEFAULT_THREADS", "FAIL_ON_CHOICES",
           "STANDARD_CHOICES", "Settings", "add_options", "host_path"]
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000 ** 2, "mb": 1000 ** 2,
               "mib": 1024 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3, "t": 1000 ** 4,
               "tb": 1000 ** 4, "tib": 1024 ** 4}


# --- validators (argparse ``type=``) -----------------------------------------------------------------
def size_bytes(text: str) -> int:
    """``"2GiB"``, ``"500MB"``, ``"1e9"`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; write a positive number of bytes with an optional unit, like 4GiB or 500MB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. 60")
    return value


def positive_int(text: str) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", str(text)) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer, e.g. 1 or 50")
    return int(text)


def seed_int(text: str) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", str(text)) or int(text) >= 2 ** 32:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed; use an integer from 0 to 4294967295")
    return int(text)


def parse_device_ids(text: str) -> list[int]:
    """``"0,1,3"`` -> [0, 1, 3]. Raises ValueError with what to write instead."""
    ids: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):
            raise ValueError(f"device ids must be non-negative integers separated by commas, like 0,1,2; "
                             f"got {text!r}")
        if int(part) in ids:
            raise ValueError(f"device id {part} is listed twice in {text!r}")
        ids.append(int(part))
    return ids


def device_ids(text: str) -> list:
    try:
        return parse_device_ids(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def api_list(text: str) -> list:
    """``"linear,gelu"`` -> ["linear", "gelu"] (base API names, as msprobe's white/black lists)."""
    return [p.strip() for p in re.split(r"[,\s]+", str(text)) if p.strip()]


def standard_name(text: str) -> str:
    key = str(text).strip()
    if key.endswith(".0") and key.count(".") == 2:
        key = key[:-2]
    if key not in STANDARD_CHOICES:
        raise argparse.ArgumentTypeError(f"unknown precision standard {text!r}; choose one of "
                                         f"{', '.join(STANDARD_CHOICES)}")
    return key


def host_path(text: str) -> tuple:
    """``"10.0.0.2:8888:/shared/dump=/mnt/dump"`` -> ("10.0.0.2:8888", "/shared/dump", "/mnt/dump").

    Raises:
        ValueError: with what to write instead.
    """
    raw = str(text)
    cut = raw.find(":/")
    src, eq, dst = raw[cut + 1:].partition("=") if cut > 0 else ("", "", "")
    if cut <= 0 or not eq or not os.path.isabs(src) or not os.path.isabs(dst):
        raise ValueError(f"--msprobe-host-path {raw!r}: write HOST:DIR=HOST_DIR with two absolute directories, "
                         "e.g. 10.0.0.2:8888:/shared/dump=/mnt/dump (HOST as in --tx, or * for every host)")
    return raw[:cut], os.path.normpath(src), os.path.normpath(dst)


def _existing(path: str | None, option: str) -> None:
    """Raise ValueError naming ``option`` when its file is not there (checked where the options are resolved,
    on the controller: a worker on another host is sent what it needs instead)."""
    if path and not os.path.isfile(path):
        raise ValueError(f"{option}: file {path!r} does not exist")


# --- registration ------------------------------------------------------------------------------------
def add_options(parser: Any) -> None:
    """All options, under the ``msprobe`` group; the important ones mirrored as ini keys."""
    g = parser.getgroup("msprobe", "accuracy check of captured API calls (pytest-msprobe)")
    from .runs_compare.pytest_items import add_compare_options
    add_compare_options(parser)
    g.addoption("--msprobe-api-info", action="append", default=[], metavar="PATH",
                help="dump.json (or a dump directory) whose API calls become tests; repeatable")
    g.addoption("--msprobe-out", metavar="DIR", default=None,
                help="directory of accuracy_checking_result/details CSVs (ini msprobe_out, default ./)")
    g.addoption("--msprobe-device-type", metavar="NAME", default=None,
                help="device backend under test: cpu, cuda, npu, recorded (the outputs the dump recorded) or a "
                     "registered one (default: first available accelerator, else cpu)")
    g.addoption("--msprobe-devices", type=device_ids, default=None, metavar="IDS",
                help="device ids, e.g. 0,1,2,3; xdist worker k uses device k mod len (default: all visible)")
    g.addoption("--msprobe-max-workers-per-device", type=positive_int, default=None, metavar="N",
                help=f"refuse more than N xdist workers per accelerator device "
                     f"(default {DEFAULT_MAX_WORKERS_PER_DEVICE}; cpu: no limit)")
    g.addoption("--msprobe-standard", type=standard_name, default=None, metavar="VERSION",
                help=f"precision standard: {DEFAULT_STANDARD} (default) or "
                     f"{' or '.join(c for c in STANDARD_CHOICES if c != DEFAULT_STANDARD)}")
    g.addoption("--msprobe-fail-on", choices=FAIL_ON_CHOICES, default=None,
                help=f"an API fails its test on '{DEFAULT_FAIL_ON}' (default) or also on "
                     f"'{FAIL_ON_CHOICES[1]}'")
    g.addoption("--msprobe-baseline", default=None, metavar="RESULT_CSV",
                help="APIs failing in this earlier result CSV are xfail: CI fails only on new failures")
    g.addoption("--msprobe-result-csv", default=None, metavar="RESULT_CSV",
                help="continue this result CSV (ours or msprobe's): its APIs are not run again "
                     "(with --lf, its failing APIs are)")
    g.addoption("--msprobe-white-list", type=api_list, default=None, metavar="APIS",
                help="only check these base API names (comma separated), e.g. linear,gelu")
    g.addoption("--msprobe-black-list", type=api_list, default=None, metavar="APIS",
                help="never check these base API names (comma separated)")
    g.addoption("--msprobe-filter-api", action="store_true", default=False,
                help="check one representative of calls with identical structure (msprobe -f)")
    g.addoption("--msprobe-save-error-data", action="store_true", default=False,
                help="torch.save the inputs and both outputs of failing APIs (see --msprobe-error-data-path)")
    g.addoption("--msprobe-error-data-path", metavar="DIR", default=None,
                help="where --msprobe-save-error-data writes ut_error_data{timestamp}/ (default: --msprobe-out)")
    g.addoption("--msprobe-config", default=None, metavar="CONFIG_JSON",
                help="msprobe config.json: its acc_check/run_ut section sets white_list, black_list, "
                     "error_data_path")
    g.addoption("--msprobe-max-bytes", type=size_bytes, default=None, metavar="SIZE",
                help="memory budget of one API's inputs, e.g. 4GiB; larger entries SKIP "
                     "(default: a quarter of physical memory)")
    g.addoption("--msprobe-timeout", type=positive_float, default=None, metavar="SECONDS",
                help="per-API time limit; a call that runs longer is an error 'timeout' (default: none)")
    g.addoption("--msprobe-random", action="store_true", default=False,
                help="generate inputs from the statistics even when the dump has tensor files")
    g.addoption("--msprobe-seed", type=seed_int, default=None, metavar="INT",
                help=f"seed of random-data mode (default {DEFAULT_SEED}); each API derives its own from it")
    g.addoption("--msprobe-threads", type=positive_int, default=None, metavar="N",
                help=f"CPU threads of each process for the bench and cpu backends (default {DEFAULT_THREADS}: "
                     "results are then "
                     "identical whatever -n is; more threads change the reduction order of CPU kernels)")
    g.addoption("--msprobe-examples", type=positive_int, default=None, metavar="N",
                help=f"random-data mode: run N Hypothesis examples per API and shrink a failure "
                     f"(default {DEFAULT_EXAMPLES})")
    g.addoption("--msprobe-edge-values", action="store_true", default=False,
                help="random-data mode: add subnormals, signed zeros, near-max values and ties")
    g.addoption("--msprobe-gpu-csv", default=None, metavar="DETAILS_CSV",
                help="GPU accuracy_checking_details CSV: each API passes or fails by api_precision_compare of "
                     "its rows against the GPU's (msprobe's final verdict); the compare CSVs are written at the end")
    g.addoption("--msprobe-reference", default=None, metavar="DEVICE_TYPE",
                help="also run every call on this backend (cpu, or a registered one) in the dumped dtype, and "
                     "give each API msprobe's final verdict (api_precision_compare) against it in the same run, "
                     "as --msprobe-gpu-csv would with that backend's details CSV")
    g.addoption("--msprobe-fidelity", choices=FIDELITY_CHOICES, default=None,
                help=f"replay fidelity (device output vs the recorded one): '{DEFAULT_FIDELITY}' (default) "
                     "writes the Replay Fidelity column; 'strict' also fails every item whose replay differs")
    g.addoption("--msprobe-precision", type=positive_int, default=None, metavar="N",
                help=f"decimals of float cells in the CSVs (default {DEFAULT_PRECISION}, as msprobe)")
    g.addoption("--msprobe-host-path", action="append", default=[], metavar="HOST:DIR=HOST_DIR",
                help="xdist gateways on other hosts: on HOST (as in --tx, e.g. 10.0.0.2:8888 or user@node1; "
                     "* for every other host) the controller's directory DIR is HOST_DIR; repeatable "
                     "(default: every host sees the dump at the controller's path)")
    parser.addini("msprobe_out", "directory of the accuracy-check CSVs", default=None)
    parser.addini("msprobe_device_type", "device backend under test", default=None)
    parser.addini("msprobe_standard", f"precision standard: {' or '.join(STANDARD_CHOICES)}", default=None)
    parser.addini("msprobe_fail_on", " or ".join(FAIL_ON_CHOICES), default=None)
    parser.addini("msprobe_white_list", "base API names to check", type="args", default=[])
    parser.addini("msprobe_black_list", "base API names never to check", type="args", default=[])
    parser.addini("msprobe_max_bytes", "memory budget of one API's inputs, e.g. 4GiB", default=None)
    parser.addini("msprobe_timeout", "per-API time limit in seconds", default=None)
    parser.addini("msprobe_seed", "seed of random-data mode", default=None)
    parser.addini("msprobe_fidelity", " or ".join(FIDELITY_CHOICES), default=None)


# --- resolved settings -------------------------------------------------------------------------------
def default_max_bytes() -> int:
    """A quarter of physical memory (bench, device and gradients all hold copies of the inputs)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    except (ValueError, OSError, AttributeError):
        return 4 * 1024 ** 3


def read_config_section(path: str) -> dict:
    """The ``acc_check`` (26.2) or ``run_ut`` (1.0.4) section of an msprobe config.json (or .yaml).

    Raises:
        ValueError: unreadable file or wrong types, naming the file and key.
    """
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith((".yaml", ".yml")):
        import yaml
        try:
            data = yaml.safe_load(text)       # plain data only: object tags (!!python/...) are refused
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML, or it uses a tag other than plain data "
                             f"({' '.join(str(exc).split())})") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
    return checker_section(data, path)


@dataclass
class Settings:
    """Every option of a run, resolved once per process."""

    api_info: list = field(default_factory=list)
    out_dir: str = DEFAULT_OUT_DIR
    device_type: str | None = None
    devices: list | None = None
    max_workers_per_device: int = DEFAULT_MAX_WORKERS_PER_DEVICE
    standard: str = DEFAULT_STANDARD
    standard_reason: str = ""            # why the standard was chosen, when it was detected (--msprobe-gpu-csv)
    fail_on: str = DEFAULT_FAIL_ON
    baseline: str | None = None
    result_csv: str | None = None
    white_list: list = field(default_factory=list)
    black_list: list = field(default_factory=list)
    filter_api: bool = False
    save_error_data: bool = False
    error_data_path: str | None = None
    max_bytes: int = 0
    max_bytes_given: bool = False         # False: the default, a share of this machine's memory
    timeout: float | None = None
    random: bool = False
    seed: int = DEFAULT_SEED
    threads: int = DEFAULT_THREADS
    examples: int = DEFAULT_EXAMPLES
    edge_values: bool = False
    gpu_csv: str | None = None
    reference: str | None = None          # --msprobe-reference: the backend of the in-run second opinion
    precision: int = DEFAULT_PRECISION
    host_paths: list = field(default_factory=list)     # (host, controller dir, host dir), --msprobe-host-path
    fidelity: str = DEFAULT_FIDELITY

    @property
    def active(self) -> bool:
        return bool(self.api_info)

    @classmethod
    def from_config(cls, config: Any) -> Settings:
        """Merge command line, ``--msprobe-config`` and ini; raises ValueError with what to fix."""
        opt = config.option

        def ini(name: str) -> Any:
            try:
                value = config.getini(name)
            except ValueError:
                return None
            return value if value not in ("", None, []) else None

        s = cls()
        s.api_info = [str(p) for p in (opt.msprobe_api_info or [])]
        s.out_dir = opt.msprobe_out or ini("msprobe_out") or DEFAULT_OUT_DIR
        s.device_type = opt.msprobe_device_type or ini("msprobe_device_type")
        s.devices = opt.msprobe_devices
        s.max_workers_per_device = opt.msprobe_max_workers_per_device or DEFAULT_MAX_WORKERS_PER_DEVICE
        s.standard = opt.msprobe_standard or (standard_name(ini("msprobe_standard"))
                                              if ini("msprobe_standard") else DEFAULT_STANDARD)
        s.fail_on = opt.msprobe_fail_on or ini("msprobe_fail_on") or DEFAULT_FAIL_ON
        if s.fail_on not in FAIL_ON_CHOICES:
            raise ValueError(f"ini msprobe_fail_on = {s.fail_on!r}; use {' or '.join(FAIL_ON_CHOICES)}")
        s.baseline = opt.msprobe_baseline
        s.result_csv = opt.msprobe_result_csv
        for path, option in ((s.baseline, "--msprobe-baseline"), (s.result_csv, "--msprobe-result-csv"),
                             (opt.msprobe_config, "--msprobe-config"), (opt.msprobe_gpu_csv, "--msprobe-gpu-csv")):
            _existing(path, option)
        cfg = read_config_section(opt.msprobe_config) if opt.msprobe_config else {}
        s.white_list = (opt.msprobe_white_list if opt.msprobe_white_list is not None
                        else cfg.get("white_list") or list(ini("msprobe_white_list") or []))
        s.black_list = (opt.msprobe_black_list if opt.msprobe_black_list is not None
                        else cfg.get("black_list") or list(ini("msprobe_black_list") or []))
        s.filter_api = bool(opt.msprobe_filter_api)
        s.save_error_data = bool(opt.msprobe_save_error_data)
        s.error_data_path = opt.msprobe_error_data_path or cfg.get("error_data_path") or None
        mb = opt.msprobe_max_bytes or (size_bytes(ini("msprobe_max_bytes")) if ini("msprobe_max_bytes") else None)
        s.max_bytes = mb or default_max_bytes()
        s.max_bytes_given = mb is not None
        s.timeout = opt.msprobe_timeout or (positive_float(ini("msprobe_timeout")) if ini("msprobe_timeout")
                                            else None)
        s.random = bool(opt.msprobe_random)
        s.threads = opt.msprobe_threads or DEFAULT_THREADS
        s.seed = (opt.msprobe_seed if opt.msprobe_seed is not None
                  else seed_int(ini("msprobe_seed")) if ini("msprobe_seed") else DEFAULT_SEED)
        s.examples = opt.msprobe_examples or DEFAULT_EXAMPLES
        s.edge_values = bool(opt.msprobe_edge_values)
        s.gpu_csv = opt.msprobe_gpu_csv
        s.reference = getattr(opt, "msprobe_reference", None)
        if s.reference and s.gpu_csv:
            raise ValueError("--msprobe-reference and --msprobe-gpu-csv both give the final verdict; pass one")
        if s.gpu_csv and not (opt.msprobe_standard or ini("msprobe_standard")):
            from .report.standard_detect import standard_for_gpu_csv
            s.standard, s.standard_reason = standard_for_gpu_csv(s.gpu_csv)
        s.precision = opt.msprobe_precision or DEFAULT_PRECISION
        s.host_paths = [host_path(text) for text in getattr(opt, "msprobe_host_path", None) or []]
        s.fidelity = opt.msprobe_fidelity or ini("msprobe_fidelity") or DEFAULT_FIDELITY
        if s.fidelity not in FIDELITY_CHOICES:
            raise ValueError(f"ini msprobe_fidelity = {s.fidelity!r}; use {' or '.join(FIDELITY_CHOICES)}")
        if s.device_type == RECORDED_DEVICE and s.random:
            raise ValueError("--msprobe-random cannot be used with --msprobe-device-type recorded: random inputs "
                             "have no recorded outputs; leave out --msprobe-random, or choose a device type "
                             "that runs the calls (cpu, cuda, npu)")
        return s

    # the options only the controller reads (the CSV it continues, the path map): a worker is sent the result
    CONTROLLER_ONLY = ("result_csv", "host_paths")
    PATHS = ("out_dir", "error_data_path", "gpu_csv")

    def brief(self, where: Callable[[str], str] | None = None) -> dict:
        """These settings for a worker (:class:`~.brief.WorkerBrief`), every path through ``where`` (the
        controller's absolute path -> the one on the worker's host); the memory budget only when given (else
        that host's own share)."""
        data = dataclasses.asdict(self)
        for name in self.CONTROLLER_ONLY:
            data.pop(name)
        if where is not None:
            data["api_info"] = [where(os.path.abspath(p)) for p in self.api_info]
            for name in self.PATHS:
                if data[name]:
                    data[name] = where(os.path.abspath(data[name]))
        if not self.max_bytes_given:
            data["max_bytes"] = 0
        return data

    @classmethod
    def from_brief(cls, data: dict) -> Settings:
        """The settings a worker was sent (:meth:`brief`)."""
        names = {f.name for f in dataclasses.fields(cls)}
        s = cls(**{k: v for k, v in data.items() if k in names})
        if not s.max_bytes_given:
            s.max_bytes = default_max_bytes()
        return s
