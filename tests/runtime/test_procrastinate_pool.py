"""The worker's Procrastinate pool: a liveness round trip only where it can find something.

Procrastinate's own pool checks every connection it gives out with a round trip, two per
job (its fetch and its finish). The engine's pool (`_job_pool`) checks a connection only
when it sat unused longer than `CHECK_IDLE` seconds or its socket has something to say,
and runs in autocommit (no `BEGIN`/`COMMIT` around Procrastinate's one-statement calls).
These tests hold it to both halves: a hot pool skips the round trip, and a pool whose
backends the server ended still runs the next job.

The job threads keep connections of their own (a store's, its leases'), outside the pool:
a thread whose connections the server ended makes new ones before its next job, and a job
that fails on a dead one leaves none to its retry. The serving worker has concurrency 1,
so one job thread: the next job surely meets what the last one left.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import CHECK_IDLE, ProcrastinateEngine, _Checkout
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_app
from tests.runtime.test_procrastinate_tenants import Serving


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the round-trip checks the pool makes (each still made, on the real server)."""
    made: list[int] = []
    real = psycopg_pool.AsyncConnectionPool.check_connection

    async def counted(conn: psycopg.AsyncConnection[Any]) -> None:
        made.append(conn.info.backend_pid)
        await real(conn)

    monkeypatch.setattr(psycopg_pool.AsyncConnectionPool, "check_connection", counted)
    return made


