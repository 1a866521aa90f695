"""Serving the app with uvicorn, on a socket bound before the first line is printed.

Binding first lets `--port 0` print the port the system chose, and means the URL printed is
one that already answers.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette

from agentfsm.fsm.registry import known_tables

__all__ = ["SWITCH_INTERVAL", "Server", "allowed_hosts", "bind", "is_loopback", "serve"]

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
