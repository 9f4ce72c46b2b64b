"""Checking across hosts on xdist's gateways: host identity, per-host paths, worker arguments, node ids.

A worker on another host (``--tx socket=...``, ``--tx ssh=...``, ``popen//via=...``, or any gateway with
``chdir``) starts in another directory, often on another filesystem. The controller therefore sends it
(:mod:`.host_controller`) its arguments with every path absolute and mapped to that host
(``--msprobe-host-path``), the resolved settings instead of ini keys and files it may not have, the list of
dump files with the node id each must have (the controller's own, so ``--lf``, ``-k`` and the reports agree
on every host), pytest's last-failed entries, and its device slot on that host. Plain local workers
(``-n``, ``--tx popen``) get nothing of this: their node ids and behaviour stay those of a one-host run.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

LOCAL = "localhost"
FILES_KEY = pytest.StashKey["dict"]()       # worker: real path of a dump file -> its node id

# options the controller resolves itself and sends to remote workers in resolved form
RESOLVED_OPTIONS = ("--msprobe-api-info", "--msprobe-out", "--msprobe-error-data-path", "--msprobe-gpu-csv",
                    "--msprobe-config", "--msprobe-white-list", "--msprobe-black-list", "--msprobe-standard",
                    "--msprobe-fail-on", "--msprobe-device-type", "--msprobe-seed", "--msprobe-timeout",
                    "--msprobe-max-bytes")
# options only the controller reads (the CSVs it continues, the baseline, the path map)
CONTROLLER_OPTIONS = ("--msprobe-result-csv", "--msprobe-baseline", "--msprobe-host-path")


def add_options(parser: Any) -> None:
    """``--msprobe-host-path`` in the ``msprobe`` group."""
    g = parser.getgroup("msprobe")
    g.addoption("--msprobe-host-path", action="append", default=[], metavar="HOST:DIR=HOST_DIR",
                help="xdist gateways on other hosts: on HOST (as in --tx, e.g. 10.0.0.2:8888 or user@node1; "
                     "* for every other host) the controller's directory DIR is HOST_DIR; repeatable "
                     "(default: every host sees the dump at the controller's path)")


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


def tx_specs(config: Any) -> tuple:
    """(worker specs, proxy specs by id) of this run's ``--tx``/``--px`` (empty without distributed xdist)."""
    import execnet
    tx = list(getattr(config.option, "tx", None) or [])
    if not tx or getattr(config.option, "dist", "no") == "no":
        return [], {}
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


# --- per-host paths ----------------------------------------------------------------------------------------
class HostPaths:
    """``--msprobe-host-path HOST:DIR=HOST_DIR`` entries: where the controller's directories are on each host."""

    def __init__(self, entries: list | None = None) -> None:
        self.entries: list = []            # (host, controller dir, host dir), longest controller dir first
        for text in entries or []:
            self.entries.append(self.parse(text))
        self.entries.sort(key=lambda e: -len(e[1]))

    @staticmethod
    def parse(text: str) -> tuple:
        """``"10.0.0.2:8888:/shared/dump=/mnt/dump"`` -> ("10.0.0.2:8888", "/shared/dump", "/mnt/dump")."""
        raw = str(text)
        cut = raw.find(":/")
        src, eq, dst = raw[cut + 1:].partition("=") if cut > 0 else ("", "", "")
        if cut <= 0 or not eq or not os.path.isabs(src) or not os.path.isabs(dst):
            raise ValueError(f"--msprobe-host-path {raw!r}: write HOST:DIR=HOST_DIR with two absolute directories, "
                             "e.g. 10.0.0.2:8888:/shared/dump=/mnt/dump (HOST as in --tx, or * for every host)")
        return raw[:cut], os.path.normpath(src), os.path.normpath(dst)

    def map(self, host: str, path: str) -> str:
        """The path on ``host`` of the controller's absolute ``path`` (unchanged where no entry applies)."""
        path = os.path.normpath(path)
        for entry_host, src, dst in self.entries:
            if entry_host not in (host, "*"):
                continue
            if path == src or path.startswith(src.rstrip(os.sep) + os.sep):
                return dst + path[len(src):] if src != os.sep else os.path.join(dst, path.lstrip(os.sep))
        return path


# --- what a remote worker is sent --------------------------------------------------------------------------
def _strip(args: list, names: tuple) -> list:
    """``args`` without the options ``names`` (both ``--opt value`` and ``--opt=value``)."""
    out: list = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def _explicit(config: Any, dest: str, ini: str | None) -> Any:
    value = getattr(config.option, dest, None)
    if value is None and ini:
        try:
            value = config.getini(ini)
        except ValueError:
            value = None
    return value if value not in ("", [], None) else None


