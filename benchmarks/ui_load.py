"""The UI under load: 100 concurrent clients over lists, run pages, approvals and tables while
events are appended, with 1 and 2 server processes, beside issue 32's "before".

    .venv/bin/python benchmarks/ui_load.py [--clients 100] [--seconds 20] [--workers 1,2]
        [--runs 2000] [--events 10000]

Three kinds of process on loopback:

- the server: `create_app(Source(...))` served by uvicorn on one socket bound before it
  forks, in 1 or 2 processes (each answers on its own thread pool, reading through its own
  pool of SQLite handles);
- an appender, which keeps writing: a tool turn (5 events) to a live run and a new run
  about 20 times a second, as agents would;
- this process, the load generator: `--clients` clients (threads, each on its own
  kept-open connection) that each ask, one request after another for `--seconds`, for a
  page picked at random: the runs list (first page, a status filter, a page deep in the
  index), a run's page (one of the 100 short runs the list's first pages show, the
  `--events`-event run's timeline pages, a waiting
  run), a run's version poll, the approvals inbox and its count, the tables and a table.

Reported per number of server processes: requests/s, p50/p95/p99/max latency, errors (an
answer other than 200, or no answer). Targets on this 2-core machine (issue 32): p95 under
500 ms, p99 under 1 s, no errors, and requests/s growing from 1 to 2 processes. The store is
built once on /dev/shm when there is one, SQLite synchronous=NORMAL.
"""

from __future__ import annotations

import argparse
import http.client
import logging
import multiprocessing
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import structlog

from agentfsm import DEFAULT_TABLE, LogBuilder, SQLiteEventStore
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores.base import EventStore, StoreOptions
from benchmarks.bench_ui import batch_run, long_run, short_run

#: Issue 32's figures before the change, 100 clients on one server: one lock around reads.
BEFORE = {"req/s": 60.0, "p50": 1700.0, "p99": 7000.0, "max": 9800.0}
#: With reads through a pool but every page rendered per request (b2a80d0, measured on a
#: quiet machine with this script's defaults): (processes, req/s, p50, p95, p99).
BEFORE_POOL = [(1, 64.0, 1420.0, 2816.0, 3694.0), (2, 116.0, 536.0, 2073.0, 3321.0)]
WAITING = 50  # runs waiting for a person's approval (a 5-call batch each)
SHOWN = 100  # the short runs people open: those of the runs list's first pages


def build(path: Path, runs: int, events: int) -> None:
    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        for i in range(runs):
            run_id = f"run-{i:06d}"
            store.append(run_id, short_run(run_id, i), 0)
        for i in range(WAITING):
            run_id = f"wait-{i:03d}"
            store.append(run_id, batch_run(run_id, 5), 0)
        big = long_run("long-run", events)
        for start in range(0, len(big), 1000):
            store.append("long-run", big[start : start + 1000], start)


def _quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)


def _serve(path: str, fd: int) -> None:
    import socket

    from agentfsm.ui import Source, UIConfig, create_app
    from agentfsm.ui._server import serve

    _quiet()
    sock = socket.socket(fileno=fd)

    def opener(table: TransitionTable) -> EventStore:
        options = StoreOptions(reducer=Reducer(table), cache_size=0)
        return SQLiteEventStore(path, options=options)

    config = UIConfig(token="x" * 20, read_only=True, allowed_hosts=("127.0.0.1",))
    serve(create_app(Source(opener, label=path), config), sock)


def _append(path: str, stop: multiprocessing.synchronize.Event, live_id: str) -> None:
    """A tool turn to a live run and a new run, about 20 times a second, until `stop`."""
    _quiet()
    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        live = LogBuilder(live_id)
        live.add("run.started", objective="keep going", agent="bench")
        store.append(live_id, live.events, 0)
        version, i = len(live.events), 0
        while not stop.is_set():
            i += 1
            log = LogBuilder(live_id, start=version + 1)
            calls = [{"action_id": f"a{i}", "tool": "lookup", "arguments": {"n": i}}]
            log.add("model.started")
            log.add("model.completed", decision="tool_calls", tool_calls=calls)
            log.add("tool.requested", action_id=f"a{i}", tool="lookup", arguments={"n": i})
            log.add("tool.started", action_id=f"a{i}")
            log.add("tool.completed", action_id=f"a{i}", result={"n": i})
            store.append(live_id, log.events, version)
            version += len(log.events)
            new = f"{live_id}-new-{i:06d}"
            store.append(new, short_run(new, i), 0)
            time.sleep(0.05)


