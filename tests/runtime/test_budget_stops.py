"""Both runners stop right after a call that overran a budget, and never lose a model call.

Every model call that happened is in the log with its usage, whatever stopped the run: a
budget crossed by its own usage, a guard refusing what it decided, a decision that is not
JSON. Without a configured `reserve`, a call reserves the largest call so far.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from agentfsm.errors import OverrunError
from agentfsm.events import Limits, Usage, step_clock
from agentfsm.events import models as m
from agentfsm.fsm import DEFAULT_TABLE
from agentfsm.guards import Budget, LoopDetector
from agentfsm.runtime import (
    Decision,
    ProposedCall,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolResult,
    cancel,
    submit,
)
from agentfsm.runtime._writer import Spec
from agentfsm.stores import MemoryEventStore, StoreOptions

from .helpers import RUNNERS, Calls, Sleeps, drive_r1, order_tools, runner_for, types

OVER = "spent 2,200 > 1,500 tokens"
BIG = Usage(input_tokens=2_000, output_tokens=200)


def _events(store: MemoryEventStore) -> list[dict[str, Any]]:
    """The run's events without envelopes: type and the fields a test cares about."""
    skip = {"run_id", "sequence", "occurred_at"}
    return [
        {k: v for k, v in e.model_dump(mode="json", exclude_none=True).items() if k not in skip}
        for e in store.events("r1")
    ]


@RUNNERS
class TestCrossing:
    def test_a_single_call_that_overruns_ends_the_run_right_after_it(self, runner: str) -> None:
        """2,200 tokens against 1,500: the answer is recorded, then `run.terminated(budget)`."""
        model = ScriptedModel([Decision.answer("a long draft", usage=BIG)])
        result, store = drive_r1(runner, model, [], limits=Limits(max_tokens=1500))
        assert _events(store) == [
            {
                "type": "run.started",
                "agent": "support",
                "limits": {"max_turns": 100, "max_tokens": 1500, "max_calls_per_decision": 64},
                "table": DEFAULT_TABLE.ref.model_dump(),
            },
            {"type": "model.started"},
            {
                "type": "model.completed",
                "decision": "final",
                "output": "a long draft",
                "usage": {"input_tokens": 2000, "output_tokens": 200, "cost": 0.0},
            },
            {"type": "run.terminated", "stop_reason": "budget", "detail": OVER},
        ]
        assert (result.status, result.stop_reason, result.final_output) == (
            "terminated",
            "budget",
            "a long draft",
        )

    def test_calls_decided_by_the_crossing_answer_are_not_run(self, runner: str) -> None:
        """A crossing `tool_calls` answer: the calls are proposed, never requested or run."""
        calls = Calls()
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}), usage=BIG)]
        )
        result, store = drive_r1(runner, model, order_tools(calls), guards=[Budget(1500)])
        assert types(store, "r1") == [
            "run.started",
            "model.started",
            "model.completed",
            "run.terminated",
        ]
        assert (result.record.stop_detail, calls.log) == (OVER, [])

    def test_a_tool_cost_that_overruns_ends_the_run_after_its_result(self, runner: str) -> None:
        """A tool whose `ToolResult.cost` crosses `max_cost`: its result, then the stop."""
        tool = Tool("quote", lambda ctx: ToolResult({"price": 3}, cost=0.75), side_effects=False)
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("quote"), usage=Usage(cost=0.5)),
                Decision.answer("3"),
            ]
        )
        result, store = drive_r1(runner, model, [tool], limits=Limits(max_cost=1.0))
        assert types(store, "r1")[-3:] == ["tool.started", "tool.completed", "run.terminated"]
        assert (result.stop_reason, result.record.stop_detail) == (
            "budget",
            "spent 1.25 > max cost 1",
        )


@RUNNERS
class TestDefaultReservation:
    def test_a_call_reserves_the_largest_call_so_far(self, runner: str) -> None:
        """1,000-token calls under 2,500: the third is refused before it is made."""
        usage = Usage(input_tokens=900, output_tokens=100)
        model = ScriptedModel([Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}), usage=usage)],
                              repeat_last=True)  # fmt: skip
        result, store = drive_r1(
            runner, model, order_tools(Calls()), limits=Limits(max_tokens=2500)
        )
        started = [e for e in _events(store) if e["type"] == "model.started"]
        assert started == [{"type": "model.started"}, {"type": "model.started",
                                                         "reserved_tokens": 1000}]  # fmt: skip
        assert result.record.stop_detail == "spent 2,000 + reserved 1,000 > 2,500 tokens"
        assert model.calls == 2

    def test_a_configured_reserve_wins(self, runner: str) -> None:
        """`RunnerConfig(reserve=Usage())` reserves nothing: the third call is made, and
        overruns."""
        usage = Usage(input_tokens=900, output_tokens=100)
        model = ScriptedModel([Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}), usage=usage)],
                              repeat_last=True)  # fmt: skip
        result, _ = drive_r1(
            runner, model, order_tools(Calls()), limits=Limits(max_tokens=2500),
            config=RunnerConfig(reserve=Usage()),
        )  # fmt: skip
        assert (result.record.stop_detail, model.calls) == ("spent 3,000 > 2,500 tokens", 3)

    def test_no_budget_no_reservation(self, runner: str) -> None:
        """A run without a budget reserves nothing: its log is as before."""
        model = ScriptedModel([Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}), usage=BIG),
                               Decision.answer("ok", usage=BIG)])  # fmt: skip
        _, store = drive_r1(runner, model, order_tools(Calls()))
        assert [e for e in _events(store) if e["type"] == "model.started"] == [
            {"type": "model.started"},
            {"type": "model.started"},
        ]


