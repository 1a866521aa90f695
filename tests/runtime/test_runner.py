"""The sync Runner: durable steps, policy, validation feedback, guards, retries, handoffs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from structlog.testing import capture_logs

from agentfsm.events import Limits, Usage, step_clock
from agentfsm.guards import LoopDetector, MaxTurns
from agentfsm.runtime import (
    Agent,
    Decision,
    ModelError,
    ProposedCall,
    Runner,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolError,
    ToolPolicy,
    ToolRegistry,
    approve,
    deny,
    needs_approval,
    reject,
)
from agentfsm.stores import MemoryEventStore

from .helpers import Calls, Sleeps, order_script, order_tools, runner_for, types, validate

ORDER_PATH = [
    "run.started",
    "model.started",
    "model.completed",
    "tool.requested",
    "tool.started",
    "tool.completed",
    "model.started",
    "model.completed",
    "tool.requested",
    "tool.started",
    "tool.completed",
    "model.started",
    "model.completed",
    "run.completed",
]


class TestOrderRun:
    """The order/ticket run end to end."""

    def test_runs_the_order_ticket_run_to_completion(self) -> None:
        """Lookup, ticket, answer: every step is an event, in table order."""
        store, calls = MemoryEventStore(), Calls()
        result = runner_for(store, order_script(), order_tools(calls)).run(
            "r1", "Open a ticket for O-1001", limits=Limits(max_turns=5)
        )
        assert result.status == "completed"
        assert result.final_output == "Opened ticket T-9001."
        assert types(store, "r1") == ORDER_PATH
        assert calls.log == [("get_order", "r1:t1.1", 1), ("create_ticket", "r1:t2.1", 1)]
        assert result.record.facts == {
            "get_order": {"order_id": "O-1001", "payment": "paid", "shipment": "not_shipped"},
            "create_ticket": {"ticket_id": "T-9001", "order_id": "O-1001"},
        }
        assert validate(store, ["r1"]).ok

    def test_each_transition_is_logged_with_its_states(self) -> None:
        """`transition.applied` names run, sequence, event, from and to, and passed guards."""
        store = MemoryEventStore()
        with capture_logs() as logs:
            runner_for(store, order_script(), order_tools(Calls())).run("r1")
        applied = [entry for entry in logs if entry["event"] == "transition.applied"]
        assert len(applied) == len(ORDER_PATH)
        assert applied[1] == {
            "event": "transition.applied",
            "log_level": "info",
            "run_id": "r1",
            "sequence": 2,
            "event_type": "model.started",
            "from_state": "running",
            "to_state": "running",
            "guard_verdict": "passed",
        }
        assert applied[3]["from_state"] == "running"
        assert applied[3]["to_state"] == "waiting_tool"

    def test_the_model_sees_the_previous_batch_and_the_time_left(self) -> None:
        """The context carries turn, results of the last batch and the remaining seconds."""
        store = MemoryEventStore()
        model = order_script()
        limits = Limits(deadline="2026-09-01T11:00:00+00:00")
        runner_for(store, model, order_tools(Calls())).run("r1", "goal", limits=limits)
        first, second = model.contexts[0], model.contexts[1]
        assert (first.turn, first.results, first.objective, first.agent) == (
            1,
            (),
            "goal",
            "support",
        )
        assert [a.tool for a in second.results] == ["get_order"]
        assert second.results[0].status == "succeeded"
        deadline = datetime(2026, 9, 1, 11, 0, tzinfo=UTC)
        assert first.remaining == (deadline - first.now).total_seconds() > 0


class TestValidationFeedback:
    """Calls that cannot run are fed back to the model, never a crash."""

    def test_invalid_arguments_become_a_tool_failure_the_model_sees(self) -> None:
        """A pydantic validation error: tool.requested, then tool.failed `invalid_arguments`."""

        class OrderArgs(BaseModel):
            order_id: str

        calls = Calls()
        tool = Tool("get_order", lambda ctx: calls.record(ctx), args=OrderArgs)
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("get_order", {"order": 1})),
                Decision.answer("gave up"),
            ]
        )
        store = MemoryEventStore()
        result = runner_for(store, model, [tool]).run("r1")
        action = result.record.actions["t1.1"]
        assert action.status == "failed"
        assert action.error is not None
        assert action.error.model_dump() == {
            "kind": "invalid_arguments",
            "message": "arguments for 'get_order' are invalid: at order_id: Field required",
            "retryable": False,
        }
        assert calls.log == []
        assert model.contexts[1].results == (action,)
        assert types(store, "r1")[3:5] == ["tool.requested", "tool.failed"]
        assert result.status == "completed"

    def test_a_json_schema_validates_arguments(self) -> None:
        """A JSON Schema tool names the path and the schema's message."""
        schema = {
            "type": "object",
            "properties": {"order_id": {"type": "integer"}},
            "required": ["order_id"],
        }
        tool = Tool("get_order", lambda ctx: {"ok": True}, args=schema)
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("get_order", {"order_id": "x"})), Decision.answer("")]
        )
        result = runner_for(MemoryEventStore(), model, [tool]).run("r1")
        error = result.record.actions["t1.1"].error
        assert error is not None
        assert (
            error.message
            == "arguments for 'get_order' are invalid: at order_id: 'x' is not of type 'integer'"
        )

    def test_an_unknown_tool_is_fed_back_with_the_known_names(self) -> None:
        """`unknown_tool`, not retryable, naming the tools there are."""
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("refund", {"amount": 3})), Decision.answer("ok")]
        )
        result = runner_for(MemoryEventStore(), model, order_tools(Calls())).run("r1")
        error = result.record.actions["t1.1"].error
        assert error is not None
        assert error.model_dump() == {
            "kind": "unknown_tool",
            "message": "there is no tool 'refund'; tools: 'create_ticket', 'get_order'",
            "retryable": False,
        }

    def test_a_tool_exception_and_a_tool_error_are_recorded_as_failures(self) -> None:
        """`ToolError` keeps its kind; any other exception is kind `exception`."""

        def broken(ctx: ToolContext) -> Any:
            raise ValueError("no such order")

        def refusing(ctx: ToolContext) -> Any:
            raise ToolError("order is locked", kind="locked")

        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("broken"), ProposedCall("refusing")),
                Decision.answer(""),
            ]
        )
        tools = [Tool("broken", broken), Tool("refusing", refusing)]
        result = runner_for(MemoryEventStore(), model, tools).run("r1")
        errors = {
            a.action_id: a.error.model_dump() for a in result.record.actions.values() if a.error
        }
        assert errors == {
            "t1.1": {
                "kind": "exception",
                "message": "ValueError: no such order",
                "retryable": False,
            },
            "t1.2": {"kind": "locked", "message": "order is locked", "retryable": False},
        }

    def test_a_result_that_is_not_json_is_a_failure(self) -> None:
        """A tool returning a set is recorded as `invalid_result`."""
        model = ScriptedModel([Decision.call_tools(ProposedCall("odd")), Decision.answer("")])
        result = runner_for(MemoryEventStore(), model, [Tool("odd", lambda ctx: {1, 2})]).run("r1")
        error = result.record.actions["t1.1"].error
        assert error is not None
        assert (error.kind, error.message) == (
            "invalid_result",
            "the tool returned a value that is not JSON: set",
        )


