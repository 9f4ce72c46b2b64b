"""The hosts of a distributed run, on the controller: what each worker is sent, device slots per host, hosts
that cannot start or are lost.

A collaborator of :class:`~.controller.Controller`, which calls it from its xdist hooks (one with any
``--tx``/``-n`` run). For every gateway it knows the host (:func:`.hosts.host_of`); a worker gets the
lowest free device slot of its host (a worker that replaces a crashed one takes over its slot, so its
device). A remote worker (:func:`.hosts.is_remote`) is sent the settings with its host's paths and the dump
files under the controller's node ids (:func:`.api_items.node_path`), in its brief (:mod:`.brief`).

Only xdist's hooks and pytest's are used. A host that cannot start a worker at all is one usage error naming
the host and the cause: a gateway that cannot be made reaches pytest as an internal error, which
:meth:`HostController.internal_error` turns into that one line; a worker that ends before it is ready is
reported by ``pytest_testnodedown``, which raises it. A host lost mid-run (its server, its network or the
machine goes down) leaves an ``error`` row for the call each of its workers was running (the controller writes
it, :func:`.api_items.crash`); xdist then tries to start a worker in its place, which fails, and the run stops
there with one line naming the host, its CSVs whole; ``--lf`` checks the error rows and the calls not run.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from . import hosts
from .api_items import node_path


class HostController:
    """Hosts, slots and lost hosts of one distributed run (built by :meth:`for_run`)."""

    def __init__(self, config: Any, sess: Any, specs: list, proxies: dict, paths: hosts.HostPaths) -> None:
        self.config = config
        self.sess = sess
        self.proxies = proxies
        self.paths = paths
        self.workers = Counter(hosts.host_of(s, proxies) for s in specs)
        self.remote = any(hosts.is_remote(s) for s in specs)
        self.slots: dict = {}               # host -> set of slots in use
        self.node_slot: dict = {}           # gateway id -> (host, slot)
        self.ready: set = set()             # hosts that started a worker
        self.lost: dict = {}                # host -> why
        self.errors: dict = {}              # gateway id -> error of its end
        self.crashed: list = []             # (host, node id) of calls lost with their worker
        self.specs: list = []               # xdist's specs, in the order it starts their gateways
        self.gateways = 0                   # gateways made so far
        self.restarting: str | None = None  # the host of a worker xdist is about to replace

    @classmethod
    def for_run(cls, config: Any, sess: Any) -> HostController | None:
        """The hosts of a run with xdist workers; None without workers."""
        specs, proxies = hosts.tx_specs(config)
        if not specs:
            return None
        return cls(config, sess, specs, proxies, hosts.HostPaths(sess.settings.host_paths))

    # --- before the run ----------------------------------------------------------------------------------
    def check_limits(self) -> None:
        """The per-device worker limit of each host whose devices the controller knows (ValueError naming the
        host); another host's device count is checked by its workers."""
        for host, count in sorted(self.workers.items()):
            if self.sess.settings.devices or host == hosts.LOCAL:
                self.sess.check_workers(count, host)

    def describe(self) -> str:
        """The hosts of this run and their worker counts, when any is another host ("" otherwise)."""
        return describe_hosts(self.config) if self.remote else ""

    # --- the controller's xdist hooks --------------------------------------------------------------------
    def setup_nodes(self, specs: list) -> None:
        """xdist is about to start a gateway for each of ``specs``, in their order."""
        self.specs = list(specs)

    def new_gateway(self, gateway: Any) -> None:
        self.gateways += 1
        self.restarting = None

    def brief(self, node: Any) -> dict:
        """What a worker learns of its host: the host, its slot there, the host's worker count, and (on another
        host) the settings with that host's paths and the dump files with the controller's node ids."""
        spec = node.gateway.spec
        host = hosts.host_of(spec, self.proxies)
        used = self.slots.setdefault(host, set())
        slot = next(i for i in range(len(used) + 1) if i not in used)
        used.add(slot)
        self.node_slot[node.gateway.id] = (host, slot)
        out: dict = {"host": host, "slot": slot, "host_workers": self.workers.get(host, 0)}
        if hosts.is_remote(spec):
            out["settings"] = self.sess.settings.brief(lambda path: self.paths.map(host, path))
            out["files"] = [[self.paths.map(host, p), node_path(self.config.rootpath, p)] for p in self.sess.dump_paths]
        return out

    def node_ready(self, node: Any) -> None:
        self.ready.add(self._host(node))

    def node_down(self, node: Any, error: Any) -> None:
        """A worker went down. One that never became ready on a host where none did: the host cannot start a
        worker (pytest.UsageError naming it, before xdist starts another). Another with an error is about to
        be replaced by xdist (:meth:`internal_error` names its host if that fails)."""
        host, slot = self.node_slot.pop(node.gateway.id, (self._host(node), None))
        if slot is not None:
            self.slots.get(host, set()).discard(slot)
        if error is None:
            return
        self.errors[node.gateway.id] = str(error)
        if host not in self.ready:
            raise pytest.UsageError(_start_message(host, node.gateway.spec, _last_line(error)))
        self.restarting = host

    def internal_error(self, exc: BaseException) -> str | None:
        """The one line for an error of xdist's while it starts a worker (None for any other error): a host
        that cannot start, or a lost one whose worker xdist tried to replace."""
        if not isinstance(exc, _start_errors()):
            return None
        if self.restarting is not None:
            host = self.restarting
            self.lost[host] = _one_line(exc)
            return (f"pytest-msprobe: host {host} is lost ({self.lost[host]}); the calls not finished are left "
                    "for the same command with --lf")
        if not self.specs or self.ready:
            return None
        if isinstance(exc, ValueError) and "rsync root" in str(exc):
            host = hosts.host_of(self.specs[min(self.gateways, len(self.specs)) - 1], self.proxies)
            return (f"pytest-msprobe: cannot start a worker on host {host}: {_one_line(exc)}; xdist sends a path "
                    "argument to another host only when it lies under an --rsyncdir: write an option's path as "
                    "--option=PATH, or select dump calls with -k instead of test paths")
        spec = self.specs[min(self.gateways, len(self.specs) - 1)]
        return _start_message(hosts.host_of(spec, self.proxies), spec, _one_line(exc))

    def crash_item(self, crashitem: str, report: Any) -> None:
        """The report of a call lost with its worker names the worker and its host (the error row's reason)."""
        node = getattr(report, "node", None)
        if node is None:
            return
        host = self._host(node)
        why = _one_line(self.errors.get(node.gateway.id, "")) or "it went down"
        self.crashed.append((host, crashitem))
        report.longrepr = (f"worker {node.gateway.id!r} on host {host} crashed while running {crashitem!r} "
                           f"(the worker process or its host went down: {why})")

    def summary_lines(self) -> list:
        """The lost hosts and their error rows ([] when none was lost)."""
        if not self.lost and not self.crashed:
            return []
        lines = [f"host {host} lost mid-run: {why}" for host, why in sorted(self.lost.items())]
        lines += [f"  error row: {nodeid} (was running on {host})" for host, nodeid in self.crashed]
        return lines + ["run the same command with --lf to check these calls again"]

    # --- helpers -----------------------------------------------------------------------------------------
    def _host(self, node: Any) -> str:
        entry = self.node_slot.get(node.gateway.id)
        return entry[0] if entry else hosts.host_of(node.gateway.spec, self.proxies)


