"""Both runners refuse a model decision over the cap on calls, tell the model why, and go on.

A decision of more calls than `max_calls_per_decision` (64 unless told otherwise) is recorded
as `refused`: no call of it is requested, nothing waits for approval, its usage counts, the
log holds a summary of a few hundred bytes however many calls there were, and the model's
next turn reads the refusal (`ModelContext.refusal`).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.events import Limits, dump_event
from agentfsm.fsm import DEFAULT_TABLE
from agentfsm.guards import GuardContext, MaxCallsPerDecision, Verdict, attach_guard
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer
from agentfsm.runtime import (
    Decision,
    ModelContext,
    ProposedCall,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    cancel,
)
from agentfsm.stores import MemoryEventStore, StoreOptions

from .helpers import RUNNERS, drive_r1, types

#: What a cap of 64 tells a model that proposed 1,000 calls.
OVER_64 = (
    "1,000 calls proposed in one decision; at most 64 are allowed: none of them ran, "
    "propose at most 64 at a time"
)
USAGE = {"input_tokens": 10, "output_tokens": 5}


def many(n: int, tool: str = "refund") -> Decision:
    """A decision of `n` calls to `tool`."""
    return Decision.call_tools(
        *(ProposedCall(tool, {"order_id": f"O-{i}"}) for i in range(n)), usage=USAGE
    )


def tools(ran: list[str]) -> list[Tool]:
    """`refund` (the policy below asks a person first) and `lookup` (free)."""

    def act(ctx: ToolContext) -> str:
        ran.append(f"{ctx.tool} {ctx.args['order_id']}")
        return "done"

    return [Tool("refund", act), Tool("lookup", act)]


#: A person approves each refund.
REFUNDS_NEED_APPROVAL = ToolPolicy(approval={"refund"})


def log_bytes(store: MemoryEventStore) -> int:
    """The run's log as JSON Lines, in bytes."""
    return sum(len(dump_event(e).encode()) + 1 for e in store.events("r1"))


