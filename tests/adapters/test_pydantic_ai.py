"""The pydantic-ai adapter: a real `Agent.iter()`, offline, under our lifecycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext, UsageLimits

from agentfsm.adapters.pydantic_ai import (
    AgentIterRun,
    per_million_tokens,
)
from agentfsm.events import Limits
from agentfsm.runtime import approve
from agentfsm.stores import MemoryEventStore
from tests.adapters import _pydantic_ai_app as app
from tests.adapters._common import (
    run,
    types,
    validates,
)
from tests.adapters._pydantic_ai_app import answer, call, make_agent


def looping(n: int = 5) -> Any:
    return make_agent(*[call("get_weather", f"call_{i}", city=f"C{i}") for i in range(n)])


def test_a_usage_limit_on_tokens_becomes_a_budget_stop(tmp_path: Path) -> None:
    """UsageLimits(total_tokens_limit=25) at 15 tokens a request: run.terminated 'budget',
    after the second request, which the SDK counted but never handed on, with its usage."""
    store = MemoryEventStore()
    done = run(
        AgentIterRun(store, "r1").arun(
            looping(), "weather?", usage_limits=UsageLimits(total_tokens_limit=25)
        )
    )
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "Exceeded the total_tokens_limit of 25 (total_tokens=30)",
    )
    assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
    last = list(store.events("r1"))[-2]
    assert last.model_dump(include={"decision", "output", "usage"}) == {
        "decision": "final",
        "output": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost": 0.0},
    }
    assert done.record.usage.input_tokens + done.record.usage.output_tokens == 30
    assert validates(store, "r1", tmp_path) == 0


def test_the_request_limit_becomes_a_max_turns_stop(tmp_path: Path) -> None:
    """UsageLimits(request_limit=2): the SDK refuses the third request before making it;
    run.terminated max_turns, and no answer is made up for it."""
    store = MemoryEventStore()
    done = run(
        AgentIterRun(store, "r1").arun(
            looping(), "weather?", usage_limits=UsageLimits(request_limit=2)
        )
    )
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "max_turns",
        "The next request would exceed the request_limit of 2",
    )
    # The third request was never made: its model.started is closed by the stop, no answer.
    assert types(store, "r1")[-2:] == ["model.started", "run.terminated"]
    assert done.record.turn == 3
    assert validates(store, "r1", tmp_path) == 0


def test_a_subagent_called_from_a_tool_is_its_own_run_in_the_same_store(tmp_path: Path) -> None:
    """A tool that runs another agent through the adapter: parent and child runs both validate."""

    store = MemoryEventStore()
    child = make_agent(answer("Paris is sunny."))
    parent: Agent[None, str] = Agent(
        app.scripted(call("ask_specialist", "call_1", question="Paris?"), answer("It is sunny.")),
        name="triage",
    )

    @parent.tool_plain
    async def ask_specialist(question: str) -> str:
        """Ask the weather specialist."""
        done = await AgentIterRun(store, "r1/call_1").arun(child, question)
        return str(done.final_output)

    done = run(AgentIterRun(store, "r1").arun(parent, "weather?"))
    assert (done.status, done.final_output) == ("completed", "It is sunny.")
    assert done.record.actions["call_1"].result == "Paris is sunny."
    assert store.load("r1/call_1").status == "completed"
    assert validates(store, "r1", tmp_path) == 0
    assert types(store, "r1/call_1") == [
        "run.started", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip


def test_a_cancellation_token_fired_mid_tool_ends_the_run_cancelled(tmp_path: Path) -> None:
    """The SDK's own cancel (CancellationToken): RunCancelled becomes a recorded, legal cancel."""
    from pydantic_ai import CancellationToken

    token = CancellationToken()
    store = MemoryEventStore()
    agent = make_agent(
        call("get_weather", "call_1", city="Paris"), answer("never"), on_tool=token.cancel
    )
    done = run(AgentIterRun(store, "r1").arun(agent, "w", cancellation_token=token))
    assert (done.status, done.record.cancel_reason) == ("cancelled", "the agent run was cancelled")
    assert types(store, "r1")[-1] == "run.cancelled"
    assert validates(store, "r1", tmp_path) == 0


def test_a_tool_that_raises_ends_the_run_failed_with_the_call_failed(tmp_path: Path) -> None:
    """pydantic-ai lets a plain exception end the run: tool.failed for the call, run.failed."""
    store = MemoryEventStore()
    agent: Agent[None, str] = Agent(
        app.scripted(call("charge", "call_1", amount=5), answer("never")), name="billing"
    )

    @agent.tool_plain
    def charge(amount: int) -> str:
        """Charge the card."""
        raise ValueError("card declined")

    with pytest.raises(ValueError, match="card declined"):
        run(AgentIterRun(store, "r1").arun(agent, "charge 5"))
    record = store.load("r1")
    assert types(store, "r1")[-2:] == ["tool.failed", "run.failed"]
    error = record.actions["call_1"].error
    assert (record.actions["call_1"].status, error.kind, error.message) == (
        "failed",
        "ValueError",
        "card declined",
    )
    assert (record.status, record.error.kind) == ("failed", "ValueError")
    assert validates(store, "r1", tmp_path) == 0


