"""An execnet socket server that starts a fresh Python process for every connection.

    python -m pytest_msprobe.host_server 0.0.0.0:8888 [--chdir DIR]

execnet's own ``execnet/script/socketserver.py`` runs one gateway at a time inside its own process, so one
server gives one xdist worker. This server speaks the same protocol (the client sends one line, the ``repr``
of the bootstrap source, which is executed with the accepted socket as ``clientsock``), but serves each
connection in a new child process: ``--tx 4*socket=HOST:8888`` then gives four workers on that host, each
with its own interpreter. Killing the server's process group stops the server and every worker it started.

The server executes any code a client sends (that is what an execnet gateway is): bind it to an address
that only the controller can reach.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from typing import Any

MAX_LINE = 64 * 1024 * 1024      # the bootstrap source is about 100 kB; refuse anything absurd


def parse_address(text: str) -> tuple:
    """``"HOST:PORT"`` (or ``":PORT"``, every interface) -> (host, port); ValueError saying what to write."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r} is not an address; write HOST:PORT, e.g. 0.0.0.0:8888 or 127.0.0.1:8888")
    return host or "0.0.0.0", int(port)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket (address reuse on, close-on-exec as every Python socket)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


# The child process runs this (python -c), so that nothing of the package is imported before pytest starts
# there (pytest could not rewrite the plugin's asserts): read the bootstrap line from the inherited socket
# byte by byte (nothing after it may be consumed), check that it is one string literal, run it.
CHILD = """
import ast, socket, sys
conn = socket.socket(fileno=int(sys.argv[1]))
buf = b""
while not buf.endswith(b"\\n"):
    chunk = conn.recv(1)
    if not chunk:
        raise SystemExit("the client closed the connection before sending the bootstrap line")
    buf += chunk
    if len(buf) > %d:
        raise SystemExit("bootstrap line too long")
source = ast.literal_eval(buf.decode("utf-8").rstrip())
if not isinstance(source, str):
    raise SystemExit("the bootstrap line is not a string literal")
host, _, port = sys.argv[2].rpartition(":")
del ast, buf, chunk
exec(compile(source + "\\n", "<pytest-msprobe host server>", "exec"),
     {"clientsock": conn, "address": (host, int(port or 0)), "__name__": "__socketserver__"})
""" % MAX_LINE


def serve_forever(sock: socket.socket, log: Any = None) -> None:
    """Accept connections; hand each to a new child process and forget it."""
    children: list = []
    while True:
        conn, address = sock.accept()
        peer = f"{address[0]}:{address[1]}"
        try:
            child = subprocess.Popen([sys.executable, "-c", CHILD, str(conn.fileno()), peer],
                                     pass_fds=[conn.fileno()])
            children.append(child)
            if log is not None:
                print(f"connection from {peer}: worker process {child.pid}", file=log, flush=True)
        except OSError as exc:
            if log is not None:
                print(f"connection from {peer}: cannot start a process: {exc}", file=log, flush=True)
        finally:
            conn.close()
        children = [c for c in children if c.poll() is None]


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_msprobe.host_server",
                                     description="execnet socket server: one new process per connection")
    parser.add_argument("address", nargs="?", default=None, help="HOST:PORT to listen on, e.g. 0.0.0.0:8888")
    parser.add_argument("--chdir", default=None, help="working directory of the workers (default: here)")
    args = parser.parse_args(argv)
    if args.address is None:
        parser.error("give the address to listen on, e.g. 0.0.0.0:8888")
    try:
        host, port = parse_address(args.address)
    except ValueError as exc:
        parser.error(str(exc))
    if args.chdir:
        os.chdir(args.chdir)
    sock = listen(host, port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"pytest-msprobe host server listening on {host}:{sock.getsockname()[1]}, workers in {os.getcwd()}",
          flush=True)
    try:
        serve_forever(sock, log=sys.stdout)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
