"""What the Claude adapter records when the real `claude` CLI retries a failed model request.

The CLI sends its model requests to our loopback gateway (`_claude_gateway`), which judges
each with the guards before forwarding it. Here a front in front of the fake Messages API
fails the first model request as scripted: an error status (the CLI retries it), an `error`
event in the stream (it retries), a stream cut off mid-answer (it retries, streaming) or
ended before any content (it sends the request again without streaming). The gateway
tells the run before the CLI hears of it: `model.failed`, then the CLI's retry is a
`model.started` of its own, judged before it is sent (`agentfsm.adapters._attempts`, the
same rules as the `openai` clients'; docs/adapters.md, "Retries"). The front counts the
model requests that reached the API side, so a refused retry is seen not to.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") == "true":
    import claude_agent_sdk  # noqa: F401  (under CI a missing SDK fails the run, loudly)
else:
    pytest.importorskip("claude_agent_sdk")

from structlog.testing import capture_logs

from agentfsm.adapters.claude_agent_sdk import ClaudeRun
from agentfsm.events.models import Limits
from agentfsm.stores import SQLiteEventStore
from tests.adapters._claude_app import options
from tests.adapters._common import types
from tests.adapters._fake_anthropic import FakeAnthropic, Reply, ToolUse, sse
from tests.adapters.test_claude_cli import _cli, no_network

__all__ = ["_cli", "no_network"]  # the fixtures, used by name

T0 = datetime(2030, 1, 1, tzinfo=UTC)
SLOW = "mcp__shop__slow"

#: What the front does to a model request it fails.
STATUS_500 = "500"
OVERLOADED = "overloaded"  # 200, `message_start` then an `error` event
CUT = "cut"  # 200, chunked, the connection closed mid-answer
ENDED = "ended"  # 200, complete as HTTP, but the stream stops after `message_start`


class Front:
    """In front of `upstream`: the first model requests fail as `failures` says, the rest
    (and everything else) are forwarded as they came."""

    def __init__(self, upstream: str, failures: list[str]) -> None:
        #: The model requests that reached the API side (the front), failed or forwarded.
        self.model_requests = 0
        self.failed = 0
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw or b"{}")
                model = self.path.startswith("/v1/messages") and body.get("tools")
                if model:
                    front.model_requests += 1
                if model and front.failed < len(failures):
                    front.failed += 1
                    self._fail(failures[front.failed - 1], str(body.get("model")))
                    return
                sent = urllib.request.Request(
                    upstream + self.path, data=raw, method="POST",
                    headers={"content-type": "application/json"},
                )  # fmt: skip
                with urllib.request.urlopen(sent, timeout=30) as answer:
                    kind = answer.headers.get("content-type", "application/json")
                    self._send(answer.status, answer.read(), kind)

            def do_GET(self) -> None:
                self._send(200, b"{}", "application/json")

            def _fail(self, how: str, model: str) -> None:
                frames = sse(Reply(text="never said"), model, "msg_failed").split(b"\n\n")
                begun = b"\n\n".join(frames[:2]) + b"\n\n"  # message_start, a block's start
                if how == STATUS_500:
                    error = {"type": "error", "error": {"type": "api_error", "message": "boom"}}
                    self._send(500, json.dumps(error).encode(), "application/json",
                               {"retry-after-ms": "1"})  # fmt: skip
                elif how == OVERLOADED:
                    error = {"type": "error", "error": {"type": "overloaded_error",
                                                        "message": "Overloaded"}}  # fmt: skip
                    event = f"event: error\ndata: {json.dumps(error)}\n\n".encode()
                    self._send(200, frames[0] + b"\n\n" + event, "text/event-stream")
                elif how == ENDED:
                    self._send(200, frames[0] + b"\n\n", "text/event-stream")
                else:  # CUT: one chunk, then the connection goes, no last chunk
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(begun), begun))
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            def _send(
                self, status: int, data: bytes, kind: str, extra: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: `shutdown` waits for the loop to see it.
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"


def model(body: dict[str, Any]) -> Reply | None:
    """The model: asked to look something up, a call of `slow` first; else it says hello."""
    if not body.get("tools"):
        return None  # a side request of the CLI's
    messages = body.get("messages", [])
    answered = any(m["role"] == "assistant" for m in messages)
    if "look it up" in json.dumps(messages[:1]) and not answered:
        return Reply(tools=(ToolUse("toolu_s1", SLOW, {"seconds": 0.0}),))
    return Reply(text="hello")


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(model) as fake:
        yield fake


@pytest.fixture
def fronts(api: FakeAnthropic) -> Iterator[list[Front]]:
    made: list[Front] = []
    yield made
    for front in made:
        front.server.shutdown()
        front.server.server_close()


def drive(
    tmp_path: Path,
    front: Front,
    prompt: str = "say hello",
    limits: Limits | None = None,
    **run: Any,
) -> Any:
    store = SQLiteEventStore(tmp_path / "runs.db")
    with capture_logs():
        done = asyncio.run(
            ClaudeRun(store, "r1", **run).arun(prompt, options(front.url, tmp_path), limits=limits)
        )
    return store, done


def failures(store: SQLiteEventStore) -> list[Any]:
    return [e for e in store.events("r1") if e.type == "model.failed"]


def test_a_500_then_an_answer_is_two_model_calls(
    tmp_path: Path, api: FakeAnthropic, fronts: list[Front]
) -> None:
    """500, then the CLI's retry answers: the failed attempt is `model.failed` saying what
    the API answered, the retry a `model.started` of its own (each reserving), and the run
    completes with the answer."""
    fronts.append(front := Front(api.url, [STATUS_500]))
    store, done = drive(tmp_path, front, reserve_tokens=100)
    assert done.status == "completed"
    assert done.final_output == "hello"
    assert (front.model_requests, len(api.requests)) == (2, 1)
    assert types(store, "r1") == [
        "run.started",
        "model.started",
        "model.failed",
        "model.started",
        "model.completed",
        "run.completed",
    ]
    (failed,) = failures(store)
    assert failed.error.model_dump() == {
        "kind": "http_500",
        "message": "HTTP 500 Internal Server Error: boom",
        "retryable": True,
    }
    assert failed.usage is None  # an error status reports none (and is not missing any)
    started = [e for e in store.events("r1") if e.type == "model.started"]
    assert [e.reserved_tokens for e in started] == [100, 100]
    assert done.record.turn == 2


def test_under_max_turns_1_the_retry_is_refused_before_it_is_sent(
    tmp_path: Path, api: FakeAnthropic, fronts: list[Front]
) -> None:
    """`max_turns` counts attempts: the CLI's retry of the failed first one is refused at
    the gateway, and never reaches the API side."""
    fronts.append(front := Front(api.url, [STATUS_500]))
    store, done = drive(tmp_path, front, max_turns=1)
    assert (done.status, done.stop_reason) == ("terminated", "max_turns")
    assert done.record.stop_detail == "1 of 1 turns used"
    assert (front.model_requests, len(api.requests)) == (1, 0)
    assert types(store, "r1") == ["run.started", "model.started", "model.failed", "run.terminated"]


def test_a_deadline_passed_during_the_backoff_stops_the_run_before_the_retry(
    tmp_path: Path, api: FakeAnthropic, fronts: list[Front]
) -> None:
    """The first attempt fails; by the time the CLI retries, the deadline has passed (the
    clock jumps once the front failed it): the retry is refused, never sent."""
    fronts.append(front := Front(api.url, [STATUS_500]))
    limits = Limits(deadline=(T0 + timedelta(hours=1)).isoformat())
    store, done = drive(
        tmp_path,
        front,
        limits=limits,
        clock=lambda: T0 + timedelta(hours=2) if front.failed else T0,
    )
    assert (done.status, done.stop_reason) == ("terminated", "deadline")
    assert (front.model_requests, len(api.requests)) == (1, 0)
    assert types(store, "r1") == ["run.started", "model.started", "model.failed", "run.terminated"]


def test_an_error_event_in_the_stream_is_a_failed_attempt_with_its_usage(
    tmp_path: Path, api: FakeAnthropic, fronts: list[Front]
) -> None:
    """An `overloaded_error` event after `message_start`: `model.failed` with the error's
    type and the usage the stream reported; the events the CLI streamed of it are not the
    call's answer; the retry answers."""
    fronts.append(front := Front(api.url, [OVERLOADED]))
    store, done = drive(tmp_path, front)
    assert (done.status, done.final_output) == ("completed", "hello")
    assert types(store, "r1") == [
        "run.started",
        "model.started",
        "model.failed",
        "model.started",
        "model.completed",
        "run.completed",
    ]
    (failed,) = failures(store)
    assert failed.error.model_dump() == {
        "kind": "overloaded_error",
        "message": "error event in the stream: overloaded_error: Overloaded",
        "retryable": True,
    }
    assert (failed.usage.input_tokens, failed.usage.output_tokens) == (10, 1)


