"""A fake OpenAI API on 127.0.0.1 for the SDKs' real HTTP clients: scripted, streamed or not.

`FakeOpenAI(script)` serves `POST /v1/chat/completions` and `POST /v1/responses` the way the
public API answers them: a JSON body, or server-sent events when the request says
`"stream": true` (Chat Completions chunks ending in `[DONE]`; the Responses API's
`response.created` / `response.output_item.*` / `response.completed`). Each request takes the
next entry of `script`:

- a `Reply` (text and tool calls, with the usage the server reports; `usage=False` leaves it
  out, as a server that does not report usage does);
- a `Fail` (an HTTP error status, e.g. 500), which the SDKs' clients may retry;
- a `Drop` (the connection closed without an answer, after the request was read).

Chat Completions streams carry usage only when the request asks for it
(`stream_options.include_usage`), as the real API does. Every request is kept in `requests`
(path and JSON body), so a test reads what each SDK sent, and how many attempts it made.

It binds 127.0.0.1 only; `loopback_only` is the fixture that lets the client in the test
process reach it while any other connection still fails.
"""

from __future__ import annotations

import functools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Call:
    """A tool call the model asks for."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One model answer: text, or tool calls; with its usage unless `usage=False`."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    input_tokens: int = 40
    output_tokens: int = 20
    usage: bool = True


@dataclass(frozen=True)
class Fail:
    """An HTTP error answer (the SDKs' clients retry 500s unless told not to).

    `retry_after_ms` sends a `retry-after-ms` header, which the `openai` client honours
    instead of its backoff (half a second, then a second): retries a test can afford.
    """

    status: int = 500
    retry_after_ms: int | None = None


@dataclass(frozen=True)
class Drop:
    """No answer at all: the server reads the request and closes the connection (the
    client sees a dropped connection after its request was sent)."""


Entry = Reply | Fail | Drop


def _chat_message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in reply.calls
        ]
    return message


def _chat_usage(reply: Reply) -> dict[str, int]:
    total = reply.input_tokens + reply.output_tokens
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": total,
    }


def chat_json(reply: Reply, model: str, n: int) -> dict[str, Any]:
    """A Chat Completions answer as JSON."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": _chat_message(reply),
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
    }
    if reply.usage:
        body["usage"] = _chat_usage(reply)
    return body


def chat_chunks(reply: Reply, model: str, n: int, include_usage: bool) -> Iterator[dict[str, Any]]:
    """A Chat Completions answer as the chunks of its stream."""
    head = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
    }
    first: dict[str, Any] = {"role": "assistant", "content": reply.text if reply.text else None}
    if include_usage:
        head_usage: dict[str, Any] = {"usage": None}
    else:
        head_usage = {}
    yield {**head, **head_usage, "choices": [{"index": 0, "delta": first, "finish_reason": None}]}
    for i, c in enumerate(reply.calls):
        delta = {
            "tool_calls": [
                {
                    "index": i,
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
            ]
        }
        yield {
            **head,
            **head_usage,
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
    finish = "tool_calls" if reply.calls else "stop"
    yield {**head, **head_usage, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    if include_usage and reply.usage:
        yield {**head, "choices": [], "usage": _chat_usage(reply)}


def response_json(reply: Reply, model: str, n: int, status: str = "completed") -> dict[str, Any]:
    """A Responses API answer as JSON."""
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for c in reply.calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{c.id}",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
                "status": "completed",
            }
        )
    body: dict[str, Any] = {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": model,
        "status": status,
        "output": output if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }
    if reply.usage and status == "completed":
        body["usage"] = {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return body


def response_events(reply: Reply, model: str, n: int) -> Iterator[dict[str, Any]]:
    """A Responses API answer as the events of its stream."""
    seq = iter(range(1_000))
    yield {
        "type": "response.created",
        "sequence_number": next(seq),
        "response": response_json(reply, model, n, status="in_progress"),
    }
    done = response_json(reply, model, n)
    for i, item in enumerate(done["output"]):
        yield {
            "type": "response.output_item.added",
            "sequence_number": next(seq),
            "output_index": i,
            "item": item,
        }
        yield {
            "type": "response.output_item.done",
            "sequence_number": next(seq),
            "output_index": i,
            "item": item,
        }
    yield {"type": "response.completed", "sequence_number": next(seq), "response": done}


@dataclass
class FakeOpenAI:
    """The fake API's server, answering each request with the next entry of `script`."""

    script: list[Entry]
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Called with the request's number (1 for the first) before it is answered, in the
    #: server's thread: what happens elsewhere while the client waits.
    on_request: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        fake = self
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append((self.path, body))
                    n = len(fake.requests)
                    entry = fake.script.pop(0) if fake.script else Fail(404)
                if fake.on_request is not None:
                    fake.on_request(n)
                if isinstance(entry, Drop):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(entry, Fail):
                    headers = {}
                    if entry.retry_after_ms is not None:
                        headers["retry-after-ms"] = str(entry.retry_after_ms)
                    self._json(entry.status, {"error": {"message": "scripted failure",
                                                        "type": "server_error"}},
                               headers)  # fmt: skip
                    return
                model = body.get("model", "gpt-test")
                stream = bool(body.get("stream"))
                if self.path.endswith("/chat/completions"):
                    if not stream:
                        self._json(200, chat_json(entry, model, n))
                        return
                    include = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._sse((None, chunk) for chunk in chat_chunks(entry, model, n, include))
                elif self.path.endswith("/responses"):
                    if not stream:
                        self._json(200, response_json(entry, model, n))
                        return
                    self._sse((e["type"], e) for e in response_events(entry, model, n))
                else:
                    self._json(404, {"error": {"message": f"no such path {self.path}"}})

            def _json(
                self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _sse(self, frames: Iterator[tuple[str | None, dict[str, Any]]]) -> None:
                parts = []
                for name, data in frames:
                    prefix = f"event: {name}\n" if name else ""
                    parts.append(f"{prefix}data: {json.dumps(data)}\n\n")
                parts.append("data: [DONE]\n\n")
                raw = "".join(parts).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: `close` (shutdown) waits up to one poll for the serving loop to stop.
        serve = functools.partial(self.server.serve_forever, poll_interval=0.02)
        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The API's base URL, as the SDKs' clients take it (`.../v1`)."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def paths(self) -> list[str]:
        """The paths of the requests so far, one per HTTP attempt."""
        return [path for path, _ in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


_REAL_CONNECT = socket.socket.connect
_REAL_CONNECT_EX = socket.socket.connect_ex


def _loopback(address: object) -> bool:
    return isinstance(address, tuple) and address[0] in ("127.0.0.1", "localhost", "::1")


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections to 127.0.0.1 go through (the fake server); any other one still fails."""
    from tests.adapters.conftest import NetworkAttemptError

    def connect(self: socket.socket, address: Any) -> None:
        if not _loopback(address):
            raise NetworkAttemptError(f"network access attempted: {address!r}")
        _REAL_CONNECT(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _loopback(address):
            raise NetworkAttemptError(f"network access attempted: {address!r}")
        return _REAL_CONNECT_EX(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture
def fake_openai(loopback_only: None) -> Iterator[FakeOpenAI]:
    """A fake OpenAI API with an empty script (tests `extend` it)."""
    fake = FakeOpenAI([])
    try:
        yield fake
    finally:
        fake.close()
