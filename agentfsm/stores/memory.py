"""The in-memory store: for tests and single-process embedding. Nothing survives the process.

Everything is kept in this process's memory, with no cap unless one is given: about 8 MB per
1,000 short runs (issue 32's soak test). `MemoryStorage(max_runs=..., max_events=...)` caps
it: at the cap a new run is refused (`StoreFullError`), while the runs already there go on,
so a run that started can finish. For anything that must outlive the process, or that other
processes share, use the SQLite or PostgreSQL store.

It keeps the same rows the durable stores keep (lines, chained hashes, a runs table, one
snapshot per run, a meta table holding the key record, a lease per run), so the
conformance suite checks it exactly like the others, and several handles can share one
`MemoryStorage` the way processes share a database file: a handle under another key than
the storage's first one is refused like a process opening a keyed SQLite file without its
key. Its lease table (`MemoryLeaseTable`) is what `MemoryLeases` claims runs from for the
threads of one process (`Worker`s) and what its handles' drivers hold (`EventStore.hold`):
one table, so a claim is a driver's lease.
"""

from __future__ import annotations

import heapq
import threading
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Sequence

import attrs

from agentfsm.errors import StoreFullError
from agentfsm.stores._append import PreparedAppend
from agentfsm.stores._checks import conflict
from agentfsm.stores._keys import META_KEY, key_refusal
from agentfsm.stores._moment import moment
from agentfsm.stores._process import Process, this_process
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.stores.lease import Holder, LeaseRows, from_epoch, takeable
from agentfsm.stores.rows import Attachment, StoredEvent, StoredSnapshot
from agentfsm.stores.runs import RunCount, RunInfo, RunOrder

__all__ = ["MemoryEventStore", "MemoryLeaseTable", "MemoryLeases", "MemoryStorage"]


@attrs.frozen
class _Lease:
    worker_id: str | None
    expires_at: float
    wake_at: float | None = None
    host: str | None = None
    pid: int | None = None
    process: str | None = None
    claimed_at: float | None = None
    heartbeat_at: float | None = None


@attrs.define
class MemoryLeaseTable:
    """The leases of a memory store's runs: its `MemoryStorage`'s, shared by every handle
    and every `MemoryLeases` on it.

    Attributes:
        leases: each run's lease row.
        lock: held for every read and write of a lease.
        clock: seconds (the wall clock; tests inject one to expire leases).
    """

    leases: dict[str, _Lease] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    clock: Callable[[], float] = time.time
    #: `(wake_at, run_id)` of every timer set, earliest first (a heap). An entry whose row
    #: no longer has that time is stale and dropped when met: a claim reads the head, not
    #: every lease row.
    timers: list[tuple[float, str]] = attrs.field(factory=list)

    def put(self, run_id: str, lease: _Lease) -> None:
        """Write a run's lease row (under `lock`), keeping `timers` in step."""
        old = self.leases.get(run_id)
        self.leases[run_id] = lease
        if lease.wake_at is not None and (old is None or old.wake_at != lease.wake_at):
            heapq.heappush(self.timers, (lease.wake_at, run_id))

    def first_due(self, now: float) -> tuple[float, str] | None:
        """The earliest `(wake_at, run_id)` due by `now` whose run nobody drives (under
        `lock`). The held ones passed over are few: one per live driver."""
        timers, passed = self.timers, []
        found = None
        while timers and timers[0][0] <= now:
            wake_at, run_id = timers[0]
            lease = self.leases.get(run_id)
            if lease is None or lease.wake_at != wake_at:
                heapq.heappop(timers)  # stale: the row's time moved or the row is gone
            elif _free(lease, now):
                found = (wake_at, run_id)  # kept: the time stays until the release
                break
            else:
                passed.append(heapq.heappop(timers))
        for entry in passed:
            heapq.heappush(timers, entry)
        return found


def _at_least_one(_: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name} must be at least 1 or None, got {value}")


