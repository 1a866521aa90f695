"""The adapters' shared scenarios, written once and run through every SDK's real runner.

Each test drives a scripted agent (`_drivers`) through each driver; an SDK that cannot
express a scenario skips it, saying why. What only one SDK has stays in its own module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentfsm.errors import IllegalTransitionError
from agentfsm.events import Limits
from agentfsm.guards import LoopDetector, MaxTurns
from agentfsm.runtime import approve, cancel, reject
from agentfsm.stores import MemoryEventStore, SQLiteEventStore
from agentfsm.stores.base import EventStore
from tests.adapters._common import types, validates
from tests.adapters._drivers import (
    CALLS,
    DRIVERS,
    WEATHER,
    AgentSpec,
    Driver,
    Tool,
    agent,
    call,
    make_driver,
    require,
    say,
)


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    """Each SDK's driver in turn (skipped when its SDK is not installed)."""
    pytest.importorskip(DRIVERS[request.param])
    return make_driver(request.param, tmp_path)


def looping(n: int = 5, city: str | None = None) -> AgentSpec:
    """An agent asking for the weather in C0, C1, ... (or always `city`), never answering."""
    steps = [call("get_weather", f"call_{i}", city=city or f"C{i}") for i in range(n)]
    return agent("weather", *steps)


class TestToolLoop:
    """A model that calls tools until it answers."""

    def test_a_tool_loop_with_a_failing_tool_ends_in_a_final_answer(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """Model → tool → model → failing tool → model: call ids kept, the failure recorded,
        usage added up, a legal log."""
        store = MemoryEventStore()
        spec = agent(
            "weather",
            call("get_weather", "call_1", city="Paris"),
            call("get_weather", "call_2", city="Atlantis"),
            say("Sunny in Paris."),
        )
        done = driver.run(store, "r1", spec)
        assert (done.status, done.final_output) == ("completed", "Sunny in Paris.")
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.completed", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.failed", "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        action = done.record.actions["call_1"]
        assert (action.tool, action.arguments, action.result) == (
            "get_weather",
            {"city": "Paris"},
            "sunny in Paris",
        )
        error = done.record.actions["call_2"].error
        assert (error.kind, error.message) == (driver.failed_kind, "no such city")
        assert (done.record.usage.input_tokens, done.record.usage.output_tokens) == (30, 15)
        assert validates(store, "r1", tmp_path) == 0

    def test_a_tool_result_no_log_can_hold_is_a_failed_call(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """A tool returns NaN: the log records the call as failed with the reason (it ran; its
        result cannot be stored), the run goes on, and every line reads back."""
        require(driver, "unstorable_result")

        def measure(q: str) -> dict[str, float]:
            """Measure something (the sensor is broken)."""
            return {"value": float("nan")}

        store = MemoryEventStore()
        spec = agent(
            "a",
            call("measure", "call_1", q="x"),
            say("Broken sensor."),
            tools=(Tool("measure", measure),),
        )
        done = driver.run(store, "r1", spec)
        assert done.status == "completed"
        error = done.record.actions["call_1"].error
        assert error is not None
        assert (error.kind, error.message, error.retryable) == (
            "unstorable_result",
            "the tool ran, but its result cannot be stored: the value at 'value' is nan, which "
            "JSON cannot hold (numbers must be finite)",
            False,
        )
        assert validates(store, "r1", tmp_path) == 0


class TestGuardStops:
    """Our guards and limits stop an SDK run and say why."""

    def test_our_max_turns_stops_the_run_keeping_the_partial_output(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """MaxTurns(2) refuses the third model call: run.terminated, the last tool result kept."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(), guards=[MaxTurns(2)])
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "max_turns",
            "2 of 2 turns used",
        )
        assert done.partial_output == "sunny in C1"
        assert CALLS == ["get_weather C0", "get_weather C1"]
        assert types(store, "r1")[-2:] == ["tool.completed", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_token_budget_stops_the_run_right_after_the_call_that_overran_it(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """limits.max_tokens=25 with 15 tokens a call: the second call overruns it (30 > 25); the
        run stops right after it, its answer recorded, its call never run; validate says so."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(), limits=Limits(max_tokens=25))
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 30 > 25 tokens",
        )
        assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
        assert done.record.actions["call_1"].status == "rejected"  # proposed, never run
        assert CALLS == ["get_weather C0"]
        assert validates(store, "r1", tmp_path) == 1

    def test_a_single_answer_that_overruns_the_budget_ends_the_run_keeping_it(
        self, driver: Driver
    ) -> None:
        """One 15-token answer under max_tokens=10: recorded, then run.terminated(budget) at once."""
        store = MemoryEventStore()
        spec = agent("weather", say("Sunny."))
        done = driver.run(store, "r1", spec, limits=Limits(max_tokens=10))
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 15 > 10 tokens",
        )
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "run.terminated",
        ]  # fmt: skip
        assert (done.record.final_output, done.partial_output) == ("Sunny.", "Sunny.")

    def test_a_reservation_stops_the_model_call_that_could_overspend(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """reserve_tokens=15 under max_tokens=40: the third call (30 + 15 > 40) is never made."""
        store = MemoryEventStore()
        done = driver.run(
            store, "r1", looping(), limits=Limits(max_tokens=40), reserve_tokens=15
        )
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 30 + reserved 15 > 40 tokens",
        )
        assert done.record.usage.input_tokens + done.record.usage.output_tokens == 30
        started = [e for e in store.events("r1") if e.type == "model.started"]
        assert [e.reserved_tokens for e in started] == [15, 15]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_loop_of_identical_calls_is_stopped_before_the_tool_runs_again(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """LoopDetector(threshold=2): the same call with nothing new observed is refused before
        it runs. The first result is a new observation, so the second call is progress; the
        third is not."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(city="Paris"), guards=[LoopDetector(threshold=2)])
        assert (done.status, done.stop_reason) == ("terminated", "loop_detected")
        assert CALLS == ["get_weather Paris", "get_weather Paris"]
        assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_deadline_on_the_injected_clock_stops_the_run(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """limits.deadline 10:00:04 on a clock ticking 1 s per append: a call at/after it is
        refused."""
        from agentfsm.events import step_clock

        store = MemoryEventStore()
        limits = Limits(deadline="2026-09-01T10:00:04Z")
        done = driver.run(store, "r1", looping(3), limits=limits, clock=step_clock())
        assert (done.status, done.stop_reason) == ("terminated", "deadline")
        assert done.record.stop_detail == (
            "deadline 2026-09-01T10:00:04+00:00 reached at 2026-09-01T10:00:05+00:00 (1 s past it)"
        )
        assert types(store, "r1")[-2:] == ["tool.completed", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0


class TestCancel:
    """A cancel asked for from elsewhere ends the run at its next signal."""

    def test_a_cancel_from_elsewhere_stops_the_run_at_its_next_signal(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """A cancel appended while a tool runs: its result is kept, the next model call never
        starts."""
        store = MemoryEventStore()

        def slow_lookup(q: str) -> str:
            """Look something up (meanwhile, someone cancels the run)."""
            cancel(store, "r1", reason="user closed the tab", requested_by="ui")
            return f"found {q}"

        spec = agent(
            "a",
            call("slow_lookup", "call_1", q="x"),
            say("never said"),
            tools=(Tool("slow_lookup", slow_lookup),),
        )
        done = driver.run(store, "r1", spec, prompt="look")
        assert (done.status, done.record.cancel_reason) == ("cancelled", "user closed the tab")
        assert done.record.actions["call_1"].result == "found x"
        assert types(store, "r1")[-3:] == [
            "run.cancel_requested", "tool.completed", "run.cancelled",
        ]  # fmt: skip
        assert validates(store, "r1", tmp_path) == 0
