"""The event-store contract for asyncio code, `AsyncEventStore`, and the store template's
async shell, `AsyncStoreShell`.

Re-exported by `agentfsm.stores.base` beside `EventStore`, whose docstring states the
contract both keep.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Self, TypeVar

from agentfsm.errors import ConcurrencyConflictError, IntegrityKeyError, LifecycleError
from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores._append import PreparedAppend, takes_fold
from agentfsm.stores._checks import check_run_id, no_attachments, no_leases
from agentfsm.stores._core import Steps, StoreCore
from agentfsm.stores.anchor import AnchoredHead
from agentfsm.stores.lease import (
    LEASE_TTL,
    AsyncLease,
    AsyncLeaseRows,
    Holder,
    atake_lease,
    live_holder,
    root_of,
)
from agentfsm.stores.rows import Attachment, Folded, StoredEvent, StoredSnapshot, VerifyReport
from agentfsm.stores.runs import COUNT_EXACT_UP_TO, RunCount, RunInfo, RunOrder

__all__ = ["AsyncEventStore", "AsyncStoreShell"]

T = TypeVar("T")


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


class AsyncStoreShell(StoreCore, AsyncEventStore):
    """The async shell of the store template (`_core.StoreCore`): every decision is the
    core's, this class awaits the hooks it asks for. A natively async backend
    (`AsyncPostgresEventStore`) subclasses it and implements them as coroutines, with the
    signatures `EventStore` gives them; the anchor, a sync object, is called on a thread.
    """

    #: Rows read per query while a run's events are streamed.
    _page = 1000

    async def _run(self, steps: Steps[T]) -> T:
        """Drive one of the core's operations to its end, awaiting each hook it asks for
        (and throwing in what a hook raised, where it was asked for)."""
        try:
            io = next(steps)
            while True:
                try:
                    got = await getattr(self, io[0])(*io[1:])
                except Exception as exc:  # noqa: BLE001  (the core decides what a hook's error means)
                    io = steps.throw(exc)
                else:
                    io = steps.send(got)
        except StopIteration as done:
            result: T = done.value
            return result

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
        batch, head = self._append_start(run_id, events, expected_version)
        if head is None or self.options.anchor is not None:
            steps = self._append_steps(run_id, batch, expected_version, folded, head)
            return await self._run(steps)
        # As `EventStore.append`: a cached head and no anchor, the write awaited straight.
        try:
            prepared = self._prepare(head, batch, folded)
        except LifecycleError:
            await self._run(self._refused_steps(run_id, expected_version))
            raise
        try:
            await self._write(prepared)
        except ConcurrencyConflictError:
            await self._run(self._lost_race_steps(run_id))
            raise
        return self._appended(prepared)

    async def load(self, run_id: str) -> RunRecord:
        """The run's current record (see `EventStore.load`)."""
        return await self._run(self._load_steps(run_id))

    async def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after `after`, in order, a page of rows per read (under a key,
        each row's link checked, as `EventStore.events` does)."""
        reader = await self._run(self._events_steps(run_id, after))
        start = reader.start
        while True:
            page = await self._first_rows(run_id, start, self._page)
            for row in page:
                event = reader.event(row)
                if event is not None:
                    yield event
            if len(page) < self._page:
                reader.end()
                return
            start = page[-1].sequence

    async def run_info(self, run_id: str) -> RunInfo:
        """The run's row of the runs table (see `EventStore.run_info`)."""
        return await self._run(self._run_info_steps(run_id))

    async def runs(
        self,
        status: str | Iterable[str] | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        order: RunOrder = "run_id",
    ) -> list[RunInfo]:
        """Runs in `order`, paged by key (see `EventStore.runs`)."""
        return await self._run(self._runs_steps(status, limit, after, order))

    async def count_runs(
        self, status: str | Iterable[str] | None = None, *, exact_up_to: int = COUNT_EXACT_UP_TO
    ) -> RunCount:
        """How many runs are in `status`, counted up to `exact_up_to` and estimated past it
        (see `EventStore.count_runs`)."""
        return await self._run(self._count_runs_steps(status, exact_up_to))

    async def verify(self, run_id: str) -> VerifyReport:
        """Check every stored row of the run (see `EventStore.verify`)."""
        return await self._run(self._verify_steps(run_id))

    async def put_attachment(self, run_id: str, name: str, data: bytes, *, version: int) -> None:
        """Keep `data` under `(run_id, name)` (see `EventStore.put_attachment`)."""
        await self._run(self._put_attachment_steps(run_id, name, data, version))

    async def attachment(self, run_id: str, name: str) -> Attachment | None:
        """The attachment under `(run_id, name)`, or None (see `EventStore.attachment`)."""
        found: Attachment | None = await self._run(
            self._attachment_steps("_read_attachment", run_id, name)
        )
        return found

    async def delete_attachment(self, run_id: str, name: str) -> bool:
        """Drop the attachment under `(run_id, name)` (see `EventStore.delete_attachment`)."""
        deleted: bool = await self._run(self._attachment_steps("_delete_attachment", run_id, name))
        return deleted

    async def _open_key_check(self) -> None:
        """`EventStore._open_key_check`, awaited."""
        await self._run(self._open_key_steps())

    async def _key_refusal(self) -> IntegrityKeyError | None:
        """`EventStore._key_refusal`, awaited."""
        return await self._run(self._key_refusal_steps())

    # -- the shell's own hooks (the anchor is a sync object: called on a thread) -------------

    async def _put_new_meta(self, key: str, value: str) -> bool:
        done: bool = await self._put_meta(key, value, expected=None)
        return done

    async def _anchor_read(self, run_id: str) -> AnchoredHead | None:
        anchor = self.options.anchor
        return None if anchor is None else await asyncio.to_thread(anchor.get, run_id)

    async def _anchor_write(self, heads: list[AnchoredHead]) -> None:
        anchor = self.options.anchor
        assert anchor is not None
        await asyncio.to_thread(anchor.put, heads)

    # -- required of a backend, as in `EventStore` (`_first_rows` too: one bounded read) ---

    @abc.abstractmethod
    async def _read_run(self, run_id: str) -> RunInfo | None:
        """As `EventStore._read_run`."""

    @abc.abstractmethod
    async def _read_rows(self, run_id: str, after: int) -> list[StoredEvent]:
        """As `EventStore._read_rows`, every row read."""

    @abc.abstractmethod
    async def _first_rows(self, run_id: str, after: int, n: int) -> list[StoredEvent]:
        """At most the first `n` rows `_read_rows` would return (one bounded read)."""

    @abc.abstractmethod
    async def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        """As `EventStore._read_snapshot`."""

    @abc.abstractmethod
    async def _write(self, prepared: PreparedAppend) -> None:
        """As `EventStore._write`."""

    @abc.abstractmethod
    async def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        """As `EventStore._list_runs`."""

    # -- optional for a backend, as in `EventStore` ----------------------------------------

    async def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        raise NotImplementedError(
            f"{type(self).__name__} lists runs by run id only: its backend does not "
            "implement `_list_runs_in`"
        )

    async def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        return RunCount.bounded(len(await self._list_runs(statuses, up_to + 1, None)), up_to)

    async def _write_attachment(self, attachment: Attachment) -> None:
        raise no_attachments(self)

    async def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        raise no_attachments(self)

    async def _delete_attachment(self, run_id: str, name: str) -> bool:
        raise no_attachments(self)

    async def _read_meta(self, key: str) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} keeps no meta")

    async def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        raise NotImplementedError(f"{type(self).__name__} keeps no meta")
