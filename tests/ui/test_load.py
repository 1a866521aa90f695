"""The UI under load (issue 32): no per-request delay on a kept-open connection, pages read
in parallel, caches bounded by bytes."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path

from tests.ui.conftest import LiveServer


class TestNoDelay:
    """The UI's own socket is a TCP one, so asyncio turns Nagle's algorithm off on every
    connection it accepts (without it, each request on a kept-open connection waited ~40 ms
    for the client's delayed ACK)."""

    def test_the_bound_socket_names_tcp(self) -> None:
        """`bind` makes its socket with IPPROTO_TCP: asyncio sets TCP_NODELAY only then."""
        from agentfsm.ui.server import bind

        sock = bind("127.0.0.1", 0)
        try:
            assert sock.proto == socket.IPPROTO_TCP
        finally:
            sock.close()

    def test_every_accepted_connection_has_nodelay(self, runs_db: Path) -> None:
        """A connection the live server accepted has TCP_NODELAY set on the server's side."""
        server = LiveServer(runs_db)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            conn.request("GET", "/tables")
            assert conn.getresponse().read()
            protocols = list(server.server.server_state.connections)
            assert protocols, "the server holds the kept-open connection"
            flags = {
                p.transport.get_extra_info("socket").getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY
                )
                for p in protocols
            }
            conn.close()
        finally:
            server.stop()
        assert flags == {1}
