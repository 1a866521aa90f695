"""One handler per event type: the rules beyond the table, then the event's effect.

A handler gets the table (not the reducer: every reducer of one table folds alike), the
record before the event and the table's precomputed move, checks what DESIGN.md adds to the
table (action ids, exact-call binding, open model calls, unresolved batches), resolves the
move's condition, and returns the new record built by one of the typed changes in
`_changes.py`. `Reducer.reduce` (reduce.py) checks the envelope and the table before, and
the guards after; this module is the rest of steps 3 and 4 and the fold.

An event's fields are read through pydantic's `__getattr__` hook, which leaves every load of
one unspecialised (about ten times a record's slot), so each is read once, and a new
record's version is `rec.version + 1`: the envelope check made it the event's sequence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from agentfsm.errors import ActionError, LifecycleError, TableMismatchError
from agentfsm.events import models as m
from agentfsm.events._bounds import unstorable
from agentfsm.events._canonical import same_json
from agentfsm.events.models import parse_timestamp
from agentfsm.fsm.table import Condition, TransitionTable
from agentfsm.ledger import put, put_all, unsettled
from agentfsm.names import RESOLVED, ActionStatus
from agentfsm.record import Action, RunRecord, UsageTotals, default_key
from agentfsm.reducers._changes import (
    action_approved,
    action_asked_again,
    action_emit_refused,
    action_emitted,
    action_failed,
    action_pending,
    action_rejected,
    action_requested,
    action_started,
    action_succeeded,
    action_unknown,
    new_action,
    new_usage,
    set_actions,
    set_actions_batch,
    set_agent,
    set_cancel,
    set_completed,
    set_custom,
    set_emitted,
    set_ended,
    set_forked,
    set_model_completed,
    set_model_failed,
    set_model_started,
    set_pause,
    set_started,
    set_usage,
)

__all__ = ["HANDLERS", "Handler", "Move"]

A = ActionStatus
_IN_FLIGHT = (A.REQUESTED, A.STARTED)
_NOT_RUN = (A.PROPOSED, A.APPROVAL_PENDING, A.APPROVED)

#: A precomputed move of the table: the target itself, or ordered (condition, target) pairs.
Move = str | tuple[tuple[Condition | None, str], ...]
Handler = Callable[[TransitionTable, RunRecord, Any, Move], RunRecord]


def _to(table: TransitionTable, rec: RunRecord, ev: Any, move: Move) -> str:
    """Resolve a move: a plain target, or the first alternative whose condition holds."""
    if move.__class__ is not tuple:  # a plain target, told apart without a call (every event)
        return move  # type: ignore[return-value]
    for condition, target in move:  # inlined from TransitionTable.choose: hot
        if condition is None or condition.predicate(rec, ev):
            return target
    return table.choose(move, rec.status, ev.type, rec, ev, rec.run_id, ev.sequence)


def _refuse(record: RunRecord, event: Any, reason: str) -> LifecycleError:
    return LifecycleError(
        f"is refused: {reason}",
        run_id=record.run_id,
        sequence=event.sequence,
        state=record.status,
        event=event.type,
    )


def _action_error(record: RunRecord, event: Any, action_id: str, reason: str) -> ActionError:
    return ActionError(
        reason,
        action_id=action_id,
        run_id=record.run_id,
        sequence=event.sequence,
        state=record.status,
        event=event.type,
    )


def _model_call_open(record: RunRecord, event: Any) -> LifecycleError:
    """The refusal of an event that needs no model call open, when one is (the handlers
    test `model_call_open` themselves: a call per event for what is almost never so)."""
    return _refuse(record, event, "a model call is open (model.started has no model.completed)")


def _known_action(record: RunRecord, event: Any) -> Action:
    action = record.actions.get(event.action_id)
    if action is None:
        raise _no_such_action(record, event)
    return action


def _no_such_action(record: RunRecord, event: Any) -> ActionError:
    return _action_error(record, event, event.action_id, "no such action was proposed or requested")


_with = put


def _changed(rec: RunRecord, ev: Any, target: str, action: Action) -> RunRecord:
    """The record after `ev`, which moved the run to `target` and changed one call: `action`."""
    return set_actions(
        rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at,
        actions=_with(rec.actions, action),
    )  # fmt: skip


# -- handlers, one per event type ---------------------------------------------------------


def _run_started(table: TransitionTable, rec: RunRecord, ev: m.RunStarted, move: Move) -> RunRecord:
    started = ev.table
    if started is not None and started.digest != table.digest:
        # Folding a run with another table (or another version of it) would read its log
        # under rules it was never written under.
        raise TableMismatchError(
            run_id=rec.run_id,
            sequence=ev.sequence,
            started_under=f"'{started.name}' ({started.digest})",
            folded_with=f"'{table.name}' ({table.digest})",
        )
    agent = ev.agent if ev.agent is not None else rec.current_agent
    return set_started(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        objective=ev.objective, current_agent=agent, limits=ev.limits,
        started_at=ev.occurred_at,
        # The table's own reference, one object for every reducer of it: a run under the
        # reducer's table is known by identity on the hot path (`Reducer.reduce`).
        table=rec.table if started is None else table.ref,
    )  # fmt: skip


def _model_started(
    table: TransitionTable, rec: RunRecord, ev: m.ModelStarted, move: Move
) -> RunRecord:
    if rec.model_call_open:
        raise _model_call_open(rec, ev)
    actions = rec.actions
    for aid in rec.batch:
        action = actions[aid]
        status = action.status
        if status not in RESOLVED:
            raise _action_error(
                rec, ev, aid,
                f"the model cannot be called while an action of the batch is '{status}'",
            )  # fmt: skip
        if action.emit is not None and action.emit_pending:
            raise _action_error(
                rec, ev, aid,
                f"the model cannot be called before the event its call proposed "
                f"('{action.emit.type}') is applied or refused",
            )  # fmt: skip
    if rec.decided_emit is not None:
        raise _refuse(
            rec, ev,
            f"the event the model's decision proposed ('{rec.decided_emit.type}') is not "
            "applied yet",
        )  # fmt: skip
    return set_model_started(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        turn=rec.turn + 1, model_call_open=True, reserved_tokens=ev.reserved_tokens or 0,
        reserved_cost=ev.reserved_cost or 0.0,
    )  # fmt: skip


def _model_completed(
    table: TransitionTable, rec: RunRecord, ev: m.ModelCompleted, move: Move
) -> RunRecord:
    if not rec.model_call_open:
        raise _refuse(rec, ev, "no model call is open (model.completed without model.started)")
    actions: Mapping[str, Action] = rec.actions
    batch: tuple[str, ...] = ()
    calls = ev.tool_calls
    if calls:
        proposed: dict[str, Action] = {}  # the ledger is changed once, for the whole batch
        key_prefix = rec.run_id + ":"
        for call in calls:
            aid = call.action_id
            if aid in actions or aid in proposed:
                raise _action_error(rec, ev, aid, "the action id is already used")
            proposed[aid] = new_action(
                action_id=aid, tool=call.tool, arguments=call.arguments, status=A.PROPOSED,
                attempts=0, idempotency_key=key_prefix + aid, result=None, error=None,
                cost=None, approver=None, reason=None, expires_at=None, emit=None,
                emitted=None, refusal=None,
            )  # fmt: skip
        actions = put_all(actions, proposed.values())
        batch = tuple(proposed)
    usage = _plus(rec.usage, ev.usage)
    decision = ev.decision
    final = ev.output if decision == "final" else rec.final_output
    # The model holds a refusal to decision 'refused' and a proposed event to 'emit'
    # (`ModelCompleted._calls_match_decision`): each is read only where it can be.
    refusal = ev.refusal if decision == "refused" else None
    emit = ev.emit if decision == "emit" else None
    return set_model_completed(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        model_call_open=False, reserved_tokens=0, reserved_cost=0.0, usage=usage,
        last_decision=decision, last_refusal=refusal, decided_emit=emit,
        final_output=final, actions=actions, batch=batch,
    )  # fmt: skip


def _plus(usage: UsageTotals, spent: m.Usage | None) -> UsageTotals:
    """`usage` with what an event reports spending added (model.completed, model.failed,
    usage.reported)."""
    if spent is None:
        return usage
    return new_usage(
        input_tokens=usage.input_tokens + spent.input_tokens,
        output_tokens=usage.output_tokens + spent.output_tokens,
        cost=usage.cost + spent.cost,
    )


def _model_failed(
    table: TransitionTable, rec: RunRecord, ev: m.ModelFailed, move: Move
) -> RunRecord:
    """An attempt of the open model call failed: the call ends, its reservation released,
    and what it reported spending counted; the run stays where it is (on no edge)."""
    if not rec.model_call_open:
        raise _refuse(rec, ev, "no model call is open (model.failed without model.started)")
    usage = _plus(rec.usage, ev.usage)
    return set_model_failed(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        model_call_open=False, reserved_tokens=0, reserved_cost=0.0, usage=usage,
    )  # fmt: skip


def _handoff(table: TransitionTable, rec: RunRecord, ev: m.Handoff, move: Move) -> RunRecord:
    if rec.model_call_open:
        raise _model_call_open(rec, ev)
    return set_agent(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        current_agent=ev.to_agent,
    )  # fmt: skip


def _bound_to_call(rec: RunRecord, ev: Any, action: Action, what: str) -> None:
    """A proposed or approved call may only go ahead exactly as it was proposed."""
    if action.tool != ev.tool:
        raise _action_error(
            rec, ev, action.action_id,
            f"the {what} call was to tool '{action.tool}', not '{ev.tool}'",
        )  # fmt: skip
    if not same_json(action.arguments, ev.arguments):
        raise _action_error(
            rec, ev, action.action_id,
            f"the arguments differ from the {what} call ({action.arguments_digest})",
        )  # fmt: skip


def _expired(action: Action, ev: Any) -> bool:
    """The action's approval had expired when `ev` occurred."""
    expires = action.expires_at
    return expires is not None and parse_timestamp(ev.occurred_at) > parse_timestamp(expires)


