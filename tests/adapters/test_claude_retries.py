"""What the Claude adapter records when the real `claude` CLI retries a failed model request.

The CLI sends its model requests to our loopback gateway (`_claude_gateway`), which judges
each with the guards before forwarding it. Here the API answers the first model request
with a 500 (and `retry-after-ms`, so the CLI retries at once): the CLI sends it again, the
gateway forwards the retry too, and the log holds one model call. This pins what
docs/adapters.md ("Retries") says of the Claude adapter today: the retry goes through the
gateway, but stands behind the first attempt's `model.started`.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import urllib.request
from collections.abc import Iterator
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
from agentfsm.stores import SQLiteEventStore
from tests.adapters._claude_app import options
from tests.adapters._common import types
from tests.adapters._fake_anthropic import FakeAnthropic, Reply
from tests.adapters.test_claude_cli import _cli, no_network

__all__ = ["_cli", "no_network"]  # the fixtures, used by name


class Flaky:
    """In front of `upstream`: the first `failures` model requests get a 500, the rest (and
    everything else) are forwarded as they came."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.failed = 0
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw or b"{}")
                model = self.path.startswith("/v1/messages") and body.get("tools")
                if model and flaky.failed < failures:
                    flaky.failed += 1
                    error = {"type": "error", "error": {"type": "api_error", "message": "x"}}
                    self._send(500, json.dumps(error).encode(), "application/json",
                               {"retry-after-ms": "1"})  # fmt: skip
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
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"


@pytest.fixture
def flaky() -> Iterator[tuple[FakeAnthropic, Flaky]]:
    with FakeAnthropic(lambda body: Reply(text="hello") if body.get("tools") else None) as api:
        front = Flaky(api.url, failures=1)
        try:
            yield api, front
        finally:
            front.server.shutdown()
            front.server.server_close()


def test_the_clis_retry_passes_the_gateway_behind_one_model_call(
    tmp_path: Path, flaky: tuple[FakeAnthropic, Flaky]
) -> None:
    """500, then the CLI's retry answers: two requests reached the API side, the run
    completed, and the log has one `model.started` (the gateway forwards a request made
    while a model call is open without judging it again)."""
    api, front = flaky
    store = SQLiteEventStore(tmp_path / "runs.db")
    with capture_logs():
        done = asyncio.run(ClaudeRun(store, "r1").run("say hello", options(front.url, tmp_path)))
    assert done.status == "completed"
    assert front.failed == 1
    assert len(api.requests) == 1  # the retry, after the 500 the front answered
    assert types(store, "r1").count("model.started") == 1
    assert "model.failed" not in types(store, "r1")
