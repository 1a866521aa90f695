"""The event-store contract for asyncio code: `AsyncEventStore`.

Re-exported by `agentfsm.stores.base` beside `EventStore`, whose docstring states the
contract both keep.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Self

from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores._checks import check_run_id, no_attachments, no_leases
from agentfsm.stores._holder import AsyncLeaseRows, Holder, live_holder
from agentfsm.stores._lease import LEASE_TTL, AsyncLease, atake_lease, root_of
from agentfsm.stores._rows import (
    COUNT_EXACT_UP_TO,
    Attachment,
    RunCount,
    RunInfo,
    RunOrder,
    VerifyReport,
)

__all__ = ["AsyncEventStore"]


class AsyncEventStore(abc.ABC):
    """The same contract as `EventStore`, for asyncio code.

    `AsyncPostgresEventStore` is natively async; `ThreadedAsyncEventStore` runs any sync
    store (SQLite, memory) on a worker thread of its own.
    """

    @property
    @abc.abstractmethod
    def reducer(self) -> Reducer:
        """The reducer that validates appends and folds loads (its table is the store's)."""

    @abc.abstractmethod
    async def append(
        self, run_id: str, events: Sequence[Event], expected_version: int
    ) -> RunRecord:
        """Validate and append a batch atomically (see `EventStore.append`)."""

    @abc.abstractmethod
    async def load(self, run_id: str) -> RunRecord:
        """The run's current record (see `EventStore.load`)."""

    @abc.abstractmethod
    def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after `after`, in order (see `EventStore.events`)."""

    @abc.abstractmethod
    async def run_info(self, run_id: str) -> RunInfo:
        """The run's row of the runs table (see `EventStore.run_info`)."""

    @abc.abstractmethod
    async def runs(
        self,
        status: str | Iterable[str] | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        order: RunOrder = "run_id",
    ) -> list[RunInfo]:
        """Runs in `order`, paged by key (see `EventStore.runs`)."""

    @abc.abstractmethod
    async def verify(self, run_id: str) -> VerifyReport:
        """Check the run's hash chain (see `EventStore.verify`)."""

    # Not abstract, as attachments below: async stores written before counts still work.
    async def count_runs(
        self, status: str | Iterable[str] | None = None, *, exact_up_to: int = COUNT_EXACT_UP_TO
    ) -> RunCount:
        """How many runs are in `status`, counted or estimated (see `EventStore.count_runs`)."""
        raise NotImplementedError(f"{type(self).__name__} does not count runs")

    # Not abstract, so async stores written before attachments existed still instantiate.
    async def put_attachment(self, run_id: str, name: str, data: bytes, *, version: int) -> None:
        """Keep `data` under `(run_id, name)` (see `EventStore.put_attachment`)."""
        raise no_attachments(self)

    async def attachment(self, run_id: str, name: str) -> Attachment | None:
        """The attachment under `(run_id, name)`, or None (see `EventStore.attachment`)."""
        raise no_attachments(self)

    async def delete_attachment(self, run_id: str, name: str) -> bool:
        """Drop the attachment under `(run_id, name)` (see `EventStore.delete_attachment`)."""
        raise no_attachments(self)

    async def hold(
        self,
        run_id: str,
        *,
        ttl: float = LEASE_TTL,
        wait: float | None = None,
        holder: str | None = None,
        renew_every: float | None = None,
    ) -> AsyncLease:
        """Take the run's lease for a driver of this process (see `EventStore.hold`); keep
        it alive with `async with lease.kept():` (a task of the event loop renews it).

        Raises:
            RunHeldError: a live driver holds it (still, after `wait` seconds).
            NotImplementedError: this store keeps no leases.
        """
        check_run_id(run_id)
        rows = await self._lease_rows()
        if rows is None:
            raise no_leases(self)
        return await atake_lease(rows, run_id, ttl=ttl, wait=wait, holder=holder, every=renew_every)

    async def holder(self, run_id: str) -> Holder | None:
        """Who drives the run now (see `EventStore.holder`)."""
        check_run_id(run_id)
        rows = await self._lease_rows()
        return None if rows is None else live_holder(await rows.read(root_of(run_id)))

    async def _lease_rows(self) -> AsyncLeaseRows | None:
        """The store's lease table (see `EventStore._lease_rows`), or None: optional."""
        return None

    async def migrate(self) -> None:  # noqa: B027  (optional, as in `EventStore`)
        """Create or upgrade the store's schema; safe to call any number of times."""

    async def close(self) -> None:  # noqa: B027  (optional, as in `EventStore`)
        """Release the handle's resources; the data stays."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
