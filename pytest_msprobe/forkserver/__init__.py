"""Local xdist workers forked from a process that has already imported what they all import (:mod:`.server`).

The server's module is also run as a script, by path, so it lives in a folder of its own: no module beside it
shadows a standard-library name (``select``) in that script's ``sys.path``. Here: which server a run gets.
"""
from __future__ import annotations

from .server import ENV_SWITCH, ForkServer, available, loaded_modules, preloadable, unforkable, wanted

__all__ = ["ENV_SWITCH", "ForkServer", "available", "for_run", "loaded_modules", "preloadable", "unforkable",
           "wanted"]


def for_run(option: object, rewrite_hook: object, controller: bool = False,
            before_fork: object = None) -> ForkServer | None:
    """The server of a run with these options (:func:`wanted`). Asked as soon as pytest has read the options
    (``controller`` False), the controller forks itself into the server, which then has pytest and every plugin
    imported already, and whatever ``before_fork()`` left (:meth:`ForkServer.fork`); where it cannot, or asked
    later, the server is a fresh interpreter that imports pytest's modules again (:meth:`ForkServer.start`)."""
    if not wanted(option, controller):
        return None
    if not controller:
        server = ForkServer.fork(rewrite_hook, before_fork)
        if server is not None:
            return server
    return ForkServer.start(loaded_modules(), rewrite_hook)