def _approval_requested(
    table: TransitionTable, rec: RunRecord, ev: m.ApprovalRequested, move: Move
) -> RunRecord:
    if rec.model_call_open:
        raise _model_call_open(rec, ev)
    action = rec.actions.get(ev.action_id)
    batch = rec.batch
    if action is None:
        action = Action(
            ev.action_id, ev.tool, ev.arguments, A.APPROVAL_PENDING, 0,
            default_key(rec.run_id, ev.action_id), expires_at=ev.expires_at,
        )  # fmt: skip
        batch = (*batch, ev.action_id)
    elif action.status == A.PROPOSED:
        _bound_to_call(rec, ev, action, "proposed")
        action = action_pending(action, status=A.APPROVAL_PENDING, expires_at=ev.expires_at)
    elif action.status == A.APPROVED:
        # An approved call that has not run may be put to a person again (its approval
        # lapsed, or the runtime went on without it): the decision reopens, never widens.
        _bound_to_call(rec, ev, action, "approved")
        action = action_asked_again(
            action, status=A.APPROVAL_PENDING, expires_at=ev.expires_at, approver=None
        )
    else:
        raise _action_error(
            rec, ev, ev.action_id,
            "approval can only be asked for a new, proposed or approved (not yet run) "
            f"action; it is '{action.status}'",
        )  # fmt: skip
    target = _to(table, rec, ev, move)
    actions = _with(rec.actions, action)
    return set_actions_batch(
        rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at, actions=actions,
        batch=batch,
    )  # fmt: skip


