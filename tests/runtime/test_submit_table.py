"""`submit` and `asubmit` record the table a run is started under, on every kind of store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentfsm.reducers import Reducer
from agentfsm.runtime.control import asubmit, submit
from agentfsm.stores import (
    MemoryEventStore,
    SQLiteEventStore,
    StoreOptions,
    ThreadedAsyncEventStore,
)
from examples.lifecycles.ticket import TICKET_TABLE

OPTIONS = StoreOptions(reducer=Reducer(TICKET_TABLE))


def test_submit_records_the_stores_table() -> None:
    """A run submitted to a store of the ticket table names that table."""
    store = MemoryEventStore(options=OPTIONS)
    assert submit(store, "t-1", "refund").table == TICKET_TABLE.ref
    assert next(iter(store.events("t-1"))).table == TICKET_TABLE.ref  # type: ignore[union-attr]


def test_asubmit_records_the_stores_table_too(tmp_path: Path) -> None:
    """The async verb writes the same `run.started` as the sync one."""

    async def scenario() -> None:
        sync = SQLiteEventStore(tmp_path / "runs.db", options=OPTIONS)
        async with ThreadedAsyncEventStore(sync) as store:
            record = await asubmit(store, "t-1", "refund")
        assert record.table == TICKET_TABLE.ref
        with SQLiteEventStore(tmp_path / "runs.db", options=OPTIONS) as again:
            assert next(iter(again.events("t-1"))).table == TICKET_TABLE.ref  # type: ignore[union-attr]

    asyncio.run(scenario())
