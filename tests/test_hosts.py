"""Checking across hosts: two simulated hosts on this machine, each a socket server in its own directory.

Each host is ``python -m pytest_msprobe.host_server 127.0.0.1:0`` started by the test in its own working
directory and process group, with the package importable there through PYTHONPATH. A backend module
(``-p hostplant``, on every host's PYTHONPATH) records which host and device slot ran each call, and on the
host told so by its environment kills its whole server (the host) at its first call. msprobe's own bf16 dumps of
GPT-2 and Llama (tests/data/msprobe_26_2_bf16) are checked across two hosts on the real CPU device, once on
127.0.0.1 and once (where this machine lets the test make them) with each host in its own network namespace.
"""
from __future__ import annotations

import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch  # imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - keeps in-process runs fast
from pytest_msprobe import host_controller, hosts
from pytest_msprobe.report import acc_csv
from pytest_msprobe.report.columns import DETAILS_HEADER

ROOT = pathlib.Path(__file__).resolve().parent.parent
SERVER_START_S = 60
RUN_S = 540

HOSTPLANT = '''
import os, signal
from pytest_msprobe.devices import CpuBackend


class Recording(CpuBackend):
    """The CPU backend; records host and device slot of every call; on a host told so, kills that host."""

    name = "recording"

    def to_device(self, obj, index):
        record = os.environ.get("PLANT_RECORD")
        host = os.environ.get("PLANT_HOST", "controller")
        if record:
            open(os.path.join(record, f"{host}-{index}"), "w").close()
        if os.environ.get("PLANT_KILL_HOST") == "1":
            marker = os.environ["PLANT_MARKER"]
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.killpg(os.getpgrp(), signal.SIGKILL)      # the server and every worker of this host
        return obj


class FakeAccelerator(Recording):
    name = "fakeaccel"
    accelerator = True

    def device_count(self):
        return 2


def pytest_msprobe_register_devices(registry):
    registry.register(Recording())
    registry.register(FakeAccelerator())


def pytest_collection_finish(session):
    record = os.environ.get("PLANT_RECORD")
    if record and hasattr(session.config, "workerinput"):
        host = os.environ.get("PLANT_HOST", "controller")
        with open(os.path.join(record, f"args-{host}-{session.config.workerinput['workerid']}"), "w") as fh:
            fh.write("\\n".join(sorted({str(item.path) for item in session.items})))   # the dumps it read
'''


class Host:
    """One simulated host: a host server in its own directory and process group (``prefix``: the command it
    runs under, e.g. ``ip netns exec NS``; ``bind``: the address it listens on)."""

    def __init__(self, directory: pathlib.Path, env: dict, bind: str = "127.0.0.1", prefix: tuple = ()) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.log = directory / "server.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "pytest_msprobe.host_server", f"{bind}:0"],
                                         cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + SERVER_START_S
        self.port = None
        while self.port is None:
            text = self.log.read_text()
            if "listening on" in text:
                self.port = int(text.split("listening on", 1)[1].split(",", 1)[0].rsplit(":", 1)[1])
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"host server did not start: {text}")
            else:
                time.sleep(0.1)
        self.address = f"{bind}:{self.port}"

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


@pytest.fixture
def start_host(tmp_path):
    """Factory of simulated hosts; every one (and every worker it started) is killed at the end."""
    started: list = []

    def start(name: str, plugins: bool = True, bind: str = "127.0.0.1", prefix: tuple = (), **extra: str) -> Host:
        env = dict(os.environ)
        inherited = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and e != str(tmp_path / "plugins")]
        env["PYTHONPATH"] = os.pathsep.join(([str(tmp_path / "plugins")] if plugins else []) + [str(ROOT)]
                                            + inherited)
        env["PLANT_HOST"] = name
        env.update(extra)
        host = Host(tmp_path / name, env, bind, prefix)
        started.append(host)
        return host

    yield start
    for host in started:
        host.stop()


