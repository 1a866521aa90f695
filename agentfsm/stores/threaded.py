"""The asyncio API for a sync store, by running it on a worker thread of its own.

This is how the SQLite and memory stores speak asyncio, and it is what it says: the sync
store's blocking calls move off the event loop onto one dedicated thread, one call at a
time. The loop stays responsive; there is no parallelism within one handle (SQLite
serialises writers per file anyway). The PostgreSQL store has a natively async variant.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores._append import hands_fold, takes_fold
from agentfsm.stores._load import close_iterator
from agentfsm.stores._process import Process
from agentfsm.stores.base import AsyncEventStore, EventStore
from agentfsm.stores.lease import AsyncLeaseRows, Holder, LeaseRows
from agentfsm.stores.rows import Attachment, Folded, VerifyReport
from agentfsm.stores.runs import COUNT_EXACT_UP_TO, RunCount, RunInfo, RunOrder

__all__ = ["ThreadedAsyncEventStore"]

T = TypeVar("T")

_PAGE = 500  # events handed from the worker thread to the loop per hop


def _take(events: Iterator[Event], n: int) -> list[Event]:
    page: list[Event] = []
    for event in events:
        page.append(event)
        if len(page) == n:
            break
    return page


class ThreadedAsyncEventStore(AsyncEventStore):
    """An `AsyncEventStore` that runs a sync `EventStore` on one worker thread.

    Args:
        store: the sync store; this object owns it from now on (closing closes it).
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentfsm-store")

    async def _call(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, functools.partial(fn, *args, **kwargs))

    @takes_fold
    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        folded: Folded | None = None,
    ) -> RunRecord:
        """Validate and append a batch atomically (see `EventStore.append`)."""
        if folded is not None and hands_fold(self.store):
            return await self._call(
                self.store.append, run_id, events, expected_version, folded=folded
            )
        return await self._call(self.store.append, run_id, events, expected_version)

    @property
    def reducer(self) -> Reducer:
        """The wrapped store's reducer."""
        return self.store.reducer

    async def load(self, run_id: str) -> RunRecord:
        """The run's current record (see `EventStore.load`)."""
        return await self._call(self.store.load, run_id)

    async def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after `after`, in order, handed over in pages."""
        events = await self._call(self.store.events, run_id, after=after)
        try:
            while page := await self._call(_take, events, _PAGE):
                for event in page:
                    yield event
        finally:
            await self._call(close_iterator, events)

    async def run_info(self, run_id: str) -> RunInfo:
        """The run's row of the runs table (see `EventStore.run_info`)."""
        return await self._call(self.store.run_info, run_id)

    async def runs(
        self,
        status: str | Iterable[str] | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        order: RunOrder = "run_id",
    ) -> list[RunInfo]:
        """Runs in `order`, paged by key (see `EventStore.runs`)."""
        return await self._call(self.store.runs, status, limit=limit, after=after, order=order)

    async def count_runs(
        self, status: str | Iterable[str] | None = None, *, exact_up_to: int = COUNT_EXACT_UP_TO
    ) -> RunCount:
        """How many runs are in `status`, counted or estimated (see `EventStore.count_runs`)."""
        return await self._call(self.store.count_runs, status, exact_up_to=exact_up_to)

    async def verify(self, run_id: str) -> VerifyReport:
        """Check the run's hash chain (see `EventStore.verify`)."""
        return await self._call(self.store.verify, run_id)

    async def put_attachment(self, run_id: str, name: str, data: bytes, *, version: int) -> None:
        """Keep `data` under `(run_id, name)` (see `EventStore.put_attachment`)."""
        await self._call(self.store.put_attachment, run_id, name, data, version=version)

    async def attachment(self, run_id: str, name: str) -> Attachment | None:
        """The attachment under `(run_id, name)`, or None (see `EventStore.attachment`)."""
        return await self._call(self.store.attachment, run_id, name)

    async def delete_attachment(self, run_id: str, name: str) -> bool:
        """Drop the attachment under `(run_id, name)` (see `EventStore.delete_attachment`)."""
        return await self._call(self.store.delete_attachment, run_id, name)

    async def migrate(self) -> None:
        """Create or upgrade the store's schema (see `EventStore.migrate`)."""
        await self._call(self.store.migrate)

    async def _lease_rows(self) -> AsyncLeaseRows | None:
        rows = await self._call(self.store._lease_rows)
        return None if rows is None else _Threaded(rows, self._call)

    async def close(self) -> None:
        """Close the sync store on its thread, then stop the thread."""
        try:
            await self._call(self.store.close)
        finally:
            self._worker.shutdown(wait=True)


class _Threaded:
    """A sync store's lease table for asyncio code: taken, given up and read on the store's
    thread (they may use its connection), renewed on a thread of its own (the heartbeat's
    connection: a renewal must not queue behind a long read of events)."""

    def __init__(self, rows: LeaseRows, on_store: Callable[..., Awaitable[Any]]) -> None:
        self.rows = rows
        self._on_store = on_store

    async def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        taken: tuple[bool, Holder | None] = await self._on_store(
            self.rows.take, run_id, holder, process, ttl
        )
        return taken

    async def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        return await asyncio.to_thread(self.rows.renew, run_id, worker_id, ttl)

    async def free(self, run_id: str, holder: str) -> None:
        await self._on_store(self.rows.free, run_id, holder)

    async def read(self, run_id: str) -> Holder | None:
        found: Holder | None = await self._on_store(self.rows.read, run_id)
        return found
