"""The store template, once, with no I/O of its own: the sync and async stores are shells.

`StoreCore` holds what a store handle is configured with (its options, the heads it has
seen, whether its key was refused) and decides every step of every operation: what to
read, what to check, what to write, what error to raise. Each operation is a generator
(`Steps`) that yields the I/O it needs as a tuple, the name of a *hook* and its arguments,
and is sent back what the hook returned (or thrown what it raised). `EventStore`
(`base.py`) performs the hooks with direct calls, `AsyncStoreShell` (`_async_store.py`)
with awaits, as the drive core's `Runner` and `AsyncRunner` do (`runtime/_drive.py`). So
memory, SQLite and both PostgreSQL stores cannot drift apart: every rule is here.

The hooks a shell performs (a backend's, see `EventStore`, plus three of the shell's own):

| hook                                        | returns                                       |
|---------------------------------------------|-----------------------------------------------|
| `_read_run(run_id)`                         | the runs row, or None                         |
| `_read_rows(run_id, after)`                 | the log rows above `after`, ascending         |
| `_first_rows(run_id, after, n)`             | at most `n` of those, as a list               |
| `_read_snapshot(run_id)`                    | the snapshot row, or None                     |
| `_write(prepared)`                          | None; raises `ConcurrencyConflictError`       |
| `_list_runs(...)`, `_list_runs_in(...)`     | runs rows                                     |
| `_count_runs(statuses, up_to)`              | a `RunCount`                                  |
| `_read_meta(key)`                           | the value kept under `key`, or None           |
| `_put_new_meta(key, value)`                 | whether it was set (it was absent)            |
| `_write_attachment(...)` and the others       | as `EventStore` says                          |
| `_anchor_read(run_id)`                      | the anchor's head of the run, or None         |
| `_anchor_write(heads)`                      | None                                          |

Rows come back as an iterable the core reads to its end or closes: the sync shell hands
over the backend's lazy iterator (a long log is never held whole), the async one a list.
A hook's error is thrown in where it was asked for, so the core catches what it decides
on (a lost race, an anchor that did not answer, a backend without meta) and lets the
rest go up.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from agentfsm.errors import (
    ConcurrencyConflictError,
    CorruptLogError,
    IntegrityKeyError,
    LifecycleError,
    RunNotFoundError,
    StoreInconsistentError,
)
from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores._append import Head, HeadCache, PreparedAppend, prepare_append
from agentfsm.stores._checks import (
    check_append_args,
    check_attachment,
    check_attachment_name,
    check_attachment_version,
    check_order,
    check_run_id,
    conflict,
    inconsistency,
    statuses,
    unplaced_cursor,
)
from agentfsm.stores._integrity import Integrity
from agentfsm.stores._keys import META_KEY, adoption_refusal, is_rekeying, key_refusal
from agentfsm.stores._load import (
    check_link,
    close_iterator,
    fold_rows,
    parse_row,
    trusted_snapshot,
    types_after,
)
from agentfsm.stores._verify import VERIFY_TRIES, verify_rows
from agentfsm.stores.anchor import (
    Anchor,
    AnchoredHead,
    anchor_error,
    anchor_not_read,
    anchor_not_told,
    anchor_problem,
)
from agentfsm.stores.rows import GENESIS_HASH, Attachment, Folded, StoredEvent, VerifyReport
from agentfsm.stores.runs import RunCount, RunInfo, RunOrder

__all__ = ["LogReader", "Settings", "Steps", "StoreCore"]

T = TypeVar("T")

#: An operation of the core: yields (hook name, *arguments), is sent the hook's result.
Steps = Generator[tuple[Any, ...], Any, T]


class Settings(Protocol):
    """What the core reads of a handle's `StoreOptions` (`base.py`)."""

    @property
    def reducer(self) -> Reducer: ...
    @property
    def snapshot_every(self) -> int | None: ...
    @property
    def cache_size(self) -> int: ...
    @property
    def integrity(self) -> Integrity: ...
    @property
    def anchor(self) -> Anchor | None: ...


