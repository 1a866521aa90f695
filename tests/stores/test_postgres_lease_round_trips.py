"""A PostgreSQL lease is taken and freed in one statement whenever SQL alone can decide.

Every run driven through `EventStore.hold` (each Procrastinate job, each `Runner.drive` of a
PostgreSQL store) takes and frees a lease, so each round trip saved there is saved per
drive. The holder's process being gone is the one case only Python can judge; it falls
back to the read-then-compare-and-set path, whose results the contract tests in
`test_leases.py` hold on every backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentfsm.runtime import Agent, Decision, Runner, submit
from agentfsm.stores._process import Process, this_process
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.stores.postgres_leases import AsyncPostgresLeases, PostgresLeases


class _Counted:
    """A connection that counts the statements sent on it (the real server answers)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sent = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.sent += 1
        return self.conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@pytest.fixture
def tables(postgres_dsn: str, pg_prefix: str) -> Iterator[tuple[PostgresEventStore, str]]:
    store = PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True)
    yield store, pg_prefix
    store.close()


def _leases(dsn: str, prefix: str) -> tuple[PostgresLeases, _Counted]:
    leases = PostgresLeases(dsn, table_prefix=prefix)
    counted = _Counted(leases._conn)
    leases._conn = counted  # type: ignore[assignment]
    return leases, counted


def test_a_free_absent_or_lapsed_lease_is_taken_in_one_statement(
    tables: tuple[PostgresEventStore, str], postgres_dsn: str
) -> None:
    _store, prefix = tables
    leases, counted = _leases(postgres_dsn, prefix)
    me = this_process()
    try:
        assert leases.take("r1", "w1", me, 0.2) == (True, None)  # no row yet
        assert counted.sent == 1
        time.sleep(0.3)
        taken, before = leases.take("r1", "w2", me, 30)  # lapsed: taken over, and named
        assert counted.sent == 2
        assert taken
        assert before is not None
        assert (before.id, before.live, before.run_id) == ("w1", False, "r1")
        leases.free("r1", "w2")
        assert counted.sent == 3
        assert leases.take("r1", "w3", me, 30) == (True, None)  # freed: nobody taken over
        assert counted.sent == 4
    finally:
        leases.close()


def test_a_live_lease_is_refused_in_one_statement_and_a_gone_one_is_still_taken(
    tables: tuple[PostgresEventStore, str], postgres_dsn: str
) -> None:
    _store, prefix = tables
    leases, counted = _leases(postgres_dsn, prefix)
    me = this_process()
    assert me.key is not None
    try:
        assert leases.take("r1", "w1", me, 30)[0]
        counted.sent = 0
        taken, holder = leases.take("r1", "w2", me, 30)
        assert counted.sent == 1  # refused on the row the take itself read
        assert not taken
        assert holder is not None
        assert (holder.id, holder.live) == ("w1", True)
        # A long lease of a process that is not this one (another start time of this
        # pid): gone, which only the fallback path can tell.
        machine = me.key.rsplit("/", 1)[0]
        assert leases.take("r2", "old", Process(me.host, me.pid, f"{machine}/1"), 3600)[0]
        counted.sent = 0
        taken, holder = leases.take("r2", "new", me, 30)
        assert counted.sent == 2  # judged on the row the take read, then compared-and-set
        assert taken
        assert holder is not None
        assert holder.id == "old"
    finally:
        leases.close()


def test_a_free_is_one_statement_and_drops_the_row_of_a_run_that_ended(
    tables: tuple[PostgresEventStore, str], postgres_dsn: str
) -> None:
    store, prefix = tables
    leases, counted = _leases(postgres_dsn, prefix)
    me = this_process()
    try:
        submit(store, "going", "on")
        submit(store, "over", "done")
        Runner(store, Agent("a", lambda ctx: Decision.answer("done"), [])).drive("over")
        assert store.load("over").status == "completed"
        for run in ("going", "over", "theirs"):
            assert leases.take(run, "w1", me, 30)[0]
        counted.sent = 0
        leases.free("going", "w1")
        leases.free("over", "w1")
        leases.free("theirs", "someone else")  # not its lease: nothing happens
        assert counted.sent == 3
        rows = dict(
            store._conn.execute(
                f"SELECT run_id, worker_id FROM {prefix}leases ORDER BY run_id"
            ).fetchall()
        )
        # The ended run's row is gone, the other run's is kept (free), a lease not the
        # freer's is untouched.
        assert rows == {"going": None, "theirs": "w1"}
    finally:
        leases.close()


def test_async_leases_take_and_free_in_one_statement_too(
    tables: tuple[PostgresEventStore, str], postgres_dsn: str
) -> None:
    _store, prefix = tables

    class _ACounted(_Counted):
        async def execute(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            self.sent += 1
            return await self.conn.execute(*args, **kwargs)

    async def main() -> None:
        leases = await AsyncPostgresLeases.connect(postgres_dsn, table_prefix=prefix)
        counted = _ACounted(leases._conn)
        leases._conn = counted  # type: ignore[assignment]
        me = this_process()
        try:
            assert await leases.take("a1", "w1", me, 30) == (True, None)
            taken, holder = await leases.take("a1", "w2", me, 30)
            assert not taken
            assert holder is not None
            assert holder.id == "w1"
            sent = counted.sent
            await leases.free("a1", "w1")
            assert counted.sent == sent + 1
            assert await leases.take("a1", "w2", me, 30) == (True, None)
            assert counted.sent == sent + 2
        finally:
            await leases.close()

    asyncio.run(main())


def test_a_free_drops_the_row_of_a_run_ended_in_a_tables_own_terminal_state(
    tables: tuple[PostgresEventStore, str], postgres_dsn: str
) -> None:
    """A table of one's own ends runs in states of its own (`archived` here): the free of a
    run in one of them deletes its row; the default's `completed` is nothing to it."""
    store, prefix = tables
    leases = PostgresLeases(postgres_dsn, table_prefix=prefix, ended=["archived"])
    me = this_process()
    try:
        submit(store, "kept", "on")
        submit(store, "filed", "on")
        with store._conn.transaction():
            store._conn.execute(
                f"UPDATE {prefix}runs SET status = 'archived' WHERE run_id = 'filed'"
            )
            store._conn.execute(
                f"UPDATE {prefix}runs SET status = 'completed' WHERE run_id = 'kept'"
            )
        for run in ("kept", "filed"):
            assert leases.take(run, "w1", me, 30)[0]
            leases.free(run, "w1")
        rows = dict(store._conn.execute(f"SELECT run_id, worker_id FROM {prefix}leases").fetchall())
        assert rows == {"kept": None}
    finally:
        leases.close()
