"""Small log-writing helpers for the guard tests (private to them; not a strategy module)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentfsm import Event, GuardRejectedError, LogBuilder, RunRecord
from agentfsm.events.builder import step_clock
from agentfsm.reducers import Reducer

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)


def new_run(run_id: str = "run_1", *, step: float = 1.0, **started: Any) -> LogBuilder:
    """A log with `run.started` written, one event per `step` seconds from T0."""
    log = LogBuilder(run_id, clock=step_clock(T0, timedelta(seconds=step)))
    log.add("run.started", objective="test", agent="main", **started)
    return log


def model_call(
    log: LogBuilder,
    *calls: dict[str, Any],
    reserved_tokens: int | None = None,
    reserved_cost: float | None = None,
    tokens: int = 0,
    cost: float = 0.0,
) -> None:
    """One turn: `model.started` and `model.completed` (tool calls if given, else final)."""
    reserve = {"reserved_tokens": reserved_tokens, "reserved_cost": reserved_cost}
    log.add("model.started", **{k: v for k, v in reserve.items() if v is not None})
    usage = {"input_tokens": tokens, "output_tokens": 0, "cost": cost}
    if calls:
        log.add("model.completed", decision="tool_calls", tool_calls=list(calls), usage=usage)
    else:
        log.add("model.completed", decision="final", output="done", usage=usage)


def tool_call(
    log: LogBuilder,
    action_id: str,
    tool: str = "search",
    arguments: dict[str, Any] | None = None,
    *,
    result: Any = None,
    fail: bool = False,
    cost: float | None = None,
) -> None:
    """A call requested, started and completed (or failed, not retryable)."""
    log.add("tool.requested", action_id=action_id, tool=tool, arguments=arguments or {})
    log.add("tool.started", action_id=action_id)
    if fail:
        error = {"kind": "boom", "message": "it failed", "retryable": False}
        log.add("tool.failed", action_id=action_id, error=error)
    else:
        extra = {"cost": cost} if cost is not None else {}
        log.add("tool.completed", action_id=action_id, result=result, **extra)


def value_error(message: str) -> Any:
    """`pytest.raises(ValueError)` that insists on the whole message."""
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


def fold(reducer: Reducer, events: list[Event]) -> RunRecord:
    """Every event folded by `reducer`."""
    record = reducer.initial(events[0].run_id)
    for event in events:
        record = reducer.reduce(record, event)
    return record


def refusal(reducer: Reducer, events: list[Event]) -> GuardRejectedError:
    """Fold all but the last event, then expect the last one refused and nothing changed."""
    record = fold(reducer, events[:-1])
    before = record.dumps()
    with pytest.raises(GuardRejectedError) as info:
        reducer.reduce(record, events[-1])
    assert record.dumps() == before
    return info.value