class StoreCore:
    """What every store handle is configured with, and every decision its operations take.

    Args:
        options: reducer, snapshot interval, cache size, key and anchor (`StoreOptions`).
    """

    options: Settings

    def __init__(self, options: Settings) -> None:
        self.options = options
        self._cache = HeadCache(self.options.cache_size)
        # Set when the store is being re-keyed: the handle opened (so `rekey` can work
        # through it), but every public call is refused with this.
        self._refused: IntegrityKeyError | None = None

    @property
    def reducer(self) -> Reducer:
        """The reducer that validates appends and folds loads (its table is the store's)."""
        return self.options.reducer

    def _usable(self) -> None:
        if self._refused is not None:
            raise self._refused

    # -- append ----------------------------------------------------------------------------

    def _append_start(
        self, run_id: str, events: Sequence[Event], expected_version: int
    ) -> tuple[tuple[Event, ...], Head | None]:
        """The batch, checked, and the run's head at `expected_version` if it needs no read:
        this handle's cached head, or a new run's start when no anchor must be asked
        (None: `_head_steps` reads it)."""
        self._usable()
        check_run_id(run_id)
        batch = tuple(events)
        check_append_args(batch, expected_version)
        head = self._cache.at(run_id, expected_version)
        if head is None and expected_version == 0 and self.options.anchor is None:
            head = self._start_head(run_id)  # the write checks that no runs row exists
        return batch, head

    def _append_steps(
        self,
        run_id: str,
        batch: tuple[Event, ...],
        expected_version: int,
        folded: Folded | None,
        head: Head | None,
    ) -> Steps[RunRecord]:
        """An append after `_append_start`, every hook it needs asked for. When that found
        the head and no anchor is told, a shell may instead perform these same steps
        straight (`_prepare`, `_write`, `_appended`, and `_refused_steps` or
        `_lost_race_steps` when they fail): the write is then the only hook, and driving a
        generator for it cost ~10% of an append on the memory store."""
        if head is None:
            head = yield from self._head_steps(run_id, expected_version)
        try:
            prepared = self._prepare(head, batch, folded)
        except LifecycleError:
            yield from self._refused_steps(run_id, expected_version)
            raise
        try:
            yield ("_write", prepared)
        except ConcurrencyConflictError:
            yield from self._lost_race_steps(run_id)
            raise
        record = self._appended(prepared)
        if self.options.anchor is not None:
            yield from self._tell_anchor_steps(prepared)
        return record

    def _prepare(
        self, head: Head, batch: tuple[Event, ...], folded: Folded | None
    ) -> PreparedAppend:
        """The rows to write, the batch judged on top of `head`.

        Raises:
            LifecycleError: the reducer refuses an event (then see `_refused_steps`).
        """
        options = self.options
        return prepare_append(
            options.reducer, head, batch, options.snapshot_every, options.integrity, folded
        )

    def _refused_steps(self, run_id: str, expected_version: int) -> Steps[None]:
        """After `_prepare` refused the batch: a conflict if the store has moved past the
        view it was judged against (else the refusal stands: the caller re-raises it)."""
        # Judged against a view the store has moved past, a refusal says nothing about
        # the run as it is: report the conflict, which is what the caller must act on.
        info = yield ("_read_run", run_id)
        actual = info.version if info is not None else 0
        if actual != expected_version:
            self._cache.drop(run_id)
            raise conflict(run_id, expected_version, actual) from None

    def _lost_race_steps(self, run_id: str) -> Steps[None]:
        """After the write lost a race: the store's inconsistency if that is why (else the
        conflict stands: the caller re-raises it)."""
        self._cache.drop(run_id)
        # A lost race, unless the runs row and the log disagree: then every retry
        # would lose again, and the caller must hear that the store is inconsistent.
        inconsistent = yield from self._inconsistency_steps(run_id)
        if inconsistent is not None:
            raise inconsistent from None

    def _appended(self, prepared: PreparedAppend) -> RunRecord:
        """The record after a written batch (kept as the run's head for the next append)."""
        self._cache.put(prepared.run_id, Head(prepared.record, prepared.rows[-1].hash))
        return prepared.record

    def _tell_anchor_steps(self, prepared: PreparedAppend) -> Steps[None]:
        """Tell the anchor the run's new head (the batch is stored by then)."""
        run_id, version = prepared.run_id, prepared.record.version
        told = AnchoredHead(run_id, version, prepared.rows[-1].hash, self.options.integrity.record)
        try:
            yield ("_anchor_write", [told])
        except Exception as exc:  # whatever a user's anchor raises, it did not take it
            raise anchor_not_told(run_id, version, exc) from exc

    def _head_steps(self, run_id: str, expected_version: int) -> Steps[Head]:
        """The run's head at `expected_version`, not cached: loaded, or the start of a run."""
        if expected_version == 0:
            # The write checks that no runs row exists; nothing to load. A run the anchor
            # knows is one that was removed: starting it again could repeat its calls.
            if self.options.anchor is not None:
                yield from self._anchor_steps(run_id, None)
            return self._start_head(run_id)
        try:
            head = yield from self._load_head_steps(run_id)
        except RunNotFoundError:
            raise conflict(run_id, expected_version, 0) from None
        if head.record.version != expected_version:
            raise conflict(run_id, expected_version, head.record.version)
        return head

    def _start_head(self, run_id: str) -> Head:
        """The head a new run's first batch is judged on: the reducer's start, no link."""
        return Head(self.options.reducer.initial(run_id), GENESIS_HASH)

    def _inconsistency_steps(self, run_id: str) -> Steps[StoreInconsistentError | None]:
        """The runs row and the log, compared where they must meet (a few index reads)."""
        before = yield ("_read_run", run_id)
        after = max(before.version - 1, 0) if before else 0
        rows = yield ("_first_rows", run_id, after, 2)
        found = [row.sequence for row in rows]
        return inconsistency(run_id, before, found, (yield ("_read_run", run_id)))

    # -- load --------------------------------------------------------------------------------

    def _load_steps(self, run_id: str) -> Steps[RunRecord]:
        self._usable()
        check_run_id(run_id)
        record = (yield from self._load_head_steps(run_id)).record
        # Judged here, not while folding: an append folds a run under an older version up to
        # the `run.migrated` that brings it to this store's table.
        self.options.reducer.check_run_table(record)
        return record

    def _load_head_steps(self, run_id: str) -> Steps[Head]:
        """The latest trusted snapshot plus the tail, folded (and checked with the anchor)."""
        head = None
        reducer = self.options.reducer
        integrity = self.options.integrity
        stored = yield ("_read_snapshot", run_id)
        if stored is not None:
            rows = yield ("_read_rows", run_id, stored.sequence - 1)
            try:
                tail = iter(rows)
                head = trusted_snapshot(run_id, stored, next(tail, None), integrity)
                if head is not None:
                    head = fold_rows(reducer, run_id, head, tail, integrity)
            finally:
                close_iterator(rows)
        if head is None:
            rows = yield ("_read_rows", run_id, 0)
            try:
                head = fold_rows(reducer, run_id, None, rows, integrity)
            finally:
                close_iterator(rows)
        anchored = self.options.anchor is not None
        if head.record.version == 0:
            if anchored:
                yield from self._anchor_steps(run_id, None)
            raise RunNotFoundError(run_id)
        if anchored:
            yield from self._anchor_steps(run_id, head)
        self._cache.put(run_id, head)
        return head

    # -- the runs table ----------------------------------------------------------------------

    def _events_steps(self, run_id: str, after: int) -> Steps[LogReader]:
        """What reads the run's events after `after` (the run must exist: checked now)."""
        self._usable()
        check_run_id(run_id)
        if (yield ("_read_run", run_id)) is None:
            raise RunNotFoundError(run_id)
        return LogReader(self.options.reducer, self.options.integrity, run_id, after)

    def _run_info_steps(self, run_id: str) -> Steps[RunInfo]:
        self._usable()
        check_run_id(run_id)
        return (yield from self._info_steps(run_id))

    def _runs_steps(
        self,
        status: str | Iterable[str] | None,
        limit: int | None,
        after: str | None,
        order: RunOrder,
    ) -> Steps[list[RunInfo]]:
        self._usable()
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        check_order(order)
        if order == "run_id":
            found: list[RunInfo] = yield ("_list_runs", statuses(status), limit, after)
            return found
        found = yield ("_list_runs_in", order, statuses(status), limit, after)
        if not found and after is not None and limit != 0 and (yield ("_read_run", after)) is None:
            raise unplaced_cursor(after, order)
        return found

    def _count_runs_steps(
        self, status: str | Iterable[str] | None, exact_up_to: int
    ) -> Steps[RunCount]:
        self._usable()
        if exact_up_to < 0:
            raise ValueError(f"exact_up_to must not be negative, got {exact_up_to}")
        counted: RunCount = yield ("_count_runs", statuses(status), exact_up_to)
        return counted

    # -- verify ------------------------------------------------------------------------------

    def _verify_steps(self, run_id: str) -> Steps[VerifyReport]:
        self._usable()
        check_run_id(run_id)
        options = self.options
        for _ in range(VERIFY_TRIES):
            info = yield from self._info_steps(run_id)
            rows = yield ("_read_rows", run_id, 0)
            try:
                snapshot = yield ("_read_snapshot", run_id)
                report = verify_rows(
                    options.reducer,
                    run_id,
                    rows,
                    info,
                    snapshot=snapshot,
                    integrity=options.integrity,
                )
            finally:
                close_iterator(rows)
            # An append that landed while the rows were read makes the runs row and the
            # log look apart; only a disagreement that stays put is reported.
            if report.ok or (yield from self._info_steps(run_id)) == info:
                break
        if not report.ok or options.anchor is None:
            return report
        # An intact log, compared with the head its anchor keeps.
        anchored = yield from self._anchor_read_steps(run_id)
        if anchored is None:
            return report
        at = yield from self._hash_at_steps(anchored, report.checked, report.head_hash)
        found = anchor_problem(anchored, report.checked, at, options.integrity.record)
        if found is None:
            return report
        return VerifyReport(run_id, False, report.checked, report.head_hash, *found)

    def _info_steps(self, run_id: str) -> Steps[RunInfo]:
        """The run's runs row.

        Raises:
            RunNotFoundError: the store has no such run.
        """
        info: RunInfo | None = yield ("_read_run", run_id)
        if info is None:
            raise RunNotFoundError(run_id)
        return info

    # -- attachments -------------------------------------------------------------------------

    def _put_attachment_steps(
        self, run_id: str, name: str, data: bytes, version: int
    ) -> Steps[None]:
        self._usable()
        check_attachment(run_id, name, data, version)
        # Checked, then written, in two steps: a run is never deleted and its version only
        # grows, so what the check saw still holds when the write lands.
        check_run_id(run_id)
        check_attachment_version((yield from self._info_steps(run_id)), name, version)
        yield ("_write_attachment", Attachment(run_id, name, data, version))

    def _attachment_steps(self, hook: str, run_id: str, name: str) -> Steps[Any]:
        """Read (`_read_attachment`) or drop (`_delete_attachment`) one attachment."""
        self._usable()
        check_attachment_name(run_id, name)
        return (yield (hook, run_id, name))

    # -- the key record ----------------------------------------------------------------------

    def _open_key_steps(self) -> Steps[None]:
        """Check the handle's key against the store's key record as the store opens, and
        record it in a store that has none (see `_keys.py`).

        Raises:
            IntegrityKeyError: the store is under another key (a store being re-keyed
                opens, but refuses every call: `rekey` itself works through such a handle).
        """
        integrity = self.options.integrity
        try:
            found = yield ("_read_meta", META_KEY)
        except NotImplementedError:
            return  # a backend without meta records no key
        if found is None:
            found = yield from self._adopt_steps(integrity)
        refused = key_refusal(found, integrity)
        if refused is not None and not is_rekeying(found):
            raise refused
        self._refused = refused

    def _adopt_steps(self, integrity: Integrity) -> Steps[str | None]:
        """Record the handle's key in a store that records none, once its first run's first
        link shows the store is under that key; the record then kept (another handle's,
        should one have won the race)."""
        first = yield ("_list_runs", None, 1, None)
        run_id = first[0].run_id if first else None
        row = None
        if run_id is not None:
            rows = yield ("_first_rows", run_id, 0, 1)
            row = rows[0] if rows and rows[0].sequence == 1 else None
        refused = adoption_refusal(integrity, run_id, row)
        if refused is not None:
            raise refused
        yield ("_put_new_meta", META_KEY, integrity.record)
        found: str | None = yield ("_read_meta", META_KEY)
        return found

    def _key_refusal_steps(self) -> Steps[IntegrityKeyError | None]:
        """Why this handle's write was refused by the key record, if it was (a backend asks
        when its write matched nothing)."""
        try:
            found = yield ("_read_meta", META_KEY)
        except NotImplementedError:
            return None
        return key_refusal(found, self.options.integrity)

    # -- the anchor --------------------------------------------------------------------------

    def _anchor_read_steps(self, run_id: str) -> Steps[AnchoredHead | None]:
        try:
            anchored: AnchoredHead | None = yield ("_anchor_read", run_id)
        except Exception as exc:  # whatever a user's anchor raises, it could not be read
            raise anchor_not_read(run_id, exc) from exc
        return anchored

    def _hash_at_steps(
        self, anchored: AnchoredHead, version: int, head_hash: str
    ) -> Steps[str | None]:
        """The stored chain hash at the anchored sequence of a log ending at `version` with
        `head_hash` (read from the log when it is longer; None when it is shorter)."""
        if version == anchored.version:
            return head_hash
        if version < anchored.version:
            return None
        rows = yield ("_first_rows", anchored.run_id, anchored.version - 1, 1)
        return rows[0].hash if rows and rows[0].sequence == anchored.version else None

    def _anchor_steps(self, run_id: str, head: Head | None) -> Steps[None]:
        """Refuse a run whose log is shorter than its anchor, or lost the anchored head.

        Raises:
            TruncatedLogError: the log is shorter (or the run is gone).
            CorruptLogError: the anchored event is not in the log any more.
        """
        anchored = yield from self._anchor_read_steps(run_id)
        if anchored is None:
            return
        version, head_hash = (head.record.version, head.hash) if head is not None else (0, "")
        at = yield from self._hash_at_steps(anchored, version, head_hash)
        refused = anchor_error(anchored, version, at, self.options.integrity.record)
        if refused is not None:
            raise refused


