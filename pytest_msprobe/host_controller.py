"""The controller's side of a distributed run: what each worker is sent, device slots per host, lost hosts.

Registered on the xdist controller (:func:`install`) when the run has workers. For every gateway it
knows the host (:func:`.hosts.host_of`); a worker gets the lowest free device slot of its host (a worker
that replaces a crashed one takes over its slot, so its device). A remote worker (:func:`.hosts.is_remote`)
gets its own command line and the dump files with the controller's node ids (:mod:`.hosts`).

A host that cannot start a worker at all is one usage error naming the host and the cause. A host lost
mid-run (its server, its network or the machine goes down) is not restarted: the call each of its workers
was running becomes an ``error`` row naming the host, the calls queued there go to the other hosts, and the
run finishes; ``--lf`` checks the error rows again.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from . import hosts

PLUGIN_NAME = "msprobe-hosts"
_START_ERRORS = (OSError, EOFError, ValueError, TimeoutError)


def install(config: Any, sess: Any, reporter: Any) -> None:
    """Register the controller plugin for a run with xdist workers; check the per-host worker limit.

    Raises:
        pytest.UsageError: a bad ``--msprobe-host-path`` or too many workers for a host's devices.
    """
    specs, proxies = hosts.tx_specs(config)
    if not specs:
        return
    try:
        paths = hosts.HostPaths(getattr(config.option, "msprobe_host_path", None) or [])
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-msprobe: {exc}") from None
    plugin = HostController(config, sess, reporter, specs, proxies, paths)
    plugin.check_limits()
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    config.add_cleanup(lambda: config.pluginmanager.unregister(plugin) if config.pluginmanager.is_registered(plugin)
                       else None)


def controller_backend(config: Any, sess: Any, error: Exception) -> Any:
    """The backend object on a controller whose workers are all on other hosts; else UsageError(``error``)."""
    specs, proxies = hosts.tx_specs(config)
    remote_only = bool(specs) and all(hosts.host_of(s, proxies) != hosts.LOCAL for s in specs)
    if hasattr(config, "workerinput") or not remote_only or sess.backend_name() not in sess.registry():
        raise pytest.UsageError(f"--msprobe-device-type: {error}") from None
    return sess.registry().get(sess.backend_name())


class HostController:
    """xdist hooks of the controller for multi-host runs (and device slots of plain ``-n`` runs)."""

    def __init__(self, config: Any, sess: Any, reporter: Any, specs: list, proxies: dict,
                 paths: hosts.HostPaths) -> None:
        self.config = config
        self.sess = sess
        self.reporter = reporter
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

    # --- before the run ----------------------------------------------------------------------------------
    def check_limits(self) -> None:
        """The per-device worker limit of each host, where the controller knows its devices."""
        from .devices import check_worker_limit
        s = self.sess.settings
        try:
            backend = self.sess.registry().get(self.sess.backend_name())
        except KeyError:
            return
        for host, count in sorted(self.workers.items()):
            if not s.devices and host != hosts.LOCAL:
                continue                    # that host's device count is checked by its workers
            ids = s.devices or list(range(max(1, backend.device_count())))
            try:
                check_worker_limit(backend, count, ids, s.max_workers_per_device)
            except ValueError as exc:
                raise pytest.UsageError(f"pytest-msprobe: on host {host}: {exc}") from None

    def _files_for(self, host: str) -> list:
        return [[self.paths.map(host, p), hosts.node_prefix(self.config, p)] for p in self.sess.dump_paths]

    # --- xdist hooks -------------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: Any, specs: Any) -> None:
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
        self._set_clone_setup = lambda: setattr(manager, "setup_node", guarded_setup)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        spec = gateway.spec
        if hosts.is_remote(spec):
            args = hosts.worker_args(self.config, self.sess.settings, hosts.host_of(spec, self.proxies),
                                     self.paths)
            self.config.invocation_params = dataclasses.replace(self.invocation, args=tuple(args))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        self.config.invocation_params = self.invocation
        spec = node.gateway.spec
        host = hosts.host_of(spec, self.proxies)
        used = self.slots.setdefault(host, set())
        slot = next(i for i in range(len(used) + 1) if i not in used)
        used.add(slot)
        self.node_slot[node.gateway.id] = (host, slot)
        wi = node.workerinput
        wi["msprobe_host"] = host
        wi["msprobe_slot"] = slot
        wi["msprobe_host_workers"] = self.workers.get(host, 0)
        wi["msprobe_order_by_size"] = True
        if hosts.is_remote(spec):
            wi["msprobe_files"] = self._files_for(host)
            wi["msprobe_lastfailed"] = self._lastfailed()
            if self.sess.settings.baseline:
                wi["msprobe_baseline"] = self.sess.settings.baseline
                wi["msprobe_baseline_failing"] = sorted(self.sess.baseline_failing)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        self.ready.add(self._host(node))
        if hasattr(self, "_set_clone_setup"):
            self._set_clone_setup()        # from now on a failing start is a lost host, not a usage error

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        host, slot = self.node_slot.pop(node.gateway.id, (self._host(node), None))
        if slot is not None:
            self.slots.get(host, set()).discard(slot)
        if error is not None:
            self.errors[node.gateway.id] = str(error)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        node = getattr(report, "node", None)
        if node is None:
            return
        host = self._host(node)
        why = _one_line(self.errors.get(node.gateway.id, "")) or "it went down"
        self.crashed.append((host, crashitem))
        report.longrepr = (f"worker {node.gateway.id!r} on host {host} crashed while running {crashitem!r} "
                           f"(the worker process or its host went down: {why})")

    @pytest.hookimpl(trylast=True, optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list) -> None:
        """Workers run the largest calls first; the CSV rows still go back into dump order."""
        reporter = self.reporter
        if reporter is None or not getattr(reporter, "order", None):
            return
        names = [case.name for path in self.sess.dump_paths for case in self.sess.cases_of(path)]
        position = {name: i for i, name in enumerate(names)}
        reporter.order = {name: position.get(name, len(position)) for name in reporter.order}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.lost and not self.crashed:
            return
        terminalreporter.section("msprobe hosts")
        for host, why in sorted(self.lost.items()):
            terminalreporter.write_line(f"host {host} lost mid-run: {why}")
        for host, nodeid in self.crashed:
            terminalreporter.write_line(f"  error row: {nodeid} (was running on {host})")
        terminalreporter.write_line("run the same command with --lf to check these calls again")

    # --- helpers -----------------------------------------------------------------------------------------
    def _host(self, node: Any) -> str:
        entry = self.node_slot.get(node.gateway.id)
        return entry[0] if entry else hosts.host_of(node.gateway.spec, self.proxies)

    def _lastfailed(self) -> dict:
        cache = getattr(self.config, "cache", None)
        entries = cache.get("cache/lastfailed", {}) if cache is not None else {}
        prefixes = {hosts.node_prefix(self.config, p) for p in self.sess.dump_paths}
        return {k: v for k, v in (entries if isinstance(entries, dict) else {}).items()
                if str(k).split("::", 1)[0] in prefixes}

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
    """One line naming the hosts of this run and their worker counts (for the report header)."""
    specs, proxies = hosts.tx_specs(config)
    counts = Counter(hosts.host_of(s, proxies) for s in specs)
    return ", ".join(f"{host} x{n}" for host, n in sorted(counts.items())) if counts else ""

