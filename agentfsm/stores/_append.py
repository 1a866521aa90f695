"""How a store appends: validate a batch with the reducer, write its lines, chain them.

Backends only move rows; this decides what the rows are, so the sync and async stores
(and third-party backends that subclass `EventStore`) cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentfsm.errors import EventFormatError
from agentfsm.events.bounds import MAX_EVENT_BYTES
from agentfsm.events.canonical import canonical_json
from agentfsm.events.codec import dump_event, event_to_dict
from agentfsm.events.models import Event
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._cadence import snapshot_due
from agentfsm.stores._integrity import PLAIN, Integrity
from agentfsm.stores._rows import Head, PreparedAppend, StoredEvent, StoredSnapshot

__all__ = ["canonical_event_json", "prepare_append"]


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
    # Two substring scans first: the pattern cannot match without one of them, and they cost
    # a twentieth of the regex, which tries every position (2.3 µs on a 150-byte event).
    if (".0" not in text and "e+" not in text) or _INTEGRAL_FLOAT.search(text) is None:
        return text
    return canonical_json(data)


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
    if snapshot_due(record, expected_version, snapshot_every):
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
