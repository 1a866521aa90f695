"""How a store appends: validate a batch with the reducer, write its lines, chain them,
and snapshot the run when it is due.

Backends only move rows; this decides what the rows are, so the sync and async stores
(and third-party backends that subclass `EventStore`) cannot drift apart. A handle keeps
the latest record of the runs it wrote or read (`HeadCache`), so an append that follows its
own last one need not load the run again.

When a store writes a snapshot: every `snapshot_every` events, less often as a run grows.
A snapshot holds the whole record, so writing one costs what the run's action ledger holds.
At a fixed interval the cost of snapshots per event grows with the run (a run of 40,000
calls would write 40,000 actions' worth of JSON, 7 µs each, every 1,000 events; a handle
that wrote the last snapshot reuses the text of each action settled since, `record.py`, but
a fresh process, or one that loaded the run from its log, dumps them all). So the
interval is `snapshot_every` times the smallest power of two that makes it at least
`EVENTS_PER_ACTION` times the number of actions: never shorter than asked, and long enough
that a snapshot's cost spread over the events until the next is at most a quarter of an
action's dump per event, whatever the length. A load then replays at most one interval of
events after the snapshot, a bounded share of the run.
A power of two keeps the rule stateless: a multiple of the longer interval is one of every
shorter, so any handle, given only the versions, decides alike.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from agentfsm.errors import EventFormatError
from agentfsm.events._bounds import MAX_EVENT_BYTES
from agentfsm.events._canonical import canonical_text
from agentfsm.events.codec import dump_event
from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._integrity import PLAIN, Integrity
from agentfsm.stores.rows import Folded, StoredEvent, StoredSnapshot
from agentfsm.stores.runs import RunInfo

__all__ = [
    "EVENTS_PER_ACTION",
    "Head",
    "HeadCache",
    "PreparedAppend",
    "hands_fold",
    "prepare_append",
    "snapshot_due",
    "snapshot_interval",
    "takes_fold",
]


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
        snapshot: the snapshot to write with the batch, if the batch crosses a snapshot
            point (a multiple of `snapshot_every`, spaced out for long runs: `_append.py`).
        moved: whether the batch changes the run's status (when it does not, a backend may
            leave the status column, and the index listing by status, untouched).
    """

    run_id: str
    expected_version: int
    rows: tuple[StoredEvent, ...]
    record: RunRecord
    snapshot: StoredSnapshot | None
    moved: bool = True

    @property
    def info(self) -> RunInfo:
        """The runs row after the batch."""
        r = self.record
        return RunInfo(r.run_id, r.status, r.version, r.updated_at)


def prepare_append(
    reducer: Reducer,
    head: Head,
    events: Sequence[Event],
    snapshot_every: int | None,
    integrity: Integrity = PLAIN,
    folded: Folded | None = None,
) -> PreparedAppend:
    """Validate `events` on top of `head` and build the rows to write.

    With `folded` (the writer's own fold of the batch, see `Folded`) each event is still
    judged, but its record is taken from the fold when it can be trusted.

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
    known = _trusted(folded, reducer, head, events)
    for i, event in enumerate(events):
        record = reduce(record, event) if known is None else reducer.admit(record, event, known[i])
        try:
            line = dump_event(event)
            # The hash covers the canonical form of the event, read from its line: the
            # line is what a reader of the store has, and what `verify` recomputes from.
            canonical = canonical_text(line)
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
    reducer.check_run_table(record, after_append=True)
    snapshot = None
    if snapshot_due(record, expected_version, snapshot_every):
        data = Snapshot(record).dumps()
        snapshot = StoredSnapshot(record.version, previous, data, integrity.seal(previous, data))
    moved = record.status != head.record.status
    return PreparedAppend(record.run_id, expected_version, tuple(rows), record, snapshot, moved)


def _check_line_size(event: Event, line: str) -> None:
    size = len(line.encode("utf-8"))
    if size > MAX_EVENT_BYTES:
        raise EventFormatError(
            [f"the event is {size:,} bytes of JSON; at most {MAX_EVENT_BYTES:,} are allowed"],
            run_id=event.run_id,
            sequence=event.sequence,
        )


def _trusted(
    folded: Folded | None, reducer: Reducer, head: Head, events: Sequence[Event]
) -> tuple[RunRecord, ...] | None:
    if folded is None:
        return None
    by = folded.reducer
    if (
        folded.before is not head.record
        or by.table is not reducer.table
        or type(by) is not type(reducer)
        or len(folded.after) != len(events)
        or len(folded.events) != len(events)
        or not all(map(operator.is_, folded.events, events))
    ):
        return None
    return folded.after


_FOLD_MARK = "__agentfsm_takes_fold__"
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def takes_fold(append: _Fn) -> _Fn:
    """Mark a store's `append` as taking `folded=` (an override without the mark does not)."""
    setattr(append, _FOLD_MARK, True)
    return append


def hands_fold(store: object) -> bool:
    """Whether `store.append` takes `folded=`: its class's `append` is one marked so, not a
    subclass's override (a wrapper that counts appends, say) that may not pass it on."""
    return bool(getattr(getattr(type(store), "append", None), _FOLD_MARK, False))


# -- when a snapshot is due ------------------------------------------------------------------

#: How many events, at least, between two snapshots, per action in the ledger.
EVENTS_PER_ACTION = 4


def snapshot_interval(record: RunRecord, every: int) -> int:
    """The events between two snapshots of a run whose record is `record`."""
    least = len(record.actions) * EVENTS_PER_ACTION
    if least <= every:
        return every
    return every << (-(-least // every) - 1).bit_length()


def snapshot_due(record: RunRecord, expected_version: int, every: int | None) -> bool:
    """Whether a batch from `expected_version` to `record.version` crosses a snapshot point."""
    if not every:
        return False
    interval = snapshot_interval(record, every)
    return record.version // interval > expected_version // interval


# -- the heads a handle has seen ------------------------------------------------------------


class HeadCache:
    """The latest record (and chain hash) per run that this handle wrote or read.

    A run's record at a given version never changes (the log is append-only and
    `(run_id, sequence)` is unique), so a cached head is always right *for its version*;
    the write transaction still checks the stored version, so a stale cache costs a
    conflict, never a fork.
    """

    __slots__ = ("_heads", "_size")

    def __init__(self, size: int) -> None:
        self._heads: OrderedDict[str, Head] = OrderedDict()
        self._size = size

    def at(self, run_id: str, version: int) -> Head | None:
        head = self._heads.get(run_id)
        return head if head is not None and head.record.version == version else None

    def put(self, run_id: str, head: Head) -> None:
        if self._size == 0:
            return
        self._heads[run_id] = head
        self._heads.move_to_end(run_id)
        if len(self._heads) > self._size:
            self._heads.popitem(last=False)

    def drop(self, run_id: str) -> None:
        self._heads.pop(run_id, None)