@RUNNERS
class TestNoModelCallLost:
    def test_a_loop_stop_keeps_the_answer_that_looped(self, runner: str) -> None:
        """The loop detector refuses the fourth same call: the answer asking for it stays."""
        usage = Usage(input_tokens=10, output_tokens=5)
        model = ScriptedModel([Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}), usage=usage)],
                              repeat_last=True)  # fmt: skip
        result, store = drive_r1(
            runner, model, order_tools(Calls()), guards=[LoopDetector(threshold=3)]
        )
        assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
        assert (result.stop_reason, result.record.turn, result.record.usage.total_tokens) == (
            "loop_detected",
            4,
            60,
        )

    def test_a_decision_that_is_not_json_keeps_its_usage(self, runner: str) -> None:
        """An answer the log cannot hold fails the run, but what the call used is recorded."""
        model = ScriptedModel([Decision.answer({1, 2}, usage=Usage(input_tokens=7))])
        result, store = drive_r1(runner, model, [])
        assert _events(store)[2] == {
            "type": "model.completed",
            "decision": "final",
            "usage": {"input_tokens": 7, "output_tokens": 0, "cost": 0.0},
        }
        assert (result.status, result.record.usage.input_tokens) == ("failed", 7)

    def test_usage_given_as_a_dict_is_validated_into_usage(self, runner: str) -> None:
        """`Decision.call_tools(..., usage={...})` is taken, and counts against the budget."""
        model = ScriptedModel(
            [Decision.answer("done", usage={"input_tokens": 2000, "output_tokens": 200})]
        )
        result, _ = drive_r1(runner, model, [], limits=Limits(max_tokens=1500))
        assert (result.stop_reason, result.record.stop_detail) == ("budget", OVER)

    def test_a_bad_usage_dict_fails_the_call_with_nothing_half_written(self, runner: str) -> None:
        """A usage dict with a negative count fails inside the model call: `run.failed`."""
        model = ScriptedModel([lambda ctx: Decision.answer("x", usage={"input_tokens": -1})])
        result, store = drive_r1(runner, model, [])
        assert types(store, "r1") == ["run.started", "model.started", "run.failed"]
        assert result.record.error is not None
        assert result.record.error.message.startswith(
            "the model raised ValidationError: 1 validation error for Usage\ninput_tokens\n"
        )


def test_a_usage_of_another_type_is_refused_where_the_decision_is_built() -> None:
    """Neither a `Usage` nor a mapping: a `TypeError` naming what was given."""
    with pytest.raises(TypeError) as refused:
        Decision.answer("x", usage=7)  # type: ignore[arg-type]
    assert str(refused.value) == "usage must be a Usage or a mapping of its fields, got int: 7"


@settings(max_examples=40, deadline=None)
@given(
    usages=st.lists(st.integers(min_value=0, max_value=3_000), min_size=1, max_size=6),
    limit=st.integers(min_value=1, max_value=6_000),
    reserve=st.one_of(st.none(), st.integers(min_value=0, max_value=2_000)),
)
def test_a_live_run_never_spends_past_its_limit_but_on_the_crossing_call(
    usages: list[int], limit: int, reserve: int | None
) -> None:
    """For any drawn usages, limit and reservation: the recorded total is within the limit
    after every event but the one crossing call, which `run.terminated(budget)` follows."""
    script = [
        Decision.call_tools(
            ProposedCall("get_order", {"order_id": f"O-{i}"}), usage=Usage(input_tokens=u)
        )
        for i, u in enumerate(usages)
    ]
    config = RunnerConfig(reserve=Usage(input_tokens=reserve)) if reserve is not None else None
    model = ScriptedModel([*script, Decision.answer("done")])
    store = MemoryEventStore()
    result = runner_for(store, model, order_tools(Calls()), sleep=Sleeps(), config=config).run(
        "r1", limits=Limits(max_tokens=limit)
    )
    events = list(store.events("r1"))
    spent = 0
    for i, event in enumerate(events):
        usage = getattr(event, "usage", None)
        if usage is not None:
            spent += usage.input_tokens
        if spent > limit:
            assert events[i + 1 :] == events[-1:]
            assert (events[-1].type, result.stop_reason) == ("run.terminated", "budget")
            assert result.record.stop_detail == f"spent {spent:,} > {limit:,} tokens"
            break
    assert result.status in ("completed", "terminated")


