"""Hosts of a distributed run without pytest: which host a gateway runs on, and where the controller's paths
are there.

A worker on another host (``--tx socket=...``, ``--tx ssh=...``, ``popen//via=...``, or any gateway with
``chdir``) starts in another directory, often on another filesystem. So the controller
(:mod:`.host_controller`) sends it, in its brief (:mod:`.brief`), the settings resolved on the controller with
every path absolute and mapped to that host (``--msprobe-host-path``), instead of ini keys and files it may
not have. No pytest import here.
"""
from __future__ import annotations

import os
from typing import Any

from .settings import host_path

LOCAL = "localhost"


# --- host identity -----------------------------------------------------------------------------------------
def host_of(spec: Any, proxies: dict | None = None) -> str:
    """The host a gateway runs on, as the user wrote it in ``--tx``/``--px``: ``10.0.0.2:8888``,
    ``user@node1``, ``localhost`` for ``popen``; a ``popen//via=ID`` gateway is on the host of gateway ID."""
    via = getattr(spec, "via", None)
    if via:
        proxy = (proxies or {}).get(via)
        return host_of(proxy, proxies) if proxy is not None and getattr(proxy, "via", None) != via else str(via)
    for kind in ("socket", "ssh", "vagrant_ssh"):
        value = getattr(spec, kind, None)
        if value:
            return str(value) if kind != "vagrant_ssh" else f"vagrant:{value}"
    return LOCAL


def is_remote(spec: Any) -> bool:
    """True for a gateway whose worker does not start in the controller's directory and environment."""
    return bool(getattr(spec, "socket", None) or getattr(spec, "ssh", None) or getattr(spec, "vagrant_ssh", None)
                or getattr(spec, "via", None) or getattr(spec, "chdir", None))


def tx_specs(config: Any, *, whatever_dist: bool = False) -> tuple:
    """(worker specs, proxy specs by id) of this run's ``--tx``/``--px`` (empty without distributed xdist,
    unless ``whatever_dist``)."""
    tx = list(getattr(config.option, "tx", None) or [])
    if not tx or (getattr(config.option, "dist", "no") == "no" and not whatever_dist):
        return [], {}
    import execnet
    specs = []
    for text in tx:
        count, star, rest = str(text).partition("*")
        if star and count.isdigit():
            specs.extend(execnet.XSpec(rest) for _ in range(int(count)))
        else:
            specs.append(execnet.XSpec(text))
    proxies = {}
    for text in list(getattr(config.option, "px", None) or []):
        spec = execnet.XSpec(text)
        if spec.id:
            proxies[spec.id] = spec
    for spec in specs:
        if spec.id:
            proxies.setdefault(spec.id, spec)
    return specs, proxies


def runs_calls_here(config: Any) -> bool:
    """False only on a controller whose workers all run on other hosts (it needs no device of its own)."""
    if getattr(config, "workerinput", None) is not None:
        return True
    specs, proxies = tx_specs(config)
    return not specs or any(host_of(s, proxies) == LOCAL for s in specs)


def workers_run_calls(config: Any) -> bool:
    """Whether xdist workers run the calls (``-n N`` with N > 0, or ``--tx``), not this process."""
    workers = getattr(config.option, "numprocesses", None)
    return bool(isinstance(workers, int) and workers > 0 or getattr(config.option, "tx", None)) \
        and getattr(config.option, "dist", "no") != "no"


# --- per-host paths ----------------------------------------------------------------------------------------
class HostPaths:
    """``--msprobe-host-path HOST:DIR=HOST_DIR`` entries: where the controller's directories are on each host."""

    def __init__(self, entries: list | None = None) -> None:
        # (host, controller dir, host dir), longest controller dir first; text entries are parsed here
        self.entries: list = [e if isinstance(e, tuple) else host_path(e) for e in entries or []]
        self.entries.sort(key=lambda e: -len(e[1]))

    def map(self, host: str, path: str) -> str:
        """The path on ``host`` of the controller's absolute ``path`` (unchanged where no entry applies)."""
        path = os.path.normpath(path)
        for entry_host, src, dst in self.entries:
            if entry_host not in (host, "*"):
                continue
            if path == src or path.startswith(src.rstrip(os.sep) + os.sep):
                return dst + path[len(src):] if src != os.sep else os.path.join(dst, path.lstrip(os.sep))
        return path
