"""The reducer: the worked runs, and every rule DESIGN.md adds beyond the table."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentfsm import (
    Event,
    IllegalTransitionError,
    LifecycleError,
    LogBuilder,
    RunRecord,
    reduce,
    replay,
)
from agentfsm.errors import ActionError, RunMismatchError, SequenceError
from agentfsm.events import call_digest, make_event
from agentfsm.reducers import DEFAULT_REDUCER, Snapshot

CALL = {"action_id": "a1", "tool": "search", "arguments": {"q": "x", "n": 3}}
CALL2 = {"action_id": "a2", "tool": "fetch", "arguments": {"url": "u"}}


def started(*calls: dict[str, Any]) -> LogBuilder:
    """A run whose first model call proposed `calls` (or nothing, if none are given)."""
    log = LogBuilder("run_1")
    log.add("run.started", objective="test", agent="main")
    if calls:
        log.add("model.started")
        log.add("model.completed", decision="tool_calls", tool_calls=list(calls))
    return log


def fold(log: LogBuilder) -> RunRecord:
    return replay(log.events)


def refused(record: RunRecord, event: Event) -> LifecycleError:
    """Apply `event`, expect a refusal, and check the record did not change."""
    before = record.dumps()
    with pytest.raises(LifecycleError) as info:
        reduce(record, event)
    assert record.dumps() == before
    return info.value


def nxt(record: RunRecord, type_: str, **fields: Any) -> Event:
    """A well-formed event of `type_` at the record's next sequence."""
    return make_event(
        type_,
        run_id=record.run_id,
        sequence=record.version + 1,
        occurred_at="2026-09-01T12:00:00+00:00",
        **fields,
    )


class TestWorkedRuns:
    def test_order_ticket_run(self, order_events: list[Event]) -> None:
        """O-1001 looked up, T-9001 opened, the answer accepted (reference article 000)."""
        record = replay(order_events)
        assert (record.status, record.version, record.turn) == ("completed", 14, 3)
        assert record.final_output == (
            "Order O-1001 is paid but not shipped yet. I opened support ticket T-9001."
        )
        assert {a: (x.status, x.attempts) for a, x in record.actions.items()} == {
            "act_0001": ("succeeded", 1),
            "act_0002": ("succeeded", 1),
        }
        assert record.facts["create_ticket"] == {"ticket_id": "T-9001", "status": "created"}
        assert record.actions["act_0002"].idempotency_key == "run_order_O-1001:act_0002"
        assert (record.usage.input_tokens, record.usage.output_tokens) == (1512, 113)
        assert record.usage.cost == pytest.approx(0.0072)

    def test_cancel_order_with_approval(self, cancel_events: list[Event]) -> None:
        """Cancel order 123 only after a human approved that exact call (article 003)."""
        statuses = []
        record = DEFAULT_REDUCER.initial("run_cancel_123")
        for event in cancel_events:
            record = reduce(record, event)
            statuses.append(record.status)
        assert statuses[2:6] == ["running", "waiting_approval", "running", "waiting_tool"]
        action = record.actions["call_cancel_123"]
        assert (action.status, action.approver) == ("succeeded", "alice@support")
        assert record.status == "completed"


class TestEnvelope:
    def test_sequences_start_at_one(self) -> None:
        """The first event of a run is sequence 1."""
        event = make_event(
            "run.started", run_id="r", sequence=2, occurred_at="2026-09-01T10:00:00Z"
        )
        err = refused(DEFAULT_REDUCER.initial("r"), event)
        assert isinstance(err, SequenceError)
        assert err.expected == 1
        assert str(err) == (
            "run 'r' is 'created': event 'run.started' (sequence 2) leaves a gap: "
            "expected sequence 1"
        )

    def test_gaps_and_repeats(self) -> None:
        """A skipped or repeated sequence is refused with what was expected."""
        record = fold(started())
        gap = nxt(record, "model.started").model_copy(update={"sequence": 3})
        repeat = nxt(record, "model.started").model_copy(update={"sequence": 1})
        assert isinstance(refused(record, gap), SequenceError)
        err = refused(record, repeat)
        assert isinstance(err, SequenceError)
        assert "repeats an applied sequence: expected sequence 2" in str(err)

    def test_events_of_another_run(self) -> None:
        """An event naming another run is refused, whatever its sequence."""
        record = fold(started())
        event = nxt(record, "model.started").model_copy(update={"run_id": "other"})
        err = refused(record, event)
        assert isinstance(err, RunMismatchError)
        assert err.event_run_id == "other"
        assert (
            str(err)
            == "run 'run_1' is 'running': event 'model.started' (sequence 2) belongs to run 'other'"
        )


