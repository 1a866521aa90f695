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

from agentfsm.adapters.openai_agents import AgentsRun, ApprovalMismatchError, SavedStateError
from agentfsm.errors import IllegalTransitionError
from agentfsm.events import Limits
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.guards import LoopDetector, MaxTurns
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import approve, cancel, reject
from agentfsm.stores import MemoryEventStore, SQLiteEventStore, StoreOptions
from agentfsm.stores.base import EventStore
from tests.adapters import _openai_agents_app as app
from tests.adapters._common import (
    assert_caller_and_child_finished,
    assert_caller_waits_on_child,
    assert_free_call_ran_then_paused,
    assert_refunded_after_approval,
    assert_tree_stopped,
    decide_for_child,
    run,
    types,
    validates,
)

ROOT = Path(__file__).resolve().parents[2]


def weather_agent(*steps: Any) -> Agent[Any]:
    return Agent(name="weather", model=app.scripted(*steps), tools=[app.get_weather])


def test_a_tool_loop_to_a_final_answer_is_recorded_and_validates(tmp_path: Path) -> None:
    """A tool call then an answer: SDK call ids become action ids, usage adds up, the log is legal."""
    store = MemoryEventStore()
    agent = weather_agent(
        [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
        [assistant_message("It is sunny in Paris.")],
    )
    done = run(AgentsRun(store, "r1").run(agent, "weather?"))
    assert (done.status, done.final_output) == ("completed", "It is sunny in Paris.")
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
        "tool.completed", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    action = done.record.actions["call_1"]
    assert (action.tool, action.arguments, action.result) == (
        "get_weather",
        {"city": "Paris"},
        "sunny in Paris",
    )
    assert (done.record.usage.input_tokens, done.record.usage.output_tokens) == (20, 10)
    assert validates(store, "r1", tmp_path) == 0


def test_a_handoff_is_recorded_as_a_handoff_decision_and_event(tmp_path: Path) -> None:
    """A transfer_to_* call is a handoff decision, then a handoff event to the new agent."""
    billing = Agent(name="billing", model=app.scripted([assistant_message("Refunded.")]))
    triage = Agent(
        name="triage",
        model=app.scripted([function_call("transfer_to_billing", {}, call_id="h1")]),
        handoffs=[billing],
    )
    store = MemoryEventStore()
    done = run(AgentsRun(store, "r1").run(triage, "refund me"))
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


def test_a_failing_tool_is_recorded_as_tool_failed_and_the_run_goes_on(tmp_path: Path) -> None:
    """The failure function records tool.failed with the exception; the model reads the error."""
    store = MemoryEventStore()
    agent = weather_agent(
        [function_call("get_weather", {"city": "Atlantis"}, call_id="call_1")],
        [assistant_message("I could not find it.")],
    )
    done = run(AgentsRun(store, "r1").run(agent, "weather?"))
    assert done.status == "completed"
    error = done.record.actions["call_1"].error
    assert (error.kind, error.message) == ("ValueError", "no such city")
    assert "tool.failed" in types(store, "r1")
    assert "tool.completed" not in types(store, "r1")
    assert validates(store, "r1", tmp_path) == 0


def test_our_max_turns_stops_the_sdk_run_and_keeps_the_partial_output(tmp_path: Path) -> None:
    """MaxTurns(2) refuses the third model call: run.terminated, the last tool result returned."""
    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    done = run(AgentsRun(store, "r1", guards=[MaxTurns(2)]).run(agent, "weather?"))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "max_turns",
        "2 of 2 turns used",
    )
    assert done.partial_output == "sunny in C1"
    assert app.CALLS[-1] == "get_weather C1"
    assert types(store, "r1")[-2:] == ["tool.completed", "run.terminated"]
    assert validates(store, "r1", tmp_path) == 0


def test_the_sdk_max_turns_becomes_run_terminated_max_turns(tmp_path: Path) -> None:
    """The SDK's MaxTurnsExceeded is recorded as run.terminated with its own message."""
    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    done = run(AgentsRun(store, "r1").run(agent, "weather?", max_turns=2))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "max_turns",
        "Max turns (2) exceeded",
    )
    assert done.partial_output == "sunny in C1"
    assert validates(store, "r1", tmp_path) == 0