@pytest.fixture
def project(pytester, data_dir, tmp_path, monkeypatch):
    """The msprobe fp32 MLP dump and a bf16 transformer dump made by our dumper, the recording backend."""
    pytester.makeini("[pytest]\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "hostplant.py").write_text(HOSTPLANT)
    (tmp_path / "record").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "plugins"), str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PLANT_RECORD", str(tmp_path / "record"))
    for var in ("PLANT_KILL_HOST", "PLANT_MARKER", "PLANT_HOST"):
        monkeypatch.delenv(var, raising=False)
    dumps = pytester.path / "dumps"
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", dumps / "mlp")
    _bf16_transformer_dump(tmp_path / "made")
    shutil.copytree(tmp_path / "made" / "step0" / "rank", dumps / "transformer")
    return pytester


def _bf16_transformer_dump(path: pathlib.Path) -> None:
    from pytest_msprobe import PrecisionDebugger
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).bfloat16()
    head = torch.nn.Linear(16, 3).bfloat16()
    model = torch.nn.Sequential(layer, head)
    PrecisionDebugger.reset()
    path.mkdir(parents=True, exist_ok=True)
    config = path / "config.json"          # every API, the low-risk ones too: a dump of some 30 calls
    config.write_text(json.dumps({"task": "tensor", "dump_path": str(path), "level": "L1", "risk_level": "ALL"}))
    dbg = PrecisionDebugger(config_path=str(config))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dbg.start(model)
        out = model(torch.randn(2, 5, 16).bfloat16())
        torch.nn.functional.cross_entropy(out.mean(dim=1).float(), torch.tensor([0, 2])).backward()
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger.reset()
        torch.set_num_threads(threads)


def _pair(directory) -> tuple:
    results = glob.glob(str(directory / "accuracy_checking_result_*.csv"))
    assert len(results) == 1, results
    rows = acc_csv.read_result_csv(results[0])
    names = [r.name for r in rows]
    assert len(names) == len(set(names)), f"duplicate rows: {names}"
    details = acc_csv.read_details_csv(acc_csv.details_path_for(results[0]))[1]
    return {r.name: r for r in rows}, details


def _statuses(details: list) -> dict:
    status_col = DETAILS_HEADER.index("Status")
    out = {}
    for row in details:
        assert row[0] not in out, f"details row twice: {row[0]}"
        out[row[0]] = row[status_col]
    return out


def _run(p, *args):
    if not any(str(a).startswith("--msprobe-device-type") for a in args):
        args = ("--msprobe-device-type", "recording", *args)
    return p.runpytest_subprocess("-p", "hostplant", "-p", "no:randomly", *args, timeout=RUN_S)


# --- unit level ----------------------------------------------------------------------------------------------
def test_host_of_and_remote_gateways():
    import execnet
    proxies = {"h1": execnet.XSpec("socket=10.0.0.2:8888//id=h1")}
    assert hosts.host_of(execnet.XSpec("socket=10.0.0.2:8888")) == "10.0.0.2:8888"
    assert hosts.host_of(execnet.XSpec("ssh=user@node1//python=python3")) == "user@node1"
    assert hosts.host_of(execnet.XSpec("popen//via=h1"), proxies) == "10.0.0.2:8888"
    assert hosts.host_of(execnet.XSpec("popen")) == hosts.LOCAL
    assert not hosts.is_remote(execnet.XSpec("popen"))
    assert hosts.is_remote(execnet.XSpec("popen//chdir=/tmp/x")) and hosts.is_remote(execnet.XSpec("popen//via=h1"))


def test_host_paths_map_longest_prefix_first_and_bad_entries_say_what_to_write():
    paths = hosts.HostPaths(["10.0.0.2:8888:/shared=/mnt/s", "10.0.0.2:8888:/shared/dump=/fast/dump",
                             "*:/data=/remote/data"])
    assert paths.map("10.0.0.2:8888", "/shared/dump/step0/dump.json") == "/fast/dump/step0/dump.json"
    assert paths.map("10.0.0.2:8888", "/shared/other") == "/mnt/s/other"
    assert paths.map("10.0.0.2:8888", "/sharedx/a") == "/sharedx/a"
    assert paths.map("user@node1", "/data/x.json") == "/remote/data/x.json"
    assert paths.map("user@node1", "/shared/dump/x") == "/shared/dump/x"
    for bad in ("node1=/x", "node1:/x", "node1:/x=relative", ":/x=/y"):
        with pytest.raises(ValueError, match="HOST:DIR=HOST_DIR"):
            hosts.HostPaths([bad])


