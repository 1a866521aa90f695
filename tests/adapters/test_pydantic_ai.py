"""The pydantic-ai adapter: a real `Agent.iter()`, offline, under our lifecycle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext, UsageLimits

from agentfsm.adapters.pydantic_ai import (
    AgentIterRun,
    ApprovalMismatchError,
    SavedStateError,
    per_million_tokens,
)
from agentfsm.events import Limits
from agentfsm.guards import LoopDetector, MaxTurns
from agentfsm.runtime import approve, cancel, reject
from agentfsm.stores import MemoryEventStore, SQLiteEventStore
from agentfsm.stores.base import EventStore
from tests.adapters import _pydantic_ai_app as app
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
from tests.adapters._pydantic_ai_app import REFUND, answer, call, make_agent

ROOT = Path(__file__).resolve().parents[2]


def looping(n: int = 5) -> Any:
    return make_agent(*[call("get_weather", f"call_{i}", city=f"C{i}") for i in range(n)])


def test_a_tool_loop_with_a_retried_tool_ends_in_a_final_answer(tmp_path: Path) -> None:
    """A tool call, a ModelRetry (tool.failed 'retried'), then an answer: a legal log."""
    store = MemoryEventStore()
    agent = make_agent(
        call("get_weather", "call_1", city="Paris"),
        call("get_weather", "call_2", city="Atlantis"),
        answer("Sunny in Paris."),
    )
    done = run(AgentIterRun(store, "r1").run(agent, "weather?"))
    assert (done.status, done.final_output) == ("completed", "Sunny in Paris.")
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
        "tool.completed", "model.started", "model.completed", "tool.requested", "tool.started",
        "tool.failed", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert done.record.actions["call_1"].result == "sunny in Paris"
    error = done.record.actions["call_2"].error
    assert (error.kind, error.message) == ("retried", "no such city")
    assert (done.record.usage.input_tokens, done.record.usage.output_tokens) == (30, 15)
    assert validates(store, "r1", tmp_path) == 0


def test_our_max_turns_stops_the_iteration_with_the_partial_output(tmp_path: Path) -> None:
    """MaxTurns(2): the third model request is refused before it is made."""
    store = MemoryEventStore()
    done = run(AgentIterRun(store, "r1", guards=[MaxTurns(2)]).run(looping(), "weather?"))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "max_turns",
        "2 of 2 turns used",
    )
    assert done.partial_output == "sunny in C1"
    assert validates(store, "r1", tmp_path) == 0


def test_a_usage_limit_on_tokens_becomes_a_budget_stop(tmp_path: Path) -> None:
    """UsageLimits(total_tokens_limit=25) at 15 tokens a request: run.terminated 'budget',
    after the second request, which the SDK counted but never handed on, with its usage."""
    store = MemoryEventStore()
    done = run(
        AgentIterRun(store, "r1").run(
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


def test_a_single_answer_that_overruns_the_budget_ends_the_run_keeping_it(tmp_path: Path) -> None:
    """One 15-token answer under max_tokens=10: recorded, then run.terminated(budget) at once."""
    store = MemoryEventStore()
    agent = make_agent(answer("Sunny."))
    done = run(AgentIterRun(store, "r1").run(agent, "weather?", limits=Limits(max_tokens=10)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 15 > 10 tokens",
    )
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "run.terminated",
    ]  # fmt: skip
    assert (done.record.final_output, done.partial_output) == ("Sunny.", "Sunny.")


def test_the_request_limit_becomes_a_max_turns_stop(tmp_path: Path) -> None:
    """UsageLimits(request_limit=2): the SDK refuses the third request before making it;
    run.terminated max_turns, and no answer is made up for it."""
    store = MemoryEventStore()
    done = run(
        AgentIterRun(store, "r1").run(
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


def test_a_loop_is_stopped_before_the_tool_runs_again(tmp_path: Path) -> None:
    """LoopDetector(threshold=2): the third identical call is refused; the tool ran twice."""
    store = MemoryEventStore()
    agent = make_agent(*[call("get_weather", f"call_{i}", city="Paris") for i in range(5)])
    before = len(app.CALLS)
    done = run(AgentIterRun(store, "r1", guards=[LoopDetector(threshold=2)]).run(agent, "w"))
    assert (done.status, done.stop_reason) == ("terminated", "loop_detected")
    assert app.CALLS[before:] == ["get_weather Paris", "get_weather Paris"]
    assert validates(store, "r1", tmp_path) == 0


def test_a_cancel_from_elsewhere_stops_the_run(tmp_path: Path) -> None:
    """A cancel appended while a tool runs: its result is kept, no further model request."""
    store = MemoryEventStore()
    agent = make_agent(
        call("get_weather", "call_1", city="Paris"),
        answer("never"),
        on_tool=lambda: cancel(store, "r1", reason="user left"),
    )
    done = run(AgentIterRun(store, "r1").run(agent, "w"))
    assert (done.status, done.record.cancel_reason) == ("cancelled", "user left")
    assert types(store, "r1")[-3:] == ["run.cancel_requested", "tool.completed", "run.cancelled"]
    assert validates(store, "r1", tmp_path) == 0


def _pause(tmp_path: Path) -> tuple[SQLiteEventStore, Path, Path]:
    db, state_file = tmp_path / "runs.db", tmp_path / "history.json"
    store = SQLiteEventStore(db)
    paused = run(AgentIterRun(store, "r1").run(make_agent(*REFUND), "refund O-1"))
    assert (paused.status, paused.record.pending_approvals) == ("waiting_approval", ("call_r1",))
    state_file.write_text(paused.state)
    return store, db, state_file


def _resume_in_new_process(db: Path, state_file: Path | None, run_id: str = "r1") -> dict[str, Any]:
    """Resume `run_id` in a new process: from `state_file`, or (None) from the store alone."""
    state = "-" if state_file is None else str(state_file)
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._pydantic_ai_app", str(db), run_id, state],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_an_approved_deferred_call_runs_when_resumed_in_a_new_process(tmp_path: Path) -> None:
    """requires_approval defers the call; approve() in our store; a new process runs it."""
    store, db, state_file = _pause(tmp_path)
    approve(store, "r1", "call_r1", approver="alice")
    kept = store.attachment("r1", "pydantic-ai/messages")
    assert kept is not None
    assert kept.data.decode() == state_file.read_text()
    out = _resume_in_new_process(db, None)
    assert out == {"status": "completed", "final_output": "Done.", "calls": ["refund O-1"]}
    assert types(store, "r1")[3:] == [
        "approval.requested", "approval.accepted", "tool.requested", "tool.started",
        "tool.completed", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_a_rejected_deferred_call_never_runs_across_a_new_process(tmp_path: Path) -> None:
    """reject() in our store: the resumed process denies the call (ToolDenied); it never runs."""
    store, db, state_file = _pause(tmp_path)
    reject(store, "r1", "call_r1", approver="bob", reason="not today")
    out = _resume_in_new_process(db, state_file)
    assert out == {"status": "completed", "final_output": "Done.", "calls": []}
    assert validates(store, "r1", tmp_path) == 0


def test_a_run_cancelled_while_it_waits_ends_cancelled_on_resume(tmp_path: Path) -> None:
    """Nothing drives a paused run: the resume settles the cancel; the call never runs."""
    store, db, _ = _pause(tmp_path)
    cancel(store, "r1", reason="the customer left")
    out = _resume_in_new_process(db, None)
    assert out == {"status": "cancelled", "final_output": None, "calls": []}
    refund = store.load("r1").actions["call_r1"]
    assert (refund.status, refund.reason) == ("rejected", "the run ended before it ran")
    assert store.attachment("r1", "pydantic-ai/messages") is None
    assert validates(store, "r1", tmp_path) == 0


def _manager_paused(store: EventStore) -> None:
    """Run m1: its tool delegates to the refund agent, which waits for approval; so does m1."""
    manager = AgentIterRun(store, "m1")
    assert_caller_waits_on_child(
        run(manager.run(app.manager_agent(manager), "refund O-1")), store, app.CALLS
    )


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_delegate_waiting_for_approval_pauses_its_caller_until_a_new_process_resumes(
    tmp_path: Path, decision: str
) -> None:
    """The child's call is decided in the child's run; resuming the caller resumes the child."""
    db = tmp_path / "runs.db"
    store = SQLiteEventStore(db)
    _manager_paused(store)
    ran = decide_for_child(store, decision)
    out = _resume_in_new_process(db, None, run_id="m1")
    assert_caller_and_child_finished(out, store, ran, "Done.", tmp_path)


def test_a_caller_whose_delegate_is_undecided_stays_waiting_and_a_cancel_ends_both() -> None:
    """No decision: the resume runs nothing; cancelled, the next resume ends child and caller."""
    store = MemoryEventStore()
    _manager_paused(store)
    manager = AgentIterRun(store, "m1")
    again = run(manager.resume(app.manager_agent(manager)))
    assert (again.status, again.pending_approvals) == ("waiting_tool", [("m1/call_m1", "call_r1")])
    cancel(store, "m1", reason="the customer left")
    manager = AgentIterRun(store, "m1")
    done = run(manager.resume(app.manager_agent(manager)))
    assert (done.status, done.record.actions["call_m1"].status) == ("cancelled", "unknown")
    assert store.load("m1/call_m1").status == "cancelled"
    assert "refund O-1" not in app.CALLS


def test_a_history_whose_call_changed_fails_closed(tmp_path: Path) -> None:
    """Approved for O-1, the history now says O-2: ApprovalMismatchError, nothing runs."""
    store, _, state_file = _pause(tmp_path)
    approve(store, "r1", "call_r1", approver="alice")
    tampered = state_file.read_text().replace('"order_id":"O-1"', '"order_id":"O-2"')
    assert tampered != state_file.read_text()
    before = len(app.CALLS)
    with pytest.raises(ApprovalMismatchError) as err:
        run(AgentIterRun(store, "r1").resume(make_agent(*REFUND), tampered))
    assert err.value.action_id == "call_r1"
    assert err.value.expected == store.load("r1").actions["call_r1"].arguments_digest
    assert app.CALLS[before:] == []


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
        done = await AgentIterRun(store, "r1/call_1").run(child, question)
        return str(done.final_output)

    done = run(AgentIterRun(store, "r1").run(parent, "weather?"))
    assert (done.status, done.final_output) == ("completed", "It is sunny.")
    assert done.record.actions["call_1"].result == "Paris is sunny."
    assert store.load("r1/call_1").status == "completed"
    assert validates(store, "r1", tmp_path) == 0
    assert types(store, "r1/call_1") == [
        "run.started", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip


def test_a_subagent_run_draws_on_the_parents_token_budget(tmp_path: Path) -> None:
    """`delegate`: the child is stopped once the tree overspends, then the parent.

    15 tokens a request, 40 for the tree: the parent's request and two of the child's spend 45,
    so the child's second request overruns it (stopped right after), then the parent's next.
    """
    store = MemoryEventStore()
    child = make_agent(
        call("get_weather", "c1", city="Paris"),
        call("get_weather", "c2", city="Rome"),
        answer("never reached"),
    )
    parent_run = AgentIterRun(store, "r1")
    parent: Agent[None, str] = Agent(
        app.scripted(call("ask_specialist", "call_1", question="Paris?"), answer("never")),
        name="triage",
    )

    @parent.tool
    async def ask_specialist(ctx: RunContext[None], question: str) -> str:
        """Ask the weather specialist."""
        return str(await parent_run.delegate(ctx, child, question))

    done = run(parent_run.run(parent, "weather?", limits=Limits(max_tokens=40)))
    assert_tree_stopped(done, store, "r1/call_1", tmp_path)
    assert done.record.actions["call_1"].result == (
        "the subagent 'weather' stopped (terminated, budget): sunny in Paris"
    )


def test_a_cancellation_token_fired_mid_tool_ends_the_run_cancelled(tmp_path: Path) -> None:
    """The SDK's own cancel (CancellationToken): RunCancelled becomes a recorded, legal cancel."""
    from pydantic_ai import CancellationToken

    token = CancellationToken()
    store = MemoryEventStore()
    agent = make_agent(
        call("get_weather", "call_1", city="Paris"), answer("never"), on_tool=token.cancel
    )
    done = run(AgentIterRun(store, "r1").run(agent, "w", cancellation_token=token))
    assert (done.status, done.record.cancel_reason) == ("cancelled", "the agent run was cancelled")
    assert types(store, "r1")[-1] == "run.cancelled"
    assert validates(store, "r1", tmp_path) == 0


