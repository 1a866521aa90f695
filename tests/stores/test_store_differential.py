"""Differential test: the same operations on every backend give the same answers."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentfsm.errors import AgentFSMError
from agentfsm.events import dump_event, make_event
from agentfsm.stores import (
    EventStore,
    MemoryEventStore,
    MemoryStorage,
    SQLiteEventStore,
    StoreOptions,
)
from agentfsm.testing._stores.scripted import finish_events, run_started, tool_turn

RUNS = ("a", "b", "c")


def _outcome(store: EventStore, run_id: str, events: list[Any], expected: int) -> object:
    """What an append did, as a comparable value: the record's JSON or the error's text."""
    try:
        return store.append(run_id, events, expected).dumps()
    except AgentFSMError as exc:
        return (type(exc).__name__, str(exc))


class SameAnswers(RuleBasedStateMachine):
    """Drives a memory store and a SQLite store (two handles each) with the same calls."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="agentfsm-diff-"))
        storage = MemoryStorage()
        options = StoreOptions(snapshot_every=3)
        path = self.dir / "runs.db"
        # writers[i] and readers[i] share storage; each writer keeps its own head cache.
        self.writers: list[EventStore] = [
            MemoryEventStore(storage, options=options),
            SQLiteEventStore(path, options=options),
        ]
        self.readers: list[EventStore] = [
            MemoryEventStore(storage, options=options),
            SQLiteEventStore(path, options=options),
        ]
        self.version = dict.fromkeys(RUNS, 0)
        self.turns = dict.fromkeys(RUNS, 0)
        self.finished: set[str] = set()

    def _all(self, run_id: str, events: list[Any], expected: int, *, via_reader: bool) -> None:
        stores = self.readers if via_reader else self.writers
        outcomes = [_outcome(s, run_id, events, expected) for s in stores]
        assert outcomes[0] == outcomes[1]
        if isinstance(outcomes[0], str):
            self.version[run_id] = events[-1].sequence

    @rule(run_id=st.sampled_from(RUNS), via_reader=st.booleans())
    def start(self, run_id: str, via_reader: bool) -> None:
        self._all(run_id, [run_started(run_id)], 0, via_reader=via_reader)

    @precondition(lambda self: any(v > 0 for v in self.version.values()))
    @rule(run_id=st.sampled_from(RUNS), stale=st.integers(0, 6), via_reader=st.booleans())
    def turn(self, run_id: str, stale: int, via_reader: bool) -> None:
        version = self.version[run_id]
        self.turns[run_id] += 1
        events = tool_turn(run_id, version + 1, f"t{self.turns[run_id]}")
        self._all(run_id, events, max(0, version - stale), via_reader=via_reader)

    @rule(run_id=st.sampled_from(RUNS), cut=st.integers(1, 4))
    def partial_turn(self, run_id: str, cut: int) -> None:
        self.turns[run_id] += 1
        version = self.version[run_id]
        events = tool_turn(run_id, version + 1, f"t{self.turns[run_id]}")[:cut]
        self._all(run_id, events, version, via_reader=False)

    @rule(run_id=st.sampled_from(RUNS))
    def illegal(self, run_id: str) -> None:
        version = self.version[run_id]
        event = make_event(
            "run.resumed",
            run_id=run_id,
            sequence=version + 1,
            occurred_at="2026-09-01T11:00:00Z",
        )
        self._all(run_id, [event], version, via_reader=False)

    @rule(run_id=st.sampled_from(RUNS))
    def finish(self, run_id: str) -> None:
        version = self.version[run_id]
        self._all(run_id, finish_events(run_id, version + 1), version, via_reader=True)

    @invariant()
    def they_agree(self) -> None:
        memory, sqlite = self.readers
        assert memory.runs() == sqlite.runs()
        for info in memory.runs():
            assert memory.load(info.run_id).dumps() == sqlite.load(info.run_id).dumps()
            assert [dump_event(e) for e in memory.events(info.run_id)] == [
                dump_event(e) for e in sqlite.events(info.run_id)
            ]
            assert memory.verify(info.run_id) == sqlite.verify(info.run_id)
            assert memory.verify(info.run_id).ok

    def teardown(self) -> None:
        for store in (*self.writers, *self.readers):
            store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


SameAnswers.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestSameAnswers = SameAnswers.TestCase
