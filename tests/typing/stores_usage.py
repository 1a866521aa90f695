"""Typed usage of the store API: mypy strict must accept this file as written."""

from __future__ import annotations

import asyncio

from agentfsm.errors import ConcurrencyConflictError, RunHeldError
from agentfsm.events import Event, parse_event
from agentfsm.reducers import RunRecord
from agentfsm.stores import (
    AsyncEventStore,
    AsyncLease,
    Attachment,
    EventStore,
    Holder,
    Lease,
    MemoryEventStore,
    RunInfo,
    RunNotFoundError,
    SQLiteEventStore,
    StoreOptions,
    ThreadedAsyncEventStore,
    VerifyReport,
)
from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore

started: Event = parse_event(
    '{"run_id": "run_1", "sequence": 1, "type": "run.started",'
    ' "occurred_at": "2026-09-01T10:00:00Z"}'
)
store: EventStore = SQLiteEventStore(":memory:", options=StoreOptions(snapshot_every=100))
record: RunRecord = store.append("run_1", [started], expected_version=0)
try:
    store.append("run_1", [started], expected_version=0)
except ConcurrencyConflictError as exc:
    actual: int = exc.actual_version
listed: list[RunInfo] = store.runs(status=("running", "paused"), limit=10)
report: VerifyReport = store.verify("run_1")
ok: bool = report.ok
first_bad: int | None = report.sequence
sequences = [event.sequence for event in store.events("run_1", after=0)]
store.put_attachment("run_1", "sdk.state", b"{}", version=record.version)
saved: Attachment | None = store.attachment("run_1", "sdk.state")
if saved is not None:
    blob: bytes = saved.data
    belongs_to: int = saved.version
dropped: bool = store.delete_attachment("run_1", "sdk.state")
try:
    MemoryEventStore().load("missing")
except RunNotFoundError as missing:
    name: str = missing.run_id
lease: Lease = store.hold("run_1", ttl=10.0, wait=None, holder="me")
with lease.kept():
    still: bool = not lease.lost
lease.release()
holder: Holder | None = store.holder("run_1")
if holder is not None:
    said: str = holder.describe()
    age: float | None = holder.heartbeat_age
try:
    store.hold("run_1")
except RunHeldError as held:
    who: str = held.holder.describe()


async def use_async(dsn: str) -> RunRecord:
    threaded: AsyncEventStore = ThreadedAsyncEventStore(MemoryEventStore())
    await threaded.append("run_1", [started], 0)
    await threaded.put_attachment("run_1", "sdk.state", b"{}", version=1)
    kept: Attachment | None = await threaded.attachment("run_1", "sdk.state")
    removed: bool = await threaded.delete_attachment("run_1", "sdk.state")
    print(kept, removed)
    alease: AsyncLease = await threaded.hold("run_1")
    async with alease.kept():
        print(await threaded.holder("run_1"))
    await alease.release()
    native: AsyncEventStore = await AsyncPostgresEventStore.connect(dsn, migrate=True)
    async for event in native.events("run_1"):
        print(event.type)
    return await threaded.load("run_1")


_sync_pg: type[PostgresEventStore] = PostgresEventStore
_ = asyncio