def test_a_batch_mixing_free_and_deferred_calls_runs_the_free_one_then_waits(
    tmp_path: Path,
) -> None:
    """pydantic-ai runs get_weather at once and defers refund: a legal log, then a resume."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    both = ModelResponse(
        parts=[
            ToolCallPart("refund", {"order_id": "O-1"}, tool_call_id="call_r1"),
            ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="call_w1"),
        ],
        usage=app.USAGE,
    )
    store = MemoryEventStore()
    agent = make_agent(both, answer("Refunded; sunny in Paris."))
    paused = run(AgentIterRun(store, "r1").run(agent, "refund O-1, and the weather?"))
    assert_free_call_ran_then_paused(paused, store)
    approve(store, "r1", "call_r1", approver="alice")
    done = run(AgentIterRun(store, "r1").resume(agent, paused.state))
    assert_refunded_after_approval(done, store, tmp_path)


def test_a_kept_history_the_run_moved_on_from_is_refused(tmp_path: Path) -> None:
    """A history saved at the pause, put back after the resume ran: stale, SavedStateError."""
    store, _, _ = _pause(tmp_path)
    kept = store.attachment("r1", "pydantic-ai/messages")
    assert kept is not None
    approve(store, "r1", "call_r1", approver="alice")
    done = run(AgentIterRun(store, "r1").resume(make_agent(*REFUND)))
    assert done.status == "completed"
    assert store.attachment("r1", "pydantic-ai/messages") is None
    store.put_attachment("r1", kept.name, kept.data, version=kept.version)
    with pytest.raises(SavedStateError) as err:  # `resume` returns the ended run instead
        AgentIterRun(store, "r1").recorder.saved_state(kept.name)
    assert err.value.reason == (
        f"it was saved at version {kept.version}, but the run went on since "
        f"('tool.requested' at sequence {kept.version + 2}): it is stale"
    )


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
        run(AgentIterRun(store, "r1").run(agent, "charge 5"))
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


def test_a_reservation_stops_the_call_that_could_overspend_before_it_is_made(
    tmp_path: Path,
) -> None:
    """reserve_tokens=15 under max_tokens=40: the third request (30 + 15 > 40) is never made."""
    store = MemoryEventStore()
    reserving = AgentIterRun(store, "r1", reserve_tokens=15)
    done = run(reserving.run(looping(), "weather?", limits=Limits(max_tokens=40)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 30 + reserved 15 > 40 tokens",
    )
    assert (done.record.usage.input_tokens + done.record.usage.output_tokens) == 30
    started = [e for e in store.events("r1") if e.type == "model.started"]
    assert [e.reserved_tokens for e in started] == [15, 15]
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
    done = run(AgentIterRun(store, "r1").run(agent, "weather?"))
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
    done = run(AgentIterRun(store, "r1").run(agent, "weather?"))
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
    done = run(priced.run(looping(), "weather?", limits=Limits(max_cost=2.5)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 3 > max cost 2.5",
    )
    assert done.record.usage.cost == 3.0
    assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
    assert validates(store, "r1", tmp_path) == 1


def test_run_sync_and_resume_sync_drive_the_same_run_without_an_event_loop() -> None:
    """As agent.run_sync: the run defers the refund, then resumes to its answer."""
    store = MemoryEventStore()
    with capture_logs():
        paused = AgentIterRun(store, "r1").run_sync(make_agent(*REFUND), "refund O-1")
        approve(store, "r1", "call_r1", approver="alice")
        done = AgentIterRun(store, "r1").resume_sync(make_agent(*REFUND))
    assert (paused.status, done.status, done.final_output) == (
        "waiting_approval",
        "completed",
        "Done.",
    )


def test_an_sdk_move_the_table_refuses_raises_naming_the_signal() -> None:
    """A lifecycle without human approvals: a deferred call is refused, naming its SDK signal."""
    from agentfsm.errors import IllegalTransitionError
    from agentfsm.fsm.default import DEFAULT_TABLE
    from agentfsm.reducers.reduce import Reducer
    from agentfsm.stores import StoreOptions

    no_approvals = DEFAULT_TABLE.derive(
        name="no_approvals",
        remove=[
            ("running", "approval.requested", "waiting_approval"),
            ("waiting_tool", "approval.requested", "waiting_tool"),
            ("waiting_tool", "approval.requested", "waiting_approval"),
        ],
    )
    store = MemoryEventStore(options=StoreOptions(reducer=Reducer(no_approvals)))
    before = len(app.CALLS)
    with pytest.raises(IllegalTransitionError) as err:
        run(AgentIterRun(store, "r1").run(make_agent(*REFUND), "refund O-1"))
    assert err.value.signal == "pydantic-ai DeferredToolRequests"
    assert str(err.value).startswith(
        "run 'r1' is 'running': event 'approval.requested' (sequence 4) is not allowed; "
    )
    assert app.CALLS[before:] == []  # the deferred refund never ran
    record = store.load("r1")
    assert (record.status, record.error.kind) == ("failed", "illegal_transition")


def test_a_resumed_parent_counts_what_its_subagents_spent_before() -> None:
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
            done = await run_.subagent(ctx.tool_call_id).run(child, question)
            return str(done.final_output)

        return agent

    first = AgentIterRun(store, "r1")
    paused = run(first.run(parent_agent(first), "weather?", limits=Limits(max_tokens=45)))
    assert (paused.status, paused.record.usage.input_tokens) == ("waiting_approval", 20)
    approve(store, "r1", "call_r1", approver="alice")
    again = AgentIterRun(store, "r1")
    done = run(again.resume(parent_agent(again)))
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "root 'r1' (2 runs): spent 45 + reserved 0 leaves nothing of 45 tokens",
    )
    assert done.record.actions["call_r1"].status == "succeeded"


def test_a_corrupt_kept_history_is_refused_saying_so(tmp_path: Path) -> None:
    """Bytes that are not a message history: SavedStateError naming the error; nothing runs."""
    store, _, _ = _pause(tmp_path)
    kept = store.attachment("r1", "pydantic-ai/messages")
    assert kept is not None
    store.put_attachment("r1", kept.name, b'[{"kind": "nonsense"}]', version=kept.version)
    approve(store, "r1", "call_r1", approver="alice")
    before = len(app.CALLS)
    with pytest.raises(SavedStateError) as err:
        run(AgentIterRun(store, "r1").resume(make_agent(*REFUND)))
    assert err.value.reason.startswith("it does not load: ValidationError: ")
    assert app.CALLS[before:] == []


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
    done = run(AgentIterRun(store, "r1", on_event=events.append).run(agent, "weather?"))
    assert (done.status, done.final_output) == ("completed", "Sunny in Paris.")
    deltas = [e.delta.content_delta for e in events if isinstance(e, PartDeltaEvent)]
    assert "".join(deltas) == "in Paris."  # the first piece starts the part, the rest are deltas
    results = [e.part.content for e in events if isinstance(e, FunctionToolResultEvent)]
    assert results == ["sunny in Paris"]
    assert validates(store, "r1", tmp_path) == 0