class TestModelCalls:
    def test_model_completed_needs_an_open_call(self) -> None:
        """A decision without a model call is refused."""
        record = fold(started())
        err = refused(record, nxt(record, "model.completed", decision="final", output="hi"))
        assert (
            err.reason
            == "is refused: no model call is open (model.completed without model.started)"
        )

    def test_one_model_call_at_a_time(self) -> None:
        """A second model.started while one is open is refused."""
        log = started()
        log.add("model.started")
        record = fold(log)
        err = refused(record, nxt(record, "model.started"))
        assert (
            err.reason == "is refused: a model call is open (model.started has no model.completed)"
        )

    def test_no_model_call_while_the_batch_is_unresolved(self) -> None:
        """The model is not called again until every call of the batch is resolved."""
        log = started(CALL)
        log.add("approval.requested", **CALL)
        log.add("approval.accepted", action_id="a1", approver="ann")
        record = fold(log)
        assert record.status == "running"
        err = refused(record, nxt(record, "model.started"))
        assert isinstance(err, ActionError)
        assert err.action_id == "a1"
        assert "the model cannot be called while an action of the batch is 'approved'" in str(err)

    def test_turns_usage_and_reservations(self) -> None:
        """Turns count model.started; usage sums; reservations last while the call is open."""
        log = started()
        log.add("model.started", reserved_tokens=500, reserved_cost=0.5)
        open_call = fold(log)
        assert (open_call.turn, open_call.reserved_tokens, open_call.reserved_cost) == (1, 500, 0.5)
        log.add(
            "model.completed",
            decision="final",
            output="done",
            usage={"input_tokens": 10, "output_tokens": 4, "cost": 0.25},
        )
        record = fold(log)
        assert (record.reserved_tokens, record.reserved_cost) == (0, 0.0)
        assert (record.usage.total_tokens, record.usage.cost) == (14, 0.25)

    def test_handoff_changes_the_agent_and_keeps_counting(self) -> None:
        """After a handoff the turn count and usage carry on."""
        log = started()
        log.add("model.started")
        log.add("model.completed", decision="handoff", usage={"input_tokens": 3})
        log.add("handoff", to_agent="billing")
        record = fold(log)
        assert (record.current_agent, record.turn, record.usage.input_tokens) == ("billing", 1, 3)


