"""How a store loads: read its rows back as events, trust a snapshot or not, fold.

A stored row is never taken on faith: it must parse, sit at its place in the log and
(with a keyed integrity) carry its link; a snapshot is a cache that must prove it is bound
to the log before it is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from agentfsm._log import get_logger
from agentfsm.errors import CorruptLogError, EventFormatError, LifecycleError, TableMismatchError
from agentfsm.events._canonical import canonical_text
from agentfsm.events.codec import parse_event
from agentfsm.events.models import Event, RunMigrated, RunStarted, TableRef
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._append import Head
from agentfsm.stores._integrity import PLAIN, Integrity
from agentfsm.stores.rows import GENESIS_HASH, StoredEvent, StoredSnapshot

__all__ = [
    "BAD_LINK",
    "TABLE_EVENTS",
    "check_link",
    "check_row",
    "close_iterator",
    "distrust",
    "fold_rows",
    "parse_row",
    "run_tables",
    "trusted_snapshot",
    "types_after",
]

#: The events after which a run may be under another table (and read another's types).
TABLE_EVENTS = frozenset({"run.started", "run.migrated"})


def types_after(reducer: Reducer, event: Event, types: EventTypes) -> EventTypes:
    """The event types the rows after `event` are read with: those of the table a
    `run.started` or `run.migrated` puts the run under, else `types` still."""
    if event.type == "run.started":
        return reducer.event_types_of(event.table)
    if event.type == "run.migrated":
        return reducer.event_types_of(event.to_table)
    return types


_log = get_logger("agentfsm.stores")


def parse_row(run_id: str, row: StoredEvent, events: EventTypes = BUILTIN_EVENTS) -> Event:
    """The event a stored row holds, checked against the row's place in the log.

    Args:
        run_id: the run the row belongs to.
        row: the stored row.
        events: the event types of the store's table (its own types included).

    Raises:
        CorruptLogError: the row does not parse, or names another run or sequence.
    """
    checked = check_row(run_id, row, events)
    if isinstance(checked, str):
        raise CorruptLogError(checked, run_id=run_id, sequence=row.sequence)
    return checked


def check_row(run_id: str, row: StoredEvent, events: EventTypes) -> Event | str:
    """The row's event, or a sentence saying why it is not a valid event of its place."""
    try:
        event = parse_event(row.data, events=events)
    except EventFormatError as exc:
        return f"the stored event is not a valid event: {'; '.join(exc.problems)}"
    if event.run_id != run_id or event.sequence != row.sequence:
        return f"the stored event names run '{event.run_id}', sequence {event.sequence}"
    return event


def trusted_snapshot(
    run_id: str,
    stored: StoredSnapshot,
    first: StoredEvent | None,
    integrity: Integrity = PLAIN,
) -> Head | None:
    """The snapshot's record if it can be trusted, else None (and a `store.snapshot_ignored` log).

    `first` is the log row at `stored.sequence` (None when the log has no such row). A
    snapshot is a cache, never an authority: it is trusted only when its digest seals its
    text to the chain hash it names, it reads back, is of this run, says the sequence it is
    stored under, and the log still holds exactly the event it was taken after.
    """
    reason = distrust(run_id, stored, first, integrity)
    if reason is None:
        try:
            snapshot = Snapshot.loads(stored.data)
        except (ValueError, TypeError, KeyError) as exc:
            # json errors are ValueErrors; a hand-edited record can fail with the other two.
            reason = f"it does not read back ({exc})"
        else:
            if snapshot.run_id != run_id:
                reason = f"it is of run '{snapshot.run_id}'"
            elif snapshot.sequence != stored.sequence:
                reason = f"it says sequence {snapshot.sequence} but is stored as {stored.sequence}"
            else:
                return Head(snapshot.record, stored.event_hash)
    _log.warning(
        "store.snapshot_ignored",
        run_id=run_id,
        sequence=stored.sequence,
        reason=reason,
        fallback="full replay",
    )
    return None