def _pending_approval(rec: RunRecord, ev: m.ApprovalAccepted | m.ApprovalRejected) -> Action:
    action = _known_action(rec, ev)
    if action.status != A.APPROVAL_PENDING:
        raise _action_error(
            rec, ev, ev.action_id, f"it is not waiting for approval; it is '{action.status}'"
        )
    # A decision names the call it was made on; one meant for another call (another run's
    # `t1`, or this call before it was proposed again with other arguments) decides nothing.
    if ev.arguments_digest is not None and ev.arguments_digest != action.arguments_digest:
        raise _action_error(
            rec, ev, ev.action_id,
            f"the decision is for call {ev.arguments_digest}, but the call waiting is "
            f"{action.arguments_digest} (tool '{action.tool}')",
        )  # fmt: skip
    return action


def _approval_accepted(
    table: TransitionTable, rec: RunRecord, ev: m.ApprovalAccepted, move: Move
) -> RunRecord:
    action = _pending_approval(rec, ev)
    if _expired(action, ev):
        # Too late to approve; a rejection still settles the call.
        raise _action_error(rec, ev, ev.action_id, f"its approval expired at {action.expires_at}")
    target = _to(table, rec, ev, move)
    action = action_approved(action, status=A.APPROVED, approver=ev.approver, reason=ev.reason)
    return _changed(rec, ev, target, action)


