"""What a run's record holds in the driving process grows linearly with its turns (issue 32:
docs/runtime.md states the figure per 1,000 turns)."""

from __future__ import annotations

import gc
import tracemalloc

from agentfsm import LogBuilder
from agentfsm.events.models import Event
from agentfsm.reducers import replay


def _turns(count: int) -> list[Event]:
    """A run of `count` turns, each one model call asking for one tool call, run."""
    log = LogBuilder("r")
    log.add("run.started", objective="a long run", agent="test")
    for i in range(1, count + 1):
        calls = [{"action_id": f"a{i}", "tool": "lookup", "arguments": {"n": i}}]
        log.add("model.started")
        log.add("model.completed", decision="tool_calls", tool_calls=calls)
        log.add("tool.requested", action_id=f"a{i}", tool="lookup", arguments={"n": i})
        log.add("tool.started", action_id=f"a{i}")
        log.add("tool.completed", action_id=f"a{i}", result={"n": i})
    return log.events


def _held(events: list[Event]) -> int:
    """The bytes the record folded from `events` holds (tracemalloc, after collection)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        record = replay(events)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(record.actions) > 0
    return held


def test_the_record_grows_linearly_with_its_turns() -> None:
    """The bytes per turn at 4,000 turns are within 1.3x of those at 500 (a ledger that
    copied itself per turn would hold 8x as much per turn), and under 1 KiB."""
    small, large = 500, 4000
    per_small = _held(_turns(small)) / small
    per_large = _held(_turns(large)) / large
    assert per_large <= per_small * 1.3, (per_small, per_large)
    assert per_large < 1024, per_large
