"""What the Claude adapter's loopback gateway adds to a model request, direct vs through it.

    python benchmarks/claude_gateway.py [--requests 60] [--rounds 5]

A streaming fake Messages API on 127.0.0.1 answers `POST /v1/messages` with server-sent
events: `message_start`, N `content_block_delta`s (one token each, each written and flushed
on its own, as a model streams), `message_delta`, `message_stop`. One client (httpx, as a
CLI would stream it) sends the same request directly and through `Gateway` (whose check is
an instant no-op here: what the guards themselves cost is the recorder's append, measured in
`bench_adapters`; each request is watched, so the stream is read as it passes, as a run's
model call is), alternating direct / gateway request by request, in one process, for
N = 1 and N = 400 tokens. Reported: the median wall time of a request each way, the ratio,
the added time per request (N = 1) and per streamed token (the slope between N = 1 and 400);
and the same in the process's CPU time, which a loaded machine's scheduling disturbs less
(the wall time there is mostly waiting for a core at each hop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from agentfsm.adapters._claude_gateway import Failure, Gateway, Verdict

BODY = {"model": "claude-fake", "stream": True, "tools": [{"name": "t"}], "messages": []}


def _frames(tokens: int) -> list[bytes]:
    def frame(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    start = {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 10}}}
    out = [frame("message_start", start)]
    for i in range(tokens):
        delta = {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": f"tok{i} "}}  # fmt: skip
        out.append(frame("content_block_delta", delta))
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": tokens},
    }
    out += [frame("message_delta", end), frame("message_stop", {"type": "message_stop"})]
    return out


class _Fake(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        tokens = int(self.path.split("tokens=")[1]) if "tokens=" in self.path else 1
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in _frames(tokens):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


#: The process's CPU seconds spent per request, each way (the fake server's threads too:
#: the same on both paths), by the number of tokens.
CPU: dict[tuple[str, int], list[float]] = {}


async def _time(client: httpx.AsyncClient, url: str, tokens: int, way: str = "") -> float:
    t0, c0 = time.perf_counter(), time.process_time()
    async with client.stream("POST", f"{url}/v1/messages?tokens={tokens}", json=BODY) as response:
        async for _ in response.aiter_raw():
            pass
    if way:
        CPU.setdefault((way, tokens), []).append(time.process_time() - c0)
    return time.perf_counter() - t0


class _Allow:
    """Sends every request as a watched model call, and hears nothing go wrong."""

    async def request(self, body: dict[str, Any]) -> Verdict:
        return Verdict()

    async def failed(self, failure: Failure) -> None:
        raise AssertionError(f"the fake API's answer failed: {failure}")

    async def answered(self, message: dict[str, Any]) -> None:
        pass

    async def streamed(self, message_id: str | None) -> None:
        pass


async def _measure(api: str, requests: int, tokens: int) -> tuple[float, float]:
    async with Gateway(api, _Allow(), {}) as gateway, httpx.AsyncClient() as client:
        await _time(client, api, tokens)  # warm both paths (connections, code)
        await _time(client, gateway, tokens)
        direct, through = [], []
        for _ in range(requests):
            direct.append(await _time(client, api, tokens, "direct"))
            through.append(await _time(client, gateway, tokens, "gateway"))
    return statistics.median(direct), statistics.median(through)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{server.server_address[1]}"
    results: dict[int, list[tuple[float, float]]] = {1: [], 400: []}
    for _ in range(args.rounds):
        for tokens in results:
            results[tokens].append(asyncio.run(_measure(api, args.requests, tokens)))
    rows = {}
    for tokens, pairs in results.items():
        direct = statistics.median(p[0] for p in pairs)
        through = statistics.median(p[1] for p in pairs)
        rows[tokens] = (direct, through)
        added = (through - direct) * 1e3
        ratio = through / direct
        print(f"{tokens:4d} tokens: direct {direct * 1e3:7.2f} ms, gateway "
              f"{through * 1e3:7.2f} ms, ratio {ratio:.2f}x, added {added:6.2f} ms")  # fmt: skip
    added_1 = rows[1][1] - rows[1][0]
    added_n = rows[400][1] - rows[400][0]
    print(f"added per request: {added_1 * 1e3:.2f} ms; per streamed token: "
          f"{(added_n - added_1) / 399 * 1e6:.1f} µs")  # fmt: skip
    cpu = {k: statistics.median(v) for k, v in CPU.items()}
    for tokens in results:
        direct, through = cpu["direct", tokens], cpu["gateway", tokens]
        print(f"{tokens:4d} tokens, CPU: direct {direct * 1e3:6.2f} ms, gateway "
              f"{through * 1e3:6.2f} ms, added {(through - direct) * 1e3:6.2f} ms")  # fmt: skip
    slope = (cpu["gateway", 400] - cpu["direct", 400]) - (cpu["gateway", 1] - cpu["direct", 1])
    print(f"CPU added per request: {(cpu['gateway', 1] - cpu['direct', 1]) * 1e3:.2f} ms; "
          f"per streamed token: {slope / 399 * 1e6:.1f} µs")  # fmt: skip
    server.shutdown()


if __name__ == "__main__":
    main()
