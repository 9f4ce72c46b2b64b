"""msprobe's command habits: its command names and ``-f FRAMEWORK``, answered by this tool's own commands.

``api_precision_compare`` (and any command written with ``_``) is the same command here; ``run_ut``,
``acc_check``, ``multi_run_ut`` and ``multi_acc_check`` are a pytest run here, so the answer is the one line of
that run, made from the arguments given (:func:`pytest_command`).
"""
from __future__ import annotations

import shlex
from typing import Sequence

# msprobe's names of the check itself (a pytest run here)
CHECK_COMMANDS = ("run_ut", "acc_check", "multi_run_ut", "multi_acc_check")
FRAMEWORK_OPTIONS = ("-f", "--framework")

# msprobe's run_ut option -> (pytest option, takes a value)
_CHECK_OPTIONS = {
    "-api_info": ("--msprobe-api-info", True), "--api_info_file": ("--msprobe-api-info", True),
    "-o": ("--msprobe-out", True), "--out_path": ("--msprobe-out", True),
    "-csv_path": ("--msprobe-result-csv", True), "--result_csv_path": ("--msprobe-result-csv", True),
    "-config": ("--msprobe-config", True), "--config_path": ("--msprobe-config", True),
    "-save_error_data": ("--msprobe-save-error-data", False),
    "-f": ("--msprobe-filter-api", False), "--filter_api": ("--msprobe-filter-api", False),
    "-n": ("-n", True),
}
_DEVICE_OPTIONS = ("-d", "--device")
_IGNORED = ("-j", "--jit_compile")


def strip_framework(argv: Sequence[str]) -> list:
    """``argv`` without msprobe's leading ``-f pytorch`` / ``--framework mindspore``."""
    argv = list(argv)
    while len(argv) >= 2 and argv[0] in FRAMEWORK_OPTIONS:
        argv = argv[2:]
    while argv and argv[0].startswith(tuple(f"{o}=" for o in FRAMEWORK_OPTIONS)):
        argv = argv[1:]
    return argv


def pytest_command(command: str, args: Sequence[str]) -> tuple:
    """(the pytest command line that does what msprobe's ``command args`` does, the arguments it has no
    counterpart for)."""
    out = ["pytest"]
    unknown = []
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in _DEVICE_OPTIONS:
            ids = [value] if eq else []
            while not eq and i + 1 < len(args) and args[i + 1].isdigit():
                ids.append(args[i + 1])
                i += 1
            if ids:
                out.append(f"--msprobe-devices={','.join(ids)}")
        elif name in _CHECK_OPTIONS:
            option, takes = _CHECK_OPTIONS[name]
            if takes and not eq and i + 1 < len(args):
                value, eq = args[i + 1], "="
                i += 1
            if not takes:
                out.append(option)
            elif option == "-n":
                out += ["-n", value or "auto"]
            else:
                out.append(f"{option}={value}")
        elif name not in _IGNORED:
            unknown.append(arg)
        i += 1
    if command.startswith("multi_") and "-n" not in out:
        out += ["-n", "auto"]
    if not any(a.startswith("--msprobe-api-info=") for a in out):
        out.append("--msprobe-api-info=DUMP")
    return " ".join(shlex.quote(a) if a != "pytest" else a for a in out), unknown


def check_pointer(command: str, args: Sequence[str]) -> str:
    """The one line that answers msprobe's ``command``: the pytest run that does it."""
    line, unknown = pytest_command(command, args)
    extra = f" ({' '.join(unknown)}: no counterpart; see 'pytest --help', group msprobe)" if unknown else ""
    return f"pytest-msprobe: msprobe's {command} is a pytest run here; run: {line}{extra}"
