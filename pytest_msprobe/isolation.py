"""A dump is data, never part of the pytest run.

pytest reads a ``conftest.py`` beside or above every path it collects, and takes its ini file, rootdir and cache
from the paths on its command line. A dump comes from someone else (``docs/security.md``), so:

* its files never become a collection argument (:func:`collection_args`): the dump collectors are added to the
  session's own collection, and their hooks are the run's, not those of a folder near the dump
  (:class:`pytest_msprobe.api_items.DumpCollection`, :class:`pytest_msprobe.api_items.RunHooks`), so pytest never
  looks for a ``conftest.py`` there;
* ``--msprobe-api-info PATH`` (two arguments) is read by pytest as a test path before any plugin is loaded,
  and pytest roots the run there (ini file, rootdir, cache); where that would differ from the ``=`` form the run
  stops with the one-line fix (:func:`check_option_form`) before any conftest is imported.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import pytest

# the files pytest may read as the run's configuration, and setup.py, which marks a rootdir
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "setup.py")
_CONFIG_OPTIONS = ("-c", "--config-file", "--inifile")


def space_form_values(args: Iterable[str], namespace: Any) -> list:
    """(option, value) of each ``--msprobe-*`` option given as two arguments, ``--msprobe-x VALUE``; an option
    that takes no value (its attribute in ``namespace`` is a bool) is left out."""
    args = [str(a) for a in args]
    found = []
    for option, value in zip(args, args[1:]):
        if not option.startswith("--msprobe-") or "=" in option or value.startswith("-"):
            continue
        if isinstance(getattr(namespace, option[2:].replace("-", "_"), False), bool):
            continue
        found.append((option, value))
    return found


def _rooted_elsewhere(path: Path, here: Path) -> str | None:
    """Why pytest, taking ``path`` for a test path, roots the run otherwise than from ``here`` (None: alike)."""
    folder = path if path.is_dir() else path.parent
    if folder != here and here not in folder.parents:
        return f"takes its rootdir and cache (--lf) from there instead of {here}"
    for d in (folder, *folder.parents):
        if d == here:
            return None
        for name in CONFIG_FILES:
            if (d / name).exists():
                return f"reads {d / name} as this run's configuration"
    return None


def check_option_form(early_config: Any) -> None:
    """Stop a run in which pytest took the value of an ``--msprobe-*`` option given as two arguments for a test
    path and roots the run there (an ini file in the dump, or a rootdir and cache elsewhere than with ``=``).

    Raises:
        pytest.UsageError: one line naming the option and the form to write.
    """
    args = [str(a) for a in early_config.invocation_params.args]
    if any(a in _CONFIG_OPTIONS or a.startswith(("--config-file=", "--inifile=")) for a in args):
        return          # the ini file and the rootdir come from -c, not from the paths
    here = Path(os.path.realpath(early_config.invocation_params.dir))
    for option, value in space_form_values(args, early_config.known_args_namespace):
        path = Path(here, os.path.expanduser(value))
        if not path.exists():
            continue    # pytest skips paths that do not exist
        why = _rooted_elsewhere(Path(os.path.realpath(path)), here)
        if why:
            raise pytest.UsageError(
                f"{option} {value}: write {option}={value} (with '='): pytest reads its command line before any "
                f"plugin, takes {value} for a test path and {why}")


def collection_args(args: list, explicit: bool, dump_files: Iterable[str]) -> list:
    """pytest's collection arguments for a check: the tests on the command line (none when the command line
    named none: then only the dumps are collected), without a dump file given there as a test path too."""
    if not explicit:
        return []
    dumps = {os.path.realpath(f) for f in dump_files}
    return [a for a in args if os.path.realpath(str(a).split("::")[0]) not in dumps]
