"""Local xdist workers forked from one process that has already imported what every worker imports.

Each plain local xdist worker (``-n N``, ``--tx popen``) is a fresh interpreter that imports pytest, its plugins,
torch and the checker before its first item: about 1.5 s of CPU per worker, paid N times on the same cores that
then run the calls. A run's controller instead starts one *fork server* as early as it can: a process that
imports all of that once (without running anything) and forks a worker for each gateway xdist opens.

How the server starts: as soon as pytest has read the options, the controller forks itself
(:meth:`ForkServer.fork`), after what its caller does first (``before_fork``: the plugin reads the dumps, which
the server and its workers then have too). It has imported pytest and every plugin by then, their modules rewritten for
assertions as each worker's own rewriter would, so the server has them too and a worker only configures and
collects. The child drops what a fresh interpreter would not have (the controller's files and streams,
pytest's rewriter), imports numpy and torch once the controller
knows the dump's framework, and serves. A controller that is not a plain pytest process (a second Python
thread, a tracer, torch already imported: :func:`unforkable`), or one that decides late, starts the server
as a fresh interpreter instead (:meth:`ForkServer.start`), which imports the standard library and pytest's
modules that the controller has, and leaves the plugins to each worker.

How a worker is made: xdist starts each local gateway with the command ``python -u -c BOOTSTRAP``; the
controller sets that command's interpreter (execnet's ``python=`` key of the spec) to ``client.py`` beside
this file run as a script, the *client*. The client connects to the server's socket (in a directory only
the user can enter), waits until the server is ready, hands it its standard streams, working directory, environment and
arguments, and then stays as the process xdist started: it passes on SIGTERM and SIGHUP, and exits with the
worker's status. The server forks; the child takes the streams, directory and environment, runs
``BOOTSTRAP`` as ``python -u -c`` would (execnet's own gateway source, which it sends along, is not compiled
again: :func:`_run_program`), and ends as an interpreter ends (threads joined, ``atexit``
handlers, streams flushed; not torch's deregistration of its operator libraries, see :func:`_keep_torch_libraries`).
execnet and xdist then talk to it through the same pipes as to any worker.

Whatever goes wrong falls back to what xdist does without it: a client that cannot reach a server that is
ready (none, dead, stuck past the client's ``READY_TIMEOUT``, or one that declines the arguments) runs the plain
interpreter with the same arguments. The server lives as long as its pipe from the controller: it ends
when the controller closes it or dies. Only Linux (fork, and file descriptors passed over a Unix socket);
``MSPROBE_FORK_WORKERS=0`` turns it off.

This module imports only the standard library (it is run by path as the fresh server, ``server.py --serve
FD``); the client imports only modules built into the interpreter.
"""
from __future__ import annotations

import functools
import json
import os
import select
import signal
import socket
import struct
import sys
import warnings

ENV_SWITCH = "MSPROBE_FORK_WORKERS"     # "0": every worker starts as a fresh interpreter
_INT = struct.Struct("!i")              # as the client's INT
_SUPPORTED_FLAGS = {"-u", "-B"}         # the interpreter flags execnet puts before -c


def available() -> bool:
    """Whether this platform can fork workers from a server (Linux with fork and fd passing)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "send_fds")
            and hasattr(socket, "AF_UNIX") and os.environ.get(ENV_SWITCH, "1").strip() != "0")


# --- the controller's side ---------------------------------------------------------------------------------
def wanted(option: object, controller: bool = False) -> bool:
    """Whether a run with these (possibly only early-parsed) options starts local xdist workers that a
    server should fork: an msprobe check run with ``-n N`` or ``--tx popen``, not ``--collect-only`` (its
    workers never import torch), on a platform that can (:func:`available`), in a controller. Before pytest
    has told (``controller`` False), a process with ``PYTEST_XDIST_WORKER`` set counts as a worker, though
    a run started inside a worker inherits it: that one's server starts when the controller is known."""
    if not getattr(option, "msprobe_api_info", None) or getattr(option, "collectonly", False):
        return False
    if not available() or (not controller and os.environ.get("PYTEST_XDIST_WORKER")):
        return False
    workers = getattr(option, "numprocesses", None)
    return bool(workers) or any(_plain_popen(str(t)) for t in getattr(option, "tx", None) or ())


