"""Typed usage of the public API: mypy strict must accept this file as written."""

from __future__ import annotations

import io
from datetime import timedelta

from agentfsm import (
    DEFAULT_TABLE,
    IllegalTransitionError,
    RunRecord,
    State,
    Transition,
    TransitionTable,
    parse_event,
    read_events,
)
from agentfsm.events import Event, iter_lines
from agentfsm.names import RunStatus
from agentfsm.record import Timeout
from agentfsm.reducers import DEFAULT_REDUCER

record: RunRecord = DEFAULT_REDUCER.initial("run_1")
event = parse_event(
    '{"run_id": "run_1", "sequence": 1, "type": "run.started",'
    ' "occurred_at": "2026-09-01T10:00:00Z"}'
)
record = DEFAULT_REDUCER.reduce(record, event)
nxt: str = DEFAULT_TABLE.step(RunStatus.RUNNING, "run.paused")
derived: TransitionTable = DEFAULT_TABLE.derive(
    add_states=[State("escalated", description="a human took over")],
    add=[
        Transition("waiting_approval", "run.paused", "escalated"),
        Transition("escalated", "run.resumed", "running"),
        Transition("escalated", "run.failed", "failed"),
    ],
)
try:
    DEFAULT_TABLE.step("completed", "model.started")
except IllegalTransitionError as exc:
    allowed: tuple[str, ...] = exc.allowed

# A file, binary or text, is read one bounded line at a time.
text_lines: list[str] = list(iter_lines(io.BytesIO(b"\n")))
text_lines += list(iter_lines(io.StringIO("\n"), 1024))
read: list[tuple[int, Event]] = list(read_events(io.BytesIO(b"")))
read += list(read_events(io.StringIO("")))

# A state that times out: its edge's condition is its time, and the record says when.
timed: TransitionTable = derived.derive(
    add_events=["run.expired"],
    add=[Transition("escalated", "run.expired", "failed", after=timedelta(days=7))],
)
wait: timedelta | None = timed.transitions[-1].after
first: Transition | None = timed.timeout("escalated")
due: Timeout | None = record.timeout
entered: str | None = record.entered_at
try:
    DEFAULT_TABLE.step("completed", "model.started")
except IllegalTransitionError as exc:
    due_at: str | None = exc.due_at
