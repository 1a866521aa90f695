"""What every store does the same way: validate a batch, chain its hashes, fold, verify.

Backends only move rows; everything that decides whether a row is right lives here, as
plain functions over rows, so the sync and async stores (and third-party backends that
subclass `EventStore`) cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import structlog

from agentfsm.events.canonical import canonical_json
from agentfsm.events.codec import dump_event, event_to_dict, parse_event
from agentfsm.events.models import Event
from agentfsm.fsm.errors import (
    ConcurrencyConflictError,
    CorruptLogError,
    EventFormatError,
    LifecycleError,
)
from agentfsm.reducers.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.snapshot import Snapshot

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
    "conflict",
    "fold_rows",
    "parse_row",
    "prepare_append",
    "trusted_snapshot",
    "verify_rows",
]

_log = structlog.get_logger("agentfsm.stores")

#: The "previous hash" of a run's first event.
GENESIS_HASH = ""


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


def chain_hash(previous: str, canonical: str) -> str:
    """The hash of one stored event: hex sha256 over the previous hash + its canonical JSON.

    The canonical JSON (`agentfsm.events.canonical_json` of the event as a dict) does not
    depend on how the line was spelled, so anyone can recompute the chain from an export.
    """
    return hashlib.sha256((previous + canonical).encode()).hexdigest()


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
    """

    sequence: int
    event_hash: str
    data: str


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
        sequence: the first sequence that is wrong (None when `ok`).
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
        return f"run '{self.run_id}', sequence {self.sequence}: {self.problem}"


def prepare_append(
    reducer: Reducer,
    head: Head,
    events: Sequence[Event],
    snapshot_every: int | None,
) -> PreparedAppend:
    """Validate `events` on top of `head` and build the rows to write.

    Raises:
        LifecycleError: the first event the reducer refuses; nothing is to be written.
    """
    record = head.record
    expected_version = record.version
    previous = head.hash
    rows: list[StoredEvent] = []
    reduce = reducer.reduce
    for event in events:
        record = reduce(record, event)
        previous = chain_hash(previous, canonical_event_json(event_to_dict(event)))
        rows.append(StoredEvent(event.sequence, event.type, dump_event(event), previous))
    snapshot = None
    if snapshot_every and record.version // snapshot_every > expected_version // snapshot_every:
        snapshot = StoredSnapshot(record.version, previous, Snapshot(record).dumps())
    return PreparedAppend(record.run_id, expected_version, tuple(rows), record, snapshot)


def conflict(run_id: str, expected_version: int, actual_version: int) -> ConcurrencyConflictError:
    """The error for a lost race (a small helper so every backend words it the same)."""
    return ConcurrencyConflictError(
        run_id=run_id, expected_version=expected_version, actual_version=actual_version
    )


def parse_row(run_id: str, row: StoredEvent) -> Event:
    """The event a stored row holds, checked against the row's place in the log.

    Raises:
        CorruptLogError: the row does not parse, or names another run or sequence.
    """
    checked = _check_row(run_id, row)
    if isinstance(checked, str):
        raise CorruptLogError(checked, run_id=run_id, sequence=row.sequence)
    return checked


def _check_row(run_id: str, row: StoredEvent) -> Event | str:
    """The row's event, or a sentence saying why it is not a valid event of its place."""
    try:
        event = parse_event(row.data)
    except EventFormatError as exc:
        return f"the stored event is not a valid event: {'; '.join(exc.problems)}"
    if event.run_id != run_id or event.sequence != row.sequence:
        return f"the stored event names run '{event.run_id}', sequence {event.sequence}"
    return event


def trusted_snapshot(run_id: str, stored: StoredSnapshot, first: StoredEvent | None) -> Head | None:
    """The snapshot's record if it can be trusted, else None (and a `store.snapshot_ignored` log).

    `first` is the log row at `stored.sequence` (None when the log has no such row). A
    snapshot is trusted only when it reads back, is of this run, says the sequence it is
    stored under, and the log still holds exactly the event it was taken after.
    """
    reason = None
    snapshot = None
    try:
        snapshot = Snapshot.loads(stored.data)
    except (ValueError, TypeError, KeyError) as exc:
        # json errors are ValueErrors; a hand-edited record can fail with the other two.
        reason = f"it does not read back ({exc})"
    if snapshot is not None:
        if snapshot.run_id != run_id:
            reason = f"it is of run '{snapshot.run_id}'"
        elif snapshot.sequence != stored.sequence:
            reason = f"it says sequence {snapshot.sequence} but is stored as {stored.sequence}"
        elif first is None or first.sequence != stored.sequence:
            reason = f"the log has no event at sequence {stored.sequence}"
        elif first.hash != stored.event_hash:
            reason = f"the log's event at sequence {stored.sequence} is not the one it covers"
    if reason is not None or snapshot is None:
        _log.warning(
            "store.snapshot_ignored",
            run_id=run_id,
            sequence=stored.sequence,
            reason=reason,
            fallback="full replay",
        )
        return None
    return Head(snapshot.record, stored.event_hash)


def fold_rows(
    reducer: Reducer, run_id: str, head: Head | None, rows: Iterable[StoredEvent]
) -> Head:
    """Fold stored rows onto `head` (or from the start of the run when None).

    Raises:
        CorruptLogError: a row does not parse, is out of place or breaks the lifecycle;
            it names the run and the sequence.
    """
    record = head.record if head is not None else reducer.initial(run_id)
    last_hash = head.hash if head is not None else GENESIS_HASH
    reduce = reducer.reduce
    for row in rows:
        event = parse_row(run_id, row)
        try:
            record = reduce(record, event)
        except LifecycleError as exc:
            raise CorruptLogError(
                f"the stored event breaks the run's lifecycle: {exc}",
                run_id=run_id,
                sequence=row.sequence,
            ) from None
        last_hash = row.hash
    return Head(record, last_hash)


def verify_rows(
    reducer: Reducer, run_id: str, rows: Iterable[StoredEvent], info: RunInfo | None
) -> VerifyReport:
    """Check a log up to `info.version`: contiguous, each line an event of this run, the hash
    chain intact, the lifecycle legal, and as long as the runs row says. Stops at the first
    problem. Rows past `info.version` were appended after `info` was read and are left out."""
    record = reducer.initial(run_id)
    previous = GENESIS_HASH
    checked = 0

    def broken(sequence: int, problem: str) -> VerifyReport:
        return VerifyReport(run_id, False, checked, previous, sequence, problem)

    for row in rows:
        if info is not None and checked == info.version:
            break  # appended after the runs row was read: not part of what is checked
        expected = checked + 1
        if row.sequence != expected:
            return broken(expected, f"the log has no event at sequence {expected}")
        try:
            data: Any = json.loads(row.data)
            canonical = canonical_event_json(data)
        except (ValueError, TypeError) as exc:
            return broken(row.sequence, f"the stored line is not JSON ({exc})")
        if chain_hash(previous, canonical) != row.hash:
            return broken(
                row.sequence,
                "the hash does not match: this event or its stored hash was changed",
            )
        event = _check_row(run_id, row)
        if isinstance(event, str):
            return broken(row.sequence, event)
        try:
            record = reducer.reduce(record, event)
        except LifecycleError as exc:
            return broken(row.sequence, f"the event breaks the run's lifecycle: {exc}")
        previous = row.hash
        checked += 1
    if info is not None and info.version > checked:
        return broken(
            checked + 1,
            f"the runs table says version {info.version} but the log ends at {checked}",
        )
    return VerifyReport(run_id, True, checked, previous)