class TestActions:
    def test_a_result_for_an_action_never_requested(self) -> None:
        """Results must name a requested action."""
        log = started(CALL)
        log.add("tool.requested", **CALL)
        record = fold(log)
        err = refused(record, nxt(record, "tool.completed", action_id="nope"))
        assert isinstance(err, ActionError)
        assert str(err) == (
            "run 'run_1' is 'waiting_tool': event 'tool.completed' (sequence 5) for action 'nope' "
            "is refused: no such action was proposed or requested"
        )

    def test_action_ids_are_unique(self) -> None:
        """An action id cannot be requested twice, nor proposed again."""
        log = started(CALL)
        log.add("tool.requested", **CALL)
        log.add("tool.completed", action_id="a1", result=1)
        record = fold(log)
        err = refused(record, nxt(record, "tool.requested", **CALL))
        assert "the action id is already used; it is 'succeeded'" in str(err)
        log.add("model.started")
        record = fold(log)
        err = refused(
            record, nxt(record, "model.completed", decision="tool_calls", tool_calls=[CALL])
        )
        assert isinstance(err, ActionError)
        assert err.reason == "for action 'a1' is refused: the action id is already used"

    def test_requested_call_must_be_the_proposed_call(self) -> None:
        """A proposed call goes ahead only as proposed: same tool, same arguments."""
        record = fold(started(CALL))
        changed = {**CALL, "arguments": {"q": "y", "n": 3}}
        err = refused(record, nxt(record, "tool.requested", **changed))
        digest = call_digest("search", CALL["arguments"])
        assert f"the arguments differ from the proposed call ({digest})" in str(err)
        err = refused(record, nxt(record, "tool.requested", **{**CALL, "tool": "delete"}))
        assert "the proposed call was to tool 'search', not 'delete'" in str(err)

    def test_the_same_arguments_spelled_differently_are_the_same_call(self) -> None:
        """Key order and number spelling do not change a call's digest; a bool does."""
        record = fold(started(CALL))
        same = {**CALL, "arguments": {"n": 3.0, "q": "x"}}
        assert reduce(record, nxt(record, "tool.requested", **same)).status == "waiting_tool"
        other = {**CALL, "arguments": {"n": True, "q": "x"}}
        assert isinstance(refused(record, nxt(record, "tool.requested", **other)), ActionError)

    def test_the_batch_returns_to_running_only_when_all_resolved(self) -> None:
        """Two calls: the first result keeps waiting, the second returns to running."""
        log = started(CALL, CALL2)
        log.add("tool.requested", **CALL)
        log.add("tool.requested", **CALL2)
        log.add("tool.started", action_id="a1")
        log.add("tool.completed", action_id="a1", result="r1", cost=0.5)
        assert fold(log).status == "waiting_tool"
        log.add("tool.failed", action_id="a2", error={"kind": "http", "message": "503"})
        record = fold(log)
        assert record.status == "running"
        assert record.actions["a2"].status == "failed"
        assert record.usage.cost == 0.5
        assert record.facts == {"search": "r1"}

    def test_a_proposed_call_not_yet_requested_keeps_the_batch_open(self) -> None:
        """Proposed actions are part of the batch until they are resolved."""
        log = started(CALL, CALL2)
        log.add("tool.requested", **CALL)
        log.add("tool.completed", action_id="a1", result="r1")
        record = fold(log)
        assert record.status == "waiting_tool"
        assert record.batch == ("a1", "a2")


