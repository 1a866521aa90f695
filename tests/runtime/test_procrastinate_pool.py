"""The worker's Procrastinate pool: a liveness round trip only where it can find something.

Procrastinate's own pool checks every connection it gives out with a round trip, two per
job (its fetch and its finish). The engine's pool (`_job_pool`) checks a connection only
when it sat unused longer than `CHECK_IDLE` seconds or its socket has something to say,
and runs in autocommit (no `BEGIN`/`COMMIT` around Procrastinate's one-statement calls).
These tests hold it to both halves: a hot pool skips the round trip, and a pool whose
backends the server ended still runs the next job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import CHECK_IDLE, ProcrastinateEngine, _Checkout
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

    @pytest.mark.parametrize("idle", [0.0, CHECK_IDLE + 0.5], ids=["hot", "idle"])
    def test_the_next_job_runs_after_the_server_ends_every_connection(
        self, idle: float, engine: ProcrastinateEngine, serving: Serving, pq_dsn: str
    ) -> None:
        """A run completes; the server ends every backend of the database (the pool's, the
        job thread's store and fence connections, the LISTEN one), a moment later (a hot
        pool) or once the pool sat idle; the next run submitted still completes."""
        with engine.store() as store:
            submit(store, "r1", "quick")
        assert _ends(engine, "r1") == "completed"
        time.sleep(idle)
        _terminate(pq_dsn, _backends(pq_dsn))
        with engine.store() as store:
            submit(store, "r2", "quick")
        assert _ends(engine, "r2") == "completed"