def _urls(runs: int, events: int) -> tuple[list[str], int]:
    pages = max(events // 100, 1)
    digest = DEFAULT_TABLE.digest
    return [
        "/",
        "/?status=completed",
        f"/?after=run-{runs // 2:06d}",
        "/run?id=run-{short}",
        "/run?id=run-{short}",
        "/run?id=long-run&page={page}",
        "/run?id=wait-{wait}",
        "/run/version?id=live-{workers}",
        "/run/version?id=run-{short}",
        "/approvals",
        "/approvals/count",
        "/tables",
        f"/table?digest={digest}",
    ], pages


def _client(
    port: int, paths: list[str], runs: int, pages: int, workers: int, until: float,
    latencies: list[float], errors: list[str], rng: random.Random,
) -> None:  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.perf_counter() < until:
        path = rng.choice(paths).format(
            short=f"{rng.randrange(min(runs, SHOWN)):06d}",
            page=rng.randrange(1, pages + 1), wait=f"{rng.randrange(WAITING):03d}",
            workers=workers,
        )  # fmt: skip
        start = time.perf_counter()
        try:
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                errors.append(f"{answer.status} {path}")
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"{type(exc).__name__} {path}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        latencies.append(time.perf_counter() - start)
    conn.close()


def _load(
    port: int, clients: int, seconds: float, runs: int, events: int, workers: int
) -> dict[str, float]:
    """`clients` threads, each on its own kept-open connection (http.client: httpx's async
    client cost more CPU than the server's pages on this machine)."""
    paths, pages = _urls(runs, events)
    latencies: list[float] = []
    errors: list[str] = []
    until = time.perf_counter() + seconds
    threads = [
        threading.Thread(
            target=_client,
            args=(port, paths, runs, pages, workers, until, latencies, errors, random.Random(i)),
        )
        for i in range(clients)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    ms = sorted(x * 1000 for x in latencies)
    q = statistics.quantiles(ms, n=100)
    if errors:
        print(f"    errors, first few: {errors[:5]}", file=sys.stderr)
    return {"req/s": len(ms) / took, "p50": q[49], "p95": q[94], "p99": q[98],
            "max": ms[-1], "errors": float(len(errors)), "requests": float(len(ms))}  # fmt: skip


def run_one(path: Path, workers: int, args: argparse.Namespace) -> dict[str, float]:
    from agentfsm.ui._server import bind

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    ctx = multiprocessing.get_context("fork")
    servers = [ctx.Process(target=_serve, args=(str(path), sock.fileno())) for _ in range(workers)]
    for p in servers:
        p.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/tables", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the UI server did not start")
        time.sleep(0.1)
    with httpx.Client(base_url=url, timeout=60) as warm:  # templates compiled, paths folded
        for page in ("/", "/approvals", "/run?id=long-run", "/tables"):
            warm.get(page)
    stop = ctx.Event()
    appender = ctx.Process(target=_append, args=(str(path), stop, f"live-{workers}"))
    appender.start()
    try:
        return _load(port, args.clients, args.seconds, args.runs, args.events, workers)
    finally:
        stop.set()
        appender.join(30)
        for p in servers:
            os.kill(p.pid, signal.SIGTERM)
        for p in servers:
            p.join(30)
        sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", default="1,2", help="server processes, comma-separated")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args(argv)
    _quiet()
    shm = Path("/dev/shm")  # noqa: S108 - a private TemporaryDirectory is made inside it
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        path = Path(tmp) / "ui.db"
        started = time.perf_counter()
        build(path, args.runs, args.events)
        print(f"store: {args.runs:,} runs, {WAITING} waiting on a 5-call batch, one run of "
              f"{args.events:,} events; built in {time.perf_counter() - started:.0f} s; "
              f"{args.clients} clients for {args.seconds:.0f} s each", file=sys.stderr)  # fmt: skip
        rows = [(f"{w} server process{'es' if w > 1 else ''}", run_one(path, w, args))
                for w in (int(x) for x in args.workers.split(","))]  # fmt: skip
    print(f"| {args.clients} clients | req/s | p50 ms | p95 ms | p99 ms | max ms | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    b = BEFORE
    print(f"| before (issue 32, 1 server) | ~{b['req/s']:.0f} | {b['p50']:.0f} | - | "
          f"{b['p99']:.0f} | {b['max']:.0f} | 0 |")  # fmt: skip
    for n, rate, p50, p95, p99 in BEFORE_POOL:
        print(f"| pool, pages rendered each time ({n} server{'s' if n > 1 else ''}) | {rate:.0f} | "
              f"{p50:.0f} | {p95:.0f} | {p99:.0f} | - | 0 |")  # fmt: skip
    for name, r in rows:
        print(
            f"| {name} | {r['req/s']:.0f} | {r['p50']:.0f} | {r['p95']:.0f} | "
            f"{r['p99']:.0f} | {r['max']:.0f} | {r['errors']:.0f} of {r['requests']:.0f} |"
        )
    print("targets: p95 < 500 ms, p99 < 1,000 ms, 0 errors; req/s grows from 1 to 2 processes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
