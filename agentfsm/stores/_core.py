"""What every store does the same way: validate a batch, chain its hashes, fold, verify.

Backends only move rows; everything that decides whether a row is right lives here, as
plain functions over rows, so the sync and async stores (and third-party backends that
subclass `EventStore`) cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from agentfsm._log import get_logger
from agentfsm.errors import (
    ConcurrencyConflictError,
    CorruptLogError,
    EventFormatError,
    InvalidRunIdError,
    LifecycleError,
    StoreInconsistentError,
    TableMismatchError,
)
from agentfsm.events.bounds import MAX_EVENT_BYTES
from agentfsm.events.canonical import canonical_json
from agentfsm.events.codec import dump_event, event_to_dict, parse_event
from agentfsm.events.models import Event
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._integrity import PLAIN, Integrity, chain_hash

__all__ = [
    "GENESIS_HASH",
    "Attachment",
    "Head",
    "PreparedAppend",
    "RunInfo",
    "StoredEvent",
    "StoredSnapshot",
    "VerifyReport",
    "canonical_event_json",
    "chain_hash",
    "check_attachment",
    "check_attachment_name",
    "check_attachment_version",
    "check_run_id",
    "conflict",
    "fold_rows",
    "inconsistency",
    "parse_row",
    "prepare_append",
    "trusted_snapshot",
    "types_after",
    "verify_rows",
]

_log = get_logger("agentfsm.stores")

#: The "previous hash" of a run's first event.
GENESIS_HASH = ""

#: The events after which a run may be under another table (and read another's types).
_TABLE_EVENTS = frozenset({"run.started", "run.migrated"})


_encode_sorted = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
# An integral float (which canonical JSON writes as an integer) is written by Python's
# encoder either as digits, ".0", then a delimiter, or with a positive exponent ("1e+16"
# and up, always integral at that magnitude).
_INTEGRAL_FLOAT = re.compile(r"\d\.0(?![0-9eE])|e\+")


def canonical_event_json(data: Any) -> str:
    """`canonical_json(data)`, byte for byte, in about half the time for typical events.

    Most events hold no integral float, and then canonical JSON is plain sorted compact
    JSON: encode once in C and look for the one pattern normalisation would change. Only
    when it appears (or a string merely contains it) is the full `canonical_json` run.
    """
    text = _encode_sorted(data)
    if _INTEGRAL_FLOAT.search(text) is None:
        return text
    return canonical_json(data)


def check_run_id(run_id: object) -> None:
    """Refuse a run id no backend can hold, with the same error on every backend.

    Raises:
        InvalidRunIdError: not a str, empty, with a NUL (PostgreSQL text cannot hold one) or
            a lone surrogate (not UTF-8).
    """
    if not isinstance(run_id, str):
        raise InvalidRunIdError(run_id, f"it is a {type(run_id).__name__}, not a str")
    if not run_id:
        raise InvalidRunIdError(run_id, "it is empty")
    if "\x00" in run_id:
        raise InvalidRunIdError(run_id, "it holds a NUL character")
    if not run_id.isascii():
        try:
            run_id.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRunIdError(run_id, "it is not valid Unicode (a lone surrogate)") from None


@attrs.frozen(slots=True)
class StoredEvent:
    """One row of the log, as a backend keeps it.

    Attributes:
        sequence: the event's sequence (unique per run in storage).
        type: the event type (kept beside the line so it can be queried).
        data: the event as written by `dump_event`: one compact JSON line.
        hash: `chain_hash` of the previous row's hash and this event.
    """

    sequence: int
    type: str
    data: str
    hash: str


@attrs.frozen(slots=True)
class StoredSnapshot:
    """The one snapshot a backend keeps per run.

    Attributes:
        sequence: the last sequence the snapshot covers.
        event_hash: the chain hash of the event at `sequence`; a snapshot is only trusted
            while the log still holds exactly that event there.
        data: `Snapshot.dumps()` text.
        digest: `Integrity.seal(event_hash, data)`: binds the text to the chain, so a
            snapshot edited in place is not trusted ("" for one written before digests).
    """

    sequence: int
    event_hash: str
    data: str
    digest: str


@attrs.frozen(slots=True)
class RunInfo:
    """One row of `runs()`: where a run stands, without folding its log.

    Attributes:
        run_id: the run.
        status: its state in the table after the last event.
        version: its last sequence.
        updated_at: `occurred_at` of its last event.
    """

    run_id: str
    status: str
    version: int
    updated_at: str | None


def _data_repr(data: bytes) -> str:
    return f"<{len(data)} bytes>"


@attrs.frozen(slots=True)
class Attachment:
    """A named blob kept beside a run (an SDK's saved state, say); never part of its log.

    Attributes:
        run_id: the run it belongs to.
        name: its name within the run (one value per name: a later put replaces it).
        data: the bytes, as given (shown only by length in the repr).
        version: the run's event version it belongs to (at most the run's version when
            it was put).
    """

    run_id: str
    name: str
    data: bytes = attrs.field(repr=_data_repr)
    version: int


def check_attachment_name(run_id: str, name: object) -> None:
    """Refuse an attachment name that is not a non-empty str.

    Raises:
        TypeError: `name` is not a str.
        ValueError: `name` is empty.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"run '{run_id}': an attachment name must be a str, got {type(name).__name__}"
        )
    if not name:
        raise ValueError(f"run '{run_id}': an attachment name must not be empty")