@RUNNERS
class TestRefused:
    """An answer over the cap is a refused decision the model sees; the run completes."""

    def test_a_thousand_calls_are_refused_and_the_model_is_told_why(self, runner: str) -> None:
        """1,000 refunds needing approval: none is requested or put to a person; the log stays
        small; the next turn reads the refusal and answers; the run completes."""
        ran: list[str] = []
        model = ScriptedModel(
            [many(1000), Decision.answer("Refunding in smaller batches.", usage=USAGE)]
        )
        result, store = drive_r1(runner, model, tools(ran), policy=REFUNDS_NEED_APPROVAL)
        assert (result.status, result.final_output) == (
            "completed",
            "Refunding in smaller batches.",
        )
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed",
            "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        refused = list(store.events("r1"))[2].model_dump(mode="json", exclude_none=True)
        assert {k: refused[k] for k in ("decision", "usage", "refusal")} == {
            "decision": "refused",
            "usage": {"input_tokens": 10, "output_tokens": 5, "cost": 0.0},
            "refusal": {
                "kind": "max_calls_per_decision",
                "message": OVER_64,
                "proposed": {"decision": "tool_calls", "calls": 1000, "tools": {"refund": 1000}},
            },
        }
        second = model.contexts[1]
        assert second.refusal is not None
        assert (second.refusal.message, second.results) == (OVER_64, ())
        assert model.contexts[0].refusal is None
        assert (ran, result.pending_approvals, dict(result.record.actions)) == ([], (), {})
        assert (result.record.usage.input_tokens, result.record.last_refusal) == (20, None)
        assert next(iter(store.events("r1"))).limits == Limits(
            max_turns=100, max_calls_per_decision=64
        )
        assert log_bytes(store) < 1_500

    def test_the_refused_turns_usage_counts_against_the_budget(self, runner: str) -> None:
        """The call happened: its 15 tokens cross a budget of 10, and the run stops there."""
        model = ScriptedModel([many(100), Decision.answer("never")])
        result, store = drive_r1(runner, model, tools([]), limits=Limits(max_tokens=10))
        assert (result.status, result.stop_reason, result.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 15 > 10 tokens",
        )
        assert types(store, "r1")[-2:] == ["model.completed", "run.terminated"]
        assert result.record.last_decision == "refused"

    def test_a_tighter_cap_per_run_or_by_guard(self, runner: str) -> None:
        """`limits.max_calls_per_decision=2`, or a `MaxCallsPerDecision(2)` guard: three
        calls are refused, two go ahead."""
        for run in (
            {"limits": Limits(max_calls_per_decision=2)},
            {"guards": [MaxCallsPerDecision(2)]},
        ):
            ran: list[str] = []
            model = ScriptedModel([many(3, "lookup"), many(2, "lookup"), Decision.answer("ok")])
            result, _ = drive_r1(runner, model, tools(ran), **run)
            assert result.status == "completed"
            assert model.contexts[1].refusal is not None
            assert model.contexts[1].refusal.message == (
                "3 calls proposed in one decision; at most 2 are allowed: none of them ran, "
                "propose at most 2 at a time"
            )
            assert ran == ["lookup O-0", "lookup O-1"]

    def test_the_cap_can_be_lifted_for_every_run_or_for_one(self, runner: str) -> None:
        """`RunnerConfig(max_calls_per_decision=None)`: 100 calls run, and the log states no
        cap (only the turns'); a run's `Limits(max_calls_per_decision=None)`: the same, its
        log saying so."""
        lifts = (
            ({"config": RunnerConfig(max_calls_per_decision=None)}, {"max_turns": 100}),
            (
                {"limits": Limits(max_calls_per_decision=None)},
                {"max_turns": 100, "max_calls_per_decision": None},
            ),
        )
        for lift, written in lifts:
            ran: list[str] = []
            model = ScriptedModel([many(100, "lookup"), Decision.answer("ok")])
            result, store = drive_r1(runner, model, tools(ran), **lift)
            assert (result.status, len(ran)) == ("completed", 100)
            started = json.loads(dump_event(next(iter(store.events("r1")))))
            assert started.get("limits") == written

    def test_a_wrap_up_turn_over_the_cap_is_refused_then_the_turns_run_out(
        self, runner: str
    ) -> None:
        """The last turn calls 100 tools: refused (not 100 ledger entries), then no turn is
        left."""
        config = RunnerConfig(wrap_up_turn=True)
        model = ScriptedModel([many(100)])
        result, _ = drive_r1(runner, model, tools([]), config=config, limits=Limits(max_turns=1))
        assert (result.status, result.stop_reason, result.record.stop_detail) == (
            "terminated",
            "max_turns",
            "1 of 1 turns used",
        )
        assert (result.record.last_decision, dict(result.record.actions)) == ("refused", {})

    def test_an_answer_over_the_cap_after_a_cancel_is_kept_refused(self, runner: str) -> None:
        """The call happened, so it is recorded; its calls never reach the ledger."""
        store = MemoryEventStore()

        def answer(ctx: ModelContext) -> Decision:
            cancel(store, "r1", reason="user left")
            return many(1000)

        result, _ = drive_r1(runner, ScriptedModel([answer]), tools([]), store)
        assert types(store, "r1")[-3:] == [
            "run.cancel_requested", "model.completed", "run.cancelled",
        ]  # fmt: skip
        assert list(store.events("r1"))[-2].decision == "refused"
        assert (result.status, dict(result.record.actions)) == ("cancelled", {})

    def test_any_guard_on_a_decision_refuses_it(self, runner: str) -> None:
        """A guard of your own on `model.completed` refuses what the model decided, as the
        cap does: the model reads the guard's sentence and answers again."""

        @attrs.frozen
        class Sourced:
            name: str = "sourced"

            def check(self, record: RunRecord, event: Any, ctx: GuardContext) -> Verdict | None:
                if getattr(event, "decision", None) == "final" and "[1]" not in event.output:
                    return Verdict(self.name, "unsourced", "cite a source, like [1]")
                return None

        table = attach_guard(DEFAULT_TABLE, "sourced", ["model.completed"])
        store = MemoryEventStore(options=StoreOptions(reducer=Reducer(table)))
        model = ScriptedModel([Decision.answer("Trust me."), Decision.answer("See [1].")])
        result, _ = drive_r1(runner, model, [], store, guards=[Sourced()])
        assert (result.status, result.final_output) == ("completed", "See [1].")
        assert model.contexts[1].refusal is not None
        refusal = model.contexts[1].refusal
        assert (refusal.kind, refusal.message, refusal.proposed.decision) == (
            "sourced",
            "cite a source, like [1]",
            "final",
        )


def test_the_runners_cap_is_an_integer_of_at_least_one() -> None:
    """Zero would refuse every tool call; say so when the Runner is configured."""
    with pytest.raises(ValueError, match="max_calls_per_decision") as info:
        RunnerConfig(max_calls_per_decision=0)
    assert str(info.value) == "max_calls_per_decision must be an integer >= 1 or None, got 0"


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 150), cap=st.integers(1, 100))
def test_a_decision_runs_iff_it_is_within_the_cap_and_a_refusal_does_not_grow_with_it(
    n: int, cap: int
) -> None:
    """For any n calls under any cap: all n run when n <= cap, none otherwise; and the log
    of a refused decision is the same size whatever n is, but for the digits of n."""
    ran: list[str] = []
    model = ScriptedModel([many(n, "lookup"), Decision.answer("ok")])
    config = RunnerConfig(max_calls_per_decision=cap)
    result, store = drive_r1("sync", model, tools(ran), config=config)
    assert result.status == "completed"
    if n <= cap:
        assert (len(ran), result.record.last_decision) == (n, "final")
        return
    assert (ran, dict(result.record.actions)) == ([], {})
    # The count is written three times: in the message (`1,000`), `calls` and `tools`.
    digits = len(f"{n:,}") + len(str(n)) * 2
    assert log_bytes(store) - digits == _refused_log_bytes(cap)


def _refused_log_bytes(cap: int) -> int:
    """The bytes of a run whose one decision, of `cap + 1` calls, was refused, less the
    count's digits (as above)."""
    model = ScriptedModel([many(cap + 1, "lookup"), Decision.answer("ok")])
    config = RunnerConfig(max_calls_per_decision=cap)
    _, store = drive_r1("sync", model, tools([]), config=config)
    n = cap + 1
    return log_bytes(store) - len(f"{n:,}") - len(str(n)) * 2
