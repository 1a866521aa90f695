"""Live pages: server-sent events (`text/event-stream`) that push what changed to the page.

A run's page gets its timeline's new rows, the runs list its rows (and counts), the inbox
the calls that came or went, each added or replaced in place by `static/app.js`; a browser
without `EventSource` (or refused a stream) polls as before.

What bounds it, whatever the number of readers or the length of a run:

- **A cap on open streams** per server (`LiveConfig.max_streams`): past it a stream is
  refused with 503 (the page then polls). A stream from another site's page (an `Origin`
  other than this server's) is refused with 403 before it counts, so no page elsewhere can
  use the cap up; the `Host` check and the headers are those of every answer.
- **No read connection held while idle**: each look at the store borrows a handle of the
  `Source`'s pool for that read alone (on the server's thread pool), then sleeps holding
  nothing. One look per `tick` per stream: a run's index row; a page of the runs index; the
  inbox's page of waiting calls (records come from the version-keyed cache).
- **Nothing per stream that grows**: a stream keeps a cursor (the last event shown), or the
  digest of what it last sent, or the keys of one inbox page (at most 50).
- **A heartbeat comment** every `heartbeat` seconds (proxies keep the connection open; a
  dead one is found), and **an end**: when the client goes away (Starlette cancels the
  stream), after `lifetime` seconds (the browser reconnects, resuming after its last event
  id), or when the server stops (`Streams.close`, called before uvicorn waits for open
  connections: a stream would otherwise keep it waiting forever).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import attrs
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["LiveConfig", "Step", "StreamResponse", "Streams", "digest", "message", "stream"]

_LINE_ENDS = re.compile(r"\r\n|\r|\n")

#: What one look at the store returns: the messages to send (already framed), if any.
Step = Callable[[], Awaitable[list[str]]]


@attrs.frozen
class LiveConfig:
    """How the pages are kept live.

    Attributes:
        tick: seconds between two looks at the store per stream (0: no streams; pages poll).
        max_streams: streams open at once per server; past it one is refused (503).
        heartbeat: seconds between two comment lines on a stream with nothing to say.
        lifetime: seconds a stream lasts before the server ends it (the browser reconnects
            at once, resuming where it was).
    """

    tick: float = 1.0
    max_streams: int = 64
    heartbeat: float = 15.0
    lifetime: float = 300.0

    def __attrs_post_init__(self) -> None:
        if self.tick < 0 or self.max_streams < 0 or self.heartbeat <= 0 or self.lifetime <= 0:
            raise ValueError(
                "LiveConfig needs tick >= 0, max_streams >= 0, heartbeat > 0 and lifetime > 0, "
                f"got {self}"
            )


@attrs.define
class Streams:
    """The streams one app has open: how many, and a switch that ends them all."""

    cap: int
    open: int = 0
    closing: bool = False

    def take(self) -> str | None:
        """Count a stream in, or say why not (the cap is reached, or the server closes)."""
        if self.closing:
            return "the server is stopping"
        if self.open >= self.cap:
            return f"{self.open} live streams are open, the most this server keeps"
        self.open += 1
        return None

    def close(self) -> None:
        """End every open stream at its next look (within a tick); refuse new ones."""
        self.closing = True


def message(event: str, data: Any, *, id: str | None = None) -> str:
    """One event in the `text/event-stream` format: `data` as text (each of its lines a
    `data:` line; not str: as JSON), and an id the browser sends back on reconnecting."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines = [f"event: {event}"]
    if id is not None:
        lines.append(f"id: {id}")
    # The format's line ends only (CR, LF, CRLF): `str.splitlines` would also split at
    # U+2028 and others, which the browser would join again as LF.
    lines += [f"data: {line}" for line in _LINE_ENDS.split(text)]
    return "\n".join(lines) + "\n\n"


def digest(text: str) -> str:
    """A short digest of what was sent, to send it again only once it changed."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


async def stream(streams: Streams, config: LiveConfig, step: Step) -> AsyncIterator[str]:
    """The stream: a retry hint, then `step`'s messages each tick, a heartbeat comment when
    there was nothing to say for `heartbeat` seconds, until the stream's lifetime is over or
    the server closes it (the count of open streams is given back however it ends)."""
    # A stream the server ends is reopened after a second, from the last event's id.
    yield "retry: 1000\n\n"
    started = last = time.monotonic()
    while not streams.closing and time.monotonic() - started < config.lifetime:
        sent = await step()
        for text in sent:
            yield text
        now = time.monotonic()
        if sent:
            last = now
        elif now - last >= config.heartbeat:
            yield ": still here\n\n"
            last = now
        # Sleep holding nothing (no handle, no lock), a short while at a time so that a
        # closing server ends the stream promptly.
        wake = now + config.tick
        while not streams.closing and time.monotonic() < wake:
            await anyio.sleep(min(0.25, max(wake - time.monotonic(), 0)))


class StreamResponse(StreamingResponse):
    """A `text/event-stream` answer that gives its place back among the open streams
    however it ends (finished, cancelled when the client went away, or failed)."""

    def __init__(self, streams: Streams, content: AsyncIterator[str]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},  # a proxy must pass each event on at once
        )
        self._streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._streams.open -= 1
