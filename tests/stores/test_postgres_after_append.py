"""The PostgreSQL stores' `after_append` hook: it runs inside the append's transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentfsm.record import RunRecord
from agentfsm.runtime import asubmit, submit
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