class TestApprovals:
    def approved(self) -> LogBuilder:
        log = started(CALL)
        log.add("approval.requested", **CALL, expires_at="2026-09-01T10:30:00+00:00")
        log.add("approval.accepted", action_id="a1", approver="ann")
        return log

    def test_an_approved_call_cannot_change(self) -> None:
        """The call that runs is the call that was approved."""
        record = fold(self.approved())
        err = refused(
            record, nxt(record, "tool.requested", **{**CALL, "arguments": {"q": "rm -rf"}})
        )
        assert "the arguments differ from the approved call" in str(err)

    def test_approvals_expire(self) -> None:
        """A call requested after its approval expired is refused."""
        record = fold(self.approved())
        err = refused(record, nxt(record, "tool.requested", **CALL))  # at 12:00, expired 10:30
        assert isinstance(err, ActionError)
        assert "its approval expired at 2026-09-01T10:30:00+00:00" in str(err)

    def test_a_decision_for_another_call_is_refused(self) -> None:
        """An approval of run A's `a1` (amount 1), re-stamped onto run B's `a1` (amount
        1,000,000), approves nothing: the decision names the call it was made on."""
        small = {"action_id": "a1", "tool": "charge", "arguments": {"amount": 1}}
        big = {**small, "arguments": {"amount": 1_000_000}}
        run_a = started(small)
        run_a.add("approval.requested", **small)
        run_a.add("approval.accepted", action_id="a1", approver="ann",
                  arguments_digest=call_digest("charge", {"amount": 1}))  # fmt: skip
        stolen = run_a.events[-1]
        run_b = started(big)
        run_b.add("approval.requested", **big)
        record = fold(run_b)
        forged = stolen.model_copy(update={"sequence": record.version + 1})
        err = refused(record, forged)
        assert isinstance(err, ActionError)
        assert str(err) == (
            "run 'run_1' is 'waiting_approval': event 'approval.accepted' (sequence 5) for "
            f"action 'a1' is refused: the decision is for call {call_digest('charge', {'amount': 1})}, but the call waiting is "
            f"{call_digest('charge', {'amount': 1_000_000})} (tool 'charge')"
        )

    def test_a_rejection_is_bound_the_same_way(self) -> None:
        """A rejection for another call is refused too (it would settle the wrong call)."""
        log = started(CALL)
        log.add("approval.requested", **CALL)
        record = fold(log)
        other = call_digest("search", {"q": "y", "n": 3})
        err = refused(
            record, nxt(record, "approval.rejected", action_id="a1", arguments_digest=other)
        )
        assert isinstance(err, ActionError)
        assert other in str(err)

    def test_a_decision_with_the_calls_digest_applies(self) -> None:
        """The right digest approves; a decision without one (an older log) still does."""
        log = started(CALL)
        log.add("approval.requested", **CALL)
        record = fold(log)
        digest = call_digest(CALL["tool"], CALL["arguments"])
        bound = reduce(
            record, nxt(record, "approval.accepted", action_id="a1", arguments_digest=digest)
        )
        unbound = reduce(record, nxt(record, "approval.accepted", action_id="a1"))
        assert bound.actions["a1"].status == unbound.actions["a1"].status == "approved"

    def test_approving_after_the_approval_expired_is_refused(self) -> None:
        """Asked until 10:30, approved at 12:00: refused, saying it expired; a rejection
        still settles the call."""
        log = started(CALL)
        log.add("approval.requested", **CALL, expires_at="2026-09-01T10:30:00+00:00")
        record = fold(log)
        err = refused(record, nxt(record, "approval.accepted", action_id="a1"))
        assert str(err) == (
            "run 'run_1' is 'waiting_approval': event 'approval.accepted' (sequence 5) for "
            "action 'a1' is refused: its approval expired at 2026-09-01T10:30:00+00:00"
        )
        rejected = reduce(record, nxt(record, "approval.rejected", action_id="a1"))
        assert rejected.actions["a1"].status == "rejected"

    def test_a_lapsed_approval_may_be_asked_for_again(self) -> None:
        """Approved until 10:30, not run by 12:00: the same call may be put to a person again."""
        record = fold(self.approved())
        record = reduce(record, nxt(record, "approval.requested", **CALL))
        action = record.actions["a1"]
        assert (record.status, action.status, action.approver, action.expires_at) == (
            "waiting_approval",
            "approval_pending",
            None,
            None,
        )

    def test_a_valid_approval_may_be_reopened_but_a_run_call_may_not(self) -> None:
        """An approved call not yet run may be asked again; once it ran, asking is refused."""
        log = started(CALL)
        log.add("approval.requested", **CALL, expires_at="2026-09-01T23:00:00+00:00")
        log.add("approval.accepted", action_id="a1", approver="ann")
        record = reduce(fold(log), nxt(fold(log), "approval.requested", **CALL))
        assert (record.actions["a1"].status, record.actions["a1"].approver) == (
            "approval_pending",
            None,
        )
        log.add("tool.requested", **CALL)
        record = fold(log)
        err = refused(record, nxt(record, "approval.requested", **CALL))
        assert str(err).endswith(
            "approval can only be asked for a new, proposed or approved (not yet run) "
            "action; it is 'requested'"
        )

    def test_a_pending_call_cannot_run(self) -> None:
        """tool.requested for a call that still waits for approval is refused."""
        log = started(CALL, CALL2)
        log.add("approval.requested", **CALL)
        log.add("approval.requested", **CALL2)
        log.add("approval.accepted", action_id="a2")
        record = fold(log)
        assert (record.status, record.pending_approvals) == ("waiting_approval", ("a1",))
        log.add("approval.rejected", action_id="a1", reason="too risky")
        record = fold(log)
        assert (record.status, record.pending_approvals) == ("running", ())
        assert record.actions["a1"].reason == "too risky"

    def test_a_decision_for_a_call_not_waiting(self) -> None:
        """Accepting twice, or accepting what was never asked, is refused."""
        log = self.approved()
        log.add("approval.requested", **CALL2)
        record = fold(log)
        err = refused(record, nxt(record, "approval.accepted", action_id="a1"))
        assert "it is not waiting for approval; it is 'approved'" in str(err)


