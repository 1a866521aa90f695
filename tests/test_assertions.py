"""`assert_legal_log`: the folded record, or a failure that shows where and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfsm import (
    DEFAULT_TABLE,
    EventFormatError,
    IllegalTransitionError,
    Reducer,
    State,
    Transition,
)
from agentfsm.events import dump_event, make_event
from agentfsm.testing import IllegalLogError, Step, assert_legal_log

EXAMPLES = Path(__file__).parent.parent / "examples"
AT = "2026-09-01T10:00:00Z"


def _event(seq: int, type: str, **fields: object):  # type: ignore[no-untyped-def]
    return make_event(type, run_id="run_1", sequence=seq, occurred_at=AT, **fields)


def test_legal_log_returns_its_record() -> None:
    """A legal log, given as JSON lines, folds to its record."""
    lines = (EXAMPLES / "order_ticket.jsonl").read_text(encoding="utf-8").splitlines()
    record = assert_legal_log(lines)
    assert (record.status, record.version) == ("completed", 14)


def test_dicts_and_models_mix() -> None:
    """Events may be validated models or plain dicts."""
    record = assert_legal_log(
        [_event(1, "run.started"), json.loads(dump_event(_event(2, "model.started")))]
    )
    assert record.model_call_open


def test_refused_event_shows_the_path() -> None:
    """The failure names the event, the reason, the path so far and the event itself."""
    events = [_event(1, "run.started"), _event(2, "model.started"), _event(3, "run.completed")]
    with pytest.raises(IllegalLogError) as info:
        assert_legal_log(events)
    failure = info.value
    assert str(failure) == (
        "log is not legal under table 'agent_run': event 3 of 3 is refused\n"
        "  run 'run_1' is 'running': event 'run.completed' (sequence 3) is not allowed: "
        "condition 'final output recorded, nothing unresolved' does not hold; allowed: "
        "'approval.requested', 'handoff', 'model.completed', 'model.started', "
        "'run.cancel_requested', 'run.completed', 'run.failed', 'run.paused', "
        "'run.terminated', 'tool.requested', 'tool.started'\n"
        "path so far:\n"
        "     1  run.started            created -> running\n"
        "     2  model.started          running -> running\n"
        "offending event:\n"
        '  {"run_id":"run_1","sequence":3,"type":"run.completed",'
        '"occurred_at":"2026-09-01T10:00:00Z"}'
    )
    assert (failure.table, failure.position, failure.total) == ("agent_run", 3, 3)
    assert failure.path == (
        Step(1, "run.started", "created", "running"),
        Step(2, "model.started", "running", "running"),
    )
    assert failure.event == events[2]
    assert isinstance(failure.error, IllegalTransitionError)


def test_unreadable_event_is_reported() -> None:
    """An item that is not a valid event is reported with the wire format's message."""
    with pytest.raises(IllegalLogError) as info:
        assert_legal_log([dump_event(_event(1, "run.started")), '{"type": "run.exploded"}'])
    assert isinstance(info.value.error, EventFormatError)
    assert str(info.value).splitlines()[0] == (
        "log is not legal under table 'agent_run': event 2 of 2 is not a valid event"
    )
    assert info.value.event is None


def test_first_event_refused() -> None:
    """When the first event is refused, the path says so."""
    with pytest.raises(IllegalLogError) as info:
        assert_legal_log([_event(1, "model.started")])
    assert str(info.value).splitlines()[2:4] == [
        "path so far:",
        "  (none: it is the first event)",
    ]


def test_empty_log() -> None:
    """An empty log is not a run."""
    with pytest.raises(IllegalLogError) as info:
        assert_legal_log([])
    assert str(info.value) == "log is not legal under table 'agent_run': it is empty"


def test_checks_against_the_table_given() -> None:
    """A derived table (or a reducer) decides what is legal."""
    escalating = DEFAULT_TABLE.derive(
        name="escalating",
        add_states=[State("escalated")],
        add=[
            Transition("running", "handoff", "escalated"),
            Transition("escalated", "run.failed", "failed"),
        ],
        remove=[("running", "handoff", "running")],
    )
    events = [_event(1, "run.started"), _event(2, "handoff", to_agent="human")]
    assert assert_legal_log(events, escalating).status == "escalated"
    assert assert_legal_log(events, Reducer(DEFAULT_TABLE)).status == "running"