def _approval_rejected(
    table: TransitionTable, rec: RunRecord, ev: m.ApprovalRejected, move: Move
) -> RunRecord:
    action = _pending_approval(rec, ev)
    target = _to(table, rec, ev, move)
    action = action_rejected(action, status=A.REJECTED, approver=ev.approver, reason=ev.reason)
    return _changed(rec, ev, target, action)


def _tool_requested(
    table: TransitionTable, rec: RunRecord, ev: m.ToolRequested, move: Move
) -> RunRecord:
    if rec.model_call_open:
        raise _model_call_open(rec, ev)
    aid = ev.action_id  # read once: an event's fields are read through pydantic's hook
    key = ev.idempotency_key or default_key(rec.run_id, aid)
    action = rec.actions.get(aid)
    batch = rec.batch
    if action is None:
        action = new_action(
            action_id=aid, tool=ev.tool, arguments=ev.arguments, status=A.REQUESTED,
            attempts=0, idempotency_key=key, result=None, error=None, cost=None,
            approver=None, reason=None, expires_at=None, emit=None, emitted=None,
            refusal=None,
        )  # fmt: skip
        batch = (*batch, aid)
    elif action.status == A.PROPOSED or action.status == A.APPROVED:
        _bound_to_call(rec, ev, action, "approved" if action.status == A.APPROVED else "proposed")
        if action.expires_at is not None and _expired(action, ev):  # most calls never expire
            raise _action_error(rec, ev, aid, f"its approval expired at {action.expires_at}")
        action = action_requested(action, status=A.REQUESTED, idempotency_key=key)
    elif action.status == A.APPROVAL_PENDING:
        raise _action_error(rec, ev, aid, "it is still waiting for approval")
    else:
        raise _action_error(rec, ev, aid, f"the action id is already used; it is '{action.status}'")
    target = _to(table, rec, ev, move)
    actions = _with(rec.actions, action)
    return set_actions_batch(
        rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at, actions=actions,
        batch=batch,
    )  # fmt: skip


def _tool_started(
    table: TransitionTable, rec: RunRecord, ev: m.ToolStarted, move: Move
) -> RunRecord:
    action = _known_action(rec, ev)
    target = _to(table, rec, ev, move)
    attempt = ev.attempt
    if attempt != action.attempts + 1:
        raise _action_error(
            rec, ev, ev.action_id,
            f"attempt {attempt} does not follow {action.attempts} attempts: "
            f"expected attempt {action.attempts + 1}",
        )  # fmt: skip
    action = action_started(action, status=A.STARTED, attempts=attempt, error=None)
    return _changed(rec, ev, target, action)


def _in_flight_action(rec: RunRecord, ev: Any) -> Action:
    action = rec.actions.get(ev.action_id)  # `_known_action`, inlined: every tool outcome
    if action is None:
        raise _no_such_action(rec, ev)
    if action.status not in _IN_FLIGHT:
        raise _action_error(rec, ev, ev.action_id, f"it is not in flight; it is '{action.status}'")
    return action


def _tool_completed(
    table: TransitionTable, rec: RunRecord, ev: m.ToolCompleted, move: Move
) -> RunRecord:
    action = _in_flight_action(rec, ev)
    target = _to(table, rec, ev, move)
    usage = rec.usage
    cost, result = ev.cost, ev.result
    if cost:
        usage = new_usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=usage.cost + cost,
        )
    facts = dict(rec.facts)
    facts[action.tool] = result
    action = action_succeeded(action, status=A.SUCCEEDED, result=result, cost=cost, emit=ev.emit)
    actions = _with(rec.actions, action)
    return set_completed(
        rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at, actions=actions,
        usage=usage, facts=facts,
    )  # fmt: skip


