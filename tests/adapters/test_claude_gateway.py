"""The Claude adapter's gateway tells what became of each watched model request, unaltered.

A real `Gateway` between an `httpx` client (as the CLI would stream) and a scripted upstream on
127.0.0.1, with a `Watch` that notes what it is told: a failure is told before the client
reads it, the bytes the client gets are the upstream's own (compressed or not), and what the
stream reported is read from a decoded copy. The CLI's own behaviour around these answers is
pinned with the real CLI in `test_claude_retries.py`.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from agentfsm.adapters._claude_gateway import Failure, Gateway, Verdict
from tests.adapters._fake_openai import loopback_only

__all__ = ["loopback_only"]  # the fixture, used by name

pytestmark = pytest.mark.usefixtures("loopback_only")

BODY = {"model": "claude-fake", "stream": True, "tools": [{"name": "t"}], "messages": []}


def frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


START = frame(
    "message_start",
    {"type": "message_start",
     "message": {"id": "msg_1", "model": "claude-fake", "usage": {"input_tokens": 10,
                                                                 "output_tokens": 1}}},
)  # fmt: skip
DELTA = frame(
    "content_block_delta",
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
)
END = frame(
    "message_delta",
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
) + frame("message_stop", {"type": "message_stop"})
OVERLOADED = frame(
    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
)


@dataclass
class Upstream:
    """Answers each request with `status`, `headers` and `chunks` (chunked, `pause` seconds
    before each), then closes the connection without the last chunk when `cut`."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    chunks: list[bytes] = field(default_factory=list)
    cut: bool = False
    pause: float = 0.0

    def serve(self) -> ThreadingHTTPServer:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(upstream.status)
                for name, value in upstream.headers.items():
                    self.send_header(name, value)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for chunk in upstream.chunks:
                    time.sleep(upstream.pause)
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    except OSError:
                        return  # the gateway closed it (the client went away)
                if upstream.cut:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                else:
                    self.wfile.write(b"0\r\n\r\n")

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        # A short poll: `shutdown` waits for the loop to see it.
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        return server


@dataclass
class Noted:
    """A `Watch` noting what it is told, and what the client had read by then."""

    watched: bool = True
    received: list[bytes] = field(default_factory=list)
    told: list[tuple[str, Any, bytes]] = field(default_factory=list)
    #: Set once a failure is told (made in the loop that awaits it).
    heard: asyncio.Event | None = None

    async def request(self, body: dict[str, Any]) -> Verdict:
        return Verdict(watched=self.watched)

    async def failed(self, failure: Failure) -> None:
        self.told.append(("failed", failure, b"".join(self.received)))
        if self.heard is not None:
            self.heard.set()

    async def answered(self, message: dict[str, Any]) -> None:
        self.told.append(("answered", message, b"".join(self.received)))

    async def streamed(self, message_id: str | None) -> None:
        self.told.append(("streamed", message_id, b"".join(self.received)))


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(upstream: Upstream) -> str:
        servers.append(server := upstream.serve())
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def through(url: str, watch: Noted) -> bytes:
    """POST a model request through a gateway to `url`: the raw bytes the client read."""

    async def go() -> None:
        async with Gateway(url, watch, {}) as gateway, httpx.AsyncClient() as client:
            request = client.build_request("POST", gateway + "/v1/messages", json=BODY)
            response = await client.send(request, stream=True)
            try:
                async for chunk in response.aiter_raw():
                    watch.received.append(chunk)
            except httpx.RemoteProtocolError:
                pass  # the gateway closes the connection as the upstream did
            finally:
                await response.aclose()

    asyncio.run(go())
    return b"".join(watch.received)


def test_an_error_event_is_told_before_it_is_passed_on_and_the_bytes_are_untouched(
    serve: Any,
) -> None:
    """A gzip stream, its lines split across chunks: the error event's failure (with the
    usage `message_start` reported) is told before the client reads the event, and the
    client reads the upstream's compressed bytes as they were."""
    raw = gzip.compress(START + DELTA + OVERLOADED)
    chunks = [raw[:7], raw[7:30], raw[30:]]
    upstream = Upstream(headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
                        chunks=chunks)  # fmt: skip
    watch = Noted()
    assert through(serve(upstream), watch) == raw
    ((what, failure, read_by_then),) = watch.told
    assert what == "failed"
    assert failure == Failure(
        "overloaded_error",
        "error event in the stream: overloaded_error: Overloaded",
        retryable=True,
        spent=False,
        input_tokens=10,
        output_tokens=1,
        message_id="msg_1",
        model="claude-fake",
    )
    seen = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(read_by_then)
    assert b"event: error" not in seen  # told before the chunk holding the event went on


