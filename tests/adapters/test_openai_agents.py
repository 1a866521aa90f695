"""The OpenAI Agents SDK adapter: the SDK's real Runner, offline, under our lifecycle."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("agents")

from agents import Agent
from agents.testing import assistant_message, function_call

from agentfsm.adapters.openai_agents import AgentsRun, ApprovalMismatchError
from agentfsm.errors import IllegalTransitionError
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.guards import MaxTurns
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import approve, cancel
from agentfsm.stores import MemoryEventStore, StoreOptions
from agentfsm.stores.base import EventStore
from tests.adapters import _openai_agents_app as app
from tests.adapters._common import (
    assert_caller_and_child_finished,
    assert_caller_waits_on_child,
    decide_for_child,
    run,
    types,
    validates,
)

ROOT = Path(__file__).resolve().parents[2]


def weather_agent(*steps: Any) -> Agent[Any]:
    return Agent(name="weather", model=app.scripted(*steps), tools=[app.get_weather])


def test_a_handoff_is_recorded_as_a_handoff_decision_and_event(tmp_path: Path) -> None:
    """A transfer_to_* call is a handoff decision, then a handoff event to the new agent."""
    billing = Agent(name="billing", model=app.scripted([assistant_message("Refunded.")]))
    triage = Agent(
        name="triage",
        model=app.scripted([function_call("transfer_to_billing", {}, call_id="h1")]),
        handoffs=[billing],
    )
    store = MemoryEventStore()
    done = run(AgentsRun(store, "r1").arun(triage, "refund me"))
    assert (done.status, done.final_output, done.record.current_agent) == (
        "completed",
        "Refunded.",
        "billing",
    )
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "handoff",
        "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_the_sdk_max_turns_becomes_run_terminated_max_turns(tmp_path: Path) -> None:
    """The SDK's MaxTurnsExceeded is recorded as run.terminated with its own message."""
    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    done = run(AgentsRun(store, "r1").arun(agent, "weather?", max_turns=2))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "max_turns",
        "Max turns (2) exceeded",
    )
    assert done.partial_output == "sunny in C1"
    assert validates(store, "r1", tmp_path) == 0


def test_an_sdk_move_the_table_refuses_raises_naming_the_signal(tmp_path: Path) -> None:
    """A lifecycle without handoffs: the SDK's handoff is refused, naming the hook behind it."""
    no_handoffs = DEFAULT_TABLE.derive(
        name="no_handoffs", remove=[("running", "handoff", "running")]
    )
    store = MemoryEventStore(options=StoreOptions(reducer=Reducer(no_handoffs)))
    billing = Agent(name="billing", model=app.scripted([assistant_message("Refunded.")]))
    triage = Agent(
        name="triage",
        model=app.scripted([function_call("transfer_to_billing", {}, call_id="h1")]),
        handoffs=[billing],
    )
    with pytest.raises(IllegalTransitionError) as err:
        run(AgentsRun(store, "r1").arun(triage, "refund me"))
    assert str(err.value).startswith(
        "run 'r1' is 'running': event 'handoff' (sequence 4) is not allowed; allowed: "
    )
    assert str(err.value).endswith(
        "(caused by openai-agents RunHooks.on_handoff ('triage' → 'billing'))"
    )
    assert err.value.signal == "openai-agents RunHooks.on_handoff ('triage' → 'billing')"
    record = store.load("r1")
    assert (record.status, record.error.kind) == ("failed", "illegal_transition")


def test_an_agent_that_would_end_on_a_tool_result_is_refused_before_it_runs() -> None:
    """stop_on_first_tool (even on a handoff target) is refused up front: nothing runs or is stored."""
    store = MemoryEventStore()
    stopper = Agent(
        name="weather",
        model=app.scripted([function_call("get_weather", {"city": "Paris"}, call_id="call_1")]),
        tools=[app.get_weather],
        tool_use_behavior="stop_on_first_tool",
    )
    triage = Agent(name="triage", model=app.scripted(), handoffs=[stopper])
    before = len(app.CALLS)
    with pytest.raises(
        ValueError, match=r"^agent 'weather' has tool_use_behavior='stop_on_first_tool'"
    ):
        run(AgentsRun(store, "r1").arun(triage, "weather?"))
    assert app.CALLS[before:] == []
    assert list(store.runs()) == []