def _tool_failed(table: TransitionTable, rec: RunRecord, ev: m.ToolFailed, move: Move) -> RunRecord:
    action = _in_flight_action(rec, ev)
    target = _to(table, rec, ev, move)
    action = action_failed(action, status=A.FAILED, error=ev.error)
    return _changed(rec, ev, target, action)


def _tool_outcome_unknown(
    table: TransitionTable, rec: RunRecord, ev: m.ToolOutcomeUnknown, move: Move
) -> RunRecord:
    action = _in_flight_action(rec, ev)
    target = _to(table, rec, ev, move)
    action = action_unknown(action, status=A.UNKNOWN, reason=ev.reason)
    return _changed(rec, ev, target, action)


def _run_paused(table: TransitionTable, rec: RunRecord, ev: m.RunPaused, move: Move) -> RunRecord:
    if rec.model_call_open:
        raise _model_call_open(rec, ev)
    return set_pause(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        pause_reason=ev.reason,
    )  # fmt: skip


def _run_resumed(table: TransitionTable, rec: RunRecord, ev: m.RunResumed, move: Move) -> RunRecord:
    return set_pause(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        pause_reason=None,
    )  # fmt: skip


def _run_cancel_requested(
    table: TransitionTable, rec: RunRecord, ev: m.RunCancelRequested, move: Move
) -> RunRecord:
    return set_cancel(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        cancel_reason=ev.reason, cancel_requested_by=ev.requested_by, pause_reason=None,
    )  # fmt: skip


_ENDED_IN_FLIGHT = "the run ended while it was in flight"
_ENDED_NOT_RUN = "the run ended before it ran"


def _settled(actions: Mapping[str, Action]) -> Mapping[str, Action]:
    """The ledger of an ended run: nothing left in flight or waiting to run."""
    settled = []
    for action in unsettled(actions):
        if action.status in _IN_FLIGHT:
            settled.append(action_unknown(action, status=A.UNKNOWN, reason=_ENDED_IN_FLIGHT))
        elif action.status in _NOT_RUN:
            settled.append(
                action_rejected(
                    action, status=A.REJECTED, approver=action.approver, reason=_ENDED_NOT_RUN
                )
            )
    return put_all(actions, settled) if settled else actions


def _end(
    table: TransitionTable,
    rec: RunRecord,
    ev: Any,
    move: Move,
    error: m.ErrorInfo | None = None,
    stop_reason: str | None = None,
    detail: str | None = None,
) -> RunRecord:
    target = _to(table, rec, ev, move)
    return set_ended(
        rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at,
        actions=_emits_settled(rec, _settled(rec.actions), target), model_call_open=False,
        reserved_tokens=0, reserved_cost=0.0, pause_reason=None, error=error,
        stop_reason=stop_reason, stop_detail=detail, decided_emit=None,
    )  # fmt: skip


def _run_cancelled(
    table: TransitionTable, rec: RunRecord, ev: m.RunCancelled, move: Move
) -> RunRecord:
    return _end(table, rec, ev, move)


def _run_completed(
    table: TransitionTable, rec: RunRecord, ev: m.RunCompleted, move: Move
) -> RunRecord:
    return _end(table, rec, ev, move)


def _run_failed(table: TransitionTable, rec: RunRecord, ev: m.RunFailed, move: Move) -> RunRecord:
    return _end(table, rec, ev, move, error=ev.error)


def _run_terminated(
    table: TransitionTable, rec: RunRecord, ev: m.RunTerminated, move: Move
) -> RunRecord:
    return _end(table, rec, ev, move, stop_reason=ev.stop_reason, detail=ev.detail)