def _plain_popen(tx: str) -> bool:
    """``popen`` or ``3*popen//chdir=d`` (a local interpreter of xdist's choice); not ``python=``, ``via=``,
    ``env:`` (:meth:`ForkServer.adopt`)."""
    count, star, rest = tx.partition("*")
    keys = [part.partition("=")[0] for part in (rest if star and count.isdigit() else tx).split("//")]
    return "popen" in keys and "python" not in keys and "via" not in keys and \
        not any(k.startswith("env:") for k in keys)


PYTEST_STACK = ("pytest", "_pytest", "pluggy", "execnet", "iniconfig", "packaging")


def loaded_modules() -> list:
    """What every worker imports while pytest starts, as far as this process has imported it: the modules of
    pytest, pluggy and execnet and those of the standard library (asyncio for an async plugin, say), in
    import order. Plugins are not among them: pytest rewrites their asserts as it imports them
    (:func:`preloadable`), and a site-packages module is imported by a plugin or not at all."""
    import sysconfig
    paths = sysconfig.get_paths()
    stdlib = tuple(os.path.join(os.path.realpath(paths[k]), "") for k in ("stdlib", "platstdlib") if paths.get(k))
    site = tuple(os.path.join(os.path.realpath(p), "") for p in {paths.get("purelib"), paths.get("platlib")} if p)
    names = []
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in PYTEST_STACK:
            names.append(name)
            continue
        path = getattr(module, "__file__", None)
        if name != "__main__" and isinstance(path, str):
            real = os.path.realpath(path)
            if real.startswith(stdlib) and not real.startswith(site):
                names.append(name)
    return names


def preloadable(names: list, rewrite_hook: object) -> list:
    """``names`` less the modules pytest rewrites for assertions when they are imported (those of pytest
    plugins' distributions, ``pytest.register_assert_rewrite``): a worker must import those itself."""
    marked = tuple(getattr(rewrite_hook, "_must_rewrite", None) or ())
    return [n for n in names if not any(n == m or n.startswith(m + ".") for m in marked)]


