"""A loopback gateway between the `claude` CLI and the Messages API: guards before the request.

The CLI sends its model requests where `ANTHROPIC_BASE_URL` points. `Gateway(upstream,
before)` listens on 127.0.0.1 and the adapter points the CLI there; each model request
(`POST /v1/messages` with tools, the CLI's main requests) is handed to `before(body)`
first, which records `model.started` with the guards (reservation, `MaxTurns`, deadline):
a refusal is answered here with an API error (`400 invalid_request_error`, the guard's
sentence), so the refused call never reaches the API and costs nothing. Anything else, and
an allowed request, is forwarded to `upstream` as it came and its answer streamed back
untouched (the bytes as they arrive, compressed or not). The upstream is reached as the CLI
would reach it: the proxy (`HTTPS_PROXY` / `HTTP_PROXY`, `NO_PROXY`) and CA bundle
(`SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`) of the CLI's environment (yours, then the options'
`env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = ["Gateway", "upstream_client"]

#: Headers that belong to one hop, never forwarded.
_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te",
     "proxy-connection", "upgrade", "trailer"}
)  # fmt: skip

#: `before(body)`: None to forward the request, or the refusal's message.
Before = Callable[[dict[str, Any]], Awaitable[str | None]]


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

    def __init__(self, upstream: str, before: Before, env: Mapping[str, str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.before = before
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
        if method == "POST" and target.startswith("/v1/messages") and "count_tokens" not in target:
            refusal = await self._judge(body)
            if refusal is not None:
                self.refused += 1
                error = {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": refusal},
                }
                await _respond(writer, 400, "application/json", json.dumps(error).encode())
                return lower.get("connection", "").lower() != "close"
            self.forwarded += 1
        await self._forward(writer, method, target, headers, body)
        return lower.get("connection", "").lower() != "close"

    async def _judge(self, raw: bytes) -> str | None:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return None
        if not isinstance(body, dict) or not body.get("tools"):
            return None  # a side request of the CLI's (no tools): not a turn of the run
        return await self.before(body)

    async def _forward(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> None:
        assert self._client is not None
        sent = [(k, v) for k, v in headers if k.lower() not in _HOP]
        request = self._client.build_request(
            method, self.upstream + target, headers=sent, content=body
        )
        response = await self._client.send(request, stream=True)
        try:
            head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"]
            head += [
                f"{k}: {v}\r\n" for k, v in response.headers.multi_items() if k.lower() not in _HOP
            ]
            head.append("transfer-encoding: chunked\r\n\r\n")
            writer.write("".join(head).encode("latin-1"))
            async for chunk in response.aiter_raw():
                if chunk:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            await response.aclose()


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