def worker_args(config: Any, settings: Any, host: str, paths: HostPaths) -> list:
    """The command line of a worker on ``host``: msprobe paths absolute and mapped, settings resolved on the
    controller (ini keys and ``--msprobe-config`` need not exist there), controller-only options left out."""
    base = str(config.invocation_params.dir)
    args = _strip([str(a) for a in config.invocation_params.args or ()], RESOLVED_OPTIONS + CONTROLLER_OPTIONS)

    def where(p: str) -> str:
        return paths.map(host, os.path.abspath(os.path.join(base, p)))

    out = [f"--msprobe-api-info={where(p)}" for p in settings.api_info]
    out.append(f"--msprobe-out={where(settings.out_dir)}")
    if settings.error_data_path:
        out.append(f"--msprobe-error-data-path={where(settings.error_data_path)}")
    if settings.gpu_csv:
        out.append(f"--msprobe-gpu-csv={where(settings.gpu_csv)}")
    if settings.white_list:
        out.append("--msprobe-white-list=" + ",".join(settings.white_list))
    if settings.black_list:
        out.append("--msprobe-black-list=" + ",".join(settings.black_list))
    out += [f"--msprobe-standard={settings.standard}", f"--msprobe-fail-on={settings.fail_on}",
            f"--msprobe-seed={settings.seed}"]
    if settings.device_type:
        out.append(f"--msprobe-device-type={settings.device_type}")
    if settings.timeout:
        out.append(f"--msprobe-timeout={settings.timeout!r}")
    if _explicit(config, "msprobe_max_bytes", "msprobe_max_bytes") is not None:   # else each host's own memory
        out.append(f"--msprobe-max-bytes={settings.max_bytes}")
    return out + args


def node_prefix(config: Any, path: str) -> str:
    """The node id of a dump file on the controller (path relative to the rootdir, ``/``-separated)."""
    real = os.path.realpath(path)
    root = os.path.realpath(str(config.rootpath))
    rel = os.path.relpath(real, root) if real.startswith(root.rstrip(os.sep) + os.sep) else None
    return (rel or real).replace(os.sep, "/")


# --- on a worker -------------------------------------------------------------------------------------------
def _workerinput(config: Any) -> dict:
    value = getattr(config, "workerinput", None)
    return value if isinstance(value, dict) else {}


def dump_files(config: Any, files: list) -> list:
    """A remote worker checks exactly the controller's dump files (mapped to its host), under the controller's
    node ids; anywhere else ``files`` unchanged. Raises UsageError naming the host for a missing file."""
    wi = _workerinput(config)
    sent = wi.get("msprobe_files")
    if not sent:
        return files
    host = wi.get("msprobe_host", "?")
    mapping = {}
    for path, nodeid in sent:
        if not os.path.isfile(path):
            raise pytest.UsageError(
                f"pytest-msprobe: on host {host}: dump file {path} does not exist; put the dump on storage that "
                f"every host reaches at the same path, or give its directory there with --msprobe-host-path")
        mapping[os.path.realpath(path)] = nodeid
    config.stash[FILES_KEY] = mapping
    return [path for path, _ in sent]


def nodeid_for(config: Any, path: Any) -> str | None:
    """The node id a dump file must have on this worker (None: the one pytest computes)."""
    mapping = config.stash.get(FILES_KEY, None)
    return mapping.get(os.path.realpath(str(path))) if mapping else None


def place(config: Any, sess: Any) -> None:
    """A worker uses the device of its slot on its own host (slot k: ``ids[k mod len]``)."""
    wi = _workerinput(config)
    if "msprobe_slot" in wi:
        sess.worker_id = f"{wi.get('workerid', 'gw')}@{wi.get('msprobe_host', LOCAL)}#{int(wi['msprobe_slot'])}"


def configure_worker(config: Any, sess: Any, backend: Any) -> None:
    """Worker side of a multi-host run: the baseline and last-failed entries the controller sent, and the
    per-device worker limit of this host. Raises UsageError naming the host."""
    wi = _workerinput(config)
    if "msprobe_host" not in wi:
        return
    if wi.get("msprobe_baseline"):
        sess.baseline_failing = set(wi.get("msprobe_baseline_failing", ()))
        sess.settings.baseline = wi["msprobe_baseline"]
    if "msprobe_lastfailed" in wi:
        _set_lastfailed(config, wi["msprobe_lastfailed"])
    workers = int(wi.get("msprobe_host_workers", 0) or 0)
    if workers > 0:
        from .devices import check_worker_limit
        ids = sess.settings.devices or list(range(max(1, backend.device_count())))
        try:
            check_worker_limit(backend, workers, ids, sess.settings.max_workers_per_device)
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-msprobe: on host {wi['msprobe_host']}: {exc}") from None


def _set_lastfailed(config: Any, entries: dict) -> None:
    """pytest's ``--lf`` on a remote worker reads that host's empty cache: give it the controller's entries."""
    lf = config.pluginmanager.get_plugin("lfplugin")
    if lf is None or not hasattr(lf, "lastfailed"):
        return
    try:
        from _pytest.nodeid import NodeId
        parse: Any = NodeId.parse
    except ImportError:           # pytest before 9.2 keys the entries by plain strings
        parse = str
    lf.lastfailed = {parse(k): v for k, v in entries.items()}


def order_by_size(config: Any, items: list) -> None:
    """Distributed runs: the calls with the largest inputs first, so that no large call starts last on a busy
    worker. Node ids do not change; the controller puts the CSV rows back in dump order."""
    if not _workerinput(config).get("msprobe_order_by_size"):
        return
    from generators.inputs import required_bytes

    def cost(item: Any) -> int:
        case = getattr(item, "case", None)
        if case is None:
            return 0
        try:
            return int(required_bytes(case)[1])
        except Exception:  # noqa: BLE001 - a malformed entry costs nothing here; it is SKIP with its reason
            return 0

    items.sort(key=lambda item: -cost(item))
