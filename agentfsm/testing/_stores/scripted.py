"""Scripted legal runs: whole tool turns of the default table, for appending to a store.

The conformance suite, the process checks and the tests need legal batches to append, and
readable ones: a run of `turns` tool calls (`scripted_run`), or its pieces (`run_started`,
`tool_turn`, `finish_events`) to build batches that start where a store's log ends. Events
come a second apart from a fixed instant, so two builds of a run are equal event for event.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentfsm.events.codec import make_event
from agentfsm.events.models import Event

__all__ = ["finish_events", "run_started", "scripted_run", "tool_turn"]

_T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)


def _at(sequence: int) -> str:
    return (_T0 + timedelta(seconds=sequence)).isoformat()


def run_started(run_id: str) -> Event:
    """Sequence 1 of a scripted run: `run.started`."""
    return make_event("run.started", run_id=run_id, sequence=1, occurred_at=_at(1), agent="a")


def tool_turn(run_id: str, start: int, action_id: str, *, result: Any = None) -> list[Event]:
    """One whole turn from sequence `start`: the model asks for a tool, the tool succeeds.

    Legal wherever the run is `running` with nothing in flight: right after `run_started`
    or after another turn. Five events: `model.started`, `model.completed`,
    `tool.requested`, `tool.started`, `tool.completed`.
    """
    arguments = {"action": action_id}
    seq = range(start, start + 5)
    return [
        make_event("model.started", run_id=run_id, sequence=seq[0], occurred_at=_at(seq[0])),
        make_event(
            "model.completed",
            run_id=run_id,
            sequence=seq[1],
            occurred_at=_at(seq[1]),
            decision="tool_calls",
            tool_calls=[{"action_id": action_id, "tool": "lookup", "arguments": arguments}],
            usage={"input_tokens": 120, "output_tokens": 30, "cost": 0.0015},
        ),
        make_event(
            "tool.requested",
            run_id=run_id,
            sequence=seq[2],
            occurred_at=_at(seq[2]),
            action_id=action_id,
            tool="lookup",
            arguments=arguments,
        ),
        make_event(
            "tool.started",
            run_id=run_id,
            sequence=seq[3],
            occurred_at=_at(seq[3]),
            action_id=action_id,
        ),
        make_event(
            "tool.completed",
            run_id=run_id,
            sequence=seq[4],
            occurred_at=_at(seq[4]),
            action_id=action_id,
            result=result if result is not None else {"found": action_id},
        ),
    ]


def finish_events(run_id: str, start: int) -> list[Event]:
    """Three events from `start` that complete a running run: a final answer, accepted."""
    return [
        make_event("model.started", run_id=run_id, sequence=start, occurred_at=_at(start)),
        make_event(
            "model.completed",
            run_id=run_id,
            sequence=start + 1,
            occurred_at=_at(start + 1),
            decision="final",
            output="done",
        ),
        make_event("run.completed", run_id=run_id, sequence=start + 2, occurred_at=_at(start + 2)),
    ]


def scripted_run(run_id: str, turns: int, *, finished: bool = False) -> list[Event]:
    """A legal run: `run.started`, `turns` tool turns (actions `act-1`...), maybe finished."""
    events = [run_started(run_id)]
    for turn in range(1, turns + 1):
        events.extend(tool_turn(run_id, len(events) + 1, f"act-{turn}"))
    if finished:
        events.extend(finish_events(run_id, len(events) + 1))
    return events
