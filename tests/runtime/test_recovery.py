"""Crashes, cancels, pauses and other writers: the Runner continues from the store."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm.events import Limits, Usage, step_clock
from agentfsm.runtime import (
    Agent,
    Decision,
    ProposedCall,
    Runner,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    approve,
    cancel,
    in_flight,
    pause,
    resume,
    subagent,
    submit,
    unknown_outcomes,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage, RunNotFoundError

from .helpers import Calls, Crash, Sleeps, order_script, order_tools, runner_for, types, validate


def _crashing(calls: Calls, tool: str, **flags: Any) -> Tool:
    """A tool that acts, then the process dies before its result is recorded."""

    def fn(ctx: ToolContext) -> Any:
        calls.record(ctx)
        if calls.effects[ctx.idempotency_key] == 1:
            raise Crash
        return {"done": ctx.idempotency_key}

    return Tool(tool, fn, **flags)


class TestCrashRecovery:
    """A call started and never reported is re-run only if that is safe."""

    def test_an_idempotent_call_is_reexecuted_with_the_same_key(self) -> None:
        """Resume calls it again (same key, same attempt) and records its result."""
        calls = Calls()
        store = MemoryEventStore()
        tool = _crashing(calls, "charge", idempotent=True)
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("charge", {"amount": 5})), Decision.answer("ok")]
        )
        with pytest.raises(Crash):
            runner_for(store, model, [tool]).run("r1")
        record = store.load("r1")
        assert [
            (i.action.action_id, i.plan) for i in in_flight(record, Agent("a", model, [tool]).tools)
        ] == [("t1.1", "reexecute")]
        result = runner_for(store, model, [tool]).drive("r1")
        assert result.status == "completed"
        assert calls.log == [("charge", "r1:t1.1", 1), ("charge", "r1:t1.1", 1)]
        assert types(store, "r1")[3:7] == [
            "tool.requested",
            "tool.started",
            "tool.completed",
            "model.started",
        ]
        assert validate(store, ["r1"]).ok

    def test_a_call_with_side_effects_is_never_repeated_but_surfaced(self) -> None:
        """Not idempotent: `tool.outcome_unknown`, shown to the model and in the result."""
        calls = Calls()
        store = MemoryEventStore()
        tool = _crashing(calls, "send_email")
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("send_email", {"to": "a@b"})),
                lambda ctx: Decision.answer(f"unsure: {ctx.results[0].status}"),
            ]
        )
        with pytest.raises(Crash):
            runner_for(store, model, [tool]).run("r1")
        result = runner_for(store, model, [tool]).drive("r1")
        assert calls.effects["r1:t1.1"] == 1
        assert result.final_output == "unsure: unknown"
        assert [(a.action_id, a.reason) for a in result.unknown_outcomes] == [
            (
                "t1.1",
                "the worker stopped while attempt 1 was in flight; 'send_email' has side "
                "effects and is not idempotent, so it was not run again",
            )
        ]
        assert unknown_outcomes(result.record) == result.unknown_outcomes

    def test_a_model_call_cut_off_by_a_crash_is_made_again_in_the_same_turn(self) -> None:
        """model.started without model.completed: ask again, no second `model.started`."""
        store = MemoryEventStore()
        answers: list[Any] = [Crash(), Decision.answer("second try")]
        model = ScriptedModel(answers)
        with pytest.raises(Crash):
            runner_for(store, model, []).run("r1")
        result = runner_for(store, model, []).drive("r1")
        assert (result.status, result.final_output, result.record.turn) == (
            "completed",
            "second try",
            1,
        )
        assert types(store, "r1") == [
            "run.started",
            "model.started",
            "model.completed",
            "run.completed",
        ]

    def test_drive_of_an_unknown_run_says_so(self) -> None:
        """`RunNotFoundError` names the run."""
        with pytest.raises(RunNotFoundError) as info:
            runner_for(MemoryEventStore(), order_script(), []).drive("nope")
        assert info.value.run_id == "nope"


class TestCancel:
    """Two-phase cancel: requested from anywhere, noticed at the next append."""

    def test_a_cancel_from_another_handle_stops_the_run_after_the_call_in_flight(self) -> None:
        """The in-flight result is still recorded; nothing new starts; `run.cancelled`."""
        storage = MemoryStorage()
        calls = Calls()

        def slow(ctx: ToolContext) -> Any:
            calls.record(ctx)
            # Another process asks for the cancel while this call runs.
            cancel(MemoryEventStore(storage), ctx.run_id, reason="user left", requested_by="ui")
            return "looked up"

        store = MemoryEventStore(storage)
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("lookup"), ProposedCall("lookup2")),
                Decision.answer(""),
            ]
        )
        tools = [
            Tool("lookup", slow, side_effects=False),
            Tool("lookup2", slow, side_effects=False),
        ]
        result = runner_for(store, model, tools).run("r1")
        assert result.status == "cancelled"
        assert len(calls.log) == 1
        assert types(store, "r1")[3:] == [
            "tool.requested",
            "tool.requested",
            "tool.started",
            "run.cancel_requested",
            "tool.completed",
            "tool.failed",
            "run.cancelled",
        ]
        record = result.record
        assert record.actions["t1.1"].result == "looked up"
        assert record.actions["t1.2"].error is not None
        assert record.actions["t1.2"].error.kind == "cancelled"
        assert (record.cancel_reason, record.cancel_requested_by) == ("user left", "ui")
        assert validate(store, ["r1"]).ok

    def test_a_cancelled_run_with_a_dead_worker_is_settled_by_drive(self) -> None:
        """Started call with no outcome: `outcome_unknown` (never re-run during a cancel)."""
        calls = Calls()
        store = MemoryEventStore()
        tool = _crashing(calls, "charge", idempotent=True)
        model = ScriptedModel([Decision.call_tools(ProposedCall("charge"))])
        with pytest.raises(Crash):
            runner_for(store, model, [tool]).run("r1")
        cancel(store, "r1")
        result = runner_for(store, model, [tool]).drive("r1")
        assert result.status == "cancelled"
        assert len(calls.log) == 1
        assert result.unknown_outcomes[0].reason == "the run was cancelled while it was in flight"

    def test_cancelling_twice_is_one_request(self) -> None:
        """The second `cancel` appends nothing."""
        store = MemoryEventStore()
        submit(store, "r1")
        cancel(store, "r1", reason="first")
        record = cancel(store, "r1", reason="second")
        assert (record.version, record.cancel_reason) == (2, "first")


class TestPause:
    """Pause between steps; resume goes on."""

    def test_a_run_paused_between_steps_waits_and_drive_resumes_it(self) -> None:
        """A paused run stays paused; `Runner.drive` appends `run.resumed` and drives it."""
        store = MemoryEventStore()
        model = order_script()
        runner = runner_for(store, model, order_tools(Calls()))
        submit(store, "r1")
        pause(store, "r1", "waiting for the customer")
        assert store.load("r1").status == "paused"
        assert runner.drive("r1").status == "completed"
        assert types(store, "r1")[:4] == [
            "run.started",
            "run.paused",
            "run.resumed",
            "model.started",
        ]

    def test_resume_only_makes_the_run_runnable(self) -> None:
        """`resume(store, ...)` appends `run.resumed` and returns a runnable run."""
        store = MemoryEventStore()
        submit(store, "r1")
        pause(store, "r1", "callback")
        assert resume(store, "r1").status == "running"
        assert resume(store, "r1").version == 3  # already running: nothing appended


class TestOtherWriters:
    """Optimistic concurrency: a second driver stops this one instead of forking the run."""

    def test_a_run_driven_by_another_worker_is_given_up(self) -> None:
        """Another worker recorded the call's outcome: this runner stops, superseded."""
        storage = MemoryStorage()

        def contested(ctx: ToolContext) -> Any:
            other = MemoryEventStore(storage)
            record = other.load(ctx.run_id)
            from agentfsm.events import make_event

            other.append(
                ctx.run_id,
                [
                    make_event(
                        "tool.outcome_unknown",
                        run_id=ctx.run_id,
                        sequence=record.version + 1,
                        occurred_at="2026-09-01T12:00:00+00:00",
                        action_id=ctx.action_id,
                        reason="taken over",
                    )
                ],
                record.version,
            )
            return "mine"

        store = MemoryEventStore(storage)
        model = ScriptedModel([Decision.call_tools(ProposedCall("x")), Decision.answer("")])
        result = runner_for(store, model, [Tool("x", contested)]).run("r1")
        assert result.superseded
        assert result.record.actions["t1.1"].status == "unknown"
        assert model.calls == 1


