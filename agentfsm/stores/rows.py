"""The rows a backend keeps and the values a store hands back: plain frozen data (what it
says of its runs without folding a log is in `runs.py`).

`EventStore.verify` returns a `VerifyReport`, `attachment` an `Attachment`, a backend's
`_read_rows` its `StoredEvent`s and `_read_snapshot` its `StoredSnapshot`; the Runner's
writer hands `append` a `Folded`. Kept apart from the code that fills them so a backend,
the store template and the conformance suite can all name them without importing how
appends and loads work (the append's own values, `Head` and `PreparedAppend`, are in
`_append.py`).
"""

from __future__ import annotations

import attrs

from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = [
    "GENESIS_HASH",
    "Attachment",
    "Folded",
    "StoredEvent",
    "StoredSnapshot",
    "VerifyReport",
]

#: The "previous hash" of a run's first event.
GENESIS_HASH = ""


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


@attrs.frozen(slots=True)
class Folded:
    """A batch's fold, made by its writer, that a store may take instead of folding again.

    Only used when `before` is the very record the store holds as the run's head, `events`
    are the very event objects appended, and `reducer` is of the store reducer's table and
    class (the record after an event depends on nothing else). The store still judges every
    event's envelope, edge and guards (`Reducer.admit`), but trusts `after` to be the fold:
    pass only what a `Reducer` made (the Runner's writer does). Otherwise the store folds
    the batch itself, as without it.

    Attributes:
        reducer: the reducer that made `after`.
        before: the record the batch was folded onto.
        events: the batch that was folded.
        after: the record after each event of the batch, in order.
    """

    reducer: Reducer
    before: RunRecord
    events: tuple[Event, ...]
    after: tuple[RunRecord, ...]


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
