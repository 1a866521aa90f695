"""The event-store contract: `EventStore` (sync) and `AsyncEventStore` (asyncio).

What a store promises, whatever keeps its rows:

- `append(run_id, events, expected_version)` validates the whole batch with the reducer
  *before* writing (an illegal event refuses the batch; nothing of it is written); handed
  its writer's fold (`folded=`, see `Folded`), it judges each event without redoing the
  fold's work, the one place the Runner's events would otherwise be folded twice. Then, in
  one transaction, checks that the stored version is `expected_version` and writes the
  events, the runs row and, every `snapshot_every` events, a snapshot. A lost race raises
  `ConcurrencyConflictError` naming both versions; nothing is overwritten. `(run_id,
  sequence)` is unique in storage too, so even a writer that skips this class cannot fork
  a run.
- `load(run_id)` is the latest trusted snapshot plus the tail, folded. A snapshot that does
  not read back, or is not bound to the log's event at its sequence, is ignored (logged as
  `store.snapshot_ignored`) and the log is replayed in full.
- `events(run_id, after=)` streams the log (under a key, each row's link checked, as a load
  does); `runs(status=...)` lists runs from the runs table (a query, not a scan of every
  log); `verify(run_id)` checks the hash chain and reports the first broken link.
- A store records which integrity key it is under (`_keys.py`), and a handle under another
  is refused when it opens (`IntegrityKeyError`); every write checks the record in its
  transaction, so a store re-keyed meanwhile refuses a handle that opened before.
- With an anchor (`StoreOptions(anchor=...)`), each commit's head is given to it, and a
  load refuses a run whose log is shorter than its anchor (`TruncatedLogError`).

Beside the log, a store keeps *attachments*: named blobs per run (an SDK's saved state
while the run waits for an approval), so a run can be driven on in another process from the
store alone. `put_attachment(run_id, name, data, version=)` replaces the value under
`(run_id, name)` (last write wins); `attachment(run_id, name)` reads it back (None when
absent); `delete_attachment(run_id, name)` drops it. They never touch the log, the runs row,
snapshots or the head cache, so `load`, `events`, `run_info` and `verify` are unaffected.

And a store keeps each run's *lease* (`hold(run_id)`, `holder(run_id)`): who drives the run
now, so a second driver is refused (`RunHeldError`) while the first's heartbeat goes on (see
`agentfsm.stores.lease`). The memory, SQLite and PostgreSQL stores keep them, each on a
connection of its own (`_lease_rows`); a backend without them drives its runs unleased.

Writing a backend: subclass `EventStore` and implement the five *required* methods below
(`_read_run`, `_read_rows`, `_read_snapshot`, `_write`, `_list_runs`); `migrate` and `close`
are *optional* (no-ops by default), and so are the attachment hooks (`_write_attachment`,
`_read_attachment`, `_delete_attachment`: without them the attachment methods raise
`NotImplementedError`), and so is `_lease_rows` (without it `hold` raises it too, and
`holder` answers None). A backend that keeps a meta table implements `_read_meta` and
`_put_meta` too, calls `_open_key_check()` when it opens, and refuses in `_write` (raising
what `_key_refusal()` returns) when the store's key record is not the handle's; with
`_rewrite_run` as well, `agentfsm.stores.rekey` can re-key it. Validation, hashing,
snapshots and folding stay in the template's core (`_core.StoreCore`, which decides every
step and asks for these hooks by name; `EventStore` performs them with direct calls, the
async shell `_async_store.AsyncStoreShell` with awaits), so a backend only moves rows. Then
run the conformance suite (`agentfsm.testing.StoreConformance`) against it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Self, TypeVar

import attrs

from agentfsm.errors import ConcurrencyConflictError, IntegrityKeyError, LifecycleError
from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer
from agentfsm.stores._append import PreparedAppend, takes_fold
from agentfsm.stores._async_store import AsyncEventStore
from agentfsm.stores._checks import check_run_id, no_attachments, no_leases
from agentfsm.stores._core import LogReader, Steps, StoreCore
from agentfsm.stores._integrity import Integrity, key_from_env
from agentfsm.stores._load import close_iterator
from agentfsm.stores.anchor import Anchor, AnchoredHead, anchor_from_env, to_anchor
from agentfsm.stores.lease import LEASE_TTL, Holder, Lease, LeaseRows, live_holder, root_of
from agentfsm.stores.lease import take_lease as _take_lease
from agentfsm.stores.rows import Attachment, Folded, StoredEvent, StoredSnapshot, VerifyReport
from agentfsm.stores.runs import COUNT_EXACT_UP_TO, RunCount, RunInfo, RunOrder

__all__ = [
    "COUNT_EXACT_UP_TO",
    "DEFAULT_SNAPSHOT_EVERY",
    "AsyncEventStore",
    "EventStore",
    "StoreOptions",
]

T = TypeVar("T")

#: Snapshot after this many events unless told otherwise. A snapshot is the whole record,
#: and the record's action ledger grows with the run, so writing one costs O(run) at append
#: time; reading one back costs about the same whatever the interval. Measured on a
#: 10,001-event run: load ~30 ms with a snapshot vs ~340 ms without, while snapshotting
#: every 500 events added ~75% to batched append time. 1,000 halves that and leaves at
#: most 999 events to fold (~15 ms).
DEFAULT_SNAPSHOT_EVERY = 1000


def _check_snapshot_every(_: object, __: object, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"snapshot_every must be at least 1 or None, got {value}")


def _check_cache_size(_: object, __: object, value: int) -> None:
    if value < 0:
        raise ValueError(f"cache_size must not be negative, got {value}")


@attrs.frozen
class StoreOptions:
    """What every store is configured with.

    Attributes:
        reducer: validates appends and folds loads (the default table's unless given).
        snapshot_every: write a snapshot each time a batch crosses a multiple of this many
            events, spaced out by powers of two once the ledger holds more than a quarter
            as many actions (see `_append.py`); None never snapshots.
        cache_size: how many runs' latest records a handle keeps, so an append that follows
            the handle's own last append need not load the run again (0 turns it off).
        integrity_key: a secret (at least 16 bytes) that makes the hash chain and the
            snapshot digests HMACs, so rows changed by anyone without it are detected on
            load and by `verify`. Read from `AGENTFSM_INTEGRITY_KEY` when not given; None
            turns it off. A store records which key it is under, and refuses a handle
            with another (`IntegrityKeyError`); `agentfsm rekey` changes it.
        anchor: where each run's head is kept outside the store (an `Anchor`, or a file
            path for a `FileAnchor`): told after every commit, read back at every load,
            so a log shorter than its anchor is refused (`TruncatedLogError`). Read from
            `AGENTFSM_ANCHOR` when not given; None keeps no anchor.
    """

    reducer: Reducer = DEFAULT_REDUCER
    snapshot_every: int | None = attrs.field(
        default=DEFAULT_SNAPSHOT_EVERY, validator=_check_snapshot_every
    )
    cache_size: int = attrs.field(default=1024, validator=_check_cache_size)
    integrity_key: bytes | None = attrs.field(factory=key_from_env, repr=False)
    integrity: Integrity = attrs.field(init=False, repr=False)
    anchor: Anchor | None = attrs.field(factory=anchor_from_env, converter=to_anchor)

    @integrity.default
    def _integrity(self) -> Integrity:
        return Integrity(self.integrity_key)


class EventStore(StoreCore, abc.ABC):
    """A durable, append-only store of run event logs (sync API).

    A handle is meant for one thread at a time; open one per thread or process (they may
    share the same storage), or use `ThreadedAsyncEventStore` from asyncio code.

    The sync shell of the store template (`_core.StoreCore`): every decision is the core's,
    this class performs the hooks it asks for with direct calls.

    Args:
        options: reducer, snapshot interval and cache size (`StoreOptions()` if not given).
    """

    options: StoreOptions

    def __init__(self, options: StoreOptions | None = None) -> None:
        super().__init__(options if options is not None else StoreOptions())

    def _run(self, steps: Steps[T]) -> T:
        """Drive one of the core's operations to its end, performing each hook it asks for
        (and throwing in what a hook raised, where it was asked for)."""
        try:
            io = next(steps)
            while True:
                try:
                    got = getattr(self, io[0])(*io[1:])
                except Exception as exc:  # noqa: BLE001  (the core decides what a hook's error means)
                    io = steps.throw(exc)
                else:
                    io = steps.send(got)
        except StopIteration as done:
            result: T = done.value
            return result

    # -- the public API ------------------------------------------------------------------

    @takes_fold
    def append(
        self,
        run_id: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        folded: Folded | None = None,
    ) -> RunRecord:
        """Validate and append a batch atomically; return the run's record after it.

        Args:
            run_id: the run; the events must name it.
            events: the batch, in sequence order, starting at `expected_version + 1`.
            expected_version: the version the caller's view of the run is at (0 for a run
                that does not exist yet).
            folded: the caller's own fold of the batch, which spares the store folding it
                again when it can be trusted (see `Folded`; the Runner's writer passes it).

        Raises:
            ConcurrencyConflictError: the stored version is not `expected_version` (this
                wins over a refusal: a batch judged against a stale view is a conflict).
            LifecycleError: an event of the batch is refused (nothing was written).
            ValueError: an empty batch or a negative version.
            IntegrityKeyError: the store is under another key than this handle, or is being
                re-keyed (nothing was written).
            AnchorError: the batch is stored, but the anchor did not take its head.
        """
        batch, head = self._append_start(run_id, events, expected_version)
        if head is None or self.options.anchor is not None:
            return self._run(self._append_steps(run_id, batch, expected_version, folded, head))
        # The handle's own last append is the head, and no anchor is told: the write is the
        # only hook, performed straight (see `_core.StoreCore._append_steps`).
        try:
            prepared = self._prepare(head, batch, folded)
        except LifecycleError:
            self._run(self._refused_steps(run_id, expected_version))
            raise
        try:
            self._write(prepared)
        except ConcurrencyConflictError:
            self._run(self._lost_race_steps(run_id))
            raise
        return self._appended(prepared)

    def load(self, run_id: str) -> RunRecord:
        """The run's current record: the latest trusted snapshot plus the tail, folded.

        Raises:
            RunNotFoundError: the store has no such run.
            CorruptLogError: a stored event that is needed does not read back.
            InvalidRunIdError: `run_id` is not one any store can hold.
            TableMismatchError: the run is under another table than the store's reducer's.
            TruncatedLogError: the log is shorter than the store's anchor records.
        """
        return self._run(self._load_steps(run_id))

    def events(self, run_id: str, *, after: int = 0) -> Iterator[Event]:
        """The run's events with a sequence above `after`, in order, read lazily.

        Raises:
            RunNotFoundError: the store has no such run (raised here, not on iteration).
            CorruptLogError: while iterating, at the first row that does not read back (or,
                under a key, whose link does not match).
        """
        return self._iter_events(self._run(self._events_steps(run_id, after)))

    def run_info(self, run_id: str) -> RunInfo:
        """The run's row of the runs table (status, version) without folding its log.

        Raises:
            RunNotFoundError: the store has no such run.
        """
        return self._run(self._run_info_steps(run_id))

    def runs(
        self,
        status: str | Iterable[str] | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        order: RunOrder = "run_id",
    ) -> list[RunInfo]:
        """Runs in `order`, optionally only those in `status` (one or several).

        Paged by key, never by offset: each page starts after the last run of the one
        before, so a run added or moved between two pages shifts no other run off them, and
        a page deep in the list costs what the first does (one index range each).

        Args:
            status: a status or several; None lists every run.
            limit: at most this many.
            after: only the runs after this one in `order` (for paging: pass the last run id
                seen). In run-id order any string will do; in the other orders it must name
                a stored run.
            order: `"run_id"`; `"newest"` or `"oldest"` (by creation in this store: the order
                runs' first appends committed, so a run imported or forked today is newer
                than one started yesterday, whatever times its events carry); or
                `"status"` (A-Z, then by run id).

        Raises:
            ValueError: a negative `limit`, an unknown `order`, or (orders other than run
                id) an `after` that names no run.
            NotImplementedError: the backend lists runs by run id only.
        """
        return self._run(self._runs_steps(status, limit, after, order))

    def count_runs(
        self, status: str | Iterable[str] | None = None, *, exact_up_to: int = COUNT_EXACT_UP_TO
    ) -> RunCount:
        """How many runs are in `status` (one or several; None: every run), counted up to
        `exact_up_to` and estimated past it, so the answer costs the same however many runs
        the store holds (see `RunCount`)."""
        return self._run(self._count_runs_steps(status, exact_up_to))

    def verify(self, run_id: str) -> VerifyReport:
        """Re-read every stored row of the run and check it; the report names the first
        problem: a broken link, a row out of place, an illegal event, a runs row that
        disagrees with the log, a snapshot that does not hold what its events fold into,
        or (with an anchor) a log shorter than its anchored head, or without that head.

        Raises:
            RunNotFoundError: the store has no such run.
        """
        return self._run(self._verify_steps(run_id))

    # -- attachments -------------------------------------------------------------------

    def put_attachment(self, run_id: str, name: str, data: bytes, *, version: int) -> None:
        """Keep `data` under `(run_id, name)`, replacing any earlier value (last write wins).

        The write is atomic: a reader sees the old value or the new one, never a mix. It
        does not change the log, the run's version or its snapshot.

        Args:
            run_id: a run the store holds.
            name: the attachment's name within the run (non-empty).
            data: the bytes to keep.
            version: the run's event version the data belongs to (typically the record's
                version after the append that paused the run); at most the run's version.

        Raises:
            RunNotFoundError: the store has no such run.
            ValueError: `version` is above the run's version or below 1, or `name` is empty.
            TypeError: `name` is not a str, `data` not bytes or `version` not an int.
            NotImplementedError: this backend keeps no attachments.
        """
        self._run(self._put_attachment_steps(run_id, name, data, version))

    def attachment(self, run_id: str, name: str) -> Attachment | None:
        """The attachment kept under `(run_id, name)`, or None (also for an unknown run).

        Raises:
            ValueError: `name` is empty.
            TypeError: `name` is not a str.
            NotImplementedError: this backend keeps no attachments.
        """
        found: Attachment | None = self._run(
            self._attachment_steps("_read_attachment", run_id, name)
        )
        return found

    def delete_attachment(self, run_id: str, name: str) -> bool:
        """Drop the attachment under `(run_id, name)`; True if there was one.

        Raises:
            ValueError: `name` is empty.
            TypeError: `name` is not a str.
            NotImplementedError: this backend keeps no attachments.
        """
        deleted: bool = self._run(self._attachment_steps("_delete_attachment", run_id, name))
        return deleted

    # -- leases: one driver per run ----------------------------------------------------

    def hold(
        self,
        run_id: str,
        *,
        ttl: float = LEASE_TTL,
        wait: float | None = None,
        holder: str | None = None,
        renew_every: float | None = None,
    ) -> Lease:
        """Take the run's lease for a driver of this process (a subagent run's is its
        root's): refused at once while a live driver holds it, unless `wait` is given.

        The lease is free, or its holder's heartbeat stopped (it lapsed, or its process is
        gone on this host: see `agentfsm.stores.lease`); `Lease.takeover` then names the
        holder it replaced. Keep it alive while driving (`with lease.kept():`) and
        `release()` it after. The run need not exist yet (a new run is held before it
        starts).

        Args:
            run_id: the run.
            ttl: seconds the lease lasts past its last renewal.
            wait: seconds to wait for a live holder to let go (None: refuse at once).
            holder: the holder's id (a fresh `driver-...` unless given).
            renew_every: seconds between renewals (`ttl / 3` unless given).

        Raises:
            RunHeldError: a live driver holds it (still, after `wait` seconds).
            NotImplementedError: this backend keeps no leases.
        """
        check_run_id(run_id)
        rows = self._lease_rows()
        if rows is None:
            raise no_leases(self)
        return _take_lease(rows, run_id, ttl=ttl, wait=wait, holder=holder, every=renew_every)

    def holder(self, run_id: str) -> Holder | None:
        """Who drives the run now (its root, for a subagent run): the lease's live holder,
        or None (also for a backend that keeps no leases)."""
        check_run_id(run_id)
        rows = self._lease_rows()
        return None if rows is None else live_holder(rows.read(root_of(run_id)))

    def migrate(self) -> None:
        """Create or upgrade the store's schema; safe to call any number of times."""

    def close(self) -> None:
        """Release the handle's connection; the data stays."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- required of a backend -------------------------------------------------------------

    @abc.abstractmethod
    def _read_run(self, run_id: str) -> RunInfo | None:
        """The run's runs row, or None."""

    @abc.abstractmethod
    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        """The run's log rows with a sequence above `after`, ascending (may be lazy)."""

    @abc.abstractmethod
    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        """The run's snapshot row, or None."""

    @abc.abstractmethod
    def _write(self, prepared: PreparedAppend) -> None:
        """In one transaction: find the runs row at `prepared.expected_version` (or no row
        when it is 0), insert `prepared.rows`, set the runs row to `prepared.info`, and
        replace the snapshot when `prepared.snapshot` is set. Write nothing and raise
        `ConcurrencyConflictError` (via `_checks.conflict`) when the version is not the
        expected one, or when a row's `(run_id, sequence)` already exists."""

    @abc.abstractmethod
    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        """Runs rows ordered by run id, filtered as `runs()` describes."""

    # -- optional for a backend: other orders, counts ----------------------------------------

    def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        """Runs rows in `order` (not `"run_id"`), filtered as `runs()` describes, from an index
        range after the row of run `after` (none when `after` names no run). Without it,
        `runs()` lists by run id only."""
        raise NotImplementedError(
            f"{type(self).__name__} lists runs by run id only: its backend does not "
            "implement `_list_runs_in`"
        )

    def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        """How many runs rows are in `statuses`, counted up to `up_to` (and, past it, an
        estimate in bounded time, or the bound: see `RunCount`). By default, `up_to + 1`
        rows listed by run id."""
        return RunCount.bounded(len(self._list_runs(statuses, up_to + 1, None)), up_to)

    # -- optional for a backend: attachments ------------------------------------------------

    def _write_attachment(self, attachment: Attachment) -> None:
        """Insert or replace the row under `(attachment.run_id, attachment.name)`, atomically.
        The arguments are checked and the run is known to exist and to have reached
        `attachment.version`."""
        raise no_attachments(self)

    def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        """The row under `(run_id, name)`, or None."""
        raise no_attachments(self)

    def _delete_attachment(self, run_id: str, name: str) -> bool:
        """Delete the row under `(run_id, name)`; whether there was one."""
        raise no_attachments(self)

    # -- optional for a backend: meta (the key record) and re-keying -----------------------

    def _read_meta(self, key: str) -> str | None:
        """The value kept under `key` in the store's meta, or None. A backend without meta
        raises `NotImplementedError` (the default): its store records no key."""
        raise NotImplementedError(f"{type(self).__name__} keeps no meta")

    def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        """Set `key` to `value` if it holds `expected` now (None: if it is absent), in one
        atomic step; whether it did."""
        raise NotImplementedError(f"{type(self).__name__} keeps no meta")

    def _rewrite_run(
        self,
        run_id: str,
        version: int,
        hashes: Sequence[tuple[int, str]],
        snapshot: StoredSnapshot | None,
        record: str,
    ) -> bool:
        """In one transaction, if the store's key record is `record` and the run's runs row
        is at `version`: set each `(sequence, hash)` of `hashes` on the run's rows, and
        replace the run's snapshot with `snapshot` (None: delete it). Whether it did (False:
        the record or the version moved, and nothing was written). What `rekey` writes."""
        raise NotImplementedError(f"{type(self).__name__} cannot be re-keyed")

    # -- optional for a backend: leases ---------------------------------------------------

    def _lease_rows(self) -> LeaseRows | None:
        """The backend's lease table, on a connection of its own (made on first use, closed
        with the store; a heartbeat renews through it from its own thread), or None."""
        return None

    # -- the shell's own hooks ---------------------------------------------------------------

    def _first_rows(self, run_id: str, after: int, n: int) -> list[StoredEvent]:
        """At most the first `n` log rows above `after` (the backend's rows, closed after)."""
        rows = self._read_rows(run_id, after)
        try:
            return [row for _, row in zip(range(n), rows, strict=False)]
        finally:
            close_iterator(rows)

    def _put_new_meta(self, key: str, value: str) -> bool:
        return self._put_meta(key, value, expected=None)

    def _anchor_read(self, run_id: str) -> AnchoredHead | None:
        anchor = self.options.anchor
        return None if anchor is None else anchor.get(run_id)

    def _anchor_write(self, heads: list[AnchoredHead]) -> None:
        anchor = self.options.anchor
        assert anchor is not None
        anchor.put(heads)

    # -- for a backend -------------------------------------------------------------------

    def _open_key_check(self) -> None:
        """Check the handle's key against the store's key record as the store opens, and
        record it in a store that has none (see `_keys.py`); a backend calls it once its
        tables exist.

        Raises:
            IntegrityKeyError: the store is under another key (a store being re-keyed
                opens, but refuses every call: `rekey` itself works through such a handle).
        """
        self._run(self._open_key_steps())

    def _key_refusal(self) -> IntegrityKeyError | None:
        """Why this handle's write was refused by the key record, if it was (a backend asks
        when its write matched nothing)."""
        return self._run(self._key_refusal_steps())

    def _iter_events(self, reader: LogReader) -> Iterator[Event]:
        rows = self._read_rows(reader.run_id, reader.start)
        try:
            for row in rows:
                event = reader.event(row)
                if event is not None:
                    yield event
            reader.end()
        finally:
            close_iterator(rows)
