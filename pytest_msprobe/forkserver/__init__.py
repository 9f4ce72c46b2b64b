"""Local xdist workers forked from a process that has already imported what they all import (:mod:`.server`).

The server's module is also run as a script, by path, so it lives in a folder of its own: no module beside it
shadows a standard-library name (``select``) in that script's ``sys.path``.
"""
from .server import ENV_SWITCH, ForkServer, asked_by, available, loaded_modules, preloadable, wanted

__all__ = ["ENV_SWITCH", "ForkServer", "asked_by", "available", "loaded_modules", "preloadable", "wanted"]
