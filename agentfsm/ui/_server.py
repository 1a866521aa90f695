"""Serving the app with uvicorn, on a socket bound before the first line is printed.

Binding first lets `--port 0` print the port the system chose, and means the URL printed is
one that already answers.
"""

from __future__ import annotations

import ipaddress
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from agentfsm.fsm.registry import known_tables

__all__ = [
    "SWITCH_INTERVAL",
    "Server",
    "allowed_hosts",
    "bind",
    "can_fork",
    "is_loopback",
    "serve",
    "serve_forked",
]

#: The GIL's switch interval while the UI serves (Python's default is 5 ms). A light page's
#: every read of the store releases the GIL and takes it back; beside a thread folding a long
#: log, taking it back waits for that thread's interval to run out, so each of a page's few
#: hundred reads could wait 5 ms (a runs list took 0.2-0.9 s beside a first view it needed
#: nothing from; issue 32). 1 ms makes that wait a fifth, and costs a fold little.
SWITCH_INTERVAL = 0.001


class Server(uvicorn.Server):
    """uvicorn's server, which ends the app's live streams first when it stops: it waits
    for every open connection to finish its answer, and a stream's never would."""

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self._streams = getattr(app.state, "streams", None)

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve until told to stop, with the GIL handed on every `SWITCH_INTERVAL` (the
        process's: it serves), and the installed tables read before the first request:
        scanning every distribution's metadata is some 300 file reads, each a wait for the
        GIL if a fold runs beside the first page that asks."""
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        known_tables()
        super().run(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._streams is not None:
            self._streams.close()
        await super().shutdown(sockets)


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> tuple[str, ...]:
    """The `Host` names to answer: the loopback names for a loopback bind; the address
    itself for another; any for a wildcard bind (0.0.0.0, ::), whose names are not known."""
    if is_loopback(host):
        return ("127.0.0.1", "localhost", "::1", "[::1]", host)
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 - naming the wildcard, not binding it
        return ("*",)
    return (host,)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port` (port 0: one the system picks)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY on an accepted connection only
    # when its socket says TCP, and without it every request on a kept-open connection
    # waits ~40 ms for the client's delayed ACK (44 ms against 0.7 ms, issue 32).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    app: Starlette, sock: socket.socket, *, ready: Callable[[uvicorn.Server], None] | None = None
) -> uvicorn.Server:
    """Serve `app` on `sock` until interrupted (Ctrl-C), logging warnings only."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = Server(config, app)
    if ready is not None:
        ready(server)
    server.run(sockets=[sock])
    return server


def can_fork() -> bool:
    """Whether this platform starts processes by forking (Linux, macOS; not Windows)."""
    return "fork" in multiprocessing.get_all_start_methods()


def serve_forked(app: Starlette, sock: socket.socket, processes: int) -> int:
    """Serve `app` on `sock` from `processes` processes forked after the bind, until this one
    is interrupted or terminated, or one of them ends; the exit status (0, or the first
    ended process's).

    With the GIL one process answers a few hundred requests a second whatever its threads
    (issue 32: 100 clients, p95 550-840 ms on one process, 200-250 ms on two). Each forked
    process serves with its own threads and opens its own read pool on first use, after the
    fork (nothing is opened before: a SQLite handle must not cross a fork). The token is the
    parent's, and a form's CSRF token is derived from it alone, so a form one process drew
    is accepted by another. On SIGTERM or Ctrl-C every process is asked to end (uvicorn ends
    its live streams first) and waited for: none is left behind listening.
    """
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=serve, args=(app, sock), daemon=True) for _ in range(processes)]

    def _stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    before = signal.signal(signal.SIGTERM, _stop)
    status = 0
    try:
        for child in children:
            child.start()
        ended = multiprocessing.connection.wait([child.sentinel for child in children])
        first = next(child for child in children if child.sentinel in ended)
        status = first.exitcode or 0
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, before)
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: uvicorn's graceful shutdown
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()
    return status