def check_attachment(run_id: str, name: object, data: object, version: object) -> None:
    """Refuse `put_attachment` arguments of the wrong kind, before anything is read.

    Raises:
        TypeError: `name` is not a str, `data` not bytes, or `version` not an int.
        ValueError: `name` is empty or `version` is below 1 (a stored run has an event).
    """
    check_attachment_name(run_id, name)
    if not isinstance(data, bytes):
        raise TypeError(
            f"run '{run_id}': attachment '{name}' must be bytes, got {type(data).__name__}"
        )
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(
            f"run '{run_id}': attachment '{name}' version must be an int, "
            f"got {type(version).__name__}"
        )
    if version < 1:
        raise ValueError(
            f"run '{run_id}': attachment '{name}' version must be at least 1, got {version}"
        )


def check_attachment_version(info: RunInfo, name: str, version: int) -> None:
    """Refuse an attachment stamped with a version the run has not reached.

    Raises:
        ValueError: `version` is above `info.version`.
    """
    if version > info.version:
        raise ValueError(
            f"run '{info.run_id}' is at version {info.version}: attachment '{name}' cannot "
            f"belong to version {version}, which the run has not reached"
        )


@attrs.frozen(slots=True)
class Head:
    """A run's record at some version, with the chain hash of its last event."""

    record: RunRecord
    hash: str


@attrs.frozen(slots=True)
class PreparedAppend:
    """A validated batch, ready to be written in one transaction.

    Attributes:
        run_id: the run.
        expected_version: the version the batch follows; the write must find exactly it.
        rows: the new log rows, in order.
        record: the run's record after the batch.
        snapshot: the snapshot to write with the batch, if the batch crosses a multiple
            of the store's `snapshot_every`.
    """

    run_id: str
    expected_version: int
    rows: tuple[StoredEvent, ...]
    record: RunRecord
    snapshot: StoredSnapshot | None

    @property
    def info(self) -> RunInfo:
        """The runs row after the batch."""
        r = self.record
        return RunInfo(r.run_id, r.status, r.version, r.updated_at)


@attrs.frozen(slots=True)
class VerifyReport:
    """What `verify(run_id)` found: every link good, or the first broken one.

    Attributes:
        run_id: the run.
        ok: no problem was found.
        checked: how many events were read and found right, in order from sequence 1.
        head_hash: the chain hash of the last good event (`""` when there is none).
        sequence: the first sequence that is wrong (None when `ok`, or when the problem is
            the runs row's status or time rather than a place in the log).
        problem: a sentence saying what is wrong there (None when `ok`).
    """

    run_id: str
    ok: bool
    checked: int
    head_hash: str
    sequence: int | None = None
    problem: str | None = None

    def __str__(self) -> str:
        if self.ok:
            return f"run '{self.run_id}': {self.checked} events, hash chain intact"
        if self.sequence is None:
            return f"run '{self.run_id}': {self.problem}"
        return f"run '{self.run_id}', sequence {self.sequence}: {self.problem}"


