"""When a store writes a snapshot: every `snapshot_every` events, less often as a run grows.

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

from agentfsm.record import RunRecord

__all__ = ["EVENTS_PER_ACTION", "snapshot_due", "snapshot_interval"]

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