def test_a_token_budget_from_sdk_usage_stops_the_run(tmp_path: Path) -> None:
    """limits.max_tokens=25 with 15 tokens a call: the second call overruns it (30 > 25); the
    SDK run stops right after it, its answer recorded, its call never run; validate says so."""
    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    before = len(app.CALLS)
    done = run(AgentsRun(store, "r1").run(agent, "weather?", limits=Limits(max_tokens=25)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 30 > 25 tokens",
    )
    assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
    assert done.record.actions["call_1"].status == "rejected"  # proposed, never run
    assert app.CALLS[before:] == ["get_weather C0"]
    assert validates(store, "r1", tmp_path) == 1


def test_a_single_answer_that_overruns_the_budget_ends_the_run_keeping_it(tmp_path: Path) -> None:
    """One 15-token answer under max_tokens=10: recorded, then run.terminated(budget) at once."""
    store = MemoryEventStore()
    agent = weather_agent([assistant_message("Sunny.")])
    done = run(AgentsRun(store, "r1").run(agent, "weather?", limits=Limits(max_tokens=10)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 15 > 10 tokens",
    )
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "run.terminated",
    ]  # fmt: skip
    assert (done.record.final_output, done.partial_output) == ("Sunny.", "Sunny.")


def test_a_loop_of_identical_calls_is_stopped_before_the_tool_runs_again(tmp_path: Path) -> None:
    """LoopDetector(threshold=2): the same call with nothing new observed is refused at on_tool_start.

    The first result is a new observation, so the second call is progress; the third is not.
    """
    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": "Paris"}, call_id=f"call_{i}")] for i in range(4)]
    )
    before = len(app.CALLS)
    done = run(AgentsRun(store, "r1", guards=[LoopDetector(threshold=2)]).run(agent, "weather?"))
    assert (done.status, done.stop_reason) == ("terminated", "loop_detected")
    assert app.CALLS[before:] == ["get_weather Paris", "get_weather Paris"]
    assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
    assert validates(store, "r1", tmp_path) == 0


def test_a_cancel_from_elsewhere_stops_the_run_at_its_next_signal(tmp_path: Path) -> None:
    """A cancel appended while a tool runs: its result is kept, the next model call never starts."""
    store = MemoryEventStore()

    from agents import function_tool

    @function_tool
    def slow_lookup(q: str) -> str:
        """Look something up (meanwhile, someone cancels the run)."""
        cancel(store, "r1", reason="user closed the tab", requested_by="ui")
        return f"found {q}"

    agent = Agent(
        name="a",
        model=app.scripted(
            [function_call("slow_lookup", {"q": "x"}, call_id="call_1")],
            [assistant_message("never said")],
        ),
        tools=[slow_lookup],
    )
    done = run(AgentsRun(store, "r1").run(agent, "look"))
    assert (done.status, done.record.cancel_reason) == ("cancelled", "user closed the tab")
    assert done.record.actions["call_1"].result == "found x"
    assert types(store, "r1")[-3:] == ["run.cancel_requested", "tool.completed", "run.cancelled"]
    assert validates(store, "r1", tmp_path) == 0


def test_a_tool_result_no_log_can_hold_is_a_failed_call(tmp_path: Path) -> None:
    """A tool returns NaN: the SDK goes on with it, the log records the call as failed with
    the reason (it ran; its result cannot be stored), and every line reads back."""
    store = MemoryEventStore()

    from agents import function_tool

    @function_tool
    def measure(q: str) -> dict[str, float]:
        """Measure something (the sensor is broken)."""
        return {"value": float("nan")}

    agent = Agent(
        name="a",
        model=app.scripted(
            [function_call("measure", {"q": "x"}, call_id="call_1")],
            [assistant_message("Broken sensor.")],
        ),
        tools=[measure],
    )
    done = run(AgentsRun(store, "r1").run(agent, "measure"))
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
        run(AgentsRun(store, "r1").run(triage, "refund me"))
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
        run(AgentsRun(store, "r1").run(triage, "weather?"))
    assert app.CALLS[before:] == []
    assert list(store.runs()) == []