class TestPolicy:
    """allow / deny / needs_approval, and the re-check before an approved call runs."""

    def test_a_denied_call_is_rejected_by_the_policy_and_fed_back(self) -> None:
        """approval.requested then approval.rejected with approver `policy` and the reason."""
        calls = Calls()
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("create_ticket", {"order_id": "O-1"})),
                Decision.answer("no"),
            ]
        )
        store = MemoryEventStore()
        policy = ToolPolicy(denied={"create_ticket": "tickets are closed today"})
        result = runner_for(store, model, order_tools(calls), policy=policy).run("r1")
        assert types(store, "r1")[3:5] == ["approval.requested", "approval.rejected"]
        action = result.record.actions["t1.1"]
        assert (action.status, action.approver, action.reason) == (
            "rejected",
            "policy",
            "tickets are closed today",
        )
        assert model.contexts[1].results == (action,)
        assert calls.log == []

    def test_approval_pauses_and_drive_runs_exactly_the_approved_call(self) -> None:
        """The run returns `waiting_approval`; after `approve`, resume runs that call, with no
        model call in between."""
        calls = Calls()
        model = order_script()
        store = MemoryEventStore()
        policy = ToolPolicy(approval={"create_ticket"})
        runner = runner_for(store, model, order_tools(calls), policy=policy)
        waiting = runner.run("r1")
        assert waiting.status == "waiting_approval"
        assert [a.action_id for a in waiting.pending_approvals] == ["t2.1"]
        assert model.calls == 2
        approve(store, "r1", "t2.1", "alice@support")
        done = runner.drive("r1")
        assert done.status == "completed"
        assert model.calls == 3
        assert types(store, "r1")[8:13] == [
            "approval.requested",
            "approval.accepted",
            "tool.requested",
            "tool.started",
            "tool.completed",
        ]
        assert done.record.actions["t2.1"].approver == "alice@support"
        assert validate(store, ["r1"]).ok

    def test_a_rejection_is_the_calls_result_for_the_model(self) -> None:
        """After `reject`, resume asks the model with the rejected call among the results."""
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("create_ticket", {"order_id": "O-1"})),
                lambda ctx: Decision.answer(f"not done: {ctx.results[0].reason}"),
            ]
        )
        store = MemoryEventStore()
        policy = ToolPolicy(approval={"create_ticket"})
        runner = runner_for(store, model, order_tools(Calls()), policy=policy)
        runner.run("r1")
        reject(store, "r1", "t1.1", "bob", "duplicate ticket")
        assert runner.drive("r1").final_output == "not done: duplicate ticket"

    def test_an_approved_call_the_policy_now_denies_does_not_run(self) -> None:
        """The re-check refuses it: tool.requested then tool.failed `policy_denied`."""
        state = {"frozen": False}

        def policy(action: Any, record: Any) -> Any:
            if state["frozen"]:
                return deny("the account was frozen")
            return needs_approval()

        calls = Calls()
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("create_ticket", {"order_id": "O-1"})),
                Decision.answer(""),
            ]
        )
        store = MemoryEventStore()
        runner = runner_for(store, model, order_tools(calls), policy=policy)
        runner.run("r1")
        approve(store, "r1", "t1.1", "alice")
        state["frozen"] = True
        result = runner.drive("r1")
        error = result.record.actions["t1.1"].error
        assert error is not None
        assert (error.kind, error.message) == (
            "policy_denied",
            "approved, but the policy refused it before it ran: the account was frozen",
        )
        assert calls.log == []

    def test_an_expired_approval_is_asked_again_and_the_call_runs_once_approved(self) -> None:
        """An approval that lapsed before the call ran: asked again, never run on the old one."""
        calls = Calls()
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("create_ticket", {"order_id": "O-1"})),
                Decision.answer("done"),
            ]
        )
        store = MemoryEventStore()
        policy = ToolPolicy(approval={"create_ticket"}, expires_in=timedelta(seconds=5))
        t0 = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
        now = [t0]
        runner = runner_for(store, model, order_tools(calls), policy=policy, clock=lambda: now[0])
        runner.run("r1")  # asks at t0, valid until t0 + 5 s
        approve(store, "r1", "t1.1", "alice", clock=lambda: t0 + timedelta(seconds=1))
        now[0] = t0 + timedelta(seconds=10)
        again = runner.drive("r1")  # the approval lapsed before the call ran
        assert (again.status, again.record.pending_approvals, calls.log) == (
            "waiting_approval",
            ("t1.1",),
            [],
        )
        action = again.record.actions["t1.1"]
        assert (action.approver, action.expires_at) == (None, "2026-09-01T12:00:15+00:00")
        assert types(store, "r1")[-3:] == [
            "approval.requested", "approval.accepted", "approval.requested",
        ]  # fmt: skip
        now[0] = t0 + timedelta(seconds=12)
        approve(store, "r1", "t1.1", "bob", clock=lambda: now[0])
        done = runner.drive("r1")
        assert (done.status, done.record.actions["t1.1"].approver) == ("completed", "bob")
        assert [tool for tool, *_ in calls.log] == ["create_ticket"]
        assert validate(store, ["r1"]).ok


