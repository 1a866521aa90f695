"""Runs on many workers: Procrastinate jobs next to the home-made lease `Worker`, one run.

    make bench-engine     # or: .venv/bin/python benchmarks/bench_engine.py [--runs N]

Both on the same throwaway PostgreSQL server (one database each, fsync off: the CPU and
round trips, not the disk), with worker *processes* forked from this one:

- runs/s draining `--runs` runs (three model turns, two instant tools each) with 1, 2 and
  4 workers: `ProcrastinateEngine` vs `Worker` + `PostgresLeases`, `--rounds` times each,
  alternating, and the median of the rounds' ratios (the machine's load moves);
- wake-up latency: from `approve(...)` returning to the run's next event being appended,
  with one idle worker (Procrastinate: LISTEN/NOTIFY; `Worker.serve`: polling, `idle=0.2`);
- failover: a worker SIGKILLed in the middle of a tool call, to the run's next event on
  the other worker (Procrastinate: heartbeat 0.5 s, stalled after 2 s; `Worker`: lease
  ttl 2 s, renewed every 0.5 s).

`--costs` instead: where a run's time goes on one worker of each engine, in ms per run
(fetch, finish, the lease, the ownership check, the appends, the rest). To compare two
checkouts, run this file from each (it drives the `agentfsm` beside it), alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import structlog
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.events.models import parse_timestamp
from agentfsm.runtime import (
    ALLOW,
    Agent,
    Decision,
    ProposedCall,
    Runner,
    Tool,
    ToolContext,
    Worker,
    approve,
    needs_approval,
    submit,
)
from agentfsm.runtime.procrastinate import EngineSettings, ProcrastinateEngine
from agentfsm.stores.base import EventStore
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.stores.postgres_leases import PostgresLeases
from agentfsm.testing.fixtures.postgres_server import postgres_server

TURNS = 3
SETTINGS = EngineSettings(heartbeat=0.5, stalled_after=2.0, recover_every=0.5, poll=1.0)


def _model(ctx: Any) -> Decision:
    if ctx.turn == 1:
        return Decision.call_tools(ProposedCall("lookup", {"key": ctx.run_id}))
    if ctx.turn == 2:
        return Decision.call_tools(ProposedCall("act", {"key": ctx.run_id}))
    return Decision.answer("done")


def _policy(action: Any, record: Any) -> Any:
    if action.tool == "act" and record.objective == "ask":
        return needs_approval("ask first")
    return ALLOW


def _runner(store: EventStore) -> Runner:
    def lookup(ctx: ToolContext) -> Any:
        time.sleep(float(os.environ.get("BENCH_TOOL_DELAY", "0")))
        return {"ok": True}

    tools = [Tool("lookup", lookup, side_effects=False), Tool("act", lookup, idempotent=True)]
    return Runner(store, Agent("bench", _model, tools, _policy))


def _quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.basicConfig(level=logging.CRITICAL)


def _pq_worker(dsn: str, wait: bool) -> None:
    _quiet()
    engine = ProcrastinateEngine(dsn, _runner, settings=SETTINGS)
    asyncio.run(engine.aserve(wait=wait))


def _lease_worker(dsn: str, name: str, wait: bool) -> None:
    _quiet()
    store = PostgresEventStore(dsn)
    worker = Worker(_runner(store), PostgresLeases(dsn), worker_id=name, ttl=2.0, renew_every=0.5)
    if wait:
        worker.serve(idle=0.2)
    else:
        worker.drain()


@contextmanager
def _database(admin: str, name: str) -> Iterator[str]:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(admin, dbname=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _procs(target: Callable[..., None], args: list[tuple[Any, ...]]) -> list[Any]:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    return procs


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=30)


def drain(admin: str, engine: str, workers: int, runs: int) -> float:
    """Seconds for `workers` processes to drain `runs` submitted runs."""
    with _database(admin, f"bench_{engine}_{workers}") as dsn:
        if engine == "procrastinate":
            eng = ProcrastinateEngine(dsn, _runner, settings=SETTINGS)
            eng.migrate()
            store: PostgresEventStore = eng.store()
            target: Callable[..., None] = _pq_worker
            args: list[tuple[Any, ...]] = [(dsn, False)] * workers
        else:
            store = PostgresEventStore(dsn, migrate=True)
            PostgresLeases(dsn).close()
            target = _lease_worker
            args = [(dsn, f"w{i}", False) for i in range(workers)]
        for i in range(runs):
            submit(store, f"r{i:05d}", "go")
        t = time.perf_counter()
        procs = _procs(target, args)
        for p in procs:
            p.join()
        took = time.perf_counter() - t
        done = len(store.runs("completed"))
        store.close()
        assert done == runs, (engine, workers, done)
        return took


class Costs:
    """Wall time and calls of the functions a job goes through, summed over a drain."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _add(self, name: str, took: float) -> None:
        with self._lock:
            got = self.spent.setdefault(name, [0.0, 0])
            got[0] += took
            got[1] += 1

    def timed(self, owner: Any, attr: str, name: str) -> None:
        """Time every call of `owner.attr` (a class's method or an object's), as `name`."""
        real = getattr(owner, attr)
        if asyncio.iscoroutinefunction(real):

            async def atimed(*args: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return await real(*args, **kwargs)
                finally:
                    self._add(name, time.perf_counter() - t)

            setattr(owner, attr, atimed)
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self._add(name, time.perf_counter() - t)

        setattr(owner, attr, timed)

    def ms(self, name: str, jobs: int) -> float:
        return self.spent.get(name, [0.0, 0])[0] * 1000 / jobs

    def per_job(self, name: str, jobs: int) -> float:
        return self.spent.get(name, [0.0, 0])[1] / jobs


def costs(admin: str, runs: int) -> None:
    """Where a run's time goes, one worker of each engine draining `runs` runs (in a child
    process each, so the timers set there stay there): ms per run of each part (a run is
    one job here: three turns fit in a time slice)."""
    for name, target in (("procrastinate", _pq_costs), ("worker", _worker_costs)):
        with _database(admin, f"costs_{name}") as dsn:
            if name == "procrastinate":
                eng = ProcrastinateEngine(dsn, _runner, settings=SETTINGS)
                eng.migrate()
                store: PostgresEventStore = eng.store()
            else:
                store = PostgresEventStore(dsn, migrate=True)
                PostgresLeases(dsn).close()
            for i in range(runs):
                submit(store, f"r{i:05d}", "go")
            store.close()
            (proc,) = _procs(target, [(dsn, runs)])
            proc.join()


def _pq_costs(dsn: str, runs: int) -> None:
    from agentfsm.runtime import procrastinate as pq
    from agentfsm.stores.base import EventStore as BaseStore

    _quiet()
    eng = ProcrastinateEngine(dsn, _runner, settings=SETTINGS)
    c = Costs()
    c.timed(eng.app.job_manager, "fetch_job", "fetch")
    c.timed(eng.app.job_manager, "finish_job", "finish")
    c.timed(eng, "_advance", "job")
    c.timed(PostgresEventStore, "hold", "lease take")
    c.timed(eng, "_release", "lease release")
    c.timed(pq._Fence, "confirm", "ownership check")
    c.timed(BaseStore, "append", "appends")
    t = time.perf_counter()
    asyncio.run(eng.aserve(wait=False))
    wall = (time.perf_counter() - t) * 1000 / runs
    job = c.ms("job", runs)
    parts = ("lease take", "lease release", "ownership check", "appends")
    print(f"Procrastinate, one worker, {runs} runs: {wall:.2f} ms a run")
    for name in ("fetch", "finish", *parts):
        print(f"  {name}: {c.ms(name, runs):.2f} ms ({c.per_job(name, runs):.1f} a run)")
    inside = job - sum(c.ms(n, runs) for n in parts)
    print(f"  the rest of the job (model, tools, folds): {inside:.2f} ms")
    rest = wall - job - c.ms("fetch", runs) - c.ms("finish", runs)
    print(f"  outside the job, its fetch and its finish (thread hop, event loop): {rest:.2f} ms")


def _worker_costs(dsn: str, runs: int) -> None:
    from agentfsm.stores.base import EventStore as BaseStore

    _quiet()
    store = PostgresEventStore(dsn)
    leases = PostgresLeases(dsn)
    worker = Worker(_runner(store), leases, worker_id="w0", ttl=2.0, renew_every=0.5)
    c = Costs()
    c.timed(leases, "claim", "claim")
    c.timed(leases, "release", "release")
    c.timed(BaseStore, "append", "appends")
    t = time.perf_counter()
    worker.drain()
    wall = (time.perf_counter() - t) * 1000 / runs
    print(f"lease Worker, one worker, {runs} runs: {wall:.2f} ms a run")
    for name in ("claim", "release", "appends"):
        print(f"  {name}: {c.ms(name, runs):.2f} ms ({c.per_job(name, runs):.1f} a run)")
    rest = wall - sum(c.ms(n, runs) for n in ("claim", "release", "appends"))
    print(f"  the rest (model, tools, folds, the drain's own reads): {rest:.2f} ms")


def _next_after(store: PostgresEventStore, run_id: str, version: int, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = list(store.events(run_id, after=version))
        if events:
            return events[0]
        time.sleep(0.005)
    raise TimeoutError(run_id)


def wake_latency(admin: str, engine: str, samples: int) -> list[float]:
    """Seconds from an approval's append to the run's next event, one idle worker."""
    with _database(admin, f"wake_{engine}") as dsn:
        if engine == "procrastinate":
            eng = ProcrastinateEngine(dsn, _runner, settings=SETTINGS)
            eng.migrate()
            store = eng.store()
            procs = _procs(_pq_worker, [(dsn, True)])
        else:
            store = PostgresEventStore(dsn, migrate=True)
            PostgresLeases(dsn).close()
            procs = _procs(_lease_worker, [(dsn, "w0", True)])
        out: list[float] = []
        try:
            for i in range(samples):
                run_id = f"a{i}"
                submit(store, run_id, "ask")
                deadline = time.monotonic() + 30
                while store.run_info(run_id).status != "waiting_approval":
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                time.sleep(0.3)  # the worker is idle again
                record = store.load(run_id)
                after = approve(store, run_id, record.pending_approvals[0], approver="b")
                accepted = next(iter(store.events(run_id, after=after.version - 1)))
                nxt = _next_after(store, run_id, after.version, 30)
                out.append(
                    (
                        parse_timestamp(nxt.occurred_at) - parse_timestamp(accepted.occurred_at)
                    ).total_seconds()
                )
        finally:
            _stop(procs)
            store.close()
        return out


def failover(admin: str, engine: str, samples: int) -> list[float]:
    """Seconds from SIGKILL of the worker in a tool call to the run's next event elsewhere."""
    os.environ["BENCH_TOOL_DELAY"] = "1.0"
    out: list[float] = []
    try:
        with _database(admin, f"fail_{engine}") as dsn:
            if engine == "procrastinate":
                eng = ProcrastinateEngine(dsn, _runner, settings=SETTINGS)
                eng.migrate()
                store = eng.store()
            else:
                store = PostgresEventStore(dsn, migrate=True)
                PostgresLeases(dsn).close()
            for i in range(samples):
                run_id = f"f{i}"
                if engine == "procrastinate":
                    first = _procs(_pq_worker, [(dsn, True)])
                else:
                    first = _procs(_lease_worker, [(dsn, f"a{i}", True)])
                submit(store, run_id, "go")
                _wait_type(store, run_id, "tool.started")
                version = store.run_info(run_id).version
                os.kill(first[0].pid, signal.SIGKILL)
                killed = time.time()
                first[0].join()
                if engine == "procrastinate":
                    second = _procs(_pq_worker, [(dsn, True)])
                else:
                    second = _procs(_lease_worker, [(dsn, f"b{i}", True)])
                nxt = _next_after(store, run_id, version, 60)
                out.append(parse_timestamp(nxt.occurred_at).timestamp() - killed)
                _stop(second)
            store.close()
    finally:
        os.environ["BENCH_TOOL_DELAY"] = "0"
    return out


def _wait_type(store: PostgresEventStore, run_id: str, kind: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if kind in [e.type for e in store.events(run_id)]:
                return
        except Exception:  # noqa: BLE001, S110  (not there yet)
            pass
        assert time.monotonic() < deadline, kind
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument(
        "--rounds", type=int, default=3, help="drains per engine and worker count (default 3)"
    )
    parser.add_argument(
        "--drain-only", action="store_true", help="skip the wake-up latency and failover parts"
    )
    parser.add_argument(
        "--costs",
        action="store_true",
        help="only where a run's time goes, in ms per run, on one worker of each engine",
    )
    args = parser.parse_args()
    _quiet()
    with postgres_server() as server:
        admin = server.dsn
        if args.costs:
            costs(admin, args.runs)
            return
        print(f"{args.runs} runs x {TURNS} turns; PostgreSQL fsync off; worker processes")
        print(f"median of {args.rounds} round(s), the engines alternating within each")
        print("| workers | Procrastinate runs/s | lease Worker runs/s | time per run, vs Worker |")
        print("| ---: | ---: | ---: | ---: |")
        for workers in (1, 2, 4):
            # Interleaved, so a busy machine slows both alike: the ratio is the figure.
            rates: dict[str, list[float]] = {"procrastinate": [], "worker": []}
            for n in range(args.rounds):
                order = ["procrastinate", "worker"][:: -1 if n % 2 else 1]
                for engine in order:
                    rates[engine].append(args.runs / drain(admin, engine, workers, args.runs))
            ratios = [w / p for p, w in zip(rates["procrastinate"], rates["worker"], strict=True)]
            each = f" ({', '.join(f'{r:.2f}' for r in ratios)})" if args.rounds > 1 else ""
            pq, lw = statistics.median(rates["procrastinate"]), statistics.median(rates["worker"])
            print(f"| {workers} | {pq:.1f} | {lw:.1f} | {statistics.median(ratios):.2f}x{each} |")
        if args.drain_only:
            return
        for engine in ("procrastinate", "worker"):
            lat = wake_latency(admin, engine, args.samples)
            print(
                f"wake-up latency {engine}: median {statistics.median(lat) * 1000:.0f} ms, "
                f"max {max(lat) * 1000:.0f} ms ({len(lat)} approvals)"
            )
        for engine in ("procrastinate", "worker"):
            fo = failover(admin, engine, max(3, args.samples // 3))
            print(
                f"failover after SIGKILL {engine}: median {statistics.median(fo):.2f} s, "
                f"max {max(fo):.2f} s ({len(fo)} kills)"
            )


if __name__ == "__main__":
    main()