def _pause_for_refund(store: EventStore, state_file: Path) -> None:
    paused = run(AgentsRun(store, "r1").run(app.refund_agent(), "refund O-1"))
    assert (paused.status, paused.record.pending_approvals) == ("waiting_approval", ("call_r1",))
    state_file.write_text(json.dumps(paused.state))


def _resume_in_new_process(db: Path | str, state_file: Path | None) -> dict[str, Any]:
    """Resume run r1 in a new process: from `state_file`, or (None) from the store alone."""
    state = "-" if state_file is None else str(state_file)
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._openai_agents_app", str(db), "r1", state],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_an_approved_call_runs_when_resumed_in_a_new_process(tmp_path: Path) -> None:
    """needs_approval pauses; approve() in our store; a new process resumes and runs the call."""
    db, state_file = tmp_path / "runs.db", tmp_path / "state.json"
    store = SQLiteEventStore(db)
    _pause_for_refund(store, state_file)
    assert "refund O-1" not in app.CALLS
    approve(store, "r1", "call_r1", approver="alice")
    kept = store.attachment("r1", "openai-agents/run_state")
    assert kept is not None
    assert kept.version == store.load("r1").version - 1
    out = _resume_in_new_process(db, None)
    assert out == {"status": "completed", "final_output": "Done.", "calls": ["refund O-1"]}
    assert store.attachment("r1", "openai-agents/run_state") is None  # ended: nothing resumes
    assert types(store, "r1")[3:] == [
        "approval.requested", "approval.accepted", "tool.requested", "tool.started",
        "tool.completed", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_a_rejected_call_never_runs_and_the_model_reads_the_reason(tmp_path: Path) -> None:
    """reject() in our store; the resumed process tells the SDK, the tool never runs."""
    db, state_file = tmp_path / "runs.db", tmp_path / "state.json"
    store = SQLiteEventStore(db)
    _pause_for_refund(store, state_file)
    reject(store, "r1", "call_r1", approver="bob", reason="over the limit")
    out = _resume_in_new_process(db, state_file)
    assert out == {"status": "completed", "final_output": "Done.", "calls": []}
    record = store.load("r1")
    assert (record.actions["call_r1"].status, record.actions["call_r1"].reason) == (
        "rejected",
        "over the limit",
    )
    assert validates(store, "r1", tmp_path) == 0


def test_a_state_whose_call_changed_after_approval_fails_closed(tmp_path: Path) -> None:
    """Approved for O-1, but the SDK state now says O-2: ApprovalMismatchError, nothing runs."""
    store = MemoryEventStore()
    state_file = tmp_path / "state.json"
    _pause_for_refund(store, state_file)
    approve(store, "r1", "call_r1", approver="alice")
    tampered = state_file.read_text().replace(
        '\\"order_id\\":\\"O-1\\"', '\\"order_id\\":\\"O-2\\"'
    )
    assert tampered != state_file.read_text()
    before = len(app.CALLS)
    with pytest.raises(ApprovalMismatchError) as err:
        run(AgentsRun(store, "r1").resume(app.resumed_agent(), json.loads(tampered)))
    assert err.value.action_id == "call_r1"
    assert err.value.expected == store.load("r1").actions["call_r1"].arguments_digest
    assert err.value.expected != err.value.actual
    assert app.CALLS[before:] == []
    assert store.load("r1").status == "running"


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
        task = asyncio.create_task(AgentsRun(store, "r1").run(agent, "wait"))
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
    run(AgentsRun(store, "r1", listeners=listeners).run(agent, "weather?"))
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
    done = run(AgentsRun(store, "r1").run(agent, "go", run_config=config))
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

    done = run(AgentsRun(store, "r1").run(agent, "weather?", on_stream_event=on_event))
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
        AgentsRun(store, "r1", guards=[MaxTurns(1)]).run(
            agent, "weather?", on_stream_event=lambda e: None
        )
    )
    assert (done.status, done.stop_reason, done.partial_output) == (
        "terminated",
        "max_turns",
        "sunny in C0",
    )
    assert validates(store, "r1", tmp_path) == 0


