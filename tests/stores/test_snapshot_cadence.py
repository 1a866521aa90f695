"""Snapshots come every `snapshot_every` events, spaced out as the ledger grows."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentfsm.record import RunRecord
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.stores import MemoryEventStore, StoreOptions
from agentfsm.stores._append import EVENTS_PER_ACTION, snapshot_due, snapshot_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.growth import long_run


def _record(actions: int, version: int = 0) -> RunRecord:
    ledger = {str(i): None for i in range(actions)}
    return RunRecord(run_id="r", version=version, actions=ledger)  # type: ignore[arg-type]


@given(every=st.integers(1, 5000), actions=st.integers(0, 100_000))
def test_the_interval_is_a_doubling_of_every_that_covers_the_ledger(
    every: int, actions: int
) -> None:
    """Never shorter than asked nor than `EVENTS_PER_ACTION` per action, at most twice the
    longer of the two, and a power-of-two multiple of `every` (so any handle agrees)."""
    interval = snapshot_interval(_record(actions), every)
    least = max(every, actions * EVENTS_PER_ACTION)
    assert least <= interval < 2 * least or interval == every
    ratio = interval // every
    assert interval % every == 0
    assert ratio & (ratio - 1) == 0


def test_a_short_run_snapshots_at_every_multiple() -> None:
    """Below the ledger's share the cadence is exactly `snapshot_every`."""
    assert [v for v in range(1, 40) if snapshot_due(_record(2, v), v - 1, 10)] == [10, 20, 30]
    assert not snapshot_due(_record(2, 10), 9, None)


def test_a_long_run_writes_snapshots_further_apart() -> None:
    """A store with `snapshot_every=10` writes a 300-call run's snapshots at doubling
    versions (each holds about v/5 actions, so the next interval is at least 4v/5), and
    loads the run back equal to its fold."""
    events = long_run(300)
    store = MemoryEventStore(options=StoreOptions(snapshot_every=10))
    versions = []
    for event in events:
        store.append(event.run_id, [event], event.sequence - 1)
        stored = store._read_snapshot(event.run_id)
        if stored is not None and (not versions or versions[-1] != stored.sequence):
            versions.append(stored.sequence)
    assert versions == [10, 20, 40, 80, 160, 320, 640, 1280]
    assert store.load("long") == DEFAULT_REDUCER.replay(events)
