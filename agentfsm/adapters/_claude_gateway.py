"""A loopback gateway between the `claude` CLI and the Messages API: guards before the request.

The CLI sends its model requests where `ANTHROPIC_BASE_URL` points. `Gateway(upstream,
watch, env)` listens on 127.0.0.1 and the adapter points the CLI there; each model request
(`POST /v1/messages` with tools, the CLI's main requests) is handed to `watch.request(body)`
first, which records `model.started` with the guards (reservation, `MaxTurns`, deadline):
a refusal is answered here with an API error (`400 invalid_request_error`, the guard's
sentence), so the refused call never reaches the API and costs nothing. Anything else, and
an allowed request, is forwarded to `upstream` as it came and its answer streamed back
untouched (the bytes as they arrive, compressed or not). The upstream is reached as the CLI
would reach it: the proxy (`HTTPS_PROXY` / `HTTP_PROXY`, `NO_PROXY`) and CA bundle
(`SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`) of the CLI's environment (yours, then the options'
`env`).

The CLI retries a model request that failed (an error status, even a 400, which it sends
again with fewer beta features; an `error` event in the stream; a stream broken off, which
it sends again without streaming). So the outcome of each request the run's call went out
as (`Verdict.watched`) is told to `watch` before the CLI hears it, so the retry is judged
as a model call of its own (`agentfsm.adapters._attempts`):

- an error status: `watch.failed` (`http_529`, the API's message, retryable as the CLI
  judges it), before the answer is passed on;
- an `error` event in the stream: `watch.failed` with the error's type (`overloaded_error`)
  and the usage the stream reported, before the event is passed on;
- the upstream connection lost before the answer's `message_stop` (or no answer at all):
  `watch.failed` with the exception's class, and the usage the stream reported; `spent`
  when the request may have reached the API and the stream's final usage (its
  `message_delta`) never came, so what the call cost is unknown;
- a whole answer (a request without `stream`): `watch.answered` with the message, before it
  is passed on (the CLI streams no events of it to the SDK);
- a stream that reached its `message_stop`: `watch.streamed`, before the CLI reads it (the
  CLI may send its next request before the SDK's stream has brought the answer: a call it
  refused itself, say; the adapter then waits for the answer, not taking it for a resend);
- the CLI going away mid-answer when the run is not stopping: `watch.failed` (`abandoned`),
  the CLI having given the answer up.

The stream is read as it passes (`_claude_stream.Scan`: a copy, decoded when it is gzip or
deflate; one in another encoding is passed on unread, its failures seen only as an error
status or a lost connection). After an interrupt of ours the run is stopping and a failure is
not heard: the adapter closes the call with what it streamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from agentfsm.adapters._attempts import lost, refused
from agentfsm.adapters._claude_stream import Failure, Scan

__all__ = ["Failure", "Gateway", "Verdict", "Watch", "upstream_client"]

#: Headers that belong to one hop, never forwarded.
_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te",
     "proxy-connection", "upgrade", "trailer"}
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """`Watch.request`'s answer about a model request.

    Attributes:
        refusal: the sentence the CLI gets instead of an answer (the request is not sent).
        watched: whether the request went out as a model call of the run, so its outcome is
            told (`Watch.failed`, `Watch.answered`); a request of the CLI's own subagent is not.
    """

    refusal: str | None = None
    watched: bool = True


class Watch(Protocol):
    """What the gateway tells of the model requests it sees (the adapter's `Signals`)."""

    async def request(self, body: dict[str, Any]) -> Verdict:
        """A model request about to be sent: send it, and whether to watch it, or refuse."""
        ...

    async def failed(self, failure: Failure) -> None:
        """A watched request failed (before the CLI hears of it)."""
        ...

    async def answered(self, message: dict[str, Any]) -> None:
        """A watched request got a whole answer, not streamed (before the CLI reads it)."""
        ...

    async def streamed(self, message_id: str | None) -> None:
        """A watched request's stream reached its `message_stop` (before the CLI reads it)."""
        ...


def _bypassed(host: str, no_proxy: str) -> bool:
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*" or (
            entry and (host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")))
        ):
            return True
    return False


def upstream_client(upstream: str, env: Mapping[str, str]) -> httpx.AsyncClient:
    """An HTTP client reaching `upstream` through the proxy and CAs `env` names."""
    parts = urlsplit(upstream)
    host = (parts.hostname or "").lower()
    key = "HTTPS_PROXY" if parts.scheme == "https" else "HTTP_PROXY"
    proxy = env.get(key) or env.get(key.lower())
    if proxy and _bypassed(host, env.get("NO_PROXY") or env.get("no_proxy") or ""):
        proxy = None
    verify: Any = True
    bundles = [env[k] for k in ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS") if env.get(k)]
    if bundles:
        context = ssl.create_default_context()
        for bundle in bundles:
            context.load_verify_locations(bundle)
        verify = context
    timeout = httpx.Timeout(600.0, connect=30.0)
    return httpx.AsyncClient(trust_env=False, proxy=proxy, verify=verify, timeout=timeout)


class Gateway:
    """The loopback gateway (see the module docstring). `async with Gateway(...) as url:`."""

    def __init__(self, upstream: str, watch: Watch, env: Mapping[str, str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.watch = watch
        self.env = dict(env)
        #: How many model requests were forwarded, and refused here.
        self.forwarded = 0
        self.refused = 0
        self._server: asyncio.Server | None = None
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self._client = upstream_client(self.upstream, self.env)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        if self._client is not None:
            await self._client.aclose()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:  # each event goes out as it comes: no Nagle wait on small writes
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, httpx.HTTPError):
            pass  # the CLI went away (an interrupt), or upstream did: the CLI sees it
        except asyncio.CancelledError:
            pass  # the gateway closes with the leg: an idle keep-alive connection ends
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request of a keep-alive connection; False once it closes."""
        line = await reader.readline()
        if not line.strip():
            return False
        method, target, _version = line.decode("latin-1").split(" ", 2)
        headers: list[tuple[str, str]] = []
        while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = raw.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        lower = {k.lower(): v for k, v in headers}
        body = await _body(reader, lower)
        watched = False
        if method == "POST" and target.startswith("/v1/messages") and "count_tokens" not in target:
            verdict = await self._judge(body)
            if verdict.refusal is not None:
                self.refused += 1
                error = {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": verdict.refusal},
                }
                await _respond(writer, 400, "application/json", json.dumps(error).encode())
                return lower.get("connection", "").lower() != "close"
            self.forwarded += 1
            watched = verdict.watched
        await self._forward(writer, method, target, headers, body, watched=watched)
        return lower.get("connection", "").lower() != "close"

    async def _judge(self, raw: bytes) -> Verdict:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return _UNWATCHED
        if not isinstance(body, dict) or not body.get("tools"):
            return _UNWATCHED  # a side request of the CLI's (no tools): not a turn of the run
        return await self.watch.request(body)

    async def _forward(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
        *,
        watched: bool = False,
    ) -> None:
        assert self._client is not None
        sent = [(k, v) for k, v in headers if k.lower() not in _HOP]
        request = self._client.build_request(
            method, self.upstream + target, headers=sent, content=body
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if watched:  # no answer at all: the CLI sees the connection drop, and retries
                await self.watch.failed(Failure(*lost(exc)))
            raise
        try:
            kind = response.headers.get("content-type", "")
            if watched and (response.status_code >= 400 or "event-stream" not in kind):
                await self._whole(writer, response)
                return
            _head(writer, response)
            if watched:
                await self._stream(writer, response)
            else:
                async for chunk in response.aiter_raw():
                    await _chunk(writer, chunk)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            await response.aclose()

    async def _stream(self, writer: asyncio.StreamWriter, response: httpx.Response) -> None:
        """Pass a watched answer's stream on as it comes, its outcome told before the CLI
        reads it: an `error` event, its end (`message_stop`), or how it broke off."""
        scan = Scan(response.headers.get("content-encoding", ""))
        chunks = response.aiter_raw()
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except httpx.HTTPError as exc:
                if not scan.settled:
                    await self.watch.failed(scan.broken(exc))
                raise
            if not scan.settled:
                scan.feed(chunk)
                if scan.error is not None:
                    await self.watch.failed(scan.errored())
                elif scan.stopped:
                    await self.watch.streamed(scan.message_id)
            try:
                await _chunk(writer, chunk)
            except ConnectionError:
                # The CLI went away mid-answer. After our interrupt the run is stopping and
                # this is not heard; else the CLI gave the answer up (and may send it again).
                if not scan.settled:
                    await self.watch.failed(scan.abandoned())
                raise
        if not scan.settled:
            if scan.readable:  # ended before its `message_stop`: the CLI takes it as broken
                await self.watch.failed(scan.cut())
            else:  # unread: taken as whole, as the HTTP answer is
                await self.watch.streamed(None)

    async def _whole(self, writer: asyncio.StreamWriter, response: httpx.Response) -> None:
        """A watched request's answer that is not a stream (an error, or a whole message):
        read, told, then passed on as it came."""
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        # A copy that decodes what `raw` holds, as the CLI will.
        copy = httpx.Response(response.status_code, headers=response.headers, content=raw)
        if response.status_code >= 400:
            await self.watch.failed(Failure(*refused(None, copy)))
        else:
            with contextlib.suppress(ValueError, httpx.DecodingError):
                message = json.loads(copy.content)
                if isinstance(message, dict) and message.get("type") == "message":
                    await self.watch.answered(message)
        _head(writer, response)
        if raw:
            writer.write(b"%x\r\n%s\r\n" % (len(raw), raw))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


_UNWATCHED = Verdict(watched=False)


async def _chunk(writer: asyncio.StreamWriter, chunk: bytes) -> None:
    if chunk:
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()


def _head(writer: asyncio.StreamWriter, response: httpx.Response) -> None:
    head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"]
    head += [f"{k}: {v}\r\n" for k, v in response.headers.multi_items() if k.lower() not in _HOP]
    head.append("transfer-encoding: chunked\r\n\r\n")
    writer.write("".join(head).encode("latin-1"))


async def _body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readline()
    length = int(headers.get("content-length") or 0)
    return await reader.readexactly(length) if length else b""


async def _respond(writer: asyncio.StreamWriter, status: int, kind: str, data: bytes) -> None:
    reason = {400: "Bad Request"}.get(status, "OK")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {kind}\r\ncontent-length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + data)
    await writer.drain()
