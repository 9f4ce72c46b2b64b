"""The hosts of a distributed run, on the controller: what each worker is sent, device slots per host, hosts
that cannot start or are lost.

A collaborator of :class:`~.controller.Controller`, which calls it from its xdist hooks (one with any
``--tx``/``-n`` run). For every gateway it knows the host (:func:`.hosts.host_of`); a worker gets the
lowest free device slot of its host (a worker that replaces a crashed one takes over its slot, so its
device). A remote worker (:func:`.hosts.is_remote`) gets its own command line (:func:`.hosts.worker_args`)
and the dump files under the controller's node ids (:func:`.collect.node_path`).

A host that cannot start a worker at all is one usage error naming the host and the cause. A host lost
mid-run (its server, its network or the machine goes down) is not restarted: the call each of its workers
was running becomes an ``error`` row naming the host (the controller writes it, :func:`.wire.crash`), the
calls queued there go to the other hosts, and the run finishes; ``--lf`` checks the error rows again.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from . import hosts
from .collect import node_path

_START_ERRORS = (OSError, EOFError, ValueError, TimeoutError)


class HostController:
    """Hosts, slots and lost hosts of one distributed run (built by :meth:`for_run`)."""

    def __init__(self, config: Any, sess: Any, specs: list, proxies: dict, paths: hosts.HostPaths) -> None:
        self.config = config
        self.sess = sess
        self.proxies = proxies
        self.paths = paths
        self.workers = Counter(hosts.host_of(s, proxies) for s in specs)
        self.remote = any(hosts.is_remote(s) for s in specs)
        self.invocation = config.invocation_params
        self.slots: dict = {}               # host -> set of slots in use
        self.node_slot: dict = {}           # gateway id -> (host, slot)
        self.ready: set = set()             # hosts that started a worker
        self.lost: dict = {}                # host -> why
        self.errors: dict = {}              # gateway id -> error of its end
        self.crashed: list = []             # (host, node id) of calls lost with their worker
        self._after_first_start: Any = None

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
    def setup_nodes(self, config: Any) -> None:
        """Wrap xdist's worker start-up: a host that cannot start is one usage error, one lost later is not
        restarted."""
        dsession = config.pluginmanager.getplugin("dsession")
        manager = getattr(dsession, "nodemanager", None)
        if dsession is None or manager is None:
            return
        setup_node, clone_node = manager.setup_node, dsession._clone_node

        def guarded_setup(spec: Any, putevent: Any) -> Any:
            try:
                return setup_node(spec, putevent)
            except _START_ERRORS as exc:
                raise _HostStartError(hosts.host_of(spec, self.proxies), spec, exc) from exc
            finally:
                config.invocation_params = self.invocation

        def guarded_clone(node: Any) -> Any:
            host = self._host(node)
            if host in self.lost:
                return None
            if host not in self.ready:        # it never started: the same would happen again
                return self._cannot_start(dsession, host, node.gateway.spec, self.errors.get(node.gateway.id))
            try:
                return clone_node(node)
            except _HostStartError as exc:
                self.lost[host] = _one_line(exc.cause)
                dsession.report_line(f"msprobe: host {host} is lost ({self.lost[host]}); its calls go to the "
                                     "other hosts")
                others = [n for n in dsession._active_nodes if n is not node]
                if not others:
                    dsession.shouldstop = f"pytest-msprobe: every host is lost (last: {host}); run again with --lf"
                return None

        def first_setup(spec: Any, putevent: Any) -> Any:
            try:
                return guarded_setup(spec, putevent)
            except _HostStartError as exc:
                self._teardown_started(manager)
                if isinstance(exc.cause, ValueError) and "rsync root" in str(exc.cause):
                    raise pytest.UsageError(
                        f"pytest-msprobe: cannot start a worker on host {exc.host}: {exc.cause}; xdist sends a path "
                        "argument to another host only when it lies under an --rsyncdir: write an option's path "
                        "as --option=PATH, or select dump calls with -k instead of test paths") from None
                raise pytest.UsageError(_start_message(exc.host, exc.spec, _one_line(exc.cause))) from None

        manager.setup_node = first_setup
        dsession._clone_node = guarded_clone
        self._after_first_start = lambda: setattr(manager, "setup_node", guarded_setup)

    def new_gateway(self, gateway: Any) -> None:
        """A worker on another host is started with its own command line (restored in :meth:`configure_node`)."""
        spec = gateway.spec
        if hosts.is_remote(spec):
            args = hosts.worker_args(self.config, self.sess.settings, hosts.host_of(spec, self.proxies), self.paths)
            self.config.invocation_params = dataclasses.replace(self.invocation, args=tuple(args))

    def configure_node(self, workerinput: dict, node: Any) -> None:
        """What a worker learns of its host: the host, its slot there, the host's worker count, and (on another
        host) the dump files with the controller's node ids."""
        self.config.invocation_params = self.invocation
        spec = node.gateway.spec
        host = hosts.host_of(spec, self.proxies)
        used = self.slots.setdefault(host, set())
        slot = next(i for i in range(len(used) + 1) if i not in used)
        used.add(slot)
        self.node_slot[node.gateway.id] = (host, slot)
        workerinput["msprobe_host"] = host
        workerinput["msprobe_slot"] = slot
        workerinput["msprobe_host_workers"] = self.workers.get(host, 0)
        if hosts.is_remote(spec):
            workerinput["msprobe_files"] = [[self.paths.map(host, p), node_path(self.config.rootpath, p)]
                                            for p in self.sess.dump_paths]

    def node_ready(self, node: Any) -> None:
        self.ready.add(self._host(node))
        if self._after_first_start is not None:
            self._after_first_start()      # from now on a failing start is a lost host, not a usage error

    def node_down(self, node: Any, error: Any) -> None:
        host, slot = self.node_slot.pop(node.gateway.id, (self._host(node), None))
        if slot is not None:
            self.slots.get(host, set()).discard(slot)
        if error is not None:
            self.errors[node.gateway.id] = str(error)

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

    def _cannot_start(self, dsession: Any, host: str, spec: Any, error: Any) -> None:
        self.lost[host] = "cannot start"
        dsession.shouldstop = _start_message(host, spec, _last_line(error))
        return None

    @staticmethod
    def _teardown_started(manager: Any) -> None:
        try:
            manager.teardown_nodes()
        except Exception:  # noqa: BLE001 - best effort: the run ends with the usage error anyway
            pass


class _HostStartError(Exception):
    def __init__(self, host: str, spec: Any, cause: BaseException) -> None:
        super().__init__(f"{host}: {cause}")
        self.host = host
        self.spec = spec
        self.cause = cause


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
    spec_text = str(getattr(spec, "_spec", spec) or "").replace("execmodel=main_thread_only//", "")
    return (f"pytest-msprobe: cannot start a worker on host {host} (--tx {spec_text}): {why}. On that host "
            f"start the server (python -m pytest_msprobe.host_server HOST:PORT, or execnet's socketserver.py) "
            f"or check ssh, check that 'python -c \"import pytest_msprobe, torch\"' works there, or drop that --tx")


def describe_hosts(config: Any) -> str:
    """One line naming the hosts of this run and their worker counts."""
    specs, proxies = hosts.tx_specs(config)
    counts = Counter(hosts.host_of(s, proxies) for s in specs)
    return ", ".join(f"{host} x{n}" for host, n in sorted(counts.items())) if counts else ""