# --- real runs ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_hosts_give_the_one_host_csv(project, start_host, tmp_path):
    """bf16 transformer and fp32 MLP dumps over two hosts: every API once, every details Status as one host.

    Host B reads its own copy of the dumps through --msprobe-host-path (the settings its brief carries); each
    host's workers take that host's device slots 0 and 1 (not the global gw2, gw3)."""
    p = project
    dumps = p.path / "dumps"
    (p.path / "one").mkdir()
    ref = p.runpytest("-p", "hostplant", "--msprobe-device-type", "recording", f"--msprobe-api-info={dumps}",
                      "--msprobe-out", "one")
    o = ref.parseoutcomes()
    ref_rows, ref_details = _pair(p.path / "one")
    assert o.get("passed", 0) + o.get("failed", 0) + o.get("skipped", 0) == len(ref_rows) > 30
    for f in (tmp_path / "record").iterdir():
        f.unlink()
    host_b_dumps = tmp_path / "B-storage" / "dumps"
    shutil.copytree(dumps, host_b_dumps)
    a, b = start_host("A"), start_host("B")
    (p.path / "two").mkdir()
    res = _run(p, f"--msprobe-api-info={dumps}", "--msprobe-out=two", "--msprobe-devices", "0,1,2,3",
               "--tx", f"2*socket={a.address}", "--tx", f"2*socket={b.address}", "--dist", "load",
               "--msprobe-host-path", f"{b.address}:{dumps}={host_b_dumps}")
    assert res.ret == ref.ret, res.stdout.str()[-3000:]
    assert res.parseoutcomes() == o
    rows, details = _pair(p.path / "two")
    assert list(rows) == list(ref_rows)                        # every API once, in dump order
    assert {n: (r.forward, r.backward) for n, r in rows.items()} == \
        {n: (r.forward, r.backward) for n, r in ref_rows.items()}
    assert _statuses(details) == _statuses(ref_details)
    assert [r[0] for r in details] == [r[0] for r in ref_details]
    record = {f.name for f in (tmp_path / "record").iterdir()}
    assert {"A-0", "A-1", "B-0", "B-1"} <= record and not {"A-2", "A-3", "B-2", "B-3"} & record, record
    args_b = [(tmp_path / "record" / n).read_text() for n in record if n.startswith("args-B-")]
    args_a = [(tmp_path / "record" / n).read_text() for n in record if n.startswith("args-A-")]
    assert args_a and args_b
    assert all(str(host_b_dumps) in t for t in args_b) and not any(str(host_b_dumps) in t for t in args_a)
    assert (a.dir / "pyexecnetcache").is_dir() and (b.dir / "pyexecnetcache").is_dir()


@pytest.mark.slow
def test_host_lost_mid_run_leaves_whole_csvs_and_lf_completes(project, start_host, tmp_path):
    """xdist replaces a worker that went down; on a lost host that fails, and the run stops there with one line
    naming the host: the call each of its workers ran is an error row naming the host, the CSVs are whole,
    and --lf checks those calls and every one not run."""
    p = project
    a = start_host("A")
    b = start_host("B", PLANT_KILL_HOST="1", PLANT_MARKER=str(tmp_path / "B-killed"))
    dump = str(p.path / "dumps" / "mlp" / "dump.json")
    res = _run(p, f"--msprobe-api-info={dump}", "--tx", f"2*socket={a.address}", "--tx", f"2*socket={b.address}",
               "--dist", "load")
    out = res.stdout.str()
    assert (tmp_path / "B-killed").exists()
    assert res.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert "INTERNALERROR" not in out + res.stderr.str()
    assert f"host {b.address} is lost" in res.stderr.str() and f"host {b.address} lost mid-run" in out
    rows, details = _pair(p.path)
    lost = sorted(n for n, r in rows.items() if r.forward == "error")
    assert 1 <= len(lost) <= 2 and len(rows) <= 15, lost
    for name in lost:
        assert f"on host {b.address} crashed" in rows[name].message
    assert all(r.forward == "pass" for n, r in rows.items() if n not in lost)
    assert {acc_csv.api_of_output(r[0]) for r in details} == set(rows)
    lastfailed = json.loads((p.path / ".pytest_cache" / "v" / "cache" / "lastfailed").read_text())
    assert sorted(lastfailed) == [f"dumps/mlp/dump.json::{n}" for n in lost]   # the controller's node ids
    res = _run(p, f"--msprobe-api-info={dump}", "--tx", f"2*socket={a.address}", "--dist", "load", "--lf")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()[-3000:]
    res.assert_outcomes(passed=15 - len(rows) + len(lost))    # xdist: deselection happens on the workers
    rows, details = _pair(p.path)
    assert len(rows) == 15 and all(r.forward == "pass" for r in rows.values())
    names = [r[0] for r in details]
    assert len(names) == len(set(names)) and {acc_csv.api_of_output(n) for n in names} == set(rows)