def test_a_stream_cut_off_under_a_budget_stops_the_run_before_the_retry(
    tmp_path: Path, api: FakeAnthropic, fronts: list[Front]
) -> None:
    """The connection drops mid-answer: what the call cost is unknown (its final usage never
    came), so under a token limit the run stops for `budget` before the CLI's retry."""
    fronts.append(front := Front(api.url, [CUT]))
    store, done = drive(tmp_path, front, limits=Limits(max_tokens=10_000))
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert done.record.stop_detail == (
        "usage missing: attempt 1 of the model call got no usable answer after its request "
        "was sent, so what it spent is unknown and max_tokens 10,000 cannot be checked; the "
        "CLI's retry was not sent (docs/adapters.md, 'Retries')"
    )
    assert (front.model_requests, len(api.requests)) == (1, 0)
    assert types(store, "r1") == ["run.started", "model.started", "model.failed", "run.terminated"]
    (failed,) = failures(store)
    assert (failed.error.kind, failed.error.retryable) == ("RemoteProtocolError", True)
    assert failed.error.message.startswith(
        "the answer's stream broke off before its message_stop: "
    )
    assert (failed.usage.input_tokens, failed.usage.output_tokens) == (10, 1)


def test_a_stream_ended_early_is_sent_again_whole_and_its_calls_run_once(
    tmp_path: Path, api: FakeAnthropic, fronts: list[Front]
) -> None:
    """A stream that ends after its `message_start`: the CLI sends the request again without
    streaming (as it does when no content came; after some, it retries streaming); the
    gateway hears that whole answer (the CLI streams no events of it), so its tool call is
    recorded and runs once, and the run completes."""
    fronts.append(front := Front(api.url, [ENDED]))
    store, done = drive(tmp_path, front, prompt="look it up")
    assert (done.status, done.final_output) == ("completed", "hello")
    assert not api.requests[0].get("stream")  # the CLI's retry, whole
    assert types(store, "r1") == [
        "run.started",
        "model.started",
        "model.failed",
        "model.started",
        "model.completed",
        "tool.requested",
        "tool.started",
        "tool.completed",
        "model.started",
        "model.completed",
        "run.completed",
    ]
    (failed,) = failures(store)
    assert failed.error.model_dump() == {
        "kind": "incomplete_stream",
        "message": "the answer's stream ended before its message_stop",
        "retryable": True,
    }
    completed = [e for e in store.events("r1") if e.type == "model.completed"]
    assert [c.action_id for c in completed[0].tool_calls] == ["toolu_s1"]
    assert (completed[0].usage.input_tokens, completed[0].usage.output_tokens) == (10, 5)
