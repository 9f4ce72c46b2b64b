"""Local xdist workers forked from a process that has already imported what they all import (:mod:`.server`).

The server's module is also run as a script, by path, so it lives in a folder of its own: no module beside it
shadows a standard-library name (``select``) in that script's ``sys.path``. Here: which server a run gets, the
one started as the plugin was imported (the command line asked for it) or a new one.
"""
from __future__ import annotations

import os

from .server import ENV_SWITCH, ForkServer, asked_by, available, loaded_modules, preloadable, wanted

__all__ = ["ENV_SWITCH", "ForkServer", "asked_by", "available", "discard_early", "for_run", "loaded_modules",
           "preloadable", "start_early", "wanted"]

_EARLY: list = []               # the server started before pytest parsed the options, until a run takes it


def start_early(argv: list) -> None:
    """The pytest command (``pytest ...``, ``python -m pytest ...``) that plainly asks for a check with local
    workers gets its server while pytest is still loading its plugins, about 0.1 s before it has parsed the
    options; :func:`for_run` then takes it, or :func:`discard_early` closes it."""
    prog = os.path.basename(argv[0]) if argv else ""
    if prog not in ("pytest", "py.test") and not (prog == "__main__.py" and
                                                 os.path.basename(os.path.dirname(argv[0])) == "pytest"):
        return
    if asked_by(argv[1:]):
        server = ForkServer.start(loaded_modules())
        if server is not None:
            import atexit
            _EARLY.append(server)
            atexit.register(discard_early)          # one that no run took


def for_run(option: object, rewrite_hook: object, controller: bool = False) -> ForkServer | None:
    """The server of a run with these options (:func:`wanted`): the early one, or one started now."""
    if not wanted(option, controller):
        return None
    if _EARLY:
        server = _EARLY.pop()
        server.rewrite_hook = rewrite_hook
        return server
    return ForkServer.start(loaded_modules(), rewrite_hook)


def discard_early() -> None:
    """Close the early server no run took (the options did not ask for one after all)."""
    while _EARLY:
        _EARLY.pop().close()
