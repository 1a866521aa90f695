"""Serving the app with uvicorn, on a socket bound before the first line is printed.

Binding first lets `--port 0` print the port the system chose, and means the URL printed is
one that already answers.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette

__all__ = ["Server", "allowed_hosts", "bind", "is_loopback", "serve"]


class Server(uvicorn.Server):
    """uvicorn's server, which ends the app's live streams first when it stops: it waits
    for every open connection to finish its answer, and a stream's never would."""

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self._streams = getattr(app.state, "streams", None)

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