def distrust(
    run_id: str, stored: StoredSnapshot, first: StoredEvent | None, integrity: Integrity
) -> str | None:
    """Why the snapshot row is not bound to the log as written, or None."""
    if stored.digest != integrity.seal(stored.event_hash, stored.data):
        if not stored.digest:
            return "it has no digest (written by an older agentfsm)"
        return "its digest does not match its content: it was changed after it was written"
    if first is None or first.sequence != stored.sequence:
        return f"the log has no event at sequence {stored.sequence}"
    if first.hash != stored.event_hash:
        return f"the log's event at sequence {stored.sequence} is not the one it covers"
    return None


def fold_rows(
    reducer: Reducer,
    run_id: str,
    head: Head | None,
    rows: Iterable[StoredEvent],
    integrity: Integrity = PLAIN,
) -> Head:
    """Fold stored rows onto `head` (or from the start of the run when None).

    With a keyed `integrity`, every row's link is checked too: a row that someone without
    the key wrote or changed is refused, even with a recomputed chain.

    Raises:
        CorruptLogError: a row does not parse, is out of place, breaks the lifecycle or
            (keyed) fails its link; it names the run and the sequence.
    """
    record = head.record if head is not None else reducer.initial(run_id)
    last_hash = head.hash if head is not None else GENESIS_HASH
    reduce = reducer.reduce
    keyed = integrity.keyed
    # A run folded under an older version before a migration reads that version's types.
    types = reducer.event_types_for(record)
    for row in rows:
        event = parse_row(run_id, row, types)
        if keyed:
            check_link(integrity, run_id, last_hash, row)
        try:
            record = reduce(record, event)
        except TableMismatchError:
            # Not damage: the store was opened with another table than the run's. Said as
            # such, so an operator is not sent looking for corruption.
            raise
        except LifecycleError as exc:
            raise CorruptLogError(
                f"the stored event breaks the run's lifecycle: {exc}",
                run_id=run_id,
                sequence=row.sequence,
            ) from None
        last_hash = row.hash
        if row.type in TABLE_EVENTS:
            types = reducer.event_types_for(record)
    return Head(record, last_hash)


def close_iterator(rows: Iterable[Any]) -> None:
    """Close a backend's rows or a store's events now, if they can be closed: a half-read
    SQLite cursor keeps its read transaction open until it is, and one left to the garbage
    collector may be closed after its store ("Exception ignored")."""
    close = getattr(rows, "close", None)
    if close is not None:
        close()


def run_tables(
    events: Iterator[Event], *, first_only: bool = False
) -> tuple[TableRef | None, TableRef | None]:
    """The table a run's log says it was started under, and the one it is under now: the
    same unless a `run.migrated` moved it (None where the log names none).

    `events` (a store's, read with whatever event types it knows) is read to its end, or
    only its first event with `first_only`, and closed. The reading stops at an event no
    known table reads: the table named last is the answer, for the caller to look up.
    """
    started: TableRef | None = None
    current: TableRef | None = None
    try:
        for event in events:
            if isinstance(event, RunStarted):
                started = current = event.table
            elif isinstance(event, RunMigrated):
                current = event.to_table
            if first_only:
                break
    except CorruptLogError:
        pass  # an event of a table not known here: its table is what to report
    finally:
        close_iterator(events)
    return started, current


def check_link(integrity: Integrity, run_id: str, previous: str, row: StoredEvent) -> None:
    """Refuse a row whose stored hash is not its link after `previous` under `integrity`.

    Call it on a row that parsed (its line is JSON, so its canonical text exists).

    Raises:
        CorruptLogError: the link does not match (`BAD_LINK`).
    """
    if integrity.link(previous, canonical_text(row.data)) != row.hash:
        raise CorruptLogError(BAD_LINK, run_id=run_id, sequence=row.sequence)


#: What a load and a verify say of a row whose link does not match the chain.
BAD_LINK = (
    "the hash does not match: this event or its stored hash was changed (or the store was "
    "written under another integrity key, or none)"
)
