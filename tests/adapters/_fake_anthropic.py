"""A fake Anthropic Messages API on 127.0.0.1 for the real `claude` CLI: scripted, streamed.

`FakeAnthropic(answer)` serves `POST /v1/messages` as the public Messages API streams it
(server-sent events: `message_start`, `content_block_start` / `_delta` / `_stop` for text and
`tool_use` blocks, `message_delta` with `stop_reason` and usage, `message_stop`). `answer` is
called with each request's JSON body and returns the reply: a `Reply` (text and tool uses) or
None for a request it does not script (the CLI's side requests), which gets a short text. Any
other path gets an empty JSON object, so a newer CLI's extra calls do not fail the run.
Every request body is kept in `requests`, for tests to read what the CLI sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentfsm.testing.fixtures.claude_transport import Use

#: A `tool_use` block: the model asks for `name` with `input`, under id `id` (the scripted
#: CLI's own, so a test can script either side with the same value).
ToolUse = Use


@dataclass(frozen=True)
class Reply:
    """One model answer: text, then tool uses (`stop_reason` `tool_use` when there are any)."""

    text: str = ""
    tools: tuple[ToolUse, ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0


def sse(reply: Reply, model: str, message_id: str) -> bytes:
    """The reply as the Messages API streams it."""
    frames: list[tuple[str, dict[str, Any]]] = []
    usage = {"input_tokens": reply.input_tokens, "output_tokens": 1}
    start = {"id": message_id, "type": "message", "role": "assistant", "model": model,
             "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}  # fmt: skip
    frames.append(("message_start", {"type": "message_start", "message": start}))
    index = 0
    if reply.text or not reply.tools:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": reply.text}
        frames += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]  # fmt: skip
        index += 1
    for use in reply.tools:
        block = {"type": "tool_use", "id": use.id, "name": use.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(use.input)}
        frames += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]  # fmt: skip
        index += 1
    stop = "tool_use" if reply.tools else "end_turn"
    end_usage = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
    frames.append(("message_delta", {"type": "message_delta",
                   "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": end_usage}))  # fmt: skip
    frames.append(("message_stop", {"type": "message_stop"}))
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in frames
    )


@dataclass
class FakeAnthropic:
    """The fake API's server, answering with `answer(body)` (see the module docstring)."""

    answer: Callable[[dict[str, Any]], Reply | None]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self
        counter = iter(range(1, 1_000_000))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    data = json.loads(raw or b"{}")
                except ValueError:
                    data = {}
                return data if isinstance(data, dict) else {}

            def do_POST(self) -> None:
                body = self._body()
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self._json({"input_tokens": 10} if "count_tokens" in self.path else {})
                    return
                fake.requests.append(body)
                reply = fake.answer(body) or Reply(text="ok")
                if reply.delay:
                    import time

                    time.sleep(reply.delay)
                model = str(body.get("model") or "claude-fake")
                payload = sse(reply, model, f"msg_{next(counter)}")
                if not body.get("stream"):
                    self._json(_whole(reply, model))
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._json({})

            def _json(self, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: `shutdown` (each test's teardown) waits for the loop to see it.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        """The base URL to give the CLI as `ANTHROPIC_BASE_URL`."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _whole(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text or not reply.tools:
        content.append({"type": "text", "text": reply.text})
    content += [
        {"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in reply.tools
    ]
    return {"id": "msg_whole", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if reply.tools else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}}  # fmt: skip