# --- msprobe-made bf16 dumps of real models ----------------------------------------------------------------
BF16_MODELS = ("gpt2", "llama")
NETNS_PREFIX = "10.213"          # 10.213.S.0/24 on the veth pairs of this test's own namespaces only


@pytest.fixture
def bf16_dumps(pytester, data_dir, monkeypatch):
    """msprobe 26.2's tensor dumps of a bf16 training step of GPT-2 and Llama, the package importable."""
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for model in BF16_MODELS:
        shutil.copytree(data_dir / "msprobe_26_2_bf16" / model, pytester.path / "dumps" / model)
    return pytester


def _same_as_one_host(p, hosts_: list, *extra: str) -> str:
    """Check the dumps on one host (in this process), then across ``hosts_`` (one worker each, on the real CPU
    device): the same outcomes, every API once in the controller's one result CSV, the same details rows
    with the same Status; no CSV on any host. Returns the distributed run's output."""
    (p.path / "one").mkdir()
    # in a process of its own, as the distributed run: an inline run re-imports what an earlier inline run of
    # this process imported lazily (pytester restores sys.modules), which sympy's registry refuses
    ref = p.runpytest_subprocess("-p", "no:randomly", "--msprobe-api-info=dumps", "--msprobe-out=one",
                                 timeout=RUN_S)
    outcomes = ref.parseoutcomes()
    ref_rows, ref_details = _pair(p.path / "one")
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) + outcomes.get("skipped", 0) == len(ref_rows)
    assert {n.rsplit("::", 1)[-1].split(".")[0] for n in ref_rows} >= {"Functional", "Tensor", "Torch"}
    assert {n.split("::")[0] for n in ref_rows} == set(BF16_MODELS)
    assert len(ref_rows) > 100 and len(set(_statuses(ref_details).values())) >= 2
    (p.path / "two").mkdir()
    tx = [arg for host in hosts_ for arg in ("--tx", f"socket={host.address}")]
    res = p.runpytest_subprocess("-p", "no:randomly", "-v", f"--msprobe-api-info={p.path / 'dumps'}",
                                 "--msprobe-out=two", *tx, "--dist", "load", *extra, timeout=RUN_S)
    out = res.stdout.str()
    assert res.ret == ref.ret, out[-3000:]
    assert res.parseoutcomes() == outcomes
    rows, details = _pair(p.path / "two")
    assert list(rows) == list(ref_rows)                        # every API once, in dump order
    assert {n: (r.forward, r.backward) for n, r in rows.items()} == \
        {n: (r.forward, r.backward) for n, r in ref_rows.items()}
    assert [r[0] for r in details] == [r[0] for r in ref_details]
    assert _statuses(details) == _statuses(ref_details)
    for i, host in enumerate(hosts_):                          # gw<i> is the worker of the i-th --tx
        assert re.search(rf"\[gw{i}\] \[ *\d+%\] PASSED dumps/", out), out[-3000:]   # it ran calls
        assert host.log.read_text().count("connection from") == 1
        assert not list(host.dir.rglob("accuracy_checking_*.csv"))
    return out