def prepare_append(
    reducer: Reducer,
    head: Head,
    events: Sequence[Event],
    snapshot_every: int | None,
    integrity: Integrity = PLAIN,
) -> PreparedAppend:
    """Validate `events` on top of `head` and build the rows to write.

    Raises:
        LifecycleError: the first event the reducer refuses; nothing is to be written.
        EventFormatError: an event's line is longer than any reader takes.
    """
    record = head.record
    expected_version = record.version
    previous = head.hash
    rows: list[StoredEvent] = []
    reduce = reducer.reduce
    link = integrity.link
    for event in events:
        record = reduce(record, event)
        try:
            line = dump_event(event)
            canonical = canonical_event_json(event_to_dict(event))
        except (ValueError, TypeError, RecursionError) as exc:
            # Only an event built without validation (`model_construct`, `model_copy`) can
            # hold what JSON cannot: refuse it like any bad input, never a raw ValueError.
            raise EventFormatError(
                [f"it cannot be written as JSON ({type(exc).__name__}: {exc})"],
                run_id=event.run_id,
                sequence=event.sequence,
            ) from None
        if len(line) > MAX_EVENT_BYTES // 4:
            _check_line_size(event, line)
        previous = link(previous, canonical)
        rows.append(StoredEvent(event.sequence, event.type, line, previous))
    # A run under another version may be appended to only by the migration that brings it
    # to this table (or, through a store of the old version, takes it away).
    reducer.check_table(record, after_append=True)
    snapshot = None
    if snapshot_every and record.version // snapshot_every > expected_version // snapshot_every:
        data = Snapshot(record).dumps()
        snapshot = StoredSnapshot(record.version, previous, data, integrity.seal(previous, data))
    return PreparedAppend(record.run_id, expected_version, tuple(rows), record, snapshot)


def _check_line_size(event: Event, line: str) -> None:
    size = len(line.encode("utf-8"))
    if size > MAX_EVENT_BYTES:
        raise EventFormatError(
            [f"the event is {size:,} bytes of JSON; at most {MAX_EVENT_BYTES:,} are allowed"],
            run_id=event.run_id,
            sequence=event.sequence,
        )


def inconsistency(
    run_id: str, before: RunInfo | None, found: Sequence[int], after: RunInfo | None
) -> StoreInconsistentError | None:
    """Whether the runs row and the log disagree, from where they must meet.

    `found` is the sequences of the (at most two) log rows from the runs row's version on,
    read between `before` and `after`, two reads of the runs row. A runs row at version v
    must find the row at v and nothing after it; a run without a runs row, no rows. A runs
    row that moved between the reads is a race, not damage.
    """
    version = before.version if before is not None else 0
    if tuple(found) == ((version,) if version else ()) or after != before:
        return None
    return StoreInconsistentError(run_id=run_id, runs_version=version, log_at=tuple(found))


def conflict(run_id: str, expected_version: int, actual_version: int) -> ConcurrencyConflictError:
    """The error for a lost race (a small helper so every backend words it the same)."""
    return ConcurrencyConflictError(
        run_id=run_id, expected_version=expected_version, actual_version=actual_version
    )


def types_after(reducer: Reducer, event: Event, types: EventTypes) -> EventTypes:
    """The event types the rows after `event` are read with: those of the table a
    `run.started` or `run.migrated` puts the run under, else `types` still."""
    if event.type == "run.started":
        return reducer.event_types_of(event.table)
    if event.type == "run.migrated":
        return reducer.event_types_of(event.to_table)
    return types


def parse_row(run_id: str, row: StoredEvent, events: EventTypes = BUILTIN_EVENTS) -> Event:
    """The event a stored row holds, checked against the row's place in the log.

    Args:
        run_id: the run the row belongs to.
        row: the stored row.
        events: the event types of the store's table (its own types included).

    Raises:
        CorruptLogError: the row does not parse, or names another run or sequence.
    """
    checked = _check_row(run_id, row, events)
    if isinstance(checked, str):
        raise CorruptLogError(checked, run_id=run_id, sequence=row.sequence)
    return checked


def _check_row(run_id: str, row: StoredEvent, events: EventTypes) -> Event | str:
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
    reason = _distrust(run_id, stored, first, integrity)
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