class TestApprovalsBesideRunningCalls:
    """SDKs run a batch's free calls and pause for the rest; the table follows them."""

    def test_a_request_after_the_free_call_waits_for_the_decision(self) -> None:
        """a2 runs, then a1 asks for approval: waiting_approval, then running once decided."""
        log = started(CALL, CALL2)
        log.add("tool.requested", **CALL2)
        log.add("tool.started", action_id="a2")
        log.add("tool.completed", action_id="a2", result="page")
        assert fold(log).status == "waiting_tool"  # a1 is still to run or to decide
        log.add("approval.requested", **CALL)
        record = fold(log)
        assert (record.status, record.pending_approvals) == ("waiting_approval", ("a1",))
        log.add("approval.accepted", action_id="a1", approver="ann")
        assert fold(log).status == "running"

    def test_a_request_beside_a_running_call_waits_for_both(self) -> None:
        """a1 asks while a2 runs; decided while a2 runs; a2's result leaves a1 to run."""
        log = started(CALL, CALL2)
        log.add("tool.requested", **CALL2)
        log.add("tool.started", action_id="a2")
        log.add("approval.requested", **CALL)
        assert fold(log).status == "waiting_tool"
        log.add("approval.accepted", action_id="a1", approver="ann")
        assert fold(log).status == "waiting_tool"
        log.add("tool.completed", action_id="a2", result="page")
        record = fold(log)
        assert (record.status, record.actions["a1"].status) == ("waiting_tool", "approved")

    def test_the_last_result_with_a_decision_open_waits_for_it(self) -> None:
        """a1 asks while a2 runs; a2's result leaves only the decision: waiting_approval."""
        log = started(CALL, CALL2)
        log.add("tool.requested", **CALL2)
        log.add("tool.started", action_id="a2")
        log.add("approval.requested", **CALL)
        log.add("tool.failed", action_id="a2", error={"kind": "boom", "message": "no"})
        record = fold(log)
        assert (record.status, record.pending_approvals) == ("waiting_approval", ("a1",))
        err = refused(record, nxt(record, "model.started"))
        assert isinstance(err, IllegalTransitionError)
        assert err.state == "waiting_approval"


class TestRetries:
    def failed(self, retryable: bool) -> LogBuilder:
        log = started(CALL)
        log.add("tool.requested", **CALL)
        log.add("tool.started", action_id="a1")
        log.add(
            "tool.failed",
            action_id="a1",
            error={"kind": "timeout", "message": "slow", "retryable": retryable},
        )
        return log

    def test_a_retryable_failure_may_be_retried(self) -> None:
        """Same action, attempt 2, back to waiting_tool; attempts counts tool.started."""
        log = self.failed(retryable=True)
        log.add("tool.started", action_id="a1", attempt=2)
        log.add("tool.completed", action_id="a1", result="ok")
        record = fold(log)
        assert (record.status, record.actions["a1"].attempts) == ("running", 2)

    def test_the_attempt_number_must_follow(self) -> None:
        """A retry must say it is attempt 2."""
        record = fold(self.failed(retryable=True))
        err = refused(record, nxt(record, "tool.started", action_id="a1"))
        assert "attempt 1 does not follow 1 attempts: expected attempt 2" in str(err)

    def test_a_permanent_failure_is_not_retried(self) -> None:
        """The retry condition does not hold for a non-retryable failure."""
        record = fold(self.failed(retryable=False))
        err = refused(record, nxt(record, "tool.started", action_id="a1", attempt=2))
        assert isinstance(err, IllegalTransitionError)
        assert err.failed_conditions == ("retry",)

    def test_no_retry_after_the_model_was_called_again(self) -> None:
        """A new model call starts a new batch: the old action is not retried."""
        log = self.failed(retryable=True)
        log.add("model.started")
        record = fold(log)
        assert isinstance(
            refused(record, nxt(record, "tool.started", action_id="a1", attempt=2)), LifecycleError
        )