@pytest.mark.slow
def test_msprobe_bf16_dumps_across_two_hosts_give_the_one_host_csv(bf16_dumps, start_host):
    """GPT-2 and Llama, dumped by msprobe itself in bf16, on the dump's shared path on both hosts."""
    _same_as_one_host(bf16_dumps, [start_host("A", plugins=False), start_host("B", plugins=False)])


CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def netns_missing() -> str | None:
    """What this machine lacks for the test to make network namespaces (None: nothing)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux's (this is {sys.platform})"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    try:
        status = pathlib.Path("/proc/self/status").read_text()
        caps = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff:")), 16)
    except (OSError, StopIteration, ValueError) as exc:
        return f"cannot read this process's capabilities from /proc/self/status: {exc}"
    lacking = [name for name, bit in (("CAP_NET_ADMIN", CAP_NET_ADMIN), ("CAP_SYS_ADMIN", CAP_SYS_ADMIN))
               if not caps >> bit & 1]
    if lacking:
        return (f"'ip netns add' and 'ip link add type veth' need {' and '.join(lacking)}, which this process "
                f"(uid {os.geteuid()}) lacks")
    return None


class NetNamespaces:
    """One network namespace per simulated host, each joined to this namespace by a veth pair: host i is
    at 10.213.S.(4i+2)/30 in its namespace, this namespace's end at 10.213.S.(4i+1)."""

    def __init__(self, count: int) -> None:
        tag = os.getpid() % 10_000_000
        self.names = [f"msprobe-{tag}-{i}" for i in range(count)]
        self.links = [f"msp{tag}o{i}" for i in range(count)]
        used = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
        subnet = next(s for s in [(tag + k) % 256 for k in range(256)] if f" {NETNS_PREFIX}.{s}." not in used)
        self.addresses = [f"{NETNS_PREFIX}.{subnet}.{4 * i + 2}" for i in range(count)]
        self.peers = [f"{NETNS_PREFIX}.{subnet}.{4 * i + 1}" for i in range(count)]
        self.made: list = []

    def create(self) -> None:
        """Make the namespaces; pytest.skip naming the command that is not permitted here."""
        for name, link, address, peer in zip(self.names, self.links, self.addresses, self.peers):
            inner = f"{link[:-2]}i{link[-1]}"
            steps = [["ip", "netns", "add", name], ["ip", "link", "add", link, "type", "veth", "peer", "name", inner],
                     ["ip", "link", "set", inner, "netns", name], ["ip", "addr", "add", f"{peer}/30", "dev", link],
                     ["ip", "link", "set", link, "up"],
                     ["ip", "netns", "exec", name, "ip", "addr", "add", f"{address}/30", "dev", inner],
                     ["ip", "netns", "exec", name, "ip", "link", "set", inner, "up"],
                     ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]]
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True, timeout=30)
                if step[:3] == ["ip", "netns", "add"] and done.returncode == 0:
                    self.made.append(name)
                if done.returncode != 0:
                    pytest.skip(f"'{' '.join(step)}' is not permitted here: {done.stderr.strip()}")

    def remove(self) -> None:
        """Delete the namespaces made (their veth ends go with them, and so the peers here)."""
        for name in self.made:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
        for link in self.links:
            subprocess.run(["ip", "link", "delete", link], capture_output=True, timeout=30)
        self.made = []


@pytest.mark.slow
def test_msprobe_bf16_dumps_across_two_hosts_in_their_own_network_namespaces(bf16_dumps, start_host, tmp_path):
    """Each host's server in its own network namespace, reached only at that namespace's address (no
    loopback shared with the controller); host B reads its own copy of the dumps (--msprobe-host-path)."""
    missing = netns_missing()
    if missing:
        pytest.skip(missing)
    p = bf16_dumps
    host_b_dumps = tmp_path / "B-storage" / "dumps"
    shutil.copytree(p.path / "dumps", host_b_dumps)
    spaces = NetNamespaces(2)
    started: list = []
    try:
        spaces.create()
        for label, address, name in zip("AB", spaces.addresses, spaces.names):
            started.append(start_host(label, plugins=False, bind=address, prefix=("ip", "netns", "exec", name)))
        _same_as_one_host(p, started, "--msprobe-host-path", f"{started[1].address}:{p.path / 'dumps'}={host_b_dumps}")
        for host, peer in zip(started, spaces.peers):       # the controller came over the veth pair
            assert f"connection from {peer}:" in host.log.read_text()
    finally:
        for host in started:
            host.stop()                                    # before its namespace goes
        spaces.remove()
    assert not set(spaces.names) & set(subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                      text=True).stdout.split())