def _terminate(dsn: str, pids: list[int]) -> None:
    """End the backends `pids` and wait until they are gone (each has said goodbye on its
    socket by then, as a server restart's backends have before it takes connections)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


async def _readable_soon(conn: psycopg.AsyncConnection[Any]) -> None:
    # The backend's goodbye reaches the socket a moment after pg_terminate_backend returns.
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(conn.fileno(), ready.set)
    try:
        await asyncio.wait_for(ready.wait(), 5)
    finally:
        loop.remove_reader(conn.fileno())


class TestCheckout:
    def test_a_connection_used_a_moment_ago_is_given_out_unchecked(
        self, pq_dsn: str, checks: list[int]
    ) -> None:
        """Its first checkout is checked; the next ones, within `idle` seconds, are not."""

        async def go() -> None:
            clock = Clock()
            check = _Checkout(idle=5.0, clock=clock)
            async with await psycopg.AsyncConnection.connect(pq_dsn, autocommit=True) as conn:
                await check(conn)
                for _ in range(3):
                    clock.now += 4.0
                    await check(conn)
                    await conn.execute("SELECT 1")

        asyncio.run(go())
        assert len(checks) == 1

    def test_a_connection_idle_longer_is_checked(self, pq_dsn: str, checks: list[int]) -> None:
        async def go() -> None:
            clock = Clock()
            check = _Checkout(idle=5.0, clock=clock)
            async with await psycopg.AsyncConnection.connect(pq_dsn, autocommit=True) as conn:
                await check(conn)
                clock.now += 5.5
                await check(conn)

        asyncio.run(go())
        assert len(checks) == 2

    def test_a_connection_the_server_ended_is_refused_however_recent(
        self, pq_dsn: str, checks: list[int]
    ) -> None:
        """`pg_terminate_backend` on a connection used a moment ago: its socket says so, so
        it is checked, and the check fails (the pool then discards it and takes another)."""

        async def go() -> None:
            clock = Clock()
            check = _Checkout(idle=5.0, clock=clock)
            async with await psycopg.AsyncConnection.connect(pq_dsn, autocommit=True) as conn:
                await check(conn)
                _terminate(pq_dsn, [conn.info.backend_pid])
                await _readable_soon(conn)
                with pytest.raises(psycopg.OperationalError):
                    await check(conn)

        asyncio.run(go())
        assert len(checks) == 2


@pytest.fixture
def engine(pq_dsn: str, tmp_path: Path) -> ProcrastinateEngine:
    engine = _pq_app.engine(pq_dsn, "agentfsm", str(tmp_path / "ledger.db"))
    engine.migrate()
    return engine


@pytest.fixture
def serving(engine: ProcrastinateEngine) -> Iterator[Serving]:
    # Concurrency 1, so one job thread: every job meets the connections the jobs before it
    # left there.
    worker = Serving(engine, ["agentfsm"], "w0")
    try:
        yield worker
    finally:
        worker.stop()


def _ends(engine: ProcrastinateEngine, run_id: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    with engine.store() as store:
        while time.monotonic() < deadline:
            status = store.run_info(run_id).status
            if status in ("completed", "failed"):
                return status
            time.sleep(0.05)
        return store.run_info(run_id).status


def _backends(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
    return [row[0] for row in rows]


class TestServing:
    def test_the_pool_gives_out_its_connections_in_autocommit(
        self, engine: ProcrastinateEngine, serving: Serving
    ) -> None:
        """No `BEGIN`/`COMMIT` round trips around Procrastinate's one-statement calls."""
        pool = engine.app.connector.pool  # type: ignore[attr-defined]

        async def autocommit() -> bool:
            async with pool.connection() as conn:
                return bool(conn.autocommit)

        assert asyncio.run_coroutine_threadsafe(autocommit(), serving.loop).result(10)

    def test_a_worker_holds_two_sessions_per_job_thread_and_a_pool_sized_to_its_jobs(
        self, engine: ProcrastinateEngine, serving: Serving, pq_dsn: str
    ) -> None:
        """After six runs at concurrency 1: the job thread's store and its leases (its checks
        go on the store's connection), a pool of at most concurrency + 2 (psycopg's default
        kept 4 whatever the concurrency), the listener and the recovery pass's connection:
        at most 7 sessions, where there were 9 or more."""
        with engine.store() as store:
            for n in range(6):
                submit(store, f"r{n}", "quick")
        for n in range(6):
            assert _ends(engine, f"r{n}") == "completed"
        time.sleep(engine.settings.recover_every * 2)  # a recovery pass has opened its own
        pool = engine.app.connector.pool  # type: ignore[attr-defined]
        assert pool.get_stats()["pool_size"] <= engine.settings.concurrency + 2
        (job_store,) = engine._opened
        assert job_store._leases is not None  # the job took its lease through it
        assert len(_backends(pq_dsn)) <= 7

    @pytest.mark.parametrize("idle", [0.0, CHECK_IDLE + 0.5], ids=["hot", "idle"])
    def test_the_next_job_runs_after_the_server_ends_every_connection(
        self, idle: float, engine: ProcrastinateEngine, serving: Serving, pq_dsn: str
    ) -> None:
        """A run completes; the server ends every backend of the database (the pool's, the
        job thread's store and lease connections, the LISTEN one), a moment later (a
        hot pool) or once the pool sat idle; the next run, driven on the same job thread,
        completes at its job's first attempt: no connection the server ended serves it."""
        with engine.store() as store:
            submit(store, "r1", "quick")
        assert _ends(engine, "r1") == "completed"
        time.sleep(idle)
        _terminate(pq_dsn, _backends(pq_dsn))
        with engine.store() as store:
            submit(store, "r2", "quick")
        assert _ends(engine, "r2") == "completed"
        assert _attempts(pq_dsn, "r2") == [1]

    def test_a_job_that_met_a_dead_connection_leaves_none_to_its_retry(
        self,
        engine: ProcrastinateEngine,
        serving: Serving,
        pq_dsn: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The server ends the job thread's store connection while the job's tool runs: the
        job's next append fails on it, and the job's retry, on the same thread, runs on new
        connections and completes."""
        monkeypatch.setenv("PQ_TOOL_DELAY", "1.0")
        with engine.store() as store:
            submit(store, "r1", "plain")
            deadline = time.monotonic() + 10
            while "tool.started" not in {e.type for e in store.events("r1")}:
                assert time.monotonic() < deadline, "the tool did not start"
                time.sleep(0.02)
        (job_store,) = engine._opened
        _terminate(pq_dsn, [job_store._conn.info.backend_pid])
        assert _ends(engine, "r1") == "completed"
        assert _attempts(pq_dsn, "r1") == [2]


def test_jobs_run_on_the_workers_own_threads_whatever_else_uses_the_loops_executor(
    engine: ProcrastinateEngine,
) -> None:
    """Four threads of the event loop's default executor are made at once (as
    `asyncio.to_thread` and name lookups make them), then sit idle; twelve runs driven one
    after the other all run on the one job thread of a worker of concurrency 1, so the worker
    opens one store (and its leases' connection), not one per thread a job
    happened to land on."""
    worker = Serving(engine, ["agentfsm"], "w0")
    try:

        async def crowd() -> None:
            await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.2) for _ in range(4)))

        asyncio.run_coroutine_threadsafe(crowd(), worker.loop).result(10)
        for n in range(12):
            with engine.store() as store:
                submit(store, f"r{n}", "quick")
            assert _ends(engine, f"r{n}") == "completed"
        stores = [h for h in engine._opened if isinstance(h, PostgresEventStore)]
        assert len(stores) == 1
    finally:
        worker.stop()


def _attempts(dsn: str, run_id: str, timeout: float = 10.0) -> list[int]:
    """The attempts each advance job of the run took to end (Procrastinate counts each
    ended attempt, the successful one included), once every one has ended: a job records
    its run's end before Procrastinate records the job's."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            rows = conn.execute(
                "SELECT status, attempts FROM procrastinate_jobs "
                "WHERE task_name = 'agentfsm.advance' AND args->>'run_id' = %s ORDER BY id",
                (run_id,),
            ).fetchall()
            ended = all(status in ("succeeded", "failed") for status, _ in rows)
            if ended or time.monotonic() > deadline:
                return [attempts for _, attempts in rows]
            time.sleep(0.05)


def test_a_job_cancelled_by_an_abort_ends_only_once_its_thread_is_done() -> None:
    """Procrastinate cancels an async job it is asked to abort; the job's drive runs on a
    job thread, which nothing can stop from outside, so the job waits its work out (as a
    sync job would be left to finish) rather than end while its run is still driven."""
    engine = ProcrastinateEngine("dbname=unused", lambda store: None)  # type: ignore[arg-type,return-value]
    finished = threading.Event()

    def work() -> str:
        time.sleep(0.3)
        finished.set()
        return "advanced"

    async def cancelled() -> str:
        job = asyncio.ensure_future(engine._on_job_thread(work))
        await asyncio.sleep(0.05)
        job.cancel()
        return await job

    assert asyncio.run(cancelled()) == "advanced"
    assert finished.is_set()