def custom_event(table: TransitionTable, rec: RunRecord, ev: Any, move: Move) -> RunRecord:
    """A lifecycle's own event: the table moves the run, the event's `fold` records fields.

    One a call or a decision proposed (`emitted_by`) must be the very event proposed, and
    the next one due to be judged (see `_claimed`); the proposal is then marked applied.
    """
    by = ev.emitted_by
    actions = rec.actions
    decided = rec.decided_emit
    if by is not None:
        if by.action_id is not None:
            action = _claimed(rec, ev, by.action_id)
            actions = _with(actions, action_emitted(action, emitted=ev.sequence))
        else:
            _decided_claim(rec, ev, by.turn)
            decided = None
    target = _to(table, rec, ev, move)
    custom = ev.fold(rec.custom)
    if custom is not rec.custom:
        problem = unstorable(dict(custom)) if isinstance(custom, Mapping) else "not a mapping"
        if problem is not None:
            raise TypeError(
                f"{type(ev).__name__}.fold returned what no run record can hold: {problem}"
            )
    ended = target in table.terminal_states
    if by is None and not ended:
        return set_custom(
            rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at, custom=custom
        )
    if ended:
        # The event ended the run, as a built-in end does (`_end`): what else was proposed is
        # never judged, calls in flight are settled, an open model call and its reservation
        # are closed.
        done = set_ended(
            rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at,
            actions=_emits_settled(rec, _settled(actions), target), model_call_open=False,
            reserved_tokens=0, reserved_cost=0.0, pause_reason=None, error=None,
            stop_reason=None, stop_detail=None, decided_emit=None,
        )  # fmt: skip
        return set_custom(
            done, status=target, version=rec.version + 1, updated_at=ev.occurred_at, custom=custom
        )
    return set_emitted(
        rec, status=target, version=rec.version + 1, updated_at=ev.occurred_at, custom=custom,
        actions=actions, decided_emit=decided,
    )  # fmt: skip


# -- events proposed by calls and decisions (`emit`) ------------------------------------------

#: An event's envelope, and `emitted_by`: what a proposal's own fields are compared without.
_STAMPED = frozenset({"run_id", "sequence", "type", "occurred_at", "event_id", "emitted_by"})


def _claimed(rec: RunRecord, ev: Any, action_id: str) -> Action:
    """The call whose proposed event `ev` claims to be: it is, and it is due now.

    Due: the batch is resolved and no call before it in the batch (the order they are
    judged in) has a proposal still to judge. So a log applies a batch's proposals in one
    order only, whatever order its calls ended in.
    """
    action = rec.actions.get(action_id)
    if action is None:
        raise _action_error(rec, ev, action_id, "no such call proposed an event")
    if action.emitted is not None:
        raise _action_error(
            rec,
            ev,
            action_id,
            f"the event its call proposed was applied at sequence {action.emitted}",
        )
    if action.refusal is not None:
        raise _action_error(rec, ev, action_id, "the event its call proposed was refused")
    proposal = action.emit
    if proposal is None:
        raise _action_error(rec, ev, action_id, "its call proposed no event")
    _due(rec, ev, action)
    if not _same_event(ev, proposal):
        raise _action_error(
            rec, ev, action_id,
            f"the event differs from the one its call proposed ('{proposal.type}' with "
            f"fields {_json(proposal.fields)})",
        )  # fmt: skip
    return action


def _due(rec: RunRecord, ev: Any, action: Action) -> None:
    """A call's proposal is judged only once its batch is resolved, in batch order."""
    actions = rec.actions
    for aid in rec.batch:
        other = actions[aid]
        if other.status not in RESOLVED:
            raise _action_error(
                rec, ev, action.action_id,
                f"its batch is not resolved: call '{aid}' is '{other.status}'",
            )  # fmt: skip
    first = rec.pending_emits[0]
    if first is not action:
        raise _action_error(
            rec, ev, action.action_id,
            f"the event call '{first.action_id}' proposed comes first (batch order)",
        )  # fmt: skip


def _decided_claim(rec: RunRecord, ev: Any, turn: int | None) -> None:
    proposal = rec.decided_emit
    if proposal is None or turn != rec.turn or rec.model_call_open:
        raise _refuse(rec, ev, f"the decision of turn {turn} proposed no event now due")
    if not _same_event(ev, proposal):
        raise _refuse(
            rec, ev,
            f"the event differs from the one the decision proposed ('{proposal.type}' with "
            f"fields {_json(proposal.fields)})",
        )  # fmt: skip


