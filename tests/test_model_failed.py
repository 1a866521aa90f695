"""`model.failed`: an attempt of the open model call failed, and the call ends there.

An SDK's HTTP client retries a failed request inside what the SDK sees as one model call; the
adapters record each attempt as a model call of its own (`agentfsm.adapters._attempts`), so
each is judged by the guards before it is sent. These are the reducer's rules for the event
that ends a failed attempt: it closes the open call (its reservation released, any usage it
reported counted), keeps the run where it is, and is on no table's edge.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm.errors import GuardRejectedError, IllegalTransitionError, LifecycleError
from agentfsm.events import LogBuilder, parse_event
from agentfsm.fsm import DEFAULT_TABLE, Transition
from agentfsm.fsm.table import table_problems
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer

REDUCER = Reducer(DEFAULT_TABLE)
ERROR = {"kind": "http_500", "message": "HTTP 500 from POST /v1/responses", "retryable": True}


def attempts(*failed: dict[str, Any], limits: dict[str, Any] | None = None) -> LogBuilder:
    """A run whose model call failed once per entry of `failed` (its fields), each attempt
    reserving 100 tokens."""
    log = LogBuilder("r")
    log.add("run.started", **({"limits": limits} if limits else {}))
    for fields in failed:
        log.add("model.started", reserved_tokens=100)
        log.add("model.failed", **fields)
    return log


def next_event(record: RunRecord, type_: str, **fields: Any) -> Any:
    data = {"type": type_, "run_id": record.run_id, "sequence": record.version + 1}
    return parse_event({**data, "occurred_at": "2026-09-01T11:00:00+00:00", **fields})


class TestModelFailed:
    def test_it_closes_the_open_call_and_releases_its_reservation(self) -> None:
        """The call is no longer open, nothing is reserved, and the run stays `running`;
        the attempt counted as a turn (one `model.started` each)."""
        record = REDUCER.replay(attempts({"error": ERROR}).events)
        assert (record.status, record.model_call_open) == ("running", False)
        assert (record.reserved_tokens, record.reserved_cost, record.turn) == (0, 0.0, 1)
        assert record.usage.input_tokens == record.usage.output_tokens == 0

    def test_usage_it_reports_is_counted(self) -> None:
        """An attempt that reported spending adds it to the run's usage."""
        spent = {"input_tokens": 30, "output_tokens": 4, "cost": 0.5}
        record = REDUCER.replay(attempts({"error": ERROR, "usage": spent}).events)
        assert (record.usage.input_tokens, record.usage.output_tokens) == (30, 4)
        assert record.usage.cost == 0.5

    def test_the_retry_is_the_next_model_call(self) -> None:
        """After it, `model.started` opens the retry's call and `model.completed` ends it."""
        log = attempts({"error": ERROR}, {"error": ERROR})
        log.add("model.started", reserved_tokens=100)
        log.add("model.completed", decision="final", output="hi", usage={
            "input_tokens": 40, "output_tokens": 2})  # fmt: skip
        log.add("run.completed")
        record = REDUCER.replay(log.events)
        assert (record.status, record.turn, record.final_output) == ("completed", 3, "hi")
        assert record.usage.input_tokens == 40

    def test_without_an_open_call_it_is_refused(self) -> None:
        """There is no attempt to end: the reducer says so."""
        record = REDUCER.replay(attempts({"error": ERROR}).events)
        with pytest.raises(LifecycleError) as caught:
            REDUCER.reduce(record, next_event(record, "model.failed", error=ERROR))
        assert str(caught.value) == (
            "run 'r' is 'running': event 'model.failed' (sequence 4) is refused: no model "
            "call is open (model.failed without model.started)"
        )

    def test_after_a_cancel_was_asked_it_still_ends_the_call(self) -> None:
        """A call in flight when the cancel came may still fail: recorded, the run stays
        `cancel_requested`, and it can be cancelled (nothing is in flight)."""
        log = LogBuilder("r")
        log.add("run.started")
        log.add("model.started")
        log.add("run.cancel_requested")
        log.add("model.failed", error=ERROR)
        log.add("run.cancelled")
        assert REDUCER.replay(log.events).status == "cancelled"

    def test_a_run_that_ended_refuses_it(self) -> None:
        """Terminal states absorb every event, this one too."""
        log = LogBuilder("r")
        log.add("run.started")
        log.add("model.started")
        log.add("run.failed", error={"kind": "InternalServerError", "message": "500"})
        record = REDUCER.replay(log.events)
        with pytest.raises(IllegalTransitionError):
            REDUCER.reduce(record, next_event(record, "model.failed", error=ERROR))

    def test_it_is_on_no_edge(self) -> None:
        """Like `run.migrated` and `emit.refused`: a table may not put it on an edge, and
        adding it changed no table's digest."""
        problems = table_problems(
            DEFAULT_TABLE.states,
            DEFAULT_TABLE.initial,
            [*DEFAULT_TABLE.transitions, Transition("running", "model.failed", "running")],
            DEFAULT_TABLE.event_types,
        )
        assert problems == [
            "edge running --model.failed--> running: 'model.failed' cannot be on an edge "
            "(a model call's failed attempt keeps the run's state, in any state that has "
            "not ended)"
        ]
        assert DEFAULT_TABLE.digest == (
            "sha256:3a8d78b732de41c02e45913d9a1a46549b22481209f5dec8e221b369f80e0391"
        )


class TestGuardsJudgeEveryAttempt:
    def test_max_turns_counts_attempts(self) -> None:
        """Each attempt is a `model.started`: a third attempt under `max_turns=2` is refused."""
        record = REDUCER.replay(attempts({"error": ERROR}, {"error": ERROR}, limits={
            "max_turns": 2}).events)  # fmt: skip
        with pytest.raises(GuardRejectedError) as caught:
            REDUCER.reduce(record, next_event(record, "model.started"))
        assert (caught.value.stop_reason, caught.value.detail) == ("max_turns", "2 of 2 turns used")

    def test_a_deadline_passed_during_the_backoff_refuses_the_retry(self) -> None:
        """The retry's `model.started` comes after the deadline: refused for `deadline`."""
        record = REDUCER.replay(
            attempts({"error": ERROR}, limits={"deadline": "2026-09-01T10:30:00+00:00"}).events
        )
        with pytest.raises(GuardRejectedError) as caught:
            REDUCER.reduce(record, next_event(record, "model.started"))
        assert caught.value.stop_reason == "deadline"

    def test_each_attempt_reserves_against_the_budget(self) -> None:
        """A retry reserves again: under `max_tokens`, what earlier attempts reported
        spending and the retry's reservation must fit."""
        spent = {"input_tokens": 90, "output_tokens": 0}
        record = REDUCER.replay(
            attempts({"error": ERROR, "usage": spent}, limits={"max_tokens": 150}).events
        )
        with pytest.raises(GuardRejectedError) as caught:
            REDUCER.reduce(record, next_event(record, "model.started", reserved_tokens=100))
        assert caught.value.stop_reason == "budget"
        REDUCER.reduce(record, next_event(record, "model.started", reserved_tokens=60))