class TestEnding:
    def test_completion_needs_a_final_output(self) -> None:
        """run.completed after tool calls but no final answer is refused."""
        log = started(CALL)
        log.add("approval.requested", **CALL)
        log.add("approval.rejected", action_id="a1")
        record = fold(log)
        err = refused(record, nxt(record, "run.completed"))
        assert isinstance(err, IllegalTransitionError)
        assert str(err) == (
            "run 'run_1' is 'running': event 'run.completed' (sequence 6) is not allowed: "
            "condition 'final output recorded, nothing unresolved' does not hold; allowed: "
            "'approval.requested', 'handoff', 'model.completed', 'model.started', "
            "'run.cancel_requested', 'run.completed', 'run.failed', 'run.paused', "
            "'run.terminated', 'tool.requested', 'tool.started'"
        )

    def test_two_phase_cancel_records_late_results(self) -> None:
        """Cancel waits for in-flight calls; their late results are still recorded."""
        log = started(CALL, CALL2)
        log.add("tool.requested", **CALL)
        log.add("tool.started", action_id="a1")
        log.add("run.cancel_requested", reason="user", requested_by="ann")
        record = fold(log)
        err = refused(record, nxt(record, "run.cancelled"))
        assert isinstance(err, IllegalTransitionError)
        assert err.failed_conditions == ("nothing in flight",)
        log.add("tool.completed", action_id="a1", result="late")
        log.add("run.cancelled")
        record = fold(log)
        assert record.status == "cancelled"
        assert record.actions["a1"].result == "late"
        assert (record.actions["a2"].status, record.actions["a2"].reason) == (
            "rejected",
            "the run ended before it ran",
        )
        assert (record.cancel_reason, record.cancel_requested_by) == ("user", "ann")

    def test_in_flight_actions_become_unknown_when_the_run_ends(self) -> None:
        """Never silently failed or succeeded: outcome unknown."""
        log = started(CALL)
        log.add("tool.requested", **CALL)
        log.add("tool.started", action_id="a1")
        log.add("run.terminated", stop_reason="deadline", detail="ran out of time")
        record = fold(log)
        assert (record.status, record.stop_reason, record.stop_detail) == (
            "terminated",
            "deadline",
            "ran out of time",
        )
        assert (record.actions["a1"].status, record.actions["a1"].reason) == (
            "unknown",
            "the run ended while it was in flight",
        )
        assert record.in_flight == ()

    def test_failure_keeps_the_error_and_the_partial_result(self) -> None:
        """run.failed records its error; earlier results stay in the ledger."""
        log = started(CALL)
        log.add("tool.requested", **CALL)
        log.add("tool.completed", action_id="a1", result={"hits": 2})
        log.add("run.failed", error={"kind": "acceptance", "message": "answer not grounded"})
        record = fold(log)
        assert record.error is not None
        assert (record.status, record.error.kind) == ("failed", "acceptance")
        assert record.facts == {"search": {"hits": 2}}

    def test_pause_and_resume(self) -> None:
        """A paused run keeps its reason until it resumes."""
        log = started()
        log.add("run.paused", reason="waiting for the user")
        assert fold(log).pause_reason == "waiting for the user"
        log.add("run.resumed")
        record = fold(log)
        assert (record.status, record.pause_reason) == ("running", None)


USAGE = {"input_tokens": 3, "output_tokens": 2, "cost": 0.25}


class TestUsageReported:
    """Spending an SDK reported beyond the log's model calls (`usage.reported`)."""

    def test_it_adds_to_the_runs_usage_where_the_run_stands(self) -> None:
        """Waiting for approval, the run takes the report and stays waiting; the usage is
        the calls' plus the report's."""
        log = started(CALL)
        log.events[-1] = make_event(
            "model.completed", run_id="run_1", sequence=3, occurred_at=log.events[-1].occurred_at,
            decision="tool_calls", tool_calls=[CALL],
            usage={"input_tokens": 10, "output_tokens": 5, "cost": 0.5},
        )  # fmt: skip
        log.add("approval.requested", **CALL)
        log.add("usage.reported", usage=USAGE, source="claude-agent-sdk")
        record = fold(log)
        assert record.status == "waiting_approval"
        assert (record.usage.input_tokens, record.usage.output_tokens) == (13, 7)
        assert record.usage.cost == 0.75
        assert record.pending_approvals == ("a1",)

    def test_it_is_refused_once_the_run_ended(self) -> None:
        """A report after the end is not a fact of the run any more."""
        log = started()
        log.add("run.cancel_requested")
        log.add("run.cancelled")
        record = fold(log)
        err = refused(record, nxt(record, "usage.reported", usage=USAGE))
        assert isinstance(err, IllegalTransitionError)
        assert str(err) == (
            "run 'run_1' is 'cancelled' (terminal): event 'usage.reported' (sequence 4) is "
            "not allowed; allowed: none"
        )


