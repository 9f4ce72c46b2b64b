"""The process xdist starts for a gateway whose worker the fork server forks (:mod:`.server`).

Run by path as ``python -S -I client.py SOCKET [interpreter args...]``: it connects to the server, waits until
the server is ready, hands it its standard streams, working directory, environment and arguments, and then
stays as the process xdist started (it passes on SIGTERM and SIGHUP and exits with the worker's status). A
server that cannot be reached, is not ready within :data:`READY_TIMEOUT` or declines the arguments leaves the
plain interpreter to start in the client's place, with the same arguments.

One of these starts per gateway, one after the other, so it imports only modules built into the interpreter
(no ``socket``, ``signal`` or ``json``, which bring ``enum``, ``re`` and ``selectors``): about 10 ms instead
of 30-40 ms a gateway.
"""
import _signal
import _socket
import _struct
import os
import select
import sys

READY_TIMEOUT = 120.0           # seconds a client waits for the server to finish its imports
INT = _struct.Struct("!i")      # every integer on the socket: the request's length, the pid, the exit status


def encode_request(args: list, cwd: str, env: dict) -> bytes:
    """The request: NUL-separated fields (none of them can hold a NUL), the server's
    :func:`.server.decode_request` reverses it."""
    fields = [cwd, str(len(args)), *args, *(f"{k}={v}" for k, v in env.items())]
    return b"\0".join(os.fsencode(field) for field in fields)


def _recv(conn: object, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the server went away")
        data += chunk
    return data


def _plain(args: list) -> None:
    os.execv(sys.executable, [sys.executable, *args])


def main(argv: list) -> None:
    path, args = argv[0], argv[1:]
    try:
        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        conn.settimeout(READY_TIMEOUT)
        conn.connect(path)
        if conn.recv(1) != b"R":
            raise EOFError("not a fork server")
        body = encode_request(args, os.getcwd(), dict(os.environ))
        conn.sendmsg([INT.pack(len(body))], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _struct.pack("3i", 0, 1, 2))])
        conn.sendall(body)
        pid = INT.unpack(_recv(conn, 4))[0]
    except (OSError, EOFError, ValueError):
        _plain(args)
        return
    if pid <= 0:
        _plain(args)
        return
    devnull = os.open(os.devnull, os.O_RDWR)    # the pipes are the worker's: their ends close with it
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    for sig in (_signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(sig, lambda signum, _frame: _forward(pid, signum))
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)     # the terminal's Ctrl-C reaches the worker itself
    conn.settimeout(None)
    try:
        status = INT.unpack(_recv(conn, 4))[0]
    except (OSError, EOFError):
        while _alive(pid):          # the server went away first: wait for the worker itself
            select.select([], [], [], 0.2)
        sys.exit(1)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)     # killed by a signal: the shell's 128 + its number


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if __name__ == "__main__":
    main(sys.argv[1:])
