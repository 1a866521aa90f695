"""What a streamed Messages API answer says, read from a copy as it passes the gateway.

`Scan` reads the server-sent events of one answer as `_claude_gateway` passes them on: the
answer's id and usage (`message_start`, then `message_delta`'s final counts), its end
(`message_stop`) and an `error` event; each data line of those four is parsed, every other
line (the text and tool-input deltas, most of a stream) is only split off. `Failure` is what
the gateway tells of a model request that got no answer.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

from agentfsm.adapters._attempts import lost

__all__ = ["Failure", "Scan"]

#: The API's error types the CLI retries (as it does their statuses: 429, 500, 529).
_RETRYABLE_ERRORS = frozenset({"rate_limit_error", "api_error", "overloaded_error"})


@dataclass(frozen=True)
class Failure:
    """A watched model request that got no answer (see `_claude_gateway`).

    Attributes:
        kind: `http_<status>`, the API's error type, or the exception's class name.
        message: what went wrong, in a sentence.
        retryable: whether the CLI retries it.
        spent: whether it may have cost what nobody reported.
        input_tokens: what the stream reported, if it began.
        output_tokens: likewise.
        message_id: the answer's id (its `message_start`), if the stream began.
        model: the model the answer named.
    """

    kind: str
    message: str
    retryable: bool
    spent: bool
    input_tokens: int | None = None
    output_tokens: int | None = None
    message_id: str | None = None
    model: str | None = None


class Scan:
    """What a streamed answer's server-sent events say, read from a copy as they pass: its
    id and usage (`message_start`, `message_delta`), its end (`message_stop`), an `error`."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        #: Decodes a copy of each chunk; None when the encoding is one we do not read.
        self._decoder: Any = None
        if encoding in ("", "identity"):
            self._decoder = _Identity()
        elif encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj()
        self._rest = b""
        self._event = b""
        self.message_id: str | None = None
        self.model: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        #: Whether the final usage (`message_delta`'s) came, and the answer's end.
        self.final_usage = False
        self.stopped = False
        self.error: dict[str, Any] | None = None

    @property
    def readable(self) -> bool:
        """Whether the stream is read (its encoding one we decode)."""
        return self._decoder is not None

    @property
    def settled(self) -> bool:
        """Whether the answer's outcome is known (it ended, or its error was told)."""
        return self.stopped or self.error is not None

    def feed(self, chunk: bytes) -> None:
        """Read one chunk (`error`, `stopped` and the usage say what it held)."""
        if self._decoder is None:
            return
        try:
            text = self._decoder.decompress(chunk)
        except zlib.error:
            self._decoder = None  # not what it said it was: passed on unread
            return
        lines = (self._rest + text).split(b"\n")
        self._rest = lines.pop()
        for raw in lines:
            line = raw.rstrip(b"\r")
            if line.startswith(b"event:"):
                self._event = line[6:].strip()
            elif line.startswith(b"data:") and self._event in _READ:
                self._data(self._event, line[5:])
            elif not line:
                self._event = b""

    def _data(self, event: bytes, raw: bytes) -> None:
        if event == b"message_stop":
            self.stopped = True
            return
        try:
            data = json.loads(raw)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        if event == b"error":
            error = data.get("error")
            self.error = error if isinstance(error, dict) else {"message": str(error)}
            return
        message = data.get("message") if event == b"message_start" else None
        if isinstance(message, dict):
            self.message_id = str(message.get("id") or "") or None
            self.model = message.get("model")
            usage = message.get("usage")
        else:
            usage = data.get("usage")
        if isinstance(usage, dict):
            if usage.get("input_tokens") is not None:
                self.input_tokens = int(usage["input_tokens"])
            if usage.get("output_tokens") is not None:
                self.output_tokens = int(usage["output_tokens"])
        if event == b"message_delta":
            self.final_usage = True

    def _failure(self, kind: str, message: str, retryable: bool, spent: bool) -> Failure:
        return Failure(
            kind,
            message,
            retryable,
            spent,
            self.input_tokens,
            self.output_tokens,
            self.message_id,
            self.model,
        )

    def errored(self) -> Failure:
        """The failure the stream's `error` event says (the API answered: what it reported
        is what the call cost)."""
        error = self.error or {}
        kind = str(error.get("type") or "stream_error")
        message = f"error event in the stream: {kind}: {error.get('message') or ''}".rstrip(": ")
        return self._failure(kind, message, kind in _RETRYABLE_ERRORS, spent=False)

    def cut(self) -> Failure:
        """The failure of a stream that ended before its `message_stop` (the upstream closed
        it early): spent unless its final usage came."""
        message = "the answer's stream ended before its message_stop"
        return self._failure("incomplete_stream", message, True, spent=not self.final_usage)

    def abandoned(self) -> Failure:
        """The failure of an answer the CLI gave up before its `message_stop` (it closed the
        connection): spent unless its final usage came."""
        message = "the CLI closed the connection before the answer's message_stop"
        return self._failure("abandoned", message, True, spent=not self.final_usage)

    def broken(self, exc: Exception) -> Failure:
        """The failure of a stream broken off by `exc`: spent unless its final usage came."""
        kind, message, retryable, _sent = lost(exc)
        if self.message_id is not None:
            message = f"the answer's stream broke off before its message_stop: {exc}"
        return self._failure(kind, message, retryable, spent=not self.final_usage)


#: The events `Scan` reads the data of (a text delta, most of a stream, is skipped unread).
_READ = frozenset({b"message_start", b"message_delta", b"message_stop", b"error"})


class _Identity:
    def decompress(self, chunk: bytes) -> bytes:
        return chunk