def test_cancelling_the_asyncio_task_records_a_cancel_with_the_tool_outcome_unknown(
    tmp_path: Path,
) -> None:
    """task.cancel() mid-tool: CancelledError propagates; the log ends cancelled, legal."""
    from agents import function_tool

    started = asyncio.Event()

    @function_tool
    async def wait_for_ever(q: str) -> str:
        """Wait for something that never comes."""
        started.set()
        await asyncio.Event().wait()
        return q

    agent = Agent(
        name="a",
        model=app.scripted([function_call("wait_for_ever", {"q": "x"}, call_id="call_1")]),
        tools=[wait_for_ever],
    )
    store = MemoryEventStore()

    async def main() -> None:
        task = asyncio.create_task(AgentsRun(store, "r1").arun(agent, "wait"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    record = store.load("r1")
    assert (record.status, record.cancel_reason) == ("cancelled", "the asyncio task was cancelled")
    assert record.actions["call_1"].status == "unknown"
    assert types(store, "r1")[-3:] == [
        "run.cancel_requested",
        "tool.outcome_unknown",
        "run.cancelled",
    ]
    assert validates(store, "r1", tmp_path) == 0


def test_listeners_get_every_stored_event_in_order_for_live_spans() -> None:
    """listeners=[RunSpans(tracer).feed]: a real SDK run exports run, turn and tool spans live."""
    otel = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentfsm.adapters.otel import RunSpans

    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[int] = []
    store = MemoryEventStore()
    agent = weather_agent(
        [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
        [assistant_message("Sunny.")],
    )
    spans = RunSpans(provider.get_tracer("agentfsm"))
    listeners = [spans.feed, lambda e: seen.append(e.sequence)]
    run(AgentsRun(store, "r1", listeners=listeners).arun(agent, "weather?"))
    assert seen == list(range(1, 10))
    assert [s.name for s in exporter.get_finished_spans()] == [
        "execute_tool get_weather",
        "chat",
        "chat",
        "invoke_agent weather",
    ]


def test_a_tool_with_default_failure_handling_is_recorded_as_failed_too(tmp_path: Path) -> None:
    """No failure_error_function: the run's tool_error_formatter records tool.failed; the
    caller's own formatter still writes what the model reads."""
    from agents import RunConfig, function_tool

    @function_tool
    def flaky(q: str) -> str:
        """Fail."""
        raise TimeoutError("took too long")

    seen: list[str] = []

    def formatter(args: Any) -> str:
        seen.append(args.call_id)
        return "try later"

    agent = Agent(
        name="a",
        model=app.scripted(
            [function_call("flaky", {"q": "x"}, call_id="call_1")], [assistant_message("Sorry.")]
        ),
        tools=[flaky],
    )
    store = MemoryEventStore()
    config = RunConfig(tool_error_formatter=formatter)
    done = run(AgentsRun(store, "r1").arun(agent, "go", run_config=config))
    assert done.status == "completed"
    error = done.record.actions["call_1"].error
    assert (error.kind, error.message) == ("TimeoutError", "took too long")
    assert seen == ["call_1"]
    assert done.sdk_result.new_items[1].output == "try later"
    assert validates(store, "r1", tmp_path) == 0


def test_a_streamed_run_records_the_same_events_and_passes_the_stream_on(tmp_path: Path) -> None:
    """on_stream_event streams the run (run_streamed): same log, the SDK's events handed over."""
    store = MemoryEventStore()
    agent = weather_agent(
        [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
        [assistant_message("Sunny.")],
    )
    names: list[str] = []

    def on_event(event: Any) -> None:
        if event.type == "run_item_stream_event":
            names.append(event.name)

    done = run(AgentsRun(store, "r1").arun(agent, "weather?", on_stream_event=on_event))
    assert (done.status, done.final_output) == ("completed", "Sunny.")
    assert names == ["tool_called", "tool_output", "message_output_created"]
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
        "tool.completed", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_a_guard_stops_a_streamed_run_too(tmp_path: Path) -> None:
    """MaxTurns(1) in a streamed run: the stop raised from the hook ends the stream; terminated."""
    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    done = run(
        AgentsRun(store, "r1", guards=[MaxTurns(1)]).arun(
            agent, "weather?", on_stream_event=lambda e: None
        )
    )
    assert (done.status, done.stop_reason, done.partial_output) == (
        "terminated",
        "max_turns",
        "sunny in C0",
    )
    assert validates(store, "r1", tmp_path) == 0


def _manager_paused(store: EventStore) -> None:
    """Run m1: its agent tool's subagent asks for the refund, and both runs wait."""
    manager = AgentsRun(store, "m1")
    assert_caller_waits_on_child(
        run(manager.arun(app.manager_agent(manager), "refund O-1")), store, app.CALLS
    )


def test_a_streamed_parent_pauses_on_its_subagent_and_is_driven_on_streamed(tmp_path: Path) -> None:
    """on_stream_event: the same pause, decision and resume; the stream goes to the caller."""
    store, seen = MemoryEventStore(), []
    manager = AgentsRun(store, "m1")
    paused = run(
        manager.arun(app.manager_agent(manager), "refund O-1", on_stream_event=seen.append)
    )
    assert_caller_waits_on_child(paused, store, app.CALLS)
    before = len(seen)
    ran = decide_for_child(store, "approve")
    manager = AgentsRun(store, "m1")
    resumed = app.manager_agent(manager, resumed=True)
    done = run(manager.adrive(resumed, on_stream_event=seen.append))
    out = {"status": done.status, "final_output": done.final_output, "calls": app.CALLS}
    assert_caller_and_child_finished(out, store, ran, "O-1 refunded.", tmp_path)
    assert 0 < before < len(seen)  # both legs streamed


def test_a_subagent_call_that_changed_after_approval_fails_closed(tmp_path: Path) -> None:
    """Approved for O-1 in the child's run; the kept state now says O-2: nothing runs."""
    store = MemoryEventStore()
    _manager_paused(store)
    approve(store, "m1/call_m1", "call_r1", approver="alice")
    kept = store.attachment("m1", "openai-agents/run_state")
    assert kept is not None
    text = kept.data.decode()
    assert '\\"O-1\\"' in text  # the child's call, inside the manager's kept state
    tampered = json.loads(text.replace('\\"O-1\\"', '\\"O-2\\"'))
    manager = AgentsRun(store, "m1")
    with pytest.raises(ApprovalMismatchError) as caught:
        run(manager.adrive(app.manager_agent(manager, resumed=True), tampered))
    assert (caught.value.run_id, caught.value.action_id) == ("m1/call_m1", "call_r1")
    assert "refund O-1" not in app.CALLS
    assert "refund O-2" not in app.CALLS


def test_a_parent_cancelled_while_its_subagent_waits_cancels_the_subagent(tmp_path: Path) -> None:
    """One batch: the subagent pauses for approval, another call cancels the parent: both end."""
    from agents import function_tool

    store = MemoryEventStore()

    @function_tool
    def hang_up() -> str:
        """Stop the run from elsewhere."""
        cancel(store, "m1", reason="the customer left")
        return "bye"

    manager = AgentsRun(store, "m1")
    refunds = Agent(
        name="refunds",
        model=app.scripted([function_call("refund", {"order_id": "O-1"}, call_id="call_r1")]),
        tools=[app.refund],
    )
    agent = Agent(
        name="manager",
        model=app.scripted(
            [
                function_call("refunds", {"input": "refund O-1"}, call_id="call_m1"),
                function_call("hang_up", {}, call_id="call_h1"),
            ]
        ),
        tools=[manager.agent_tool(refunds), hang_up],
    )
    done = run(manager.arun(agent, "refund O-1"))
    assert (done.status, done.pending_approvals) == ("cancelled", ())
    child = store.load("m1/call_m1")
    assert (child.status, child.cancel_reason) == (
        "cancelled",
        "the run 'm1' that called it was cancelled",
    )
    assert "refund O-1" not in app.CALLS
    assert validates(store, "m1", tmp_path) == 0
    assert validates(store, "m1/call_m1", tmp_path) == 0


def test_agent_tool_refuses_the_hooks_it_sets_itself() -> None:
    """hooks= and failure_error_function= are how the adapter records the child: refused."""
    parent = AgentsRun(MemoryEventStore(), "r1")
    with pytest.raises(TypeError, match="agent_tool sets hooks= itself"):
        parent.agent_tool(weather_agent(), hooks=object())


def test_a_negative_reservation_is_refused_when_the_run_is_built() -> None:
    """A reservation below zero is a caller's mistake, said before anything is stored."""
    with pytest.raises(ValueError, match=r"^reserve_cost must not be negative, got -0\.5$"):
        AgentsRun(MemoryEventStore(), "r1", reserve_cost=-0.5)


def test_pricing_puts_each_model_calls_cost_on_the_record() -> None:
    """The SDK reports tokens; `pricing` turns each call's into cost, which the record adds up."""
    store = MemoryEventStore()
    seen: list[tuple[str | None, int, int]] = []

    def pricing(model: str | None, input_tokens: int, output_tokens: int) -> float:
        seen.append((model, input_tokens, output_tokens))
        return 0.25

    agent = weather_agent(
        [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
        [assistant_message("Sunny.")],
    )
    done = run(AgentsRun(store, "r1", pricing=pricing).arun(agent, "weather?"))
    assert seen == [(None, 10, 5), (None, 10, 5)]  # a scripted model has no name
    assert done.record.usage.cost == 0.5


def test_the_callers_own_run_hooks_are_called_after_ours() -> None:
    """run(..., hooks=mine): every hook of mine fires, each after its event is recorded."""
    from agents import RunHooks

    store = MemoryEventStore()
    heard: list[tuple[str, int]] = []

    class Mine(RunHooks[Any]):
        def _note(self, name: str) -> None:
            heard.append((name, store.load("r1").version))

        async def on_agent_start(self, context: Any, agent: Any) -> None:
            self._note("agent_start")

        async def on_llm_start(self, *args: Any) -> None:
            self._note("llm_start")

        async def on_llm_end(self, *args: Any) -> None:
            self._note("llm_end")

        async def on_tool_start(self, *args: Any) -> None:
            self._note("tool_start")

        async def on_tool_end(self, *args: Any) -> None:
            self._note("tool_end")

        async def on_agent_end(self, *args: Any) -> None:
            self._note("agent_end")

    agent = weather_agent(
        [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
        [assistant_message("Sunny.")],
    )
    done = run(AgentsRun(store, "r1").arun(agent, "weather?", hooks=Mine()))
    assert done.status == "completed"
    assert heard == [
        ("agent_start", 1), ("llm_start", 2), ("llm_end", 3), ("tool_start", 5),
        ("tool_end", 6), ("llm_start", 7), ("llm_end", 8), ("agent_end", 8),
    ]  # fmt: skip


def test_live_spans_put_an_agent_tool_run_under_its_call() -> None:
    """listeners=[RunSpans.feed]: the subagent's run span is a child of the call's tool span."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentfsm.adapters.otel import RunSpans

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = RunSpans(provider.get_tracer("agentfsm"))
    store = MemoryEventStore()
    parent = AgentsRun(store, "r1", listeners=[spans.feed])
    triage = Agent(
        name="triage",
        model=app.scripted(
            [function_call("researcher", {"input": "Paris?"}, call_id="call_s1")],
            [assistant_message("It is sunny.")],
        ),
        tools=[
            parent.agent_tool(weather_agent([assistant_message("Sunny.")]), tool_name="researcher")
        ],
    )
    assert run(parent.arun(triage, "weather?")).status == "completed"
    finished = exporter.get_finished_spans()
    call = next(s for s in finished if s.name == "execute_tool researcher")
    child = next(s for s in finished if s.name == "invoke_agent weather")
    assert child.parent is not None
    assert child.parent.span_id == call.context.span_id


def test_on_postgresql_the_store_alone_drives_an_approved_run_on_in_a_new_process(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The same flow on the PostgreSQL store: events and the SDK's state both kept there."""
    from agentfsm.stores.postgres import PostgresEventStore

    store = PostgresEventStore(postgres_dsn, migrate=True)
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    with capture_logs():
        paused = asyncio.run(AgentsRun(store, run_id).arun(app.refund_agent(), "refund O-1"))
    assert paused.status == "waiting_approval"
    kept = store.attachment(run_id, "openai-agents/run_state")
    assert kept is not None
    approve(store, run_id, "call_r1", approver="alice")
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._openai_agents_app", postgres_dsn, run_id, "-"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert (result["status"], result["calls"]) == ("completed", ["refund O-1"])
    assert store.load(run_id).status == "completed"
    assert store.attachment(run_id, "openai-agents/run_state") is None
    assert validates(store, run_id, tmp_path) == 0
    store.close()


def test_concurrent_runs_in_one_event_loop_record_each_failure_in_its_own_run(
    tmp_path: Path,
) -> None:
    """Two runs gathered on one loop: each failing call is recorded in the run that made it."""
    store = MemoryEventStore()

    def failing(call_id: str) -> Agent[Any]:
        return weather_agent(
            [function_call("get_weather", {"city": "Atlantis"}, call_id=call_id)],
            [assistant_message("Not found.")],
        )

    async def both() -> list[Any]:
        return list(
            await asyncio.gather(
                AgentsRun(store, "a").arun(failing("call_a"), "weather?"),
                AgentsRun(store, "b").arun(failing("call_b"), "weather?"),
            )
        )

    done = run(both())
    assert [d.status for d in done] == ["completed", "completed"]
    assert sorted(store.load("a").actions) == ["call_a"]
    assert store.load("a").actions["call_a"].status == "failed"
    assert store.load("b").actions["call_b"].status == "failed"
    assert validates(store, "a", tmp_path) == 0
    assert validates(store, "b", tmp_path) == 0
