"""The PostgreSQL stores' `after_append` hook: it runs inside the append's transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentfsm.record import RunRecord
from agentfsm.runtime import asubmit, pause, resume, submit
from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore


class RefusedError(Exception):
    """What the hook raises to undo the append."""


def test_the_hook_sees_the_record_and_the_types_on_the_appends_connection(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """It is called once per append, inside the transaction, with the record after it."""
    seen: list[tuple[str, int, tuple[str, ...], bool]] = []

    def hook(conn: Any, record: RunRecord, types: tuple[str, ...]) -> None:
        in_txn = conn.info.transaction_status.name == "INTRANS"
        seen.append((record.run_id, record.version, types, in_txn))

    with PostgresEventStore(
        postgres_dsn, table_prefix=pg_prefix, migrate=True, after_append=hook
    ) as store:
        submit(store, "r1")
    assert seen == [("r1", 1, ("run.started",), True)]


def test_a_hook_that_raises_undoes_the_append(postgres_dsn: str, pg_prefix: str) -> None:
    """What the hook writes and the events commit together, or neither does."""

    def hook(conn: Any, record: RunRecord, types: tuple[str, ...]) -> None:
        raise RefusedError

    with PostgresEventStore(
        postgres_dsn, table_prefix=pg_prefix, migrate=True, after_append=hook
    ) as store:
        with pytest.raises(RefusedError):
            submit(store, "r1")
        assert store.runs() == []


def test_the_async_store_awaits_its_hook_in_the_transaction(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """`AsyncPostgresEventStore` does the same with an async hook."""

    async def go() -> list[str]:
        seen: list[str] = []

        async def hook(conn: Any, record: RunRecord, types: tuple[str, ...]) -> None:
            seen.append(conn.info.transaction_status.name)
            raise RefusedError

        store = await AsyncPostgresEventStore.connect(
            postgres_dsn, table_prefix=pg_prefix, migrate=True, after_append=hook
        )
        try:
            with pytest.raises(RefusedError):
                await asubmit(store, "r1")
            assert await store.runs() == []
        finally:
            await store.close()
        return seen

    assert asyncio.run(go()) == ["INTRANS"]


class _Picky:
    """A hook that wants only `run.started` batches, and notes every question and call."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []
        self.called: list[tuple[str, ...]] = []

    def wants(self, record: RunRecord, types: tuple[str, ...]) -> bool:
        self.asked.append(types)
        return "run.started" in types

    def __call__(self, conn: Any, record: RunRecord, types: tuple[str, ...]) -> None:
        self.called.append(types)


def test_a_hook_that_wants_nothing_leaves_the_append_one_statement(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """`wants(record, types)` is asked before the write: False, and the hook is not called
    and no transaction is opened (the append stays one autocommit statement)."""
    hook = _Picky()
    with PostgresEventStore(
        postgres_dsn, table_prefix=pg_prefix, migrate=True, after_append=hook
    ) as store:
        submit(store, "r1")
        statements: list[str] = []
        original = store._conn.transaction

        def counting(*args: Any, **kwargs: Any) -> Any:
            statements.append("transaction")
            return original(*args, **kwargs)

        store._conn.transaction = counting  # type: ignore[method-assign]
        pause_then_resume(store, "r1")
    assert hook.called == [("run.started",)]
    assert hook.asked == [("run.started",), ("run.paused",), ("run.resumed",)]
    assert statements == []


def test_the_async_store_asks_wants_too(postgres_dsn: str, pg_prefix: str) -> None:
    """`AsyncPostgresEventStore` skips a hook that wants nothing alike."""

    async def go() -> list[tuple[str, ...]]:
        called: list[tuple[str, ...]] = []

        class Hook:
            def wants(self, record: RunRecord, types: tuple[str, ...]) -> bool:
                return False

            async def __call__(self, conn: Any, record: RunRecord, types: Any) -> None:
                called.append(types)

        store = await AsyncPostgresEventStore.connect(
            postgres_dsn, table_prefix=pg_prefix, migrate=True, after_append=Hook()
        )
        try:
            await asubmit(store, "r1")
        finally:
            await store.close()
        return called

    assert asyncio.run(go()) == []


def pause_then_resume(store: PostgresEventStore, run_id: str) -> None:
    pause(store, run_id, "a while")
    resume(store, run_id)
