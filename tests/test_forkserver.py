"""Local xdist workers forked from the fork server: the same results as fresh workers, and a plain start
whenever the server cannot serve (real server processes, real xdist runs)."""
from __future__ import annotations

import argparse
import csv
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_msprobe import forkserver
from pytest_msprobe.forkserver import ForkServer
from pytest_msprobe.forkserver import client as fork_client

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="forking workers needs Linux")

DATA = Path(__file__).parent / "data"


def _client(server: ForkServer, code: str, **kw) -> subprocess.CompletedProcess:
    """What xdist runs for a gateway whose spec the server adopted: ``<python=...> -u -c CODE``."""
    return subprocess.run(shlex.split(server.command()) + ["-u", "-c", code], capture_output=True, text=True,
                          timeout=60, **kw)


@pytest.fixture
def server():
    srv = ForkServer.start(["decimal"])
    assert srv is not None
    srv.ready()
    yield srv
    srv.close()


def test_a_forked_worker_has_the_clients_streams_directory_environment_and_status(server, tmp_path):
    code = ("import os, sys; print(sys.stdin.readline().strip(), os.getcwd(), os.environ['PROBE'], "
            "'decimal' in sys.modules, os.getppid(), sys.argv); sys.stderr.write('to stderr'); sys.exit(3)")
    res = _client(server, code, input="from stdin\n", cwd=tmp_path, env=dict(os.environ, PROBE="here"))
    assert res.returncode == 3, res.stderr
    line = res.stdout.split()
    assert line[:4] == ["from", "stdin", str(tmp_path), "here"]
    assert line[4] == "True"                        # imported by the server before the fork
    assert int(line[5]) == server.proc.pid          # forked by the server, not started by the client
    assert "to stderr" in res.stderr
    assert res.stdout.rstrip().endswith("['-c']")


@pytest.fixture
def execnet_server():
    srv = ForkServer.start(["execnet.gateway_base", "execnet.gateway_io"])
    assert srv is not None
    srv.ready()
    yield srv
    srv.close()


def test_execnets_bootstrap_serves_through_the_gateway_module_the_server_imported(execnet_server):
    """For an interpreter of its own, execnet sends the source of its gateway module and a few lines that serve
    through it: a forked worker runs only those lines, against the module the server has (as execnet's own
    local workers do), and the gateway works as any other."""
    import execnet
    gw = execnet.makegateway("popen//python=" + execnet_server.command())
    try:
        channel = gw.remote_exec(
            "import os, sys\n"
            "main, module = sys.modules['__main__'], sys.modules.get('execnet.gateway_base')\n"
            "channel.send((os.getppid(), module is not None and main.serve is module.serve, channel.receive()))")
        channel.send("echo")
        ppid, same_module, echo = channel.receive(60)
    finally:
        gw.exit()
    assert ppid == execnet_server.proc.pid      # forked by the server
    assert same_module and echo == "echo"


def test_a_bootstrap_line_with_any_other_source_runs_it_as_it_came(execnet_server):
    from execnet.gateway_io import popen_bootstrapline
    res = _client(execnet_server, popen_bootstrapline, input=repr("print('ran in', __name__, sys.argv)") + "\n")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ran", "in", "__main__", "['-c']"]