class TestGuards:
    """A guard's refusal ends the run with `run.terminated`, keeping what was done."""

    def test_max_turns_terminates_and_keeps_the_partial_record(self) -> None:
        """The third model call is refused: terminated, `max_turns`, ledger kept."""
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}))], repeat_last=True
        )
        store = MemoryEventStore()
        with capture_logs() as logs:
            result = runner_for(store, model, order_tools(Calls())).run(
                "r1", limits=Limits(max_turns=2)
            )
        assert (result.status, result.stop_reason) == ("terminated", "max_turns")
        assert result.record.stop_detail == "2 of 2 turns used"
        assert len(result.record.actions) == 2
        assert model.calls == 2
        rejected = [e for e in logs if e["event"] == "guard.rejected"]
        assert rejected == [
            {
                "event": "guard.rejected",
                "log_level": "warning",
                "run_id": "r1",
                "sequence": 12,
                "event_type": "model.started",
                "from_state": "running",
                "guard": "max_turns",
                "stop_reason": "max_turns",
                "detail": "2 of 2 turns used",
            }
        ]

    def test_the_wrap_up_turn_asks_for_an_answer_within_the_limit(self) -> None:
        """With `wrap_up_turn`, the last allowed turn is flagged and its answer completes."""
        model = ScriptedModel(
            [
                lambda ctx: (
                    Decision.answer("summary")
                    if ctx.wrap_up
                    else Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}))
                )
            ],
            repeat_last=True,
        )
        config = RunnerConfig(wrap_up_turn=True)
        result = runner_for(MemoryEventStore(), model, order_tools(Calls()), config=config).run(
            "r1", limits=Limits(max_turns=3)
        )
        assert [c.wrap_up for c in model.contexts] == [False, False, True]
        assert (result.status, result.final_output, result.record.turn) == (
            "completed",
            "summary",
            3,
        )

    def test_tool_calls_on_the_wrap_up_turn_stop_the_run(self) -> None:
        """A model that ignores the wrap-up flag is stopped for `max_turns`, its calls not run."""
        calls = Calls()
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}))], repeat_last=True
        )
        config = RunnerConfig(wrap_up_turn=True)
        result = runner_for(
            MemoryEventStore(), model, order_tools(calls), guards=[MaxTurns(2)], config=config
        ).run("r1")
        assert (result.status, result.stop_reason) == ("terminated", "max_turns")
        assert result.record.stop_detail == (
            "turn 2 was the wrap-up turn, reserved for an answer, and the model called tools "
            "instead (1 calls not run)"
        )
        assert len(calls.log) == 1
        assert result.record.actions["t2.1"].status == "rejected"

    def test_a_runaway_loop_is_stopped_by_the_loop_detector(self) -> None:
        """The same call with nothing new observed: `loop_detected` before it runs again."""
        calls = Calls()
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}))], repeat_last=True
        )
        result = runner_for(
            MemoryEventStore(), model, order_tools(calls), guards=[LoopDetector(threshold=3)]
        ).run("r1")
        assert (result.status, result.stop_reason) == ("terminated", "loop_detected")
        assert len(calls.log) == 3

    def test_a_budget_stops_the_next_model_call(self) -> None:
        """Usage adds up; the call that would overspend (with its reservation) is refused."""
        usage = Usage(input_tokens=400, output_tokens=100)
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1"}), usage=usage)],
            repeat_last=True,
        )
        config = RunnerConfig(reserve=Usage(input_tokens=300))
        result = runner_for(MemoryEventStore(), model, order_tools(Calls()), config=config).run(
            "r1", limits=Limits(max_tokens=1200)
        )
        assert (result.status, result.stop_reason) == ("terminated", "budget")
        assert result.record.stop_detail == "spent 1,000 + reserved 300 > 1,200 tokens"
        assert model.calls == 2