def test_a_run_driven_on_after_a_crash_past_its_crossing_call_is_stopped() -> None:
    """A worker died between the call that overran and the stop: resume stops it first."""
    store = MemoryEventStore()
    runner = runner_for(store, ScriptedModel([Decision.answer("never asked")]), [])
    record = submit(store, "r1", limits=Limits(max_tokens=1500))
    writer = runner._writer(record, None)
    writer.append([Spec(m.ModelStarted, {})])
    with pytest.raises(OverrunError):
        writer.append([Spec(m.ModelCompleted, {"decision": "final", "output": "draft",
                                           "usage": BIG.model_dump()})])  # fmt: skip
    result = runner.drive("r1")
    assert (result.status, result.record.stop_detail, result.final_output) == (
        "terminated",
        OVER,
        "draft",
    )


def test_a_call_in_flight_when_another_overruns_settles_before_the_stop() -> None:
    """AsyncRunner, two calls at once: the first's cost overruns `max_cost`; the second, still
    running, is recorded when it returns, and then the run is terminated for `budget`."""
    first_done = asyncio.Event()
    second_started = asyncio.Event()

    async def pricey(ctx: ToolContext) -> Any:
        # The first call starts with the decision, the second in its own append: it returns
        # once the second is in flight.
        await second_started.wait()
        first_done.set()
        return ToolResult("quote", cost=2.0)

    async def slow(ctx: ToolContext) -> Any:
        second_started.set()
        await first_done.wait()
        await asyncio.sleep(0.05)
        return "late"

    tools = [Tool("pricey", pricey, side_effects=False), Tool("slow", slow, side_effects=False)]
    # The model's calls report their tokens at no cost: only the tool spends.
    free = {"input_tokens": 10, "output_tokens": 1}
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("pricey"), ProposedCall("slow"), usage=free),
            Decision.answer("no", usage=free),
        ]
    )
    result, store = drive_r1(
        "async", model, tools, limits=Limits(max_cost=1.0), config=RunnerConfig(cancel_poll=0.01)
    )
    assert types(store, "r1")[-3:] == ["tool.completed", "tool.completed", "run.terminated"]
    assert (result.stop_reason, result.record.stop_detail) == ("budget", "spent 2 > max cost 1")
    assert result.record.actions["t1.2"].result == "late"


@RUNNERS
def test_an_answer_that_returns_after_a_cancel_is_recorded(runner: str) -> None:
    """A cancel asked while the model runs: the call happened, so its answer and usage are
    recorded in `cancel_requested`, and the run is then cancelled; nothing it proposed runs."""
    store = MemoryEventStore()

    def model(ctx: Any) -> Decision:
        cancel(store, "r1", reason="stop", clock=step_clock())
        return Decision.answer("late", usage=Usage(input_tokens=5))

    with capture_logs() as logs:
        result, _ = drive_r1(runner, model, [], store)
    assert types(store, "r1") == [
        "run.started", "model.started", "run.cancel_requested", "model.completed",
        "run.cancelled",
    ]  # fmt: skip
    assert result.status == "cancelled"
    assert (result.record.usage.input_tokens, result.record.final_output) == (5, "late")
    assert [e for e in logs if e["event"] == "model.unrecorded"] == []


@RUNNERS
def test_a_late_answer_a_table_cannot_take_is_logged(runner: str) -> None:
    """Under a table without `model.completed` after a cancel, the answer's usage is logged
    as `model.unrecorded` instead of being lost silently."""
    from agentfsm.fsm.default import DEFAULT_TABLE
    from agentfsm.reducers import Reducer

    table = DEFAULT_TABLE.derive(
        name="no_late_answers",
        remove=[("cancel_requested", "model.completed", "cancel_requested")],
    )
    store = MemoryEventStore(options=StoreOptions(reducer=Reducer(table)))

    def model(ctx: Any) -> Decision:
        cancel(store, "r1", reason="stop", clock=step_clock())
        return Decision.answer("late", usage=Usage(input_tokens=5))

    with capture_logs() as logs:
        result, _ = drive_r1(runner, model, [], store)
    assert types(store, "r1") == [
        "run.started", "model.started", "run.cancel_requested", "run.cancelled",
    ]  # fmt: skip
    assert result.status == "cancelled"
    assert [e for e in logs if e["event"] == "model.unrecorded"] == [
        {
            "event": "model.unrecorded",
            "log_level": "warning",
            "run_id": "r1",
            "status": "cancel_requested",
            "decision": "final",
            "usage": {"input_tokens": 5, "output_tokens": 0, "cost": 0.0},
        }
    ]