class LogReader:
    """Reads a run's log rows into events, checking each as a load does: in place, parsed
    with its stretch's table's types and, under a key, linked to the row before.

    A shell streams the rows from `start` (the row at `after` too, under a key: the hash the
    first one links to) and hands each to `event`.
    """

    __slots__ = (
        "_expected",
        "_integrity",
        "_keyed",
        "_previous",
        "_reducer",
        "_types",
        "after",
        "run_id",
        "start",
    )

    def __init__(self, reducer: Reducer, integrity: Integrity, run_id: str, after: int) -> None:
        self.run_id = run_id
        self.after = after
        self._reducer = reducer
        self._integrity = integrity
        self._keyed = integrity.keyed
        # Under a key, the row at `after` is read first, for the hash the next links to.
        before = integrity.keyed and after > 0
        #: The sequence the shell reads rows above.
        self.start = after - 1 if before else after
        self._expected = after if before else after + 1
        self._previous = GENESIS_HASH
        # Each stretch of a migrated log is read with its table's types (a tail, with the
        # store's: the run is under the store's table by then).
        self._types = reducer.table.event_types

    def event(self, row: StoredEvent) -> Event | None:
        """The row's event (None for the row at `after`, read only for its hash).

        Raises:
            CorruptLogError: the row is not where the log should go on, does not read back
                or (under a key) does not link.
        """
        run_id = self.run_id
        expected = self._expected
        if expected == self.after:  # the row before the first asked for, under a key
            if row.sequence != expected:
                raise self.missing(expected)
            self._previous = row.hash
            self._expected = expected + 1
            return None
        if row.sequence != expected:
            raise self.missing(expected)
        event = parse_row(run_id, row, self._types)
        if self._keyed:
            check_link(self._integrity, run_id, self._previous, row)
            self._previous = row.hash
        self._types = types_after(self._reducer, event, self._types)
        self._expected = expected + 1
        return event

    def end(self) -> None:
        """The rows ran out; under a key, refuse a log without its row at `after`.

        Raises:
            CorruptLogError: the row at `after` was never read.
        """
        if self._expected == self.after:
            raise self.missing(self.after)

    def missing(self, sequence: int) -> CorruptLogError:
        return CorruptLogError(
            f"the log has no event at sequence {sequence}", run_id=self.run_id, sequence=sequence
        )