class TestRetries:
    """Retries only for retryable errors of tools safe to repeat, with backoff."""

    def _flaky(self, calls: Calls, failures: int, **tool: Any) -> Tool:
        def fn(ctx: ToolContext) -> Any:
            calls.record(ctx)
            if ctx.attempt <= failures:
                raise ToolError("service busy", kind="busy", retryable=True)
            return "ok"

        return Tool("lookup", fn, **tool)

    def test_a_retryable_failure_of_a_safe_tool_is_retried_with_backoff(self) -> None:
        """Same action and key, attempt + 1, after 0.5 s then 1 s of (injected) sleep."""
        calls, sleeps = Calls(), Sleeps()
        tool = self._flaky(calls, 2, side_effects=False, max_attempts=3)
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("lookup")), Decision.answer("done")]
        )
        store = MemoryEventStore()
        result = runner_for(store, model, [tool], sleep=sleeps).run("r1")
        assert calls.log == [
            ("lookup", "r1:t1.1", 1),
            ("lookup", "r1:t1.1", 2),
            ("lookup", "r1:t1.1", 3),
        ]
        assert sleeps.delays == [0.5, 1.0]
        assert result.record.actions["t1.1"].attempts == 3
        assert types(store, "r1")[3:10] == [
            "tool.requested",
            "tool.started",
            "tool.failed",
            "tool.started",
            "tool.failed",
            "tool.started",
            "tool.completed",
        ]
        assert validate(store, ["r1"]).ok

    def test_retries_stop_at_max_attempts(self) -> None:
        """After `max_attempts` the failure goes to the model."""
        calls = Calls()
        tool = self._flaky(calls, 5, idempotent=True, max_attempts=2)
        model = ScriptedModel([Decision.call_tools(ProposedCall("lookup")), Decision.answer("")])
        result = runner_for(MemoryEventStore(), model, [tool]).run("r1")
        assert len(calls.log) == 2
        assert result.record.actions["t1.1"].status == "failed"

    def test_a_tool_with_side_effects_is_never_retried(self) -> None:
        """Not idempotent: one attempt, whatever the error says."""
        calls = Calls()
        tool = self._flaky(calls, 1, max_attempts=3)
        model = ScriptedModel([Decision.call_tools(ProposedCall("lookup")), Decision.answer("")])
        runner_for(MemoryEventStore(), model, [tool]).run("r1")
        assert len(calls.log) == 1

    def test_a_retryable_model_error_is_retried_then_fails_the_run(self) -> None:
        """`ModelError(retryable=True)` up to `model_max_attempts`, then `run.failed`."""
        sleeps = Sleeps()
        model = ScriptedModel([ModelError("rate limited", retryable=True)], repeat_last=True)
        result = runner_for(MemoryEventStore(), model, [], sleep=sleeps).run("r1")
        assert model.calls == 3
        assert sleeps.delays == [0.5, 1.0]
        assert result.status == "failed"
        assert result.record.error is not None
        assert (
            result.record.error.message == "the model call failed after 3 attempt(s): rate limited"
        )