def _same_event(ev: Any, proposal: m.ProposedEvent) -> bool:
    """Whether `ev` is the event `proposal` makes (its defaults filled in, read as JSON)."""
    if ev.type != proposal.type:
        return False
    envelope = {"run_id": ev.run_id, "sequence": ev.sequence, "type": ev.type}
    text = _json({**proposal.fields, **envelope, "occurred_at": ev.occurred_at})
    try:
        expected = type(ev).model_validate_json(text)
    except ValidationError:
        return False
    exclude = set(_STAMPED)
    return bool(expected.model_dump(exclude=exclude) == ev.model_dump(exclude=exclude))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _emit_refused(
    table: TransitionTable, rec: RunRecord, ev: m.EmitRefused, move: Move
) -> RunRecord:
    """A succeeded call's event is not applied: `Action.refusal` says why; the run stays."""
    action = _known_action(rec, ev)
    if action.status != A.SUCCEEDED:
        raise _action_error(
            rec, ev, ev.action_id,
            f"only a succeeded call's event can be refused; it is '{action.status}'",
        )  # fmt: skip
    if action.emitted is not None:
        raise _action_error(
            rec,
            ev,
            ev.action_id,
            f"the event its call proposed was applied at sequence {action.emitted}",
        )
    if action.refusal is not None:
        raise _action_error(
            rec, ev, ev.action_id, "the event its call proposed was refused already"
        )
    if action.emit is not None:
        _due(rec, ev, action)
    action = action_emit_refused(action, refusal=ev.refusal)
    return _changed(rec, ev, _to(table, rec, ev, move), action)


def _run_forked(table: TransitionTable, rec: RunRecord, ev: m.RunForked, move: Move) -> RunRecord:
    """The run was forked from `from_run` at `from_sequence`; it stays where it is."""
    if ev.from_run == rec.run_id:
        raise LifecycleError(
            "names the run itself as its source: a fork is another run",
            run_id=rec.run_id, sequence=ev.sequence, state=rec.status, event=ev.type,
        )  # fmt: skip
    return set_forked(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        forked_from=ev.from_run, forked_at=ev.from_sequence,
    )  # fmt: skip


def _usage_reported(
    table: TransitionTable, rec: RunRecord, ev: m.UsageReported, move: Move
) -> RunRecord:
    """Spending the SDK reported beyond the log's model calls: added to the run's usage."""
    return set_usage(
        rec, status=_to(table, rec, ev, move), version=rec.version + 1, updated_at=ev.occurred_at,
        usage=_plus(rec.usage, ev.usage),
    )  # fmt: skip


def _emits_settled(
    rec: RunRecord, actions: Mapping[str, Action], state: str
) -> Mapping[str, Action]:
    """`actions` with the batch's proposals still to judge refused: the run ended first."""
    # `emit` first: most calls propose no event, and `emit_pending` is a property (a call).
    pending = [a for aid in rec.batch if (a := actions[aid]).emit is not None and a.emit_pending]
    if not pending:
        return actions
    ended = [
        action_emit_refused(
            a,
            refusal=m.Refusal.of(
                "run_ended",
                f"the run ended ('{state}') before the event was judged",
                m.Proposal.of(None, (), a.emit.type if a.emit is not None else None),
            ),
        )
        for a in pending
    ]
    return put_all(actions, ended)


HANDLERS: dict[str, Handler] = {
    "run.started": _run_started,
    "model.started": _model_started,
    "model.completed": _model_completed,
    "model.failed": _model_failed,
    "handoff": _handoff,
    "approval.requested": _approval_requested,
    "approval.accepted": _approval_accepted,
    "approval.rejected": _approval_rejected,
    "tool.requested": _tool_requested,
    "tool.started": _tool_started,
    "tool.completed": _tool_completed,
    "tool.failed": _tool_failed,
    "tool.outcome_unknown": _tool_outcome_unknown,
    "run.paused": _run_paused,
    "run.resumed": _run_resumed,
    "run.cancel_requested": _run_cancel_requested,
    "run.cancelled": _run_cancelled,
    "run.completed": _run_completed,
    "run.failed": _run_failed,
    "run.terminated": _run_terminated,
    "emit.refused": _emit_refused,
    "run.forked": _run_forked,
    "usage.reported": _usage_reported,
}
