"""A run result lists the calls waiting for a person as `PendingApproval`s, subagents' too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agentfsm.errors import ActionError
from agentfsm.events import step_clock
from agentfsm.record import call_digest
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    PendingApproval,
    ProposedCall,
    Runner,
    RunResult,
    ScriptedModel,
    Tool,
    ToolPolicy,
    approve,
    subagent,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage, ThreadedAsyncEventStore

ORDER = {"order_id": "O-1"}
#: The refund call the subagent asks for, as every run result lists it.
CHILDS_REFUND = PendingApproval(
    run_id="m1/call_m1",
    action_id="call_r1",
    tool="refund",
    arguments=ORDER,
    arguments_digest=call_digest("refund", ORDER),
)


def _refunds() -> Agent:
    """An agent that asks for a refund (which needs approval), then says it is done."""
    script = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("refund", ORDER, action_id="call_r1")),
            Decision.answer("O-1 refunded."),
        ]
    )
    refund = Tool("refund", lambda ctx: f"refunded {ctx.arguments['order_id']}")
    return Agent("refunds", script, [refund], policy=ToolPolicy(approval={"refund"}))


def _manager() -> Agent:
    """An agent whose one call, `call_m1`, hands the refund to the `refunds` subagent."""
    script = ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("refunds", {"task": "refund O-1"}, action_id="call_m1")
            ),
            Decision.answer("The refund is done."),
        ]
    )
    return Agent("manager", script, [subagent("refunds", _refunds())])


def _paused_sync(storage: MemoryStorage, manager: Agent) -> RunResult:
    return Runner(MemoryEventStore(storage), manager, clock=step_clock()).run("m1", "refund O-1")


def _paused_async(storage: MemoryStorage, manager: Agent) -> RunResult:
    store = ThreadedAsyncEventStore(MemoryEventStore(storage))
    runner = AsyncRunner(store, manager, clock=step_clock())
    return asyncio.run(runner.run("m1", "refund O-1"))


#: Drives run m1 until it waits on its subagent, through the Runner or the AsyncRunner.
Pause = Callable[[MemoryStorage, Agent], RunResult]
PAUSES = pytest.mark.parametrize("paused", [_paused_sync, _paused_async], ids=["sync", "async"])


class TestPendingApprovals:
    """`RunResult.pending_approvals`: the calls waiting on a decision, wherever they wait."""

    def test_a_runs_own_call_is_listed_with_the_digest_a_decision_binds_to(self) -> None:
        """A run waiting for its own call lists it: run, call, tool, arguments and digest."""
        store = MemoryEventStore()
        result = Runner(store, _refunds(), clock=step_clock()).run("r1", "refund O-1")
        assert result.status == "waiting_approval"
        assert result.pending_approvals == (
            PendingApproval("r1", "call_r1", "refund", ORDER, call_digest("refund", ORDER)),
        )
        assert result.pending_approvals[0].arguments_digest == (
            result.record.actions["call_r1"].arguments_digest
        )

    @PAUSES
    def test_a_subagents_call_is_listed_on_its_caller_with_its_digest(self, paused: Pause) -> None:
        """The caller waits on its call to the subagent, and lists the subagent's call: in
        the subagent's run, where it is decided, with the digest its approval binds to."""
        result = paused(MemoryStorage(), _manager())
        assert (result.status, result.pending_approvals) == ("waiting_tool", (CHILDS_REFUND,))
        assert result.record.pending_approvals == ()  # nothing of the caller's own

    @PAUSES
    def test_the_listed_digest_pins_the_decision_and_the_run_goes_on(self, paused: Pause) -> None:
        """Approving with the listed run, call and digest lets the caller finish on resume."""
        storage, manager = MemoryStorage(), _manager()
        result = paused(storage, manager)
        store = MemoryEventStore(storage)
        (pending,) = result.pending_approvals
        approve(store, pending.run_id, pending.action_id, digest=pending.arguments_digest)
        done = Runner(store, manager, clock=step_clock()).drive("m1")
        assert (done.status, done.final_output, done.pending_approvals) == (
            "completed",
            "The refund is done.",
            (),
        )

    def test_a_digest_of_other_arguments_approves_nothing(self) -> None:
        """The digest is the call's: one for other arguments is refused, nothing decided."""
        storage = MemoryStorage()
        _paused_sync(storage, _manager())
        store = MemoryEventStore(storage)
        with pytest.raises(ActionError):
            approve(
                store, "m1/call_m1", "call_r1", digest=call_digest("refund", {"order_id": "O-2"})
            )
        assert store.load("m1/call_m1").pending_approvals == ("call_r1",)