def test_a_worker_killed_by_a_signal_is_reported_as_killed(server):
    res = _client(server, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert res.returncode == 128 + signal.SIGKILL


def test_an_uncaught_exception_ends_the_worker_as_the_interpreter_would(server):
    res = _client(server, "import atexit; atexit.register(print, 'at exit'); raise KeyError('boom')")
    assert res.returncode == 1
    assert "KeyError: 'boom'" in res.stderr and "Traceback" in res.stderr
    assert "at exit" in res.stdout                  # atexit handlers run, as at a normal end


def test_a_worker_ends_without_deregistering_torchs_libraries_and_runs_every_other_finalizer():
    """At its end a worker skips torch's exit-time deregistration of its operator libraries (tens of ms,
    nothing to keep), and still runs every other finalizer; xdist's description of the platform, asked once
    by the server, comes with the fork."""
    srv = ForkServer.start(["torch"])
    assert srv is not None
    try:
        srv.ready()
        code = ("import platform, sys, weakref, torch.library as library\n"
                "def left():\n"
                "    still = [f for f in list(weakref.finalize._registry) if f.atexit and f.peek()\n"
                "             and f.peek()[1] is library._del_library]\n"
                "    print('torch libraries left to deregister:', len(still), flush=True)\n"
                "class Probe:\n"
                "    pass\n"
                "probe = Probe()\n"
                "weakref.finalize(probe, left)\n"
                "print('platform cached:', platform._platform_cache.get((0, 0)) is not None, flush=True)\n")
        res = _client(srv, code)
    finally:
        srv.close()
    assert res.returncode == 0, res.stderr
    assert "platform cached: True" in res.stdout
    assert "torch libraries left to deregister: 0" in res.stdout     # the other finalizer ran, after the skip


def test_the_client_starts_a_plain_interpreter_when_there_is_no_server(tmp_path):
    cmd = [sys.executable, "-S", "-I", fork_client.__file__, str(tmp_path / "no-socket"),
           "-u", "-c", "import os, sys; print(os.getpid(), 'site' in sys.modules)"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    pid, site = out.split()
    assert int(pid) == proc.pid                     # the client became the interpreter (exec), same process
    assert site == "True"                           # and a normal one: not the client's -S -I


def test_the_client_imports_only_what_is_built_into_the_interpreter():
    """One client starts per gateway, one after the other: no socket, signal or json (enum, re, selectors)."""
    code = ("import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); import client; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code, os.path.dirname(fork_client.__file__)],
                         capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert "client" in out
    assert not {"socket", "signal", "json", "enum", "re", "selectors"} & set(out), out


@pytest.mark.parametrize("args, cwd, env", [
    (["-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"], "/tmp/a b", {"A": "1=2", "EMPTY": "", "B": "x y"}),
    ([], "/", {}),
    (["-c", "print('\\udcff')", ""], "/d\udcff", {"K": "v\udcfe", "P": "a:b"}),
])
def test_a_clients_request_reaches_the_server_as_it_was(args, cwd, env):
    from pytest_msprobe.forkserver.client import encode_request
    from pytest_msprobe.forkserver.server import decode_request
    assert decode_request(encode_request(args, cwd, env)) == {"argv": args, "cwd": cwd, "env": env}
    with pytest.raises(ValueError):
        decode_request(b"/\x005\x00-c")


def test_arguments_the_server_cannot_honour_get_a_plain_interpreter(server):
    res = subprocess.run(shlex.split(server.command()) + ["-X", "dev", "-c", "import sys; print(sys.flags.dev_mode)"],
                         capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "True", res.stderr


def test_a_server_that_cannot_fork_safely_says_why_and_its_clients_start_plain(tmp_path, monkeypatch):
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    srv = ForkServer.start(["starts_a_thread"])
    try:
        srv.ready()
        proc = subprocess.Popen(shlex.split(srv.command()) + ["-u", "-c", "import os; print(os.getpid())"],
                                stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=60)
        assert int(out) == proc.pid                 # not forked: the plain interpreter in the client's place
        srv.proc.wait(timeout=30)
        assert "Python threads after the imports" in srv.failure()
    finally:
        srv.close()


def test_the_server_ends_with_its_pipe_and_leaves_nothing_behind():
    srv = ForkServer.start([])
    srv.ready()
    directory = srv.directory
    assert os.stat(directory).st_mode & 0o077 == 0          # only this user reaches the socket
    srv.close()
    assert srv.proc.wait(timeout=30) == 0 and srv.failure() == ""
    assert not os.path.exists(directory)


def test_close_waits_for_the_server_to_finish_not_for_its_memory_to_go():
    """A closed server has finished (its directory is gone) when close returns; one the kernel is still tearing
    down is reaped when the next server starts."""
    from pytest_msprobe.forkserver import server as server_module
    first = ForkServer.start(["decimal"])
    first.ready()
    first.close()
    assert not os.path.exists(first.directory)
    assert first.proc.returncode == 0 or first.proc in server_module._EXITING
    deadline = time.monotonic() + 30
    while first.proc.poll() is None and time.monotonic() < deadline:    # only looking: reaping is the next's
        time.sleep(0.01)
    second = ForkServer.start([])
    assert first.proc not in server_module._EXITING and first.proc.returncode == 0
    second.ready()
    second.close()


def test_a_server_that_does_not_finish_when_closed_is_killed(monkeypatch):
    srv = ForkServer.start([])
    srv.ready()
    client = subprocess.Popen(shlex.split(srv.command()) + ["-u", "-c", "import time; print('up', flush=True); "
                                                             "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "up"
        monkeypatch.setattr(ForkServer, "CLOSE_TIMEOUT", 0.5)
        srv.close()                     # its worker still runs: the server waits for it, and is killed
        assert srv.proc.returncode == -signal.SIGKILL
        assert not os.path.exists(srv.directory)
    finally:
        client.terminate()              # passed on to the worker
        client.wait(timeout=30)


def test_a_server_whose_controller_dies_ends_and_leaves_nothing_behind():
    srv = ForkServer.start([])
    srv.ready()
    srv.proc.stdin.close()                  # what the controller's death does to the server's pipe
    srv.proc.wait(timeout=30)
    assert srv.proc.returncode == 0
    assert not os.path.exists(srv.directory)


def test_which_runs_want_a_server(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv(forkserver.ENV_SWITCH, raising=False)

    def opts(**kw):
        base = dict(msprobe_api_info="dump.json", collectonly=False, numprocesses=None, tx=[])
        return argparse.Namespace(**{**base, **kw})

    assert forkserver.wanted(opts(numprocesses=2))
    assert forkserver.wanted(opts(numprocesses="auto"))
    assert forkserver.wanted(opts(tx=["2*popen//dont_write_bytecode"]))
    assert not forkserver.wanted(opts())                                    # no workers
    assert not forkserver.wanted(opts(numprocesses=0))
    assert not forkserver.wanted(opts(tx=["ssh=node1"]))                    # workers elsewhere
    assert not forkserver.wanted(opts(tx=["popen//python=python3.12"]))     # an interpreter of the user's
    assert not forkserver.wanted(opts(tx=["popen//env:OMP_NUM_THREADS=4"])) # set before numpy's import
    assert not forkserver.wanted(opts(numprocesses=2, collectonly=True))    # workers that import no torch
    assert not forkserver.wanted(opts(numprocesses=2, msprobe_api_info=None))
    monkeypatch.setenv(forkserver.ENV_SWITCH, "0")
    assert not forkserver.wanted(opts(numprocesses=2))
    monkeypatch.delenv(forkserver.ENV_SWITCH)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")      # a worker, or a run started inside one
    assert not forkserver.wanted(opts(numprocesses=2))
    assert forkserver.wanted(opts(numprocesses=2), controller=True)     # pytest has told: a controller


FORK_ITSELF = r"""
import json, os, shlex, subprocess, sys, tempfile, types
from pytest_msprobe.forkserver import ForkServer, unforkable

class RewriteHook:                       # stands for pytest's assertion rewriter, first in sys.meta_path
    def find_spec(self, *args):
        return None

hook = RewriteHook()
sys.meta_path.insert(0, hook)
sys.modules["imported_before"] = types.ModuleType("imported_before")
tmp = tempfile.TemporaryFile()           # a file of the controller's (pytest's capture, say)
kept = os.dup2(tmp.fileno(), 57)
assert unforkable() == "", unforkable()
srv = ForkServer.fork(hook)
srv.send(["decimal"])
srv.ready()
code = ("import json, os, sys; print(json.dumps({'ppid': os.getppid(), 'fds': sorted(os.listdir('/proc/self/fd')), "
        "'before': 'imported_before' in sys.modules, 'decimal': 'decimal' in sys.modules, 'path0': sys.path[0], "
        "'hook': any(type(h).__name__ == 'RewriteHook' for h in sys.meta_path)}))")
res = subprocess.run(shlex.split(srv.command()) + ["-u", "-c", code], capture_output=True, text=True, timeout=60)
worker = json.loads(res.stdout)
with open("/proc/%d/stat" % srv.proc.pid) as fh:
    server_parent = int(fh.read().rsplit(")", 1)[1].split()[1])
directory = srv.directory
srv.close()
print(json.dumps({"worker": worker, "server": srv.proc.pid, "server_parent": server_parent, "me": os.getpid(),
                  "rc": srv.proc.wait(30), "left": os.path.exists(directory), "kept": kept}))
"""


def test_a_plain_process_forks_itself_into_the_server(tmp_path):
    """A controller that has just read its options forks itself into the server: its workers have what it had
    imported, and none of its files or pytest's rewriter (each worker's pytest installs its own); the server
    ends with its pipe and leaves nothing behind."""
    import json
    res = subprocess.run([sys.executable, "-c", FORK_ITSELF], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["server_parent"] == out["me"]                # forked from the controller itself
    worker = out["worker"]
    assert worker["ppid"] == out["server"]                  # and the worker from the server
    assert worker["before"] and worker["decimal"]
    assert not worker["hook"]
    assert worker["path0"] == ""                            # as ``python -c`` has it
    assert str(out["kept"]) not in worker["fds"]
    assert len(worker["fds"]) <= 4, worker["fds"]           # 0, 1, 2 and the listing's own
    assert out["rc"] == 0 and not out["left"]


FORK_FAILS = r"""
import glob, os, tempfile
from pytest_msprobe.forkserver import ForkServer

def no_fork():
    raise OSError(12, "Cannot allocate memory")

os.fork = no_fork
before = set(glob.glob(os.path.join(tempfile.gettempdir(), "msprobe-fork-*")))
fds = len(os.listdir("/proc/self/fd"))
print(ForkServer.fork(), set(glob.glob(os.path.join(tempfile.gettempdir(), "msprobe-fork-*"))) - before,
      len(os.listdir("/proc/self/fd")) - fds)
"""


def test_a_fork_that_fails_leaves_no_server_and_nothing_behind():
    """``fork`` failing (no memory, too many processes): no server, no directory, no file left open; the
    run then starts a fresh one."""
    res = subprocess.run([sys.executable, "-c", FORK_FAILS], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["None", "set()", "0"]


UNFORKABLE = r"""
import sys, threading, time
from pytest_msprobe.forkserver import unforkable
print(repr(unforkable()))
t = threading.Thread(target=time.sleep, args=(0.5,)); t.start(); print(repr(unforkable())); t.join()
sys.settrace(lambda *a: None); print(repr(unforkable())); sys.settrace(None)
sys.modules["torch"] = object(); print(repr(unforkable()))
"""


def test_only_a_plain_process_forks_itself():
    res = subprocess.run([sys.executable, "-c", UNFORKABLE], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["''", "'2 Python threads'", "'a trace or profile function is set'",
                                       "'torch is already imported'"]


def test_only_plain_local_specs_are_adopted(server):
    import execnet
    specs = [execnet.XSpec(t) for t in ("popen", "popen//chdir=/tmp", "popen//python=python3", "popen//via=gw9",
                                        "popen//env:OMP_NUM_THREADS=4", "ssh=node1")]
    assert server.adopt(specs) == 2
    assert [bool(s.python) for s in specs] == [True, True, True, False, False, False]
    assert specs[2].python == "python3"                                     # the user's own, untouched
    assert server.command() in (specs[0].python, specs[1].python)


def test_the_server_imports_with_automatic_collection_paused(tmp_path, monkeypatch):
    """torch's import makes a few hundred thousand long-lived objects and no garbage: no full pass walks them
    while the server imports (each would delay the first fork); collection is back on afterwards."""
    import gc
    (tmp_path / "probe_gc_at_import.py").write_text("import gc\nENABLED = gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert gc.isenabled()
    forkserver.server._preload(["probe_gc_at_import", "no_such_module_here"])
    assert sys.modules["probe_gc_at_import"].ENABLED is False
    assert gc.isenabled()
    del sys.modules["probe_gc_at_import"]


def test_what_pytest_rewrites_is_not_preloaded():
    class Hook:
        _must_rewrite = {"pytest_msprobe", "xdist"}

    names = ["torch", "pytest_msprobe", "pytest_msprobe.replay", "xdist.remote", "xdistrib", "numpy"]
    assert forkserver.preloadable(names, Hook()) == ["torch", "xdistrib", "numpy"]
    assert forkserver.preloadable(names, object()) == names                 # --assert=plain: nothing rewritten


WORKERS = '''
import json, os, sys

import generators.jsonsafe as _jsonsafe

_reads = []                     # the dump.json files this process reads after its conftest was imported
_read_text = _jsonsafe.read_text


def _counted(path, *args, **kwargs):
    if os.path.basename(path) == "dump.json":
        _reads.append(path)
    return _read_text(path, *args, **kwargs)


_jsonsafe.read_text = _counted


def pytest_unconfigure(config):
    wi = getattr(config, "workerinput", None)
    name = wi["workerid"] if wi is not None else "controller"
    with open(os.path.join(os.path.dirname(__file__), name + ".reads.json"), "w") as fh:
        json.dump(_reads, fh)


def pytest_sessionstart(session):
    if getattr(session.config, "workerinput", None) is None:     # the controller, once its plugin configured
        import gc
        with open(os.path.join(os.path.dirname(__file__), "controller.frozen.json"), "w") as fh:
            json.dump(gc.get_freeze_count(), fh)


def pytest_configure(config):
    wi = getattr(config, "workerinput", None)
    here = os.path.dirname(__file__)
    if wi is None:
        with open(os.path.join(here, "controller.json"), "w") as fh:
            json.dump({"pid": os.getpid()}, fh)
        return
    with open("/proc/%d/stat" % os.getppid()) as fh:
        grandparent = int(fh.read().rsplit(")", 1)[1].split()[1])
    with open("/proc/%d/cmdline" % os.getppid(), "rb") as fh:
        fresh_server = b"--serve" in fh.read().split(bytes(1))
    with open(os.path.join(here, wi["workerid"] + ".json"), "w") as fh:
        json.dump({"ppid": os.getppid(), "grandparent": grandparent, "fresh_server": fresh_server,
                   "torch": "torch" in sys.modules}, fh)
'''


def _run(pytester, out: str, fork: bool, prelude: str = ""):
    """``-n 2`` on a real dump, from ``python -m pytest`` or, after ``prelude``, from ``pytest.main``: a run of
    its own, not one inside this suite's xdist worker (whose variables would make it look like a worker)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env[forkserver.ENV_SWITCH] = "1" if fork else "0"
    args = ["-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-W", "error::pytest.PytestAssertRewriteWarning",
            f"--msprobe-api-info={DATA / 'mlp_fp32_tensor_L1'}", f"--msprobe-out={out}", "-n", "2"]
    cmd = [sys.executable, "-m", "pytest", *args] if not prelude else \
        [sys.executable, "-c", f"{prelude}; import sys, pytest; sys.exit(pytest.main({args!r}))"]
    return subprocess.run(cmd, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=600)


def _rows(out: Path) -> list:
    rows = []
    for name in sorted(os.listdir(out)):
        with open(out / name, newline="") as fh:
            rows.append((name.split("_2")[0], sorted(map(tuple, csv.reader(fh)))))
    return rows


def _reads(pytester) -> dict:
    import json
    return {name: json.loads((pytester.path / f"{name}.reads.json").read_text())
            for name in ("controller", "gw0", "gw1")}


def test_forked_workers_check_a_real_dump_as_fresh_workers_do(pytester):
    """The same outcomes and CSV rows with forked and with fresh workers; forked ones start with torch already
    imported, both children of the one server, and pytest has no module it could not rewrite. The controller
    reads the dumps before it forks, and no process reads them again: fresh workers each read them all. The
    controller, which runs no call, has frozen what it made before the workers start (its final collections
    do not walk it)."""
    import json
    pytester.makeconftest(WORKERS)
    forked = _run(pytester, str(pytester.path / "forked"), fork=True)
    assert forked.returncode in (0, 1), forked.stdout + forked.stderr
    assert _reads(pytester) == {"controller": [], "gw0": [], "gw1": []}
    assert json.loads((pytester.path / "controller.frozen.json").read_text()) > 10_000
    info = [json.loads((pytester.path / f"gw{i}.json").read_text()) for i in (0, 1)]
    assert all(w["torch"] for w in info), info
    assert info[0]["ppid"] == info[1]["ppid"] != os.getpid(), info
    controller = json.loads((pytester.path / "controller.json").read_text())["pid"]
    assert all(w["grandparent"] == controller and not w["fresh_server"] for w in info), (controller, info)
    fresh = _run(pytester, str(pytester.path / "fresh"), fork=False)
    dumps = len(list((DATA / "mlp_fp32_tensor_L1").rglob("dump.json")))
    assert {name: len(paths) for name, paths in _reads(pytester).items()} == \
        {"controller": dumps, "gw0": dumps, "gw1": dumps}
    info = [json.loads((pytester.path / f"gw{i}.json").read_text()) for i in (0, 1)]
    assert not any(w["torch"] for w in info), info
    assert fresh.returncode == forked.returncode
    assert forked.stdout.splitlines()[-1].split(" in ")[0] == fresh.stdout.splitlines()[-1].split(" in ")[0]
    assert _rows(pytester.path / "forked") == _rows(pytester.path / "fresh")


def test_the_server_imports_torch_only_for_pytorch_dumps():
    """A worker of a MindSpore dump never imports torch: a server for it must not either."""
    import types

    from pytest_msprobe.session import CheckSession
    from pytest_msprobe.settings import Settings

    def modules(dump: Path) -> list:
        sess = CheckSession(types.SimpleNamespace(), Settings(), [str(dump)])
        sess.load()
        return sess.worker_modules()

    assert modules(DATA / "msprobe_repo_fixtures" / "npu_megatron_mindspore" / "dump.json") == ["numpy"]
    assert modules(DATA / "mlp_fp32_tensor_L1" / "step0" / "rank" / "dump.json") == ["numpy", "torch"]


def test_a_controller_inside_a_program_that_imported_torch_gets_a_fresh_server(pytester):
    """``pytest.main`` called by a program that has imported torch: the controller does not fork itself (torch's
    thread pools may be running); it starts a fresh server, and the workers are forked from that one."""
    import json
    pytester.makeconftest(WORKERS)
    res = _run(pytester, str(pytester.path / "out"), fork=True, prelude="import torch")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    info = [json.loads((pytester.path / f"gw{i}.json").read_text()) for i in (0, 1)]
    controller = json.loads((pytester.path / "controller.json").read_text())["pid"]
    assert all(w["torch"] and w["fresh_server"] and w["grandparent"] == controller for w in info), info
    assert info[0]["ppid"] == info[1]["ppid"]


def test_a_new_server_is_sent_numpy_before_the_dumps_are_read(monkeypatch):
    """numpy is what every check's workers import: the server gets it as it starts, and imports it while the
    controller configures (torch follows once the dumps' framework is known)."""
    import types

    from pytest_msprobe import plugin
    from pytest_msprobe.session import CheckSession

    sent = []

    class Server:
        def send(self, modules):
            sent.append(list(modules))

    monkeypatch.setattr(forkserver, "for_run", lambda option, hook, controller, before_fork=None: Server())
    config = types.SimpleNamespace(stash=pytest.Stash(), pluginmanager=types.SimpleNamespace(rewrite_hook=None))
    server = plugin._start_fork_server(config, argparse.Namespace())
    assert isinstance(server, Server) and sent == [list(CheckSession.ANY_RUN_MODULES)] == [["numpy"]]
    assert plugin._start_fork_server(config, argparse.Namespace()) is server and len(sent) == 1   # once a run