def _start_errors() -> tuple:
    """The errors of a gateway that cannot be made or set up (execnet's own for a host it cannot reach)."""
    import execnet
    return (OSError, EOFError, ValueError, TimeoutError, execnet.HostNotFound)


def _one_line(value: Any) -> str:
    if isinstance(value, BaseException):
        text = f"{type(value).__name__}: {value}".rstrip(": ")
    else:
        text = str(value or "")
    return " ".join(text.split())[:300]


def _last_line(value: Any) -> str:
    lines = [ln.strip() for ln in str(value or "").splitlines() if ln.strip()]
    return lines[-1][:500] if lines else "the worker ended before it was ready"


def _start_message(host: str, spec: Any, why: str) -> str:
    spec_text = str(spec or "").replace("execmodel=main_thread_only//", "")
    return (f"pytest-msprobe: cannot start a worker on host {host} (--tx {spec_text}): {why}. On that host "
            f"start the server (python -m pytest_msprobe.host_server HOST:PORT, or execnet's socketserver.py) "
            f"or check ssh, check that 'python -c \"import pytest_msprobe, torch\"' works there, or drop that --tx")


def describe_hosts(config: Any) -> str:
    """One line naming the hosts of this run and their worker counts."""
    specs, proxies = hosts.tx_specs(config)
    counts = Counter(hosts.host_of(s, proxies) for s in specs)
    return ", ".join(f"{host} x{n}" for host, n in sorted(counts.items())) if counts else ""