def test_a_host_that_cannot_start_is_one_usage_error(project, start_host):
    host = start_host("A")
    host.stop()                                                # nothing listens there any more
    res = _run(project, "--msprobe-api-info=dumps/mlp/dump.json", "--tx", f"socket={host.address}",
               "--tx", "popen", "--dist", "load")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    text = res.stderr.str()
    assert f"cannot start a worker on host {host.address}" in text and "INTERNALERROR" not in text
    assert text.count("cannot start a worker") == 1


@pytest.mark.slow
def test_a_host_whose_workers_cannot_start_stops_the_run_with_one_error(project, start_host):
    """Host B lacks the backend module given with -p: its worker ends before it is ready; no endless restarts."""
    a, b = start_host("A"), start_host("B", plugins=False)
    res = _run(project, "--msprobe-api-info=dumps/mlp/dump.json", "--tx", f"socket={a.address}",
               "--tx", f"socket={b.address}", "--dist", "load")
    text = res.stdout.str() + res.stderr.str()
    assert res.ret not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), text[-3000:]
    assert f"cannot start a worker on host {b.address}" in text and "hostplant" in text, text[-3000:]
    assert "INTERNALERROR" not in text
    assert text.count("replacing crashed worker") == 0


@pytest.mark.slow
def test_baseline_gpu_csv_and_result_csv_across_hosts(project, start_host):
    """The controller reads the baseline and the CSV it continues; workers on another host judge against the
    GPU CSV (here the one-host run's own details: every API compares equal)."""
    p = project
    dump = "dumps/mlp/dump.json"
    (p.path / "one").mkdir()
    p.runpytest("-p", "hostplant", "--msprobe-device-type", "recording", "--msprobe-api-info", dump,
                "--msprobe-out", "one").assert_outcomes(passed=15)
    result = glob.glob(str(p.path / "one" / "accuracy_checking_result_*.csv"))[0]
    host = start_host("A")
    (p.path / "gpu").mkdir()
    res = _run(p, f"--msprobe-api-info={dump}", "--tx", f"socket={host.address}", "--dist", "load",
               f"--msprobe-baseline={result}", f"--msprobe-gpu-csv={acc_csv.details_path_for(result)}",
               "--msprobe-out=gpu", "-k", "gelu or linear")
    res.assert_outcomes(passed=3)
    assert glob.glob(str(p.path / "gpu" / "api_precision_compare_result_*.csv"))
    lines = open(result, encoding="utf-8-sig").read().split("\n")
    with open(result, "w", encoding="utf-8-sig", newline="") as fh:     # drop the last two APIs
        fh.write("\n".join(lines[:-3]) + "\n")
    res = _run(p, f"--msprobe-api-info={dump}", "--tx", f"socket={host.address}", "--dist", "load",
               f"--msprobe-result-csv={result}")
    res.assert_outcomes(passed=2)
    assert [r.name for r in acc_csv.read_result_csv(result)][-2:] == ["Tensor.add_.4", "Tensor.add_.5"]
    assert len(acc_csv.read_result_csv(result)) == 15


def test_per_host_worker_limit_names_the_host(project):
    res = _run(project, "--msprobe-api-info", "dumps/mlp/dump.json", "--msprobe-device-type", "fakeaccel",
               "--msprobe-devices", "0", "--msprobe-max-workers-per-device", "2",
               "--tx", "3*socket=127.0.0.1:9", "--tx", "2*popen", "--dist", "load")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*on host 127.0.0.1:9: 3 workers on 1 fakeaccel device(s)*"
                              "--msprobe-max-workers-per-device*"])


def test_describe_hosts_counts_workers(pytester):
    config = pytester.parseconfig("--tx", "2*socket=10.0.0.2:8888", "--tx", "popen", "--dist", "load")
    assert host_controller.describe_hosts(config) == "10.0.0.2:8888 x2, localhost x1"