class TestHandoffs:
    """A handoff switches agents; turns carry on."""

    def test_a_handoff_moves_the_run_to_the_other_agent(self) -> None:
        """model.completed(handoff) and `handoff` are appended together; billing answers."""
        triage = ScriptedModel([Decision.hand_off("billing", output="to billing")])
        billing = ScriptedModel([lambda ctx: Decision.answer(f"billing on turn {ctx.turn}")])
        store = MemoryEventStore()
        runner = Runner(
            store, [Agent("triage", triage), Agent("billing", billing)], clock=step_clock()
        )
        result = runner.run("r1")
        assert (result.final_output, result.record.current_agent) == (
            "billing on turn 2",
            "billing",
        )
        assert types(store, "r1")[2:4] == ["model.completed", "handoff"]

    def test_a_handoff_to_an_unknown_agent_fails_the_run(self) -> None:
        """`unknown_agent`, naming the agents there are."""
        model = ScriptedModel([Decision.hand_off("legal")])
        result = Runner(MemoryEventStore(), Agent("triage", model), clock=step_clock()).run("r1")
        assert result.record.error is not None
        assert (
            result.record.error.message == "the model handed off to 'legal', unknown here: 'triage'"
        )


def test_a_final_answer_the_acceptance_check_refuses_fails_the_run() -> None:
    """`accept` returning a reason ends the run `failed` (kind `output_rejected`)."""
    model = ScriptedModel([Decision.answer("")])
    config = RunnerConfig(accept=lambda output, record: None if output else "empty answer")
    result = runner_for(MemoryEventStore(), model, [], config=config).run("r1")
    assert result.record.error is not None
    assert (result.status, result.record.error.kind, result.record.error.message) == (
        "failed",
        "output_rejected",
        "empty answer",
    )


@pytest.mark.parametrize("with_id", [True, False])
def test_the_models_call_ids_are_kept_when_unused(with_id: bool) -> None:
    """A model's own call id becomes the action id; a missing one is generated."""
    proposed = ProposedCall("get_order", {"order_id": "O-1"})
    if with_id:
        proposed = type(proposed)(proposed.tool, proposed.arguments, "call_abc")
    model = ScriptedModel([Decision.call_tools(proposed), Decision.answer("")])
    result = runner_for(MemoryEventStore(), model, order_tools(Calls())).run("r1")
    assert list(result.record.actions) == (["call_abc"] if with_id else ["t1.1"])


def test_a_used_call_id_is_replaced_by_a_fresh_one() -> None:
    """An id the run (or the batch) already has is replaced: by the generated one, else by
    the generated one with a suffix."""

    def with_id(order: str, call_id: str = "") -> Any:
        proposed = ProposedCall("get_order", {"order_id": order})
        return type(proposed)(proposed.tool, proposed.arguments, call_id)

    model = ScriptedModel(
        [
            Decision.call_tools(with_id("O-1", "t2.1"), with_id("O-2", "t2.1")),
            Decision.call_tools(with_id("O-3"), with_id("O-4", "call_x")),
            Decision.answer("done"),
        ]
    )
    result = runner_for(MemoryEventStore(), model, order_tools(Calls())).run("r1")
    assert result.status == "completed"
    assert list(result.record.actions) == ["t2.1", "t1.2", "t2.1.2", "call_x"]