def test_a_deadline_on_the_injected_clock_stops_the_run(tmp_path: Path) -> None:
    """limits.deadline 10:00:04 on a clock ticking 1 s per append: a call at/after it is refused."""
    from agentfsm.events import step_clock

    store = MemoryEventStore()
    agent = weather_agent(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    limits = Limits(deadline="2026-09-01T10:00:04Z")
    done = run(AgentsRun(store, "r1", clock=step_clock()).run(agent, "w", limits=limits))
    assert (done.status, done.stop_reason) == ("terminated", "deadline")
    assert done.record.stop_detail == (
        "deadline 2026-09-01T10:00:04+00:00 reached at 2026-09-01T10:00:05+00:00 (1 s past it)"
    )
    assert types(store, "r1")[-2:] == ["tool.completed", "run.terminated"]
    assert validates(store, "r1", tmp_path) == 0


def test_an_agent_tool_runs_a_subagent_that_draws_on_the_parents_budget(tmp_path: Path) -> None:
    """agent_tool: the child is its own run; once the tree overspends both are stopped (budget).

    15 tokens a model call, 40 for the tree: the parent's call and two of the child's spend 45,
    so the child's second model call overruns it (stopped right after), then the parent's next.
    """
    store = MemoryEventStore()
    researcher = weather_agent(
        [function_call("get_weather", {"city": "Paris"}, call_id="c1")],
        [function_call("get_weather", {"city": "Rome"}, call_id="c2")],
        [assistant_message("never reached")],
    )
    parent = AgentsRun(store, "r1")
    triage = Agent(
        name="triage",
        model=app.scripted(
            [function_call("researcher", {"input": "Paris and Rome?"}, call_id="call_s1")],
            [assistant_message("never reached either")],
        ),
        tools=[parent.agent_tool(researcher, tool_name="researcher")],
    )
    done = run(parent.run(triage, "weather?", limits=Limits(max_tokens=40)))
    assert_tree_stopped(done, store, "r1/call_s1", tmp_path)
    assert store.load("r1/call_s1").actions["c1"].result == "sunny in Paris"
    assert done.record.actions["call_s1"].result == (
        "the subagent 'weather' stopped (terminated, budget): sunny in Paris"
    )
    assert done.record.usage.input_tokens + done.record.usage.output_tokens == 15


def test_a_subagent_of_a_run_without_money_limits_is_not_stopped_by_its_parent() -> None:
    """No token or cost limits on the parent: the child runs on its own terms to its answer."""
    store = MemoryEventStore()
    researcher = weather_agent([assistant_message("Sunny.")])
    parent = AgentsRun(store, "r1")
    triage = Agent(
        name="triage",
        model=app.scripted(
            [function_call("researcher", {"input": "Paris?"}, call_id="call_s1")],
            [assistant_message("It is sunny.")],
        ),
        tools=[parent.agent_tool(researcher, tool_name="researcher")],
    )
    done = run(parent.run(triage, "weather?"))
    assert (done.status, done.final_output) == ("completed", "It is sunny.")
    assert store.load("r1/call_s1").final_output == "Sunny."
    assert done.record.actions["call_s1"].result == "Sunny."


def _manager_paused(store: EventStore) -> None:
    """Run m1: its agent tool's subagent asks for the refund, and both runs wait."""
    manager = AgentsRun(store, "m1")
    assert_caller_waits_on_child(
        run(manager.run(app.manager_agent(manager), "refund O-1")), store, app.CALLS
    )


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_subagent_waiting_for_approval_pauses_its_parent_until_a_new_process_resumes(
    tmp_path: Path, decision: str
) -> None:
    """The child's call is decided in the child's run; resuming the parent goes on with both."""
    db = tmp_path / "runs.db"
    store = SQLiteEventStore(db)
    _manager_paused(store)
    ran = decide_for_child(store, decision)
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._openai_agents_app", str(db), "m1", "-"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    done = json.loads(out.stdout.strip().splitlines()[-1])
    assert_caller_and_child_finished(done, store, ran, "O-1 refunded.", tmp_path)
    assert store.attachment("m1", "openai-agents/run_state") is None


def test_deciding_a_subagents_call_in_the_parents_run_says_where_it_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """approve("m1", child's call) is refused, the error naming the subagent run to use."""
    from agentfsm.cli import main as cli
    from agentfsm.errors import ActionError

    store = SQLiteEventStore(tmp_path / "runs.db")
    _manager_paused(store)
    with pytest.raises(ActionError) as caught:
        approve(store, "m1", "call_r1", approver="alice")
    assert any("subagent run 'm1/call_m1'" in note for note in caught.value.__notes__)
    assert cli(["approve", "--store", str(tmp_path / "runs.db"), "m1", "call_r1"]) == 1
    assert "decide it there" in capsys.readouterr().err
    assert store.load("m1/call_m1").pending_approvals == ("call_r1",)  # nothing decided


def test_areject_of_a_subagents_call_in_the_parents_run_says_where_it_waits() -> None:
    """The async twin names the subagent run too, through an async store."""
    from agentfsm.errors import ActionError
    from agentfsm.runtime import areject
    from agentfsm.stores import ThreadedAsyncEventStore

    store = MemoryEventStore()
    _manager_paused(store)
    astore = ThreadedAsyncEventStore(store)
    with pytest.raises(ActionError) as caught:
        asyncio.run(areject(astore, "m1", "call_r1", approver="bob", reason="no"))
    assert any("subagent run 'm1/call_m1'" in note for note in caught.value.__notes__)


def test_a_streamed_parent_pauses_on_its_subagent_and_resumes_streamed(tmp_path: Path) -> None:
    """on_stream_event: the same pause, decision and resume; the stream goes to the caller."""
    store, seen = MemoryEventStore(), []
    manager = AgentsRun(store, "m1")
    paused = run(manager.run(app.manager_agent(manager), "refund O-1", on_stream_event=seen.append))
    assert_caller_waits_on_child(paused, store, app.CALLS)
    before = len(seen)
    ran = decide_for_child(store, "approve")
    manager = AgentsRun(store, "m1")
    resumed = app.manager_agent(manager, resumed=True)
    done = run(manager.resume(resumed, on_stream_event=seen.append))
    out = {"status": done.status, "final_output": done.final_output, "calls": app.CALLS}
    assert_caller_and_child_finished(out, store, ran, "O-1 refunded.", tmp_path)
    assert 0 < before < len(seen)  # both legs streamed


def test_resuming_a_parent_whose_subagent_is_undecided_leaves_both_waiting() -> None:
    """No decision yet: the resume runs nothing and names the subagent's call again."""
    store = MemoryEventStore()
    _manager_paused(store)
    manager = AgentsRun(store, "m1")
    again = run(manager.resume(app.manager_agent(manager, resumed=True)))
    assert (again.status, again.pending_approvals) == ("waiting_tool", [("m1/call_m1", "call_r1")])
    assert store.load("m1/call_m1").status == "waiting_approval"
    assert "refund O-1" not in app.CALLS


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
        run(manager.resume(app.manager_agent(manager, resumed=True), tampered))
    assert (caught.value.run_id, caught.value.action_id) == ("m1/call_m1", "call_r1")
    assert "refund O-1" not in app.CALLS
    assert "refund O-2" not in app.CALLS


def test_a_run_cancelled_while_it_waits_ends_cancelled_on_resume(tmp_path: Path) -> None:
    """Nothing drives a paused run: a new process's resume settles the cancel; nothing runs."""
    db, state_file = tmp_path / "runs.db", tmp_path / "state.json"
    store = SQLiteEventStore(db)
    _pause_for_refund(store, state_file)
    cancel(store, "r1", reason="the customer left")
    out = _resume_in_new_process(db, None)
    assert out == {"status": "cancelled", "final_output": None, "calls": []}
    assert store.load("r1").actions["call_r1"].status == "rejected"
    assert store.attachment("r1", "openai-agents/run_state") is None
    assert validates(store, "r1", tmp_path) == 0


def test_cancelling_a_parent_waiting_on_its_subagent_cancels_both_on_resume(
    tmp_path: Path,
) -> None:
    """The subagent's pending call never runs; the agent tool's call is outcome unknown."""
    store = MemoryEventStore()
    _manager_paused(store)
    cancel(store, "m1", reason="the customer left")
    manager = AgentsRun(store, "m1")
    done = run(manager.resume(app.manager_agent(manager, resumed=True)))
    assert (done.status, done.pending_approvals) == ("cancelled", [])
    assert done.record.actions["call_m1"].status == "unknown"
    child = store.load("m1/call_m1")
    assert (child.status, child.cancel_reason) == (
        "cancelled",
        "the run 'm1' that called it was cancelled",
    )
    assert child.actions["call_r1"].status == "rejected"
    assert "refund O-1" not in app.CALLS
    assert validates(store, "m1", tmp_path) == 0
    assert validates(store, "m1/call_m1", tmp_path) == 0


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
    done = run(manager.run(agent, "refund O-1"))
    assert (done.status, done.pending_approvals) == ("cancelled", [])
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


def test_a_batch_mixing_free_and_approval_calls_runs_the_free_one_then_waits(
    tmp_path: Path,
) -> None:
    """The SDK runs get_weather at once and pauses for refund: a legal log, then a resume."""
    store = MemoryEventStore()
    model = app.scripted(
        [
            function_call("refund", {"order_id": "O-1"}, call_id="call_r1"),
            function_call("get_weather", {"city": "Paris"}, call_id="call_w1"),
        ],
        [assistant_message("Refunded; sunny in Paris.")],
    )
    agent = Agent(name="refunds", model=model, tools=[app.refund, app.get_weather])
    paused = run(AgentsRun(store, "r1").run(agent, "refund O-1, and the weather?"))
    assert_free_call_ran_then_paused(paused, store)
    approve(store, "r1", "call_r1", approver="alice")
    done = run(AgentsRun(store, "r1").resume(agent, paused.state))
    assert_refunded_after_approval(done, store, tmp_path)


def test_a_kept_state_the_run_moved_on_from_is_refused(tmp_path: Path) -> None:
    """A state saved at the pause, put back after the resume ran: stale, SavedStateError.

    (`resume` itself now returns the ended run without reading it: test_resume_ended.py.)
    """
    store = MemoryEventStore()
    _pause_for_refund(store, tmp_path / "state.json")
    kept = store.attachment("r1", "openai-agents/run_state")
    assert kept is not None
    approve(store, "r1", "call_r1", approver="alice")
    run(AgentsRun(store, "r1").resume(app.resumed_agent()))
    store.put_attachment("r1", kept.name, kept.data, version=kept.version)
    before = len(app.CALLS)
    with pytest.raises(SavedStateError) as err:
        AgentsRun(store, "r1").recorder.saved_state(kept.name)
    assert str(err.value) == (
        "run 'r1': cannot resume from the saved state 'openai-agents/run_state': it was saved "
        f"at version {kept.version}, but the run went on since ('tool.requested' at sequence "
        f"{kept.version + 2}): it is stale"
    )
    assert app.CALLS[before:] == []


def test_resuming_a_run_that_never_paused_here_says_no_state_is_kept() -> None:
    """No kept state and none given: SavedStateError naming the attachment, nothing runs."""
    store = MemoryEventStore()
    run(AgentsRun(store, "r1").run(weather_agent([assistant_message("Hi.")]), "hi"))
    with pytest.raises(SavedStateError) as err:  # `resume` returns the ended run instead
        AgentsRun(store, "r1").recorder.saved_state("openai-agents/run_state")
    assert (err.value.run_id, err.value.name) == ("r1", "openai-agents/run_state")
    assert err.value.reason == (
        "none is kept (the run never paused for approval here); pass the state to resume"
    )


def test_a_reservation_stops_the_model_call_that_could_overspend(tmp_path: Path) -> None:
    """reserve_tokens=15 under max_tokens=40: the third call (30 + 15 > 40) is never made."""
    store = MemoryEventStore()
    model = app.scripted(
        *[[function_call("get_weather", {"city": f"C{i}"}, call_id=f"call_{i}")] for i in range(3)]
    )
    agent = Agent(name="weather", model=model, tools=[app.get_weather])
    reserving = AgentsRun(store, "r1", reserve_tokens=15)
    done = run(reserving.run(agent, "weather?", limits=Limits(max_tokens=40)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 30 + reserved 15 > 40 tokens",
    )
    assert len(model.calls) == 2
    assert validates(store, "r1", tmp_path) == 0


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
    done = run(AgentsRun(store, "r1", pricing=pricing).run(agent, "weather?"))
    assert seen == [(None, 10, 5), (None, 10, 5)]  # a scripted model has no name
    assert done.record.usage.cost == 0.5


def test_run_sync_and_resume_sync_drive_the_same_run_without_an_event_loop() -> None:
    """As Runner.run_sync: the run pauses for approval, then resumes to its answer."""
    store = MemoryEventStore()
    with capture_logs():
        paused = AgentsRun(store, "r1").run_sync(app.refund_agent(), "refund O-1")
        approve(store, "r1", "call_r1", approver="alice")
        done = AgentsRun(store, "r1").resume_sync(app.resumed_agent())
    assert (paused.status, done.status, done.final_output) == (
        "waiting_approval",
        "completed",
        "Done.",
    )


def test_a_corrupt_kept_state_is_refused_saying_so(tmp_path: Path) -> None:
    """Bytes that are not a RunState: SavedStateError naming the parse error; nothing runs."""
    store = MemoryEventStore()
    _pause_for_refund(store, tmp_path / "state.json")
    kept = store.attachment("r1", "openai-agents/run_state")
    assert kept is not None
    store.put_attachment("r1", kept.name, b"{not json", version=kept.version)
    approve(store, "r1", "call_r1", approver="alice")
    before = len(app.CALLS)
    with pytest.raises(SavedStateError) as err:
        run(AgentsRun(store, "r1").resume(app.resumed_agent()))
    assert err.value.reason.startswith("it does not load: JSONDecodeError: Expecting property")
    assert app.CALLS[before:] == []


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
    done = run(AgentsRun(store, "r1").run(agent, "weather?", hooks=Mine()))
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
    assert run(parent.run(triage, "weather?")).status == "completed"
    finished = exporter.get_finished_spans()
    call = next(s for s in finished if s.name == "execute_tool researcher")
    child = next(s for s in finished if s.name == "invoke_agent weather")
    assert child.parent is not None
    assert child.parent.span_id == call.context.span_id


def test_on_postgresql_the_store_alone_resumes_an_approved_run_in_a_new_process(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The same flow on the PostgreSQL store: events and the SDK's state both kept there."""
    from agentfsm.stores.postgres import PostgresEventStore

    store = PostgresEventStore(postgres_dsn, migrate=True)
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    with capture_logs():
        paused = asyncio.run(AgentsRun(store, run_id).run(app.refund_agent(), "refund O-1"))
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
                AgentsRun(store, "a").run(failing("call_a"), "weather?"),
                AgentsRun(store, "b").run(failing("call_b"), "weather?"),
            )
        )

    done = run(both())
    assert [d.status for d in done] == ["completed", "completed"]
    assert sorted(store.load("a").actions) == ["call_a"]
    assert store.load("a").actions["call_a"].status == "failed"
    assert store.load("b").actions["call_b"].status == "failed"
    assert validates(store, "a", tmp_path) == 0
    assert validates(store, "b", tmp_path) == 0


def test_a_cancel_while_a_call_waits_for_approval_ends_the_run_cancelled(tmp_path: Path) -> None:
    """The SDK runs the free call (which asks to cancel), then would pause: cancelled instead."""
    from agents import function_tool

    store = MemoryEventStore()

    @function_tool
    def hang_up() -> str:
        """Stop the run from elsewhere."""
        cancel(store, "r1", reason="the customer left")
        return "bye"

    model = app.scripted(
        [
            function_call("refund", {"order_id": "O-1"}, call_id="call_r1"),
            function_call("hang_up", {}, call_id="call_h1"),
        ]
    )
    agent = Agent(name="support", model=model, tools=[app.refund, hang_up])
    done = run(AgentsRun(store, "r1").run(agent, "refund O-1"))
    assert (done.status, done.record.cancel_reason) == ("cancelled", "the customer left")
    refund = done.record.actions["call_r1"]
    assert (refund.status, refund.reason) == ("rejected", "the run ended before it ran")
    assert done.record.actions["call_h1"].result == "bye"
    assert validates(store, "r1", tmp_path) == 0