def _distrust(
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
        if (
            keyed
            and integrity.link(last_hash, canonical_event_json(event_to_dict(event))) != row.hash
        ):
            raise CorruptLogError(_BAD_LINK, run_id=run_id, sequence=row.sequence)
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
        if row.type in _TABLE_EVENTS:
            types = reducer.event_types_for(record)
    return Head(record, last_hash)


_BAD_LINK = (
    "the hash does not match: this event or its stored hash was changed (or the store was "
    "written under another integrity key, or none)"
)


def verify_rows(
    reducer: Reducer,
    run_id: str,
    rows: Iterable[StoredEvent],
    info: RunInfo | None,
    *,
    snapshot: StoredSnapshot | None = None,
    integrity: Integrity = PLAIN,
) -> VerifyReport:
    """Check every stored row of a run, then the runs row and the snapshot against them.

    The log must be contiguous from 1, each line an event of this run, the hash chain
    intact, the lifecycle legal; the runs row (`info`) must say where the log ends, with
    the folded status and time; and the snapshot, if any, must be sealed and hold the
    record the events it covers fold into. Stops at the first problem.
    """
    record = reducer.initial(run_id)
    types = reducer.table.event_types
    previous = GENESIS_HASH
    checked = 0
    covered: RunRecord | None = None
    covered_hash = ""

    def broken(sequence: int | None, problem: str) -> VerifyReport:
        return VerifyReport(run_id, False, checked, previous, sequence, problem)

    for row in rows:
        expected = checked + 1
        if row.sequence != expected:
            return broken(expected, f"the log has no event at sequence {expected}")
        try:
            data: Any = json.loads(row.data)
            canonical = canonical_event_json(data)
        except (ValueError, TypeError, RecursionError) as exc:
            return broken(row.sequence, f"the stored line is not JSON ({exc})")
        if integrity.link(previous, canonical) != row.hash:
            return broken(row.sequence, _BAD_LINK)
        event = _check_row(run_id, row, types)
        if isinstance(event, str):
            return broken(row.sequence, event)
        try:
            record = reducer.reduce(record, event)
        except LifecycleError as exc:
            return broken(row.sequence, f"the event breaks the run's lifecycle: {exc}")
        previous = row.hash
        checked += 1
        if snapshot is not None and checked == snapshot.sequence:
            covered, covered_hash = record, row.hash
        if row.type in _TABLE_EVENTS:
            types = reducer.event_types_for(record)
    try:
        reducer.check_table(record)  # a run under another table is not this store's to vouch for
    except TableMismatchError as exc:
        return broken(exc.sequence, f"the event breaks the run's lifecycle: {exc}")
    if info is not None and info.version != checked:
        return broken(
            min(info.version, checked) + 1,
            f"store inconsistent: the runs table says version {info.version} but the log "
            f"ends at {checked}",
        )
    if info is not None and (info.status, info.updated_at) != (record.status, record.updated_at):
        return broken(
            None,
            f"store inconsistent: the runs table says '{info.status}' at {info.updated_at}, "
            f"but the log folds to '{record.status}' at {record.updated_at}",
        )
    if snapshot is not None:
        problem = _snapshot_problem(run_id, snapshot, covered, covered_hash, integrity)
        if problem is not None:
            return broken(snapshot.sequence, problem)
    return VerifyReport(run_id, True, checked, previous)


def _snapshot_problem(
    run_id: str,
    stored: StoredSnapshot,
    covered: RunRecord | None,
    covered_hash: str,
    integrity: Integrity,
) -> str | None:
    """What is wrong with the snapshot, checked against the fold of the events it covers."""
    if covered is None:
        return f"the snapshot covers sequence {stored.sequence}, which the log does not hold"
    row = StoredEvent(stored.sequence, "", "", covered_hash)
    reason = _distrust(run_id, stored, row, integrity)
    # One written before digests existed is never trusted by a load, so it is no risk;
    # its content is still checked below.
    if reason is not None and stored.digest:
        return f"the snapshot is not to be trusted: {reason}"
    try:
        snapshot = Snapshot.loads(stored.data)
    except (ValueError, TypeError, KeyError) as exc:
        return f"the snapshot does not read back ({exc})"
    if snapshot.run_id != run_id or snapshot.sequence != stored.sequence:
        return f"the snapshot is of run '{snapshot.run_id}', sequence {snapshot.sequence}"
    if snapshot.record != covered:
        differ = [
            f.name
            for f in attrs.fields(RunRecord)
            if getattr(snapshot.record, f.name) != getattr(covered, f.name)
        ]
        return (
            "the snapshot does not hold what the events it covers fold into (it differs in "
            f"{', '.join(differ)}): it was changed, or taken under another table"
        )
    return None