def test_a_polling_tool_may_repeat_while_its_result_changes() -> None:
    """With the registry's poll limits, a status that moves is progress, not a loop."""
    states = iter(["queued", "packing", "shipped", "shipped", "shipped", "shipped"])
    tool = Tool("status", lambda ctx: next(states), side_effects=False, polling=True, poll_limit=2)
    model = ScriptedModel(
        [Decision.call_tools(ProposedCall("status", {"order_id": "O-1"}))], repeat_last=True
    )
    runner = runner_for(
        MemoryEventStore(),
        model,
        [tool],
        guards=[LoopDetector(polling=ToolRegistry([tool]).polling)],
    )
    result = runner.run("r1", limits=Limits(max_turns=20))
    assert (result.status, result.stop_reason) == ("terminated", "loop_detected")
    assert [a.result for a in result.record.actions.values() if a.status == "succeeded"] == [
        "queued",
        "packing",
        "shipped",
        "shipped",
        "shipped",
    ]
    assert (
        result.record.stop_detail
        == "'status' polled 3 times with an unchanged result (poll limit 2)"
    )


@pytest.mark.parametrize(
    ("side_effects", "status"), [(True, "unknown"), (False, "failed")], ids=["effects", "pure"]
)
def test_a_sync_call_past_its_timeout_is_unknown_or_a_retryable_failure(
    side_effects: bool, status: str
) -> None:
    """The sync Runner enforces `timeout` too: it stops waiting, the run records why and goes on."""
    release = threading.Event()

    def stuck(ctx: ToolContext) -> str:
        release.wait()  # never returns before the runner gives up
        return "too late"

    tool = Tool("stuck", stuck, side_effects=side_effects, timeout=0.02)
    model = ScriptedModel([Decision.call_tools(ProposedCall("stuck")), Decision.answer("gave up")])
    try:
        result = runner_for(MemoryEventStore(), model, [tool]).run("r1")
    finally:
        release.set()
    action = result.record.actions["t1.1"]
    detail = action.reason if side_effects else action.error and action.error.message
    assert (result.status, action.status, detail) == (
        "completed",
        status,
        "no answer within 0.02 s",
    )
    if not side_effects:
        assert action.error is not None
        assert action.error.retryable


def test_a_timed_call_that_raises_is_a_failure_as_without_a_timeout() -> None:
    """On its worker thread a tool's exception still reaches the run as `tool.failed`."""

    def broken(ctx: ToolContext) -> str:
        raise ValueError("no such order")

    tool = Tool("broken", broken, timeout=5.0)
    model = ScriptedModel([Decision.call_tools(ProposedCall("broken")), Decision.answer("sorry")])
    result = runner_for(MemoryEventStore(), model, [tool]).run("r1")
    error = result.record.actions["t1.1"].error
    assert error is not None
    assert (error.kind, error.message) == ("exception", "ValueError: no such order")


@pytest.mark.parametrize("clock", [datetime.now, lambda: "2026-09-01T10:00:00Z"])
def test_a_clock_without_a_timezone_is_refused_by_name_before_anything_is_stored(
    clock: Any,
) -> None:
    """`datetime.now` (naive) is the clock a new user passes first: the Runner says what
    its clock must return, and the store is left as it was."""
    store = MemoryEventStore()
    runner = runner_for(store, order_script(), order_tools(Calls()), clock=clock)
    with pytest.raises(TypeError, match="the Runner's clock must return aware datetimes"):
        runner.run("r1")
    assert store.runs() == []


def test_driving_with_a_clock_without_a_timezone_is_refused_by_name() -> None:
    """A run started right and resumed by a process whose clock is naive: the same
    sentence, and nothing more is appended."""
    store = MemoryEventStore()
    waiting = runner_for(store, order_script(), order_tools(Calls()), policy=_ask).run("r1")
    assert waiting.status == "waiting_approval"
    before = store.run_info("r1").version
    naive = runner_for(store, order_script(), order_tools(Calls()), clock=datetime.now)
    with pytest.raises(TypeError, match="the Runner's clock must return aware datetimes"):
        naive.drive("r1")
    assert store.run_info("r1").version == before


def _ask(action: Any, record: Any) -> Any:
    return needs_approval()