class ForkServer:
    """The controller's handle on its fork server: its socket, its pipe (its lifeline) and its log."""

    CLOSE_TIMEOUT = 5.0                 # seconds a closed server has to finish before it is killed

    def __init__(self, directory: str, proc: object, log_path: str, rewrite_hook: object, done: int) -> None:
        self.directory = directory
        self.done = done                # read end of a pipe the server closes as it ends (-1 once read)
        self.rewrite_hook = rewrite_hook    # pytest's assertion rewriter: what it rewrites is not preloaded
        self.socket_path = os.path.join(directory, "s")
        self.proc = proc
        self.log_path = log_path
        self.used = 0                   # gateways handed to it

    @classmethod
    def start(cls, modules: list, rewrite_hook: object = None) -> ForkServer | None:
        """Start a server that imports ``modules`` (names; what fails to import, and what ``rewrite_hook``
        rewrites, is left to the workers). None where it cannot start (the run goes on with plain workers)."""
        import subprocess
        made = _listening()
        if made is None:
            return None
        directory, listener, log_path = made
        _reap_exited()
        done_r = done_w = -1
        try:
            done_r, done_w = os.pipe()
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(        # this file, not the package: the server imports only what
                    [sys.executable, os.path.abspath(__file__), "--serve", str(listener.fileno()),  # it is sent
                     str(done_w)],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
                    pass_fds=[listener.fileno(), done_w], close_fds=True)
        except OSError:
            for fd in (done_r, done_w):
                if fd >= 0:
                    os.close(fd)
            listener.close()
            _remove(directory)
            return None
        os.close(done_w)
        listener.close()                # the server holds it now: if the server dies, clients are refused
        server = cls(directory, proc, log_path, rewrite_hook, done_r)
        server.send(modules)
        return server

    @classmethod
    def fork(cls, rewrite_hook: object = None, before_fork: object = None) -> ForkServer | None:
        """Become a server by forking this process, a pytest controller that has just read its options: the
        server starts with everything the controller has imported (pytest, its plugins, their modules rewritten
        for assertions as a worker's own rewriter would) and none of what it has done since, which a fresh
        interpreter would spend a few tenths of a second importing again. ``before_fork()``, when given, runs
        first, once it is known that this process can fork: what it leaves in memory every worker has too
        (it must start no thread; what it raises is ignored). None where this process cannot fork safely
        (:func:`unforkable`): the run starts a fresh one."""
        if unforkable():
            return None
        if before_fork is not None:
            try:
                before_fork()
            except Exception:  # noqa: BLE001 - only a head start: the run does the same work later
                pass
            if unforkable():            # it started a thread after all: not safe now
                return None
        made = _listening()
        if made is None:
            return None
        directory, listener, log_path = made
        _reap_exited()
        opened: list = []
        try:
            lifeline_r, lifeline_w = os.pipe()
            opened += [lifeline_r, lifeline_w]
            done_r, done_w = os.pipe()
            opened += [done_r, done_w]
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            for fd in opened:
                os.close(fd)
            listener.close()
            _remove(directory)
            return None
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()          # nothing buffered here is written twice
            except (OSError, ValueError, AttributeError):
                pass
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:                 # no memory, too many processes: the run starts a fresh one, or none
            for fd in (lifeline_r, lifeline_w, done_r, done_w, log):
                os.close(fd)
            listener.close()
            _remove(directory)
            return None
        if pid == 0:                    # the server: never returns
            try:
                _forked_server(listener.fileno(), lifeline_r, log, rewrite_hook, done_w)
            except BaseException:  # noqa: BLE001 - before it serves: into its log, and its clients start plain
                import traceback
                traceback.print_exc()
            finally:
                os._exit(1)
        for fd in (lifeline_r, done_w, log):
            os.close(fd)
        listener.close()                # the server holds it now: if the server dies, clients are refused
        return cls(directory, _ForkedProcess(pid, os.fdopen(lifeline_w, "wb")), log_path, rewrite_hook, done_r)

    def send(self, modules: list) -> None:
        """More modules for the server to import before it forks (one JSON line on its pipe)."""
        if modules:
            modules = preloadable(list(modules), self.rewrite_hook)
            if not modules:
                return
        try:
            self.proc.stdin.write((json.dumps(list(modules)) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass                        # a server that died: its clients fall back

    def ready(self) -> None:
        """No more modules: the server forks workers from now on."""
        self.send([])

    def command(self) -> str:
        """The ``python=`` value of an execnet spec whose worker this server forks."""
        import shlex
        client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "client.py")
        return " ".join(shlex.quote(p) for p in (sys.executable, "-S", "-I", client, self.socket_path))

    def adopt(self, specs: list) -> int:
        """Point every plain local popen spec at this server; how many. Not a spec with its own interpreter
        (``python=``), on another host (``via=``) or with ``env:`` keys (a fresh worker imports numpy and torch
        with those set; a forked one would have them from before)."""
        n = 0
        for spec in specs:
            if getattr(spec, "popen", None) and not getattr(spec, "python", None) and \
                    not getattr(spec, "via", None) and not getattr(spec, "env", None):
                spec.python = self.command()
                n += 1
        self.used += n
        return n

    def failure(self) -> str:
        """Why the server ended early (the last line of its log), or "" while it serves or after a clean end."""
        rc = self.proc.poll()
        if rc in (0, None):
            return ""
        try:
            with open(self.log_path, "rb") as fh:
                lines = fh.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else f"exit status {rc}"

    def close(self) -> None:
        """End the server (closing its pipe) and remove its directory. This waits until the server has finished
        (its workers ended, its directory removed), not for the kernel's teardown of its memory, tens of
        milliseconds for a process that has imported torch: a server still exiting is reaped when the next
        one starts, or as this process ends."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if not self._finished(self.CLOSE_TIMEOUT):
            self.proc.kill()            # stuck: it goes
            self.proc.wait()
        elif self.proc.poll() is None:
            _reap_at_exit(self.CLOSE_TIMEOUT)
            _EXITING.append(self.proc)
        _remove(self.directory)

    def _finished(self, timeout: float) -> bool:
        """Whether the server ended its work within ``timeout`` seconds: it closes the write end of its
        ``done`` pipe last (as does its exit, whatever ends it)."""
        if self.done < 0:               # closed before
            return self.proc.poll() is not None
        try:
            readable, _, _ = select.select([self.done], [], [], timeout)
            return bool(readable) and not os.read(self.done, 1)
        except OSError:
            return self.proc.poll() is not None
        finally:
            os.close(self.done)
            self.done = -1


_EXITING: list = []                     # servers closed while the kernel still tore them down


def _reap_exited(timeout: float = 0.0) -> None:
    """Collect the exit status of closed servers that have ended (waiting up to ``timeout`` seconds for them):
    when the next server starts, and as this process ends, when the last of them has long finished."""
    import time
    end = time.monotonic() + timeout
    while _EXITING:
        _EXITING[:] = [proc for proc in _EXITING if proc.poll() is None]
        if not _EXITING or time.monotonic() >= end:
            return
        time.sleep(0.005)


@functools.lru_cache(maxsize=None)
def _reap_at_exit(timeout: float) -> None:
    """Reap the servers still exiting as this process ends (registered once)."""
    import atexit
    atexit.register(_reap_exited, timeout)


class _ForkedProcess:
    """What :class:`ForkServer` uses of a ``subprocess.Popen``, for a server forked from this process."""

    def __init__(self, pid: int, stdin: object) -> None:
        self.pid = pid
        self.stdin = stdin
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:   # reaped by someone else: its status is lost
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess
        import time
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(f"fork server {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass


def unforkable() -> str:
    """Why this process cannot become a fork server by forking itself ("" when it can): a second Python
    thread (it would be missing in the child, holding whatever it held), a trace or profile function (a
    debugger, coverage: each worker would report into the controller's), or torch or MindSpore already
    imported (a run inside a program: their thread pools may already run)."""
    import threading
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads"
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return "a trace or profile function is set"
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None and any(monitoring.get_tool(i) for i in range(6)):
        return "a sys.monitoring tool is registered"
    loaded = [name for name in ("torch", "mindspore") if name in sys.modules]
    return f"{loaded[0]} is already imported" if loaded else ""


def _listening() -> tuple | None:
    """(directory, listening socket, log path) of a new server: the socket ``s`` in a directory of mode 0700,
    so that only this user reaches it; None where it cannot be made."""
    import tempfile
    try:
        directory = tempfile.mkdtemp(prefix="msprobe-fork-")
    except OSError:
        return None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.path.join(directory, "s"))
        listener.listen(64)
    except OSError:
        listener.close()
        _remove(directory)
        return None
    return directory, listener, os.path.join(directory, "server.log")


def _std_streams(encoding: str) -> None:
    """``sys.stdin``, ``stdout`` and ``stderr`` (and their ``__std*__``) anew on file descriptors 0, 1 and 2, as
    an interpreter opens them: written through, stderr with backslash escapes."""
    import io
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding,
                                                   write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                                   errors="backslashreplace", write_through=True)


def _remove(directory: str) -> None:
    import shutil
    shutil.rmtree(directory, ignore_errors=True)


# --- the server --------------------------------------------------------------------------------------------
def _forked_server(listener: int, lifeline: int, log: int, rewrite_hook: object, done: int) -> None:
    """In the child of :meth:`ForkServer.fork`: leave the controller's state that a fresh interpreter would not
    have (its streams and other files, pytest's assertion rewriter), then serve. (xdist gives each local
    worker the controller's ``sys.path`` as it was when xdist was imported.)"""
    os.dup2(lifeline, 0)                    # the controller's pipe: module lists, and its end is the server's
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(log, 2)
    keep = {0, 1, 2, listener, done}
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:                         # no /proc: the usual range
        open_fds = list(range(3, 1024))
    for fd in open_fds:                     # capture files, saved terminal streams, the lifeline's ends
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    _std_streams(getattr(sys.__stdout__, "encoding", None) or "utf-8")
    if rewrite_hook in sys.meta_path:       # each worker's pytest installs its own
        sys.meta_path.remove(rewrite_hook)
    serve(listener, done)


def _preload(modules: list) -> None:
    """Import ``modules`` with automatic garbage collection paused: torch's import makes a few hundred thousand
    objects that live as long as the process and no garbage, and each full pass it would trigger walks them all
    (three passes, about 150 ms, before the first worker could be forked)."""
    import gc
    import importlib
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            if isinstance(name, str) and name and name not in sys.modules:
                try:
                    importlib.import_module(name)
                except BaseException:  # noqa: BLE001 - a worker imports it again and reports its own error
                    pass
    finally:
        if enabled:
            gc.enable()


def _read_line(fd: int, buf: bytearray) -> bytes | None:
    """One line from the controller's pipe (None at its end), without reading past it."""
    while b"\n" not in buf:
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def serve(fd: int, done: int) -> None:
    """The fork server (this file run by :meth:`ForkServer.start`); ends the process when done, without
    tearing down what it imported (nothing of it needs saving), closing ``done`` last: the controller then
    knows it has finished (:meth:`ForkServer.close`)."""
    if not sys.flags.safe_path and sys.path:
        sys.path[0] = ""            # as for ``python -c``, the workers' command, not this file's (the script's)
    status = 0
    try:
        with socket.socket(fileno=os.dup(fd)) as named:
            directory = os.path.dirname(named.getsockname())
        _serve(fd, (done,))
        _remove(directory)          # the controller closed its pipe, or died: nothing of the run is left here
    except BaseException:  # noqa: BLE001 - reported through the log (kept for the controller); clients fall back
        import traceback
        traceback.print_exc()
        status = 1
    finally:
        sys.stderr.flush()
        os.close(done)
        os._exit(status)


def _serve(fd: int, private: tuple) -> None:
    import gc
    import threading
    listener = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C is for the controller and the workers
    described = threading.Thread(target=_describe_platform, name="msprobe-platform", daemon=True)
    described.start()
    buf = bytearray()
    while True:                     # module lists until an empty one: then every worker is forked ready
        line = _read_line(0, buf)
        if line is None:
            return                  # the controller ended before any worker started
        modules = json.loads(line or b"[]")
        if not modules:
            break
        _preload(modules)
    # the imported objects are shared with every child, untouched by its collector; no collection first: imports
    # leave a few dozen garbage objects, and a pass over torch's objects would delay the first fork by ~80 ms
    described.join(5.0)             # still running (a stuck ``uname``): the thread check below says so
    gc.freeze()
    if threading.active_count() != 1:
        raise RuntimeError(f"{threading.active_count()} Python threads after the imports: forking beside them is "
                           "not safe, workers start plain")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict = {}             # pid -> the client's connection (it waits for the exit status)
    lifeline = True
    while lifeline or children:
        watch = [wake_r] + ([0, listener] if lifeline else [])
        readable, _, _ = select.select(watch, [], [], None if lifeline else 1.0)
        if wake_r in readable:
            _drain(wake_r)
        _reap(children)
        if lifeline and 0 in readable and not os.read(0, 65536):
            lifeline = False        # the controller is done (or gone): no new workers
            listener.close()
        if lifeline and listener in readable:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            _serve_one(conn, listener, children, (wake_r, wake_w, *private))


def _describe_platform() -> None:
    """Ask ``platform`` once, beside the imports, what each xdist worker asks it first (``platform.platform()``
    in the worker's description): on Linux that runs ``uname -p`` and scans the interpreter's binary, about
    4-9 ms a worker. The answer is cached in the module, so every fork inherits it."""
    try:
        import platform
        platform.platform()
    except Exception:  # noqa: BLE001 - a worker then asks for itself
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(children: dict) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(_INT.pack(status))
            except OSError:
                pass
            conn.close()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("client went away")
        data += chunk
    return bytes(data)


def _serve_one(conn: socket.socket, listener: socket.socket, children: dict, private: tuple) -> None:
    """Take one client's request and fork its worker (or decline it: the client starts a plain one)."""
    fds: list = []
    try:
        conn.settimeout(30)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():
            conn.close()
            return
        conn.sendall(b"R")
        head, fds, _, _ = socket.recv_fds(conn, 4, 3)
        if not head or len(fds) != 3:
            raise EOFError("incomplete request")
        size = _INT.unpack(head + _recv_exact(conn, 4 - len(head)))[0]
        request = decode_request(_recv_exact(conn, size))
        code, flags, rest = _parse_args(request.get("argv") or [])
        if code is None:
            conn.sendall(_INT.pack(-1))     # arguments this server cannot honour
            raise EOFError("declined")
        with warnings.catch_warnings():     # numpy's BLAS threads: their library re-creates them after fork
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            _child(fds, request, code, flags, rest, [listener, conn, *children.values()], private)  # no return
        conn.sendall(_INT.pack(pid))
        children[pid] = conn
    except (OSError, EOFError, ValueError):
        conn.close()
    finally:
        for fd in fds:
            os.close(fd)


def decode_request(body: bytes) -> dict:
    """``argv``, ``cwd`` and ``env`` of a client's request (:func:`.client.encode_request`); ValueError for
    anything else."""
    fields = [os.fsdecode(field) for field in body.split(b"\0")]
    count = int(fields[1])
    if count < 0 or len(fields) < 2 + count:
        raise ValueError("malformed request")
    env = {}
    for item in fields[2 + count:]:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError("malformed request")
        env[key] = value
    return {"cwd": fields[0], "argv": fields[2:2 + count], "env": env}


def _parse_args(argv: list) -> tuple:
    """(code, flags, args) of ``[flags...] -c CODE [args...]``; (None, None, None) for anything else."""
    flags = set()
    for i, arg in enumerate(argv):
        if arg == "-c" and i + 1 < len(argv):
            return argv[i + 1], flags, list(argv[i + 2:])
        if arg not in _SUPPORTED_FLAGS:
            break
        flags.add(arg)
    return None, None, None


def _child(fds: list, request: dict, code: str, flags: set, rest: list, inherited: list, private: tuple) -> None:
    """In the forked worker: become ``python -u -c CODE`` in the client's place (without the server's own
    ``inherited`` objects and ``private`` descriptors); ends the process."""
    import types
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for obj in inherited:
            obj.close()
        for fd in private:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        fds.clear()
        os.chdir(request["cwd"])
        env = request.get("env") or {}
        os.environ.clear()
        os.environ.update(env)
        sys.dont_write_bytecode = "-B" in flags or sys.dont_write_bytecode
        _std_streams(sys.stdout.encoding if sys.stdout else "utf-8")
        sys.argv = ["-c", *rest]
        numpy = sys.modules.get("numpy")
        if numpy is not None:           # as in a fresh process: its own seed for numpy's global generator
            numpy.random.seed()
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        try:
            _run_program(code, main.__dict__)
            status = 0
        except SystemExit as exc:
            status = _exit_status(exc.code)
        except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
            sys.excepthook(*sys.exc_info())
            status = 1
        _shut_down()
    finally:
        os._exit(status)


def _run_program(code: str, namespace: dict) -> None:
    """Run ``python -c CODE`` in ``namespace`` (``__main__``'s). When CODE is execnet's bootstrap line for a
    local interpreter, which reads one line holding the source of execnet's ``gateway_base`` and a few lines
    that serve through it, only those lines run, against the ``gateway_base`` module this process has
    imported: as execnet starts a worker that runs its own interpreter (it imports the module), instead of
    compiling its 60 KB of source again (about 20 ms a worker, one gateway after another). Any other line
    runs as it came."""
    io_module = sys.modules.get("execnet.gateway_io")
    gateway = sys.modules.get("execnet.gateway_base")
    if gateway is None or code != getattr(io_module, "popen_bootstrapline", None):
        exec(compile(code, "<string>", "exec"), namespace)     # noqa: S102 - xdist's own bootstrap
        return
    namespace["sys"] = sys                                     # the line's ``import sys``
    source = eval(sys.stdin.readline(), namespace)             # noqa: S307 - what the line itself evaluates
    known = _module_source(gateway)
    if not (isinstance(source, str) and known and source.startswith(known + "\n")):
        exec(source, namespace)                                # noqa: S102
        return
    namespace.update((name, value) for name, value in vars(gateway).items() if not name.startswith("__"))
    exec(compile(source[len(known) + 1:], "<string>", "exec"), namespace)     # noqa: S102


def _module_source(module: object) -> str:
    """A module's source as ``inspect.getsource`` reads it (how execnet sends it), or "" when unreadable."""
    try:
        import inspect
        return inspect.getsource(module)
    except (OSError, TypeError):
        return ""


def _keep_torch_libraries() -> None:
    """Drop torch's exit-time deregistration of its operator libraries (one finalizer per library, about 130,
    ~40 ms a worker): it only tidies the process's own dispatcher, and this process ends without tearing
    anything down. Every other finalizer (temporary directories, ...) still runs."""
    import weakref
    library = sys.modules.get("torch.library")
    deregister = getattr(library, "_del_library", None)
    registry = getattr(weakref.finalize, "_registry", None)
    if deregister is None or not isinstance(registry, dict):
        return
    for finalizer in list(registry):
        info = finalizer.peek()
        if info is not None and info[1] is deregister:
            finalizer.atexit = False


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _shut_down() -> None:
    """What the interpreter does at its end, short of tearing down modules: threads, atexit, streams."""
    import atexit
    import threading
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except BaseException:  # noqa: BLE001
            pass
    _keep_torch_libraries()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


if __name__ == "__main__":
    serve(int(sys.argv[2]), int(sys.argv[3]))     # ``server.py --serve FD DONE`` (:meth:`ForkServer.start`)