class TestReplay:
    def test_replay_needs_something_to_fold(self) -> None:
        """No events and no snapshot is a usage error, not an empty run."""
        with pytest.raises(ValueError, match="at least one event or a snapshot"):
            replay([])

    def test_snapshot_plus_tail_equals_full_replay(self, order_events: list[Event]) -> None:
        """A snapshot taken at any point folds the rest to the same record."""
        full = replay(order_events)
        for cut in range(1, len(order_events)):
            snap = Snapshot(replay(order_events[:cut]))
            assert replay(order_events[cut:], snapshot=snap) == full

    def test_snapshot_round_trips_and_checks_its_sequence(self, order_events: list[Event]) -> None:
        """A snapshot whose sequence disagrees with its record is refused when read."""
        snap = Snapshot(replay(order_events[:6]))
        assert Snapshot.loads(snap.dumps()) == snap
        data = snap.to_json()
        data["sequence"] = 9
        with pytest.raises(ValueError, match="says sequence 9 but its record is at version 6"):
            Snapshot.from_json(data)


class TestRecordJson:
    def test_round_trip_is_exact(
        self, order_events: list[Event], cancel_events: list[Event]
    ) -> None:
        """dumps -> loads -> dumps gives the same bytes and an equal record."""
        for events in (order_events, cancel_events):
            for cut in range(1, len(events) + 1):
                record = replay(events[:cut])
                again = RunRecord.loads(record.dumps())
                assert again == record
                assert again.dumps() == record.dumps()

    def test_the_ledger_keeps_its_order_through_json(self) -> None:
        """Ids that sort otherwise ('act_10' < 'act_9'): reloaded, the ledger's order stands.

        Found by the round-trip property: sorted keys reordered the ledger, and the reloaded
        record listed its pending approvals in another order than it was saved with.
        """
        calls = [{"action_id": f"act_{i}", "tool": "t", "arguments": {}} for i in (9, 10)]
        log = started(*calls)
        for c in calls:
            log.add("approval.requested", **c)
        record = fold(log)
        again = RunRecord.loads(record.dumps())
        assert (again.pending_approvals, list(again.actions)) == (
            ("act_9", "act_10"),
            ["act_9", "act_10"],
        )
        assert Snapshot.loads(Snapshot(record).dumps()).record.pending_approvals == (
            "act_9",
            "act_10",
        )

    def test_a_ledger_in_sorted_order_dumps_as_fully_sorted_json(
        self, order_events: list[Event]
    ) -> None:
        """When ids sort in ledger order the text is plain sorted-key JSON (older snapshots)."""
        record = replay(order_events)
        assert list(record.actions) == sorted(record.actions)
        assert record.dumps() == json.dumps(
            record.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )

    def test_unknown_and_missing_keys_are_refused(self, order_events: list[Event]) -> None:
        """A record JSON with extra or missing keys names them."""
        data = replay(order_events).to_json()
        data["colour"] = "red"
        del data["turn"]
        with pytest.raises(ValueError, match="run record: missing turn; unknown colour"):
            RunRecord.from_json(data)

    def test_derived_fields_must_agree(self, cancel_events: list[Event]) -> None:
        """pending_approvals that contradict the ledger are refused."""
        data = replay(cancel_events[:4]).to_json()
        assert data["pending_approvals"] == ["call_cancel_123"]
        data["pending_approvals"] = []
        with pytest.raises(ValueError, match="disagrees with the ledger"):
            RunRecord.from_json(data)
