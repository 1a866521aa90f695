"""The writer alone, over a memory store: how a batch is stamped before it is appended."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from agentfsm.events import models as m
from agentfsm.events import step_clock
from agentfsm.events.codec import dump_event
from agentfsm.record import RunRecord
from agentfsm.runtime import cancel
from agentfsm.runtime._writer import Spec, Writer, built
from agentfsm.stores import MemoryEventStore

CALLS = {
    "decision": "tool_calls",
    "tool_calls": [{"action_id": "t1.1", "tool": "lookup", "arguments": {"n": 1}}],
}


def _thinking(clock: Callable[[], datetime]) -> tuple[MemoryEventStore, Writer]:
    """A run with a model call open, and a writer on it."""
    store = MemoryEventStore()
    writer = Writer(store, store.reducer.initial("r"), reducer=store.reducer, clock=clock)
    writer.append([Spec(m.RunStarted, {}), Spec(m.ModelStarted, {})])
    return store, writer


def _as_built_by(writer: Writer, record: RunRecord, event: m.ModelCompleted) -> str:
    """`event`'s line as the writer builds it from its spec, on `record`."""
    spec = Spec(m.ModelCompleted, CALLS)
    fresh = writer._build([spec], record, event.occurred_at)[0]
    return dump_event(fresh)


class TestBuilt:
    def test_a_built_event_is_appended_with_the_writers_sequence_and_time(self) -> None:
        """The event built ahead (to admit its calls) is the one appended, restamped."""
        store, writer = _thinking(step_clock())
        before = writer.record
        spec = Spec(m.ModelCompleted, CALLS)
        built(spec, before, "2020-01-01T00:00:00+00:00")
        writer.append([spec])
        event = list(store.events("r"))[-1]
        assert isinstance(event, m.ModelCompleted)
        assert event.sequence == before.version + 1
        assert event.occurred_at == "2026-09-01T10:00:01+00:00"  # the writer's clock
        assert dump_event(event) == _as_built_by(writer, before, event)

    def test_it_is_restamped_on_top_of_another_process_events(self) -> None:
        """A cancel asked while the model was called moves the answer one sequence on."""
        store, writer = _thinking(step_clock())
        before = writer.record
        spec = Spec(m.ModelCompleted, CALLS)
        built(spec, before, "2026-09-01T10:00:01+00:00")
        cancel(store, "r", reason="enough")
        writer.append([spec])
        event = list(store.events("r"))[-1]
        assert event.type == "model.completed"
        assert event.sequence == before.version + 2
        assert writer.record.version == before.version + 2

    def test_the_writers_time_is_checked_as_for_any_event(self) -> None:
        """A clock without an offset is refused for a built event too; nothing is written."""
        good = step_clock()
        naive = iter([good(), datetime(2026, 9, 1, 10, 5)])
        store, writer = _thinking(lambda: next(naive))
        spec = Spec(m.ModelCompleted, CALLS)
        built(spec, writer.record, datetime.now(UTC).isoformat())
        with pytest.raises(ValidationError, match="not an RFC 3339 timestamp"):
            writer.append([spec])
        assert store.run_info("r").version == 2