def test_a_stream_cut_off_before_its_final_usage_may_have_spent_unreported(serve: Any) -> None:
    """The upstream connection drops mid-answer: told as the exception's class, `spent` (the
    final usage never came), with what `message_start` reported."""
    watch = Noted()
    through(serve(Upstream(chunks=[START, DELTA], cut=True)), watch)
    ((_, failure, _),) = watch.told
    assert (failure.kind, failure.retryable, failure.spent) == ("RemoteProtocolError", True, True)
    assert failure.message.startswith("the answer's stream broke off before its message_stop: ")
    assert (failure.input_tokens, failure.output_tokens, failure.message_id) == (10, 1, "msg_1")


def test_a_stream_in_an_encoding_not_read_is_passed_on_and_a_cut_is_spent(serve: Any) -> None:
    """Brotli is not read (its bytes go on as they came): a cut is a failure whose usage is
    unknown, spent."""
    opaque = [b"\x1b\x03\x00\xf8", b"\x8d\x94"]
    upstream = Upstream(headers={"content-type": "text/event-stream", "content-encoding": "br"},
                        chunks=opaque, cut=True)  # fmt: skip
    watch = Noted()
    assert through(serve(upstream), watch) == b"".join(opaque)
    ((_, failure, _),) = watch.told
    assert (failure.kind, failure.spent, failure.input_tokens) == (
        "RemoteProtocolError",
        True,
        None,
    )


def test_a_stream_that_ended_is_told_whole_even_if_the_connection_then_drops(
    serve: Any,
) -> None:
    """`message_stop` came: the answer is whole (told before the client reads the stop),
    whatever happens to the connection after."""
    watch = Noted()
    through(serve(Upstream(chunks=[START, DELTA, END], cut=True)), watch)
    ((what, message_id, read_by_then),) = watch.told
    assert (what, message_id) == ("streamed", "msg_1")
    assert b"message_stop" not in read_by_then


def test_an_answer_the_client_gives_up_is_a_failure(serve: Any) -> None:
    """The client closes the connection mid-answer (the run not stopping): the attempt got
    no usable answer, `abandoned`, spent (its final usage never came)."""
    watch = Noted()
    upstream = Upstream(chunks=[START] + [DELTA] * 20, pause=0.01)

    async def go() -> None:
        watch.heard = asyncio.Event()
        async with Gateway(serve(upstream), watch, {}) as gateway, httpx.AsyncClient() as client:
            request = client.build_request("POST", gateway + "/v1/messages", json=BODY)
            response = await client.send(request, stream=True)
            async for _ in response.aiter_raw():
                break  # the first chunk, then away
            await response.aclose()
            # Until the gateway's next write finds the client gone.
            await asyncio.wait_for(watch.heard.wait(), 10)

    asyncio.run(go())
    ((what, failure, _),) = watch.told
    assert (what, failure) == (
        "failed",
        Failure(
            "abandoned",
            "the CLI closed the connection before the answer's message_stop",
            retryable=True,
            spent=True,
            input_tokens=10,
            output_tokens=1,
            message_id="msg_1",
            model="claude-fake",
        ),
    )


def test_an_error_status_says_what_the_api_answered(serve: Any) -> None:
    """A 529 with `x-should-retry: false`: the API's message, not retryable (the header
    decides, as for the CLI); the body goes on as it came."""
    error = json.dumps({"type": "error", "error": {"type": "overloaded_error",
                                                   "message": "Overloaded"}}).encode()  # fmt: skip
    upstream = Upstream(status=529, chunks=[error],
                        headers={"content-type": "application/json", "x-should-retry": "false"})  # fmt: skip
    watch = Noted()
    assert through(serve(upstream), watch) == error
    ((_, failure, read_by_then),) = watch.told
    assert failure == Failure("http_529", "HTTP 529: Overloaded", retryable=False, spent=False)
    assert read_by_then == b""


def test_a_whole_answer_is_told_before_it_is_passed_on(serve: Any) -> None:
    """A message as JSON (a request without streaming): told whole, then passed on."""
    message = {"id": "msg_2", "type": "message", "content": [{"type": "text", "text": "hi"}],
               "usage": {"input_tokens": 3, "output_tokens": 2}}  # fmt: skip
    raw = json.dumps(message).encode()
    upstream = Upstream(headers={"content-type": "application/json"}, chunks=[raw])
    watch = Noted()
    assert through(serve(upstream), watch) == raw
    assert watch.told == [("answered", message, b"")]


def test_a_request_not_watched_is_passed_on_unread(serve: Any) -> None:
    """A request that is no model call of the run (the CLI's own subagent's): its failure is
    not the run's, and nothing is told."""
    watch = Noted(watched=False)
    through(serve(Upstream(status=500, chunks=[b"{}"])), watch)
    assert watch.told == []