class TestSubagents:
    """A child run behind a tool call, on the root's budget."""

    def test_a_subagent_runs_a_child_run_whose_answer_is_the_calls_result(self) -> None:
        """Child `r1/t1.1` runs its own turns; its final output comes back as the result."""
        store = MemoryEventStore()
        child_model = ScriptedModel(
            [
                lambda ctx: Decision.answer(
                    f"researched: {ctx.objective}", usage=Usage(input_tokens=50)
                )
            ]
        )
        research = subagent("research", Agent("researcher", child_model))
        parent = ScriptedModel(
            [
                Decision.call_tools(
                    ProposedCall("research", {"task": "find the order"}),
                    usage=Usage(input_tokens=20),
                ),
                lambda ctx: Decision.answer(ctx.results[0].result, usage=Usage(input_tokens=30)),
            ]
        )
        runner = Runner(store, Agent("lead", parent, [research]), clock=step_clock())
        result = runner.run("r1", limits=Limits(max_tokens=10_000))
        assert result.final_output == "researched: find the order"
        child = store.load("r1/t1.1")
        assert (child.status, child.turn, child.current_agent) == ("completed", 1, "researcher")
        assert validate(store, ["r1", "r1/t1.1"]).ok

    def test_a_child_that_overspends_the_root_budget_is_stopped(self) -> None:
        """The child's tokens count against the root's `max_tokens`, and stop them both; the
        child's second call reserves as much as its first, so it stops before overspending."""
        store = MemoryEventStore()
        spend = Usage(input_tokens=600)
        child_model = ScriptedModel(
            [Decision.call_tools(ProposedCall("noop"), usage=spend)], repeat_last=True
        )
        noop = Tool("noop", lambda ctx: None, side_effects=False)
        research = subagent("research", Agent("researcher", child_model, [noop]))
        parent = ScriptedModel(
            [
                Decision.call_tools(
                    ProposedCall("research", {"task": "dig"}), usage=Usage(input_tokens=300)
                ),
                lambda ctx: Decision.answer(
                    ctx.results[0].error.kind if ctx.results[0].error else ""
                ),
            ]
        )
        runner = Runner(store, Agent("lead", parent, [research]), clock=step_clock())
        result = runner.run("r1", limits=Limits(max_tokens=1000))
        child = store.load("r1/t1.1")
        assert (child.status, child.stop_reason) == ("terminated", "budget")
        assert child.stop_detail == "root 'r1' (2 runs): spent 900 + reserved 600 > 1,000 tokens"
        error = result.record.actions["t1.1"].error
        assert error is not None
        assert error.message == f"subagent run 'r1/t1.1' stopped by 'budget': {child.stop_detail}"
        # The tree is overspent, so the parent's next model call is refused too.
        assert (result.status, result.stop_reason) == ("terminated", "budget")

    @staticmethod
    def _waiting_tree(store: Any, calls: Calls) -> Runner:
        """r1 waits on its subagent r1/t1.1, which waits for approval of `create_ticket`."""
        child_model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("create_ticket", {"order_id": "O-1"})),
                Decision.answer("ticket open"),
            ]
        )
        child_agent = Agent(
            "clerk", child_model, order_tools(calls), ToolPolicy(approval={"create_ticket"})
        )
        parent = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("delegate", {"task": "open a ticket"})),
                lambda ctx: Decision.answer(ctx.results[0].result),
            ]
        )
        return Runner(
            store, Agent("lead", parent, [subagent("delegate", child_agent)]), clock=step_clock()
        )

    def test_a_parent_cancelled_while_its_child_waits_ends_the_child_too(self) -> None:
        """Cancelled, the parent settles its call as unknown and cancels the waiting child:
        nothing is left waiting for a decision that no run would act on."""
        store, calls = MemoryEventStore(), Calls()
        runner = self._waiting_tree(store, calls)
        assert runner.run("r1").children["r1/t1.1"].status == "waiting_approval"
        cancel(store, "r1", reason="the customer left")
        done = runner.drive("r1")
        child = store.load("r1/t1.1")
        assert (done.status, child.status) == ("cancelled", "cancelled")
        assert child.cancel_reason == "the run 'r1' that called it ended (cancelled)"
        assert child.actions["t1.1"].status == "rejected"  # it never ran
        assert calls.effects == {}
        assert validate(store, ["r1", "r1/t1.1"]).ok

    def test_a_child_waiting_for_approval_keeps_the_parents_call_in_flight(self) -> None:
        """The parent returns with the child waiting; after approval, resuming the parent
        resumes the child and finishes both."""
        store, calls = MemoryEventStore(), Calls()
        runner = self._waiting_tree(store, calls)
        first = runner.run("r1")
        assert first.status == "waiting_tool"
        assert first.children["r1/t1.1"].status == "waiting_approval"
        approve(store, "r1/t1.1", "t1.1", "alice")
        done = runner.drive("r1")
        assert (done.status, done.final_output) == ("completed", "ticket open")
        assert calls.effects == {"r1/t1.1:t1.1": 1}
        assert validate(store, ["r1", "r1/t1.1"]).ok


def test_sleeps_are_injected() -> None:
    """The helper's sleep records without waiting (used by every retry test)."""
    sleeps = Sleeps()
    sleeps(3.0)
    assert sleeps.delays == [3.0]
