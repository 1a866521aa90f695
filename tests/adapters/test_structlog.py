"""The structlog adapter: stable event names and fields, and no configure()."""

from __future__ import annotations

import pytest
import structlog
from structlog.testing import capture_logs

from agentfsm.adapters.structlog import LoggingReducer
from agentfsm.errors import GuardRejectedError, IllegalTransitionError
from agentfsm.events import LogBuilder
from agentfsm.guards import MaxTurns
from agentfsm.stores import MemoryEventStore, StoreOptions


def _two_turns() -> LogBuilder:
    log = LogBuilder("r1")
    log.add("run.started", objective="x")
    log.add("model.started")
    log.add("model.completed", decision="final", output="done")
    log.add("model.started")
    return log


def test_every_applied_event_is_logged_with_its_transition() -> None:
    """Each fold logs transition.applied with run_id, sequence, event_type and both states."""
    log = _two_turns()
    reducer = LoggingReducer()
    with capture_logs() as logs:
        reducer.replay(log.events[:3])
    assert logs == [
        {
            "run_id": "r1",
            "sequence": 1,
            "event_type": "run.started",
            "from_state": "created",
            "to_state": "running",
            "event": "transition.applied",
            "log_level": "info",
        },
        {
            "run_id": "r1",
            "sequence": 2,
            "event_type": "model.started",
            "from_state": "running",
            "to_state": "running",
            "guard_verdict": "passed",
            "event": "transition.applied",
            "log_level": "info",
        },
        {
            "run_id": "r1",
            "sequence": 3,
            "event_type": "model.completed",
            "from_state": "running",
            "to_state": "running",
            "guard_verdict": "passed",
            "event": "transition.applied",
            "log_level": "info",
        },
    ]


def test_a_guard_refusal_is_logged_as_guard_rejected() -> None:
    """A MaxTurns refusal logs guard.rejected with the guard, stop reason and detail."""
    log = _two_turns()
    reducer = LoggingReducer(guards=[MaxTurns(1)])
    record = reducer.replay(log.events[:3])
    with capture_logs() as logs, pytest.raises(GuardRejectedError):
        reducer.reduce(record, log.events[3])
    assert logs == [
        {
            "run_id": "r1",
            "sequence": 4,
            "event_type": "model.started",
            "from_state": "running",
            "guard": "max_turns",
            "stop_reason": "max_turns",
            "detail": "1 of 1 turns used",
            "event": "guard.rejected",
            "log_level": "warning",
        }
    ]


def test_an_illegal_event_is_logged_as_transition_rejected() -> None:
    """An event the table refuses logs transition.rejected with the error's kind and reason."""
    log = LogBuilder("r1")
    log.add("run.started")
    log.add("run.completed")
    reducer = LoggingReducer()
    record = reducer.reduce(reducer.initial("r1"), log.events[0])
    with capture_logs() as logs, pytest.raises(IllegalTransitionError) as err:
        reducer.reduce(record, log.events[1])
    assert logs == [
        {
            "run_id": "r1",
            "sequence": 2,
            "event_type": "run.completed",
            "from_state": "running",
            "error_kind": "illegal_transition",
            "reason": err.value.reason,
            "event": "transition.rejected",
            "log_level": "error",
        }
    ]
    assert err.value.reason.startswith("is not allowed: condition")


def test_a_store_with_the_logging_reducer_logs_its_appends() -> None:
    """StoreOptions(reducer=LoggingReducer()) logs each appended event once."""
    store = MemoryEventStore(options=StoreOptions(reducer=LoggingReducer()))
    log = _two_turns()
    with capture_logs() as logs:
        store.append("r1", log.events[:2], 0)
    assert [(e["event"], e["sequence"]) for e in logs] == [
        ("transition.applied", 1),
        ("transition.applied", 2),
    ]


def test_the_library_never_configures_structlog() -> None:
    """Using the logging reducer leaves structlog's global configuration untouched."""
    before = structlog.get_config()
    LoggingReducer().replay(_two_turns().events)
    assert structlog.get_config() == before