@attrs.define
class MemoryStorage:
    """The tables of a memory store; share one between handles to share the data.

    Attributes:
        runs: the runs table, by run id.
        events: each run's log rows, in sequence order.
        snapshots: each run's snapshot row.
        attachments: each attachment, by `(run_id, name)`.
        meta: the store's meta (its key record, under `integrity`).
        lock: held for every write and read, so handles on several threads agree.
        leases: the runs' leases (their own lock: a heartbeat never waits on an append).
        max_runs: refuse a new run once this many are kept (None: no cap).
        max_events: refuse a new run once this many events are kept in all (None: no
            cap); the runs already kept may go past it, to their end.
        event_count: how many events are kept, in all runs.
        queue: each status's top-level runs, sorted by when they took it (seconds since
            the epoch, then id): a claim reads the head of each runnable status's list,
            as the durable stores read the head of an index.
        queued: each top-level run's place in `queue`: its status and when it took it.
        made: the run ids in the order they were created (a run's creation number is its
            place here + 1), which `runs(order="newest")` reads from the end.
        created: each run's creation number.
        by_status: each status's runs' creation numbers, ascending: a page of one status,
            newest or oldest first, is a slice of its list.
    """

    runs: dict[str, RunInfo] = attrs.field(factory=dict)
    events: dict[str, list[StoredEvent]] = attrs.field(factory=dict)
    snapshots: dict[str, StoredSnapshot] = attrs.field(factory=dict)
    attachments: dict[tuple[str, str], Attachment] = attrs.field(factory=dict)
    meta: dict[str, str] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    leases: MemoryLeaseTable = attrs.field(factory=MemoryLeaseTable)
    max_runs: int | None = attrs.field(default=None, kw_only=True, validator=_at_least_one)
    max_events: int | None = attrs.field(default=None, kw_only=True, validator=_at_least_one)
    event_count: int = attrs.field(default=0, kw_only=True)
    queue: dict[str, list[tuple[float, str]]] = attrs.field(factory=dict, kw_only=True)
    queued: dict[str, tuple[str, float]] = attrs.field(factory=dict, kw_only=True)
    made: list[str] = attrs.field(factory=list, kw_only=True)
    created: dict[str, int] = attrs.field(factory=dict, kw_only=True)
    by_status: dict[str, list[int]] = attrs.field(factory=dict, kw_only=True)

    def index(self, old: RunInfo | None, info: RunInfo) -> None:
        """Keep `made`, `created` and `by_status` up with `info` (under `lock`): a new run
        takes the next creation number; one whose status changed moves between lists."""
        if old is None:
            self.made.append(info.run_id)
            number = self.created[info.run_id] = len(self.made)
            self.by_status.setdefault(info.status, []).append(number)  # the largest yet
            return
        if old.status == info.status:
            return
        number = self.created[info.run_id]
        entries = self.by_status[old.status]
        del entries[bisect_left(entries, number)]
        insort(self.by_status.setdefault(info.status, []), number)

    def page(
        self,
        order: str,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        """Runs by creation, `"newest"` or `"oldest"` first, after run `after` (under `lock`):
        a slice of each status's list (or of `made`), so a page costs its own rows."""
        newest = order == "newest"
        if after is None:
            cursor = len(self.made) + 1 if newest else 0
        elif after in self.created:
            cursor = self.created[after]
        else:
            return []
        lists = [range(1, len(self.made) + 1)] if statuses is None else [
            self.by_status.get(s, []) for s in statuses
        ]  # fmt: skip
        numbers: list[int] = []
        for entries in lists:
            if newest:
                end = bisect_left(entries, cursor)
                start = 0 if limit is None else max(end - limit, 0)
                numbers += entries[start:end]
            else:
                start = bisect_right(entries, cursor)
                numbers += entries[start : None if limit is None else start + limit]
        numbers.sort(reverse=newest)
        return [self.runs[self.made[n - 1]] for n in numbers[:limit]]

    def requeue(self, info: RunInfo) -> None:
        """Move `info`'s run to the end of its status's queue if its status changed; it
        keeps its place while appended to in the same status (under `lock`)."""
        if "/" in info.run_id:  # a subagent: driven by its parent's call, never claimed
            return
        old = self.queued.get(info.run_id)
        if old is not None and old[0] == info.status:
            return
        if old is not None:
            entries = self.queue[old[0]]
            del entries[bisect_left(entries, (old[1], info.run_id))]
        at = moment(info.updated_at)
        seconds = at.timestamp() if at is not None else time.time()
        insort(self.queue.setdefault(info.status, []), (seconds, info.run_id))
        self.queued[info.run_id] = (info.status, seconds)

    def check_room(self, run_id: str) -> None:
        """Raise `StoreFullError` if a new run `run_id` would go past a cap (under `lock`)."""
        if self.max_runs is not None and len(self.runs) >= self.max_runs:
            raise StoreFullError(run_id, "max_runs", self.max_runs)
        if self.max_events is not None and self.event_count >= self.max_events:
            raise StoreFullError(run_id, "max_events", self.max_events)


class MemoryEventStore(EventStore):
    """An `EventStore` in a dict.

    Args:
        storage: the tables to use (a fresh, empty `MemoryStorage` unless given).
        options: reducer, snapshot interval and cache size.
    """

    def __init__(
        self, storage: MemoryStorage | None = None, *, options: StoreOptions | None = None
    ) -> None:
        super().__init__(options)
        self.storage = storage if storage is not None else MemoryStorage()
        self._leases: MemoryLeases | None = None
        self._open_key_check()

    def _lease_rows(self) -> LeaseRows:
        if self._leases is None:
            self._leases = MemoryLeases(self, self.storage.leases)
        return self._leases

    def _read_run(self, run_id: str) -> RunInfo | None:
        with self.storage.lock:
            return self.storage.runs.get(run_id)

    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        with self.storage.lock:
            rows = list(self.storage.events.get(run_id, ()))
        # Rows are kept in order, so a row's index is its sequence - 1 unless the list was
        # tampered with; filter rather than slice so a tampered list still reads honestly.
        return (row for row in rows if row.sequence > after)

    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        with self.storage.lock:
            return self.storage.snapshots.get(run_id)

    def _write(self, prepared: PreparedAppend) -> None:
        storage = self.storage
        run_id = prepared.run_id
        with storage.lock:
            current = storage.runs.get(run_id)
            actual = current.version if current is not None else 0
            log = storage.events.get(run_id, [])
            # (run_id, sequence) is unique here too: the log is sorted, so its last row
            # decides whether the batch's first sequence is already taken.
            taken = bool(log) and log[-1].sequence >= prepared.rows[0].sequence
            refused = key_refusal(storage.meta.get(META_KEY), self.options.integrity)
            if refused is not None:
                raise refused
            if actual != prepared.expected_version or taken:
                raise conflict(run_id, prepared.expected_version, actual)
            if current is None:
                storage.check_room(run_id)
            storage.events.setdefault(run_id, log).extend(prepared.rows)
            storage.event_count += len(prepared.rows)
            storage.runs[run_id] = prepared.info
            storage.requeue(prepared.info)
            storage.index(current, prepared.info)
            if prepared.snapshot is not None:
                storage.snapshots[run_id] = prepared.snapshot

    def _read_meta(self, key: str) -> str | None:
        with self.storage.lock:
            return self.storage.meta.get(key)

    def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        with self.storage.lock:
            if self.storage.meta.get(key) != expected:
                return False
            self.storage.meta[key] = value
            return True

    def _rewrite_run(
        self,
        run_id: str,
        version: int,
        hashes: Sequence[tuple[int, str]],
        snapshot: StoredSnapshot | None,
        record: str,
    ) -> bool:
        storage = self.storage
        with storage.lock:
            info = storage.runs.get(run_id)
            if storage.meta.get(META_KEY) != record or info is None or info.version != version:
                return False
            new = dict(hashes)
            storage.events[run_id] = [
                attrs.evolve(row, hash=new[row.sequence]) if row.sequence in new else row
                for row in storage.events[run_id]
            ]
            if snapshot is None:
                storage.snapshots.pop(run_id, None)
            else:
                storage.snapshots[run_id] = snapshot
            return True

    def _write_attachment(self, attachment: Attachment) -> None:
        with self.storage.lock:
            self.storage.attachments[attachment.run_id, attachment.name] = attachment

    def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        with self.storage.lock:
            return self.storage.attachments.get((run_id, name))

    def _delete_attachment(self, run_id: str, name: str) -> bool:
        with self.storage.lock:
            return self.storage.attachments.pop((run_id, name), None) is not None

    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        with self.storage.lock:
            infos = sorted(self.storage.runs.values(), key=lambda info: info.run_id)
        return [
            info
            for info in infos
            if (statuses is None or info.status in statuses)
            and (after is None or info.run_id > after)
        ][:limit]

    def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        storage = self.storage
        with storage.lock:
            if order != "status":
                return storage.page(order, statuses, limit, after)
            cursor = storage.runs.get(after) if after is not None else None
            if after is not None and cursor is None:
                return []
            infos = sorted(storage.runs.values(), key=lambda info: (info.status, info.run_id))
        start = (cursor.status, cursor.run_id) if cursor is not None else None
        return [
            info
            for info in infos
            if (statuses is None or info.status in statuses)
            and (start is None or (info.status, info.run_id) > start)
        ][:limit]

    def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        # Exact whatever the bound: each status's list knows its length.
        with self.storage.lock:
            if statuses is None:
                found = len(self.storage.runs)
            else:
                found = sum(len(self.storage.by_status.get(s, ())) for s in statuses)
        return RunCount(found, True, found)


class MemoryLeases:
    """Leases over a `MemoryEventStore`'s runs (for threads of one process and tests).

    A `Worker`'s lease store (`claim`, `renew`, `release`: see `agentfsm.stores.leases`) and
    the store's own lease table for its drivers (`take`, `free`, `read`: see `LeaseRows`),
    over the same rows.

    Args:
        store: the store whose runs are claimed.
        table: the lease table (the store's own, for a `MemoryEventStore`, unless given).
        clock: seconds (the table's clock unless given; tests inject one to expire leases).
    """

    def __init__(
        self,
        store: EventStore,
        table: MemoryLeaseTable | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        if table is None:
            table = store.storage.leases if isinstance(store, MemoryEventStore) else None
        self.table = table if table is not None else MemoryLeaseTable()
        self.clock = clock if clock is not None else self.table.clock
        self._taken: dict[str, Holder | None] = {}

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run (see `LeaseStore.claim`)."""
        with self.table.lock:
            now = self.clock()
            # The run whose wake-up fell due first, then the one runnable longest (never
            # by id: ids need not grow over time). Leases are kept only for runs not over.
            due = self.table.first_due(now)
            if due is not None:
                # The time stays until the release: a worker that dies loses nothing.
                wake_at, woken = due
                self._taken[woken] = self._holder(woken, now)
                self._held_by(woken, worker_id, now, ttl, wake_at)
                return woken
            ready = self._next_ready(now)
            if ready is not None:
                lease = self.table.leases.get(ready)
                self._taken[ready] = self._holder(ready, now)
                self._held_by(ready, worker_id, now, ttl, None if lease is None else lease.wake_at)
            return ready

    def _next_ready(self, now: float) -> str | None:
        """The unleased (or lapsed) runnable run that took its status first (under the
        table's lock): the head of each runnable status's queue, past the held runs."""
        runnable = self.store.reducer.table.runnable_states
        if not isinstance(self.store, MemoryEventStore):
            # Another store's runs, by id: its own lease store claims in its order.
            for info in self.store.runs(runnable):
                if "/" not in info.run_id and self._unleased(info.run_id, now):
                    return info.run_id
            return None
        best: tuple[float, str] | None = None
        storage = self.store.storage
        with storage.lock:
            for status in runnable:
                for entry in storage.queue.get(status, ()):
                    if self._unleased(entry[1], now):
                        best = entry if best is None or entry < best else best
                        break
        return None if best is None else best[1]

    def _unleased(self, run_id: str, now: float) -> bool:
        lease = self.table.leases.get(run_id)
        return lease is None or lease.expires_at <= now

    def _drop_if_ended(self, run_id: str) -> None:
        """A run that ended gives its lease row up (under the table's lock): rows are kept
        for the runs that may be driven again, not for every run ever driven."""
        if not isinstance(self.store, MemoryEventStore):
            return
        with self.store.storage.lock:
            info = self.store.storage.runs.get(run_id)
        if info is not None and info.status in self.store.reducer.table.terminal_states:
            self.table.leases.pop(run_id, None)

    def _held_by(
        self,
        run_id: str,
        holder: str,
        now: float,
        ttl: float,
        wake_at: float | None,
        process: Process | None = None,
    ) -> None:
        p = process if process is not None else this_process()
        self.table.put(run_id, _Lease(holder, now + ttl, wake_at, p.host, p.pid, p.key, now, now))

    def taken_over(self, run_id: str) -> Holder | None:
        """The holder whose lapsed lease this object's last claim of `run_id` took (see
        `SQLiteLeases.taken_over`)."""
        with self.table.lock:
            return self._taken.pop(run_id, None)

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`)."""
        with self.table.lock:
            now = self.clock()
            lease = self.table.leases.get(run_id)
            if lease is None or lease.worker_id != worker_id or lease.expires_at <= now:
                return False
            self.table.put(run_id, attrs.evolve(lease, expires_at=now + ttl, heartbeat_at=now))
            return True

    def release(
        self, run_id: str, worker_id: str, *, retry_after: float = 0.0, wake_at: float | None = None
    ) -> None:
        """Give the lease up (see `LeaseStore.release`)."""
        with self.table.lock:
            lease = self.table.leases.get(run_id)
            if lease is not None and lease.worker_id == worker_id:
                self.table.put(run_id, _Lease(None, self.clock() + retry_after, wake_at))
                self._drop_if_ended(run_id)

    def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        """Take the lease of `run_id` if nobody live holds it (see `LeaseRows.take`)."""
        with self.table.lock:
            now = self.clock()
            found = self._holder(run_id, now)
            if not takeable(found):
                return False, found
            kept = self.table.leases.get(run_id)
            self._held_by(run_id, holder, now, ttl, None if kept is None else kept.wake_at, process)
            return True, found

    def free(self, run_id: str, holder: str) -> None:
        """Give up a lease `take` took (see `LeaseRows.free`)."""
        with self.table.lock:
            lease = self.table.leases.get(run_id)
            if lease is not None and lease.worker_id == holder:
                self.table.put(run_id, _Lease(None, self.clock(), lease.wake_at))
                self._drop_if_ended(run_id)

    def read(self, run_id: str) -> Holder | None:
        """The lease's holder, live or lapsed (see `LeaseRows.read`)."""
        with self.table.lock:
            return self._holder(run_id, self.clock())

    def _holder(self, run_id: str, now: float) -> Holder | None:
        lease = self.table.leases.get(run_id)
        if lease is None or lease.worker_id is None:
            return None
        return Holder(
            run_id=run_id,
            id=lease.worker_id,
            host=lease.host,
            pid=lease.pid,
            process=lease.process,
            since=None if lease.claimed_at is None else from_epoch(lease.claimed_at),
            heartbeat=None if lease.heartbeat_at is None else from_epoch(lease.heartbeat_at),
            expires=from_epoch(lease.expires_at),
            read_at=from_epoch(now),
        )


def _free(lease: _Lease, now: float) -> bool:
    """Nobody drives the run: released (a hold does not stop a due timer), or expired."""
    return lease.worker_id is None or lease.expires_at <= now