def _structured(strategy: str) -> tuple[Agent[None, Any], list[str]]:
    """An agent with a structured output that answers with it beside one more weather call."""
    from pydantic import BaseModel
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    class Weather(BaseModel):
        city: str
        sky: str

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return call("get_weather", "call_1", city="Paris")
        final = ToolCallPart(info.output_tools[0].name, {"city": "Paris", "sky": "sunny"}, "out")
        extra = ToolCallPart("get_weather", {"city": "Rome"}, tool_call_id="call_2")
        return ModelResponse(parts=[final, extra], usage=app.USAGE)

    ran: list[str] = []
    agent: Agent[None, Any] = Agent(
        FunctionModel(respond), output_type=Weather, name="weather", end_strategy=strategy
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    return agent, ran


def test_a_structured_output_is_the_final_decision_not_a_tool_call(tmp_path: Path) -> None:
    """The output tool's call is the final answer; the call beside it never runs (early)."""
    store = MemoryEventStore()
    agent, ran = _structured("early")
    done = run(AgentIterRun(store, "r1").arun(agent, "weather?"))
    assert (done.status, done.final_output.sky, ran) == ("completed", "sunny", ["Paris"])
    assert done.record.final_output == {"city": "Paris", "sky": "sunny"}
    assert sorted(done.record.actions) == ["call_1"]
    assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.completed"]
    assert validates(store, "r1", tmp_path) == 0


def test_a_call_beside_the_output_that_runs_is_recorded_after_the_final_decision(
    tmp_path: Path,
) -> None:
    """end_strategy="exhaustive" runs the other call: requested directly, then completed."""
    store = MemoryEventStore()
    agent, ran = _structured("exhaustive")
    done = run(AgentIterRun(store, "r1").arun(agent, "weather?"))
    assert (done.status, ran) == ("completed", ["Paris", "Rome"])
    assert done.record.actions["call_2"].result == "sunny in Rome"
    assert types(store, "r1")[-6:] == [
        "model.started", "model.completed", "tool.requested", "tool.started", "tool.completed",
        "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_pricing_turns_tokens_into_cost_and_a_cost_limit_stops_the_run(tmp_path: Path) -> None:
    """1.0 a request (10 in, 5 out) under max_cost=2.5: the third request overruns it (3.0),
    and the run stops right after it, its answer recorded; validate reports the overrun."""
    store = MemoryEventStore()
    pricing = per_million_tokens(input=50_000, output=100_000)  # 0.5 + 0.5 a request
    priced = AgentIterRun(store, "r1", pricing=pricing)
    done = run(priced.arun(looping(), "weather?", limits=Limits(max_cost=2.5)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 3 > max cost 2.5",
    )
    assert done.record.usage.cost == 3.0
    assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
    assert validates(store, "r1", tmp_path) == 1


def test_a_parent_driven_on_counts_what_its_subagents_spent_before() -> None:
    """Paused after a subagent spent 15 of the tree's 45 tokens (45 of 45 spent); resumed by a
    new run object (as a new process would), the parent's limit still counts them: the
    refund's result is recorded, and the next model call is refused, nothing being left."""
    store = MemoryEventStore()
    child = make_agent(answer("Paris is sunny."))

    def parent_agent(run_: AgentIterRun) -> Agent[None, Any]:
        agent = make_agent(
            call("ask_specialist", "call_1", question="Paris?"),
            call("refund", "call_r1", order_id="O-1"),
            answer("never"),
        )

        @agent.tool
        async def ask_specialist(ctx: RunContext[None], question: str) -> str:
            """Ask the weather specialist."""
            assert ctx.tool_call_id is not None
            done = await run_.subagent(ctx.tool_call_id).arun(child, question)
            return str(done.final_output)

        return agent

    first = AgentIterRun(store, "r1")
    paused = run(first.arun(parent_agent(first), "weather?", limits=Limits(max_tokens=45)))
    assert (paused.status, paused.record.usage.input_tokens) == ("waiting_approval", 20)
    approve(store, "r1", "call_r1", approver="alice")
    again = AgentIterRun(store, "r1")
    done = run(again.adrive(parent_agent(again)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "root 'r1' (2 runs): spent 45 + reserved 0 leaves nothing of 45 tokens",
    )
    assert done.record.actions["call_r1"].status == "succeeded"


def test_on_event_streams_the_models_tokens_and_the_tools_events(tmp_path: Path) -> None:
    """With on_event the model is asked to stream: its deltas and the tool events reach it."""
    from collections.abc import AsyncIterator

    from pydantic_ai.messages import FunctionToolResultEvent, ModelMessage, PartDeltaEvent
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if len(messages) == 1:
            yield {0: DeltaToolCall("get_weather", '{"city": "Paris"}', tool_call_id="call_1")}
        else:
            for piece in ("Sunny ", "in ", "Paris."):
                yield piece

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=stream), name="weather")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        return f"sunny in {city}"

    events: list[Any] = []
    store = MemoryEventStore()
    done = run(AgentIterRun(store, "r1", on_event=events.append).arun(agent, "weather?"))
    assert (done.status, done.final_output) == ("completed", "Sunny in Paris.")
    deltas = [e.delta.content_delta for e in events if isinstance(e, PartDeltaEvent)]
    assert "".join(deltas) == "in Paris."  # the first piece starts the part, the rest are deltas
    results = [e.part.content for e in events if isinstance(e, FunctionToolResultEvent)]
    assert results == ["sunny in Paris"]
    assert validates(store, "r1", tmp_path) == 0
