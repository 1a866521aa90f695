"""What the SDK adapter tests share: reading a run's types back, validating its log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from agentfsm.cli import main as cli
from agentfsm.events import dump_event
from agentfsm.record import call_digest
from agentfsm.runtime import PendingApproval, approve, reject
from agentfsm.stores.base import EventStore


def types(store: EventStore, run_id: str, *, reports: bool = False) -> list[str]:
    """The run's event types, in order: the lifecycle's steps, as every adapter logs them.

    `usage.reported` (what an SDK reported it spent beyond the log's calls: the Claude CLI
    at the end of each leg) is left out unless `reports`: the scenarios hold for every
    adapter, and the tests of cost read it (`tests/adapters/test_claude_agent_sdk.py`).
    """
    return [e.type for e in store.events(run_id) if reports or e.type != "usage.reported"]


def validates(store: EventStore, run_id: str, tmp_path: Path) -> int:
    """Exit status of `agentfsm validate` on the run's log written as JSON Lines."""
    path = tmp_path / f"{run_id.replace('/', '_')}.jsonl"
    path.write_text("".join(dump_event(e) + "\n" for e in store.events(run_id)))
    return cli(["validate", "--quiet", str(path)])


def run(coro: Any) -> Any:
    """Run a coroutine with the transition logs captured."""
    with capture_logs():
        return asyncio.run(coro)


#: How a parent run is stopped once the tree spends 45 of 40 tokens: its next call refused.
TREE_OVERSPENT = "root 'r1' (2 runs): spent 45 + reserved 0 > 40 tokens"
#: How the child whose model call took the tree to 45 of 40 tokens is stopped right after it.
TREE_OVERRUN = "root 'r1' (2 runs): spent 45 > 40 tokens"


def assert_tree_stopped(done: Any, store: EventStore, child_id: str, tmp_path: Path) -> None:
    """`child_id` overran the tree's budget and stopped right after; its parent r1's next call
    was refused; both ended for `budget`, and neither overran its own limits (logs valid)."""
    child = store.load(child_id)
    assert (child.status, child.stop_reason, child.stop_detail) == (
        "terminated",
        "budget",
        TREE_OVERRUN,
    )
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        TREE_OVERSPENT,
    )
    assert validates(store, "r1", tmp_path) == 0
    assert validates(store, child_id, tmp_path) == 0


#: The arguments of the refund every adapter scenario asks for.
REFUND_O1 = {"order_id": "O-1"}


def refund_waiting_in(run_id: str) -> PendingApproval:
    """The refund of O-1 (call_r1) as run `run_id`'s result lists it while it waits."""
    return PendingApproval(run_id, "call_r1", "refund", REFUND_O1, call_digest("refund", REFUND_O1))


def assert_free_call_ran_then_paused(paused: Any, store: EventStore) -> None:
    """Run r1 ran get_weather (call_w1) at once and now waits for refund (call_r1)."""
    assert (paused.status, paused.pending_approvals) == (
        "waiting_approval",
        (refund_waiting_in("r1"),),
    )
    assert paused.record.actions["call_w1"].result == "sunny in Paris"
    assert types(store, "r1")[3:] == [
        "tool.requested", "tool.started", "tool.completed", "approval.requested",
    ]  # fmt: skip


def assert_refunded_after_approval(done: Any, store: EventStore, tmp_path: Path) -> None:
    """Run r1, resumed after refund was approved, ran it and answered; its log is valid."""
    assert (done.status, done.final_output) == ("completed", "Refunded; sunny in Paris.")
    assert done.record.actions["call_r1"].result == "refunded O-1"
    assert validates(store, "r1", tmp_path) == 0


def assert_caller_waits_on_child(paused: Any, store: EventStore, calls: list[str]) -> None:
    """Run m1 waits on its call call_m1, whose subagent run waits for approval of call_r1."""
    assert (paused.status, paused.pending_approvals) == (
        "waiting_tool",
        (refund_waiting_in("m1/call_m1"),),
    )
    assert paused.record.actions["call_m1"].status == "started"  # the caller waits on it
    child = store.load("m1/call_m1")
    assert (child.status, child.pending_approvals) == ("waiting_approval", ("call_r1",))
    assert "refund O-1" not in calls


def decide_for_child(store: EventStore, decision: str) -> list[str]:
    """Approve or reject call_r1 in the subagent's run; the calls that are then to run."""
    if decision == "approve":
        approve(store, "m1/call_m1", "call_r1", approver="alice")
        return ["refund O-1"]
    reject(store, "m1/call_m1", "call_r1", approver="bob", reason="over the limit")
    return []


def assert_caller_and_child_finished(
    out: dict[str, Any], store: EventStore, ran: list[str], child_output: str, tmp_path: Path
) -> None:
    """The resumed m1 and its subagent both completed; the caller's call was recorded once."""
    assert out == {"status": "completed", "final_output": "The refund is done.", "calls": ran}
    child = store.load("m1/call_m1")
    assert (child.status, child.final_output) == ("completed", child_output)
    assert child.actions["call_r1"].status == ("succeeded" if ran else "rejected")
    assert store.load("m1").actions["call_m1"].result == child_output
    assert types(store, "m1")[3:] == [
        "tool.requested", "tool.started", "tool.completed",  # once, across the pause
        "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "m1", tmp_path) == 0
    assert validates(store, "m1/call_m1", tmp_path) == 0
