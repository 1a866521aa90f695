"""The reducer: `reduce(record, event) -> record`, pure and deterministic.

Each event is checked in a fixed order, and the first failure is raised with the record
untouched (it is immutable; a refusal simply returns nothing new):

1. the envelope: the event names this run and the next sequence;
2. the table: some edge leaves the current state on this event type;
3. the ledger and the rules DESIGN.md adds beyond the table (action ids, exact-call binding,
   open model calls, unresolved batches);
4. the edge's condition chooses the target state (or none holds: illegal);
5. the limit guards listed on the edge taken (`agentfsm.guards.guardset`): the run's own
   `run.started.limits`, a shared budget from the context, and the reducer's Python guards.
   A verdict raises `GuardRejectedError`; `run.terminated` is never refused.

Then the event's effect is folded in. The per-event work is a handful of dict lookups and
one record construction: no validation, no hashing, no `attrs.evolve`. (Steps 3 and 4 run
inside each event's handler together with the fold; the guards see the record *before* the
event and the target state, and on a verdict the folded record is simply dropped.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentfsm.errors import (
    ActionError,
    IllegalTransitionError,
    LifecycleError,
    OverrunError,
    RunMismatchError,
    SequenceError,
    TableMismatchError,
)
from agentfsm.events import models as m
from agentfsm.events.bounds import unstorable
from agentfsm.events.canonical import same_json
from agentfsm.events.models import Event, parse_timestamp
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, TransitionTable
from agentfsm.guards.base import Guard, GuardContext
from agentfsm.guards.guardset import GuardSet
from agentfsm.names import RESOLVED, ActionStatus
from agentfsm.record import Action, RunRecord, UsageTotals
from agentfsm.reducers._evolve import evolver, maker
from agentfsm.reducers.snapshot import Snapshot

__all__ = ["DEFAULT_REDUCER", "Reducer", "reduce", "replay"]

A = ActionStatus
_IN_FLIGHT = (A.REQUESTED, A.STARTED)
_NOT_RUN = (A.PROPOSED, A.APPROVAL_PENDING, A.APPROVED)

# Specialised copy functions, one per shape of change (see _evolve.py for why).
_set_basic = evolver(RunRecord, "status", "version", "updated_at")
_set_started = evolver(
    RunRecord,
    *("status", "version", "updated_at", "objective", "current_agent", "limits", "started_at"),
)
_set_model_started = evolver(
    RunRecord,
    *("status", "version", "updated_at", "turn", "model_call_open"),
    *("reserved_tokens", "reserved_cost"),
)
_set_model_completed = evolver(
    RunRecord,
    *("status", "version", "updated_at", "model_call_open", "reserved_tokens", "reserved_cost"),
    *("usage", "last_decision", "final_output", "actions", "batch"),
)
_set_agent = evolver(RunRecord, "status", "version", "updated_at", "current_agent")
_set_custom = evolver(RunRecord, "status", "version", "updated_at", "custom")
_set_actions = evolver(RunRecord, "status", "version", "updated_at", "actions")
_set_actions_batch = evolver(RunRecord, "status", "version", "updated_at", "actions", "batch")
_set_completed = evolver(RunRecord, "status", "version", "updated_at", "actions", "usage", "facts")
_set_pause = evolver(RunRecord, "status", "version", "updated_at", "pause_reason")
_set_cancel = evolver(
    RunRecord,
    *("status", "version", "updated_at", "cancel_reason", "cancel_requested_by", "pause_reason"),
)
_set_ended = evolver(
    RunRecord,
    *("status", "version", "updated_at", "actions", "model_call_open", "reserved_tokens"),
    *("reserved_cost", "pause_reason", "error", "stop_reason", "stop_detail"),
)
_action_approved = evolver(Action, "status", "approver")
_action_rejected = evolver(Action, "status", "approver", "reason")
_action_requested = evolver(Action, "status", "idempotency_key")
_action_started = evolver(Action, "status", "attempts", "error")
_action_succeeded = evolver(Action, "status", "result", "cost")
_action_failed = evolver(Action, "status", "error")
_action_unknown = evolver(Action, "status", "reason")
_action_pending = evolver(Action, "status", "expires_at")
_action_asked_again = evolver(Action, "status", "expires_at", "approver")
_new_action = maker(Action)
_new_usage = maker(UsageTotals)

#: A precomputed move of the table: the target itself, or ordered (condition, target) pairs.
Move = str | tuple[tuple[Condition | None, str], ...]
Handler = Callable[["Reducer", RunRecord, Any, Move], RunRecord]


class Reducer:
    """Folds events into run records under one table, checking its guards.

    Args:
        table: the transition table (the default agent-run table unless given).
        guards: Python guard objects (`MaxTurns(3)`, `LoopDetector()`, your own), each run
            on the table edges that list its name.
        run_limits: check each run's own `run.started.limits` too (the stricter limit wins).

    Raises:
        InvalidTableError: a guard no edge lists, or a guard listed on `run.terminated`.
    """

    __slots__ = (
        "_allowed", "_always", "_guarded", "_handlers", "_moves", "_terminal", "guards", "table",
    )  # fmt: skip

    def __init__(
        self,
        table: TransitionTable = DEFAULT_TABLE,
        guards: Iterable[Guard] = (),
        *,
        run_limits: bool = True,
    ) -> None:
        self.table = table
        self._moves = table._moves  # the precomputed (state -> event -> move) map
        self._allowed = table._allowed
        self._terminal = table.terminal_states
        self._handlers: dict[str, Handler] = dict(_HANDLERS)
        for name in table.event_types.custom:
            self._handlers[name] = _custom_event
        #: The guards bound to the table's edges (see `agentfsm.guards.guardset`).
        self.guards = GuardSet(table, guards, run_limits=run_limits)
        self._guarded = self.guards.events
        self._always = self.guards.always

    def initial(self, run_id: str) -> RunRecord:
        """The record of a run before its first event."""
        return RunRecord(run_id=run_id, status=self.table.initial)

    def reduce(self, record: RunRecord, event: Event, ctx: GuardContext | None = None) -> RunRecord:
        """The record after `event`, or a `LifecycleError` with `record` unchanged.

        Args:
            record: the run's record before the event.
            event: the event to apply.
            ctx: what guards see as the time and shared budget; by default the time is the
                event's `occurred_at` (so replays and audits are deterministic).

        Raises:
            GuardRejectedError: a guard's verdict (the run should be terminated with its
                `stop_reason`); it is a `LifecycleError`, apart from `IllegalTransitionError`.
        """
        if event.sequence != record.version + 1 or event.run_id != record.run_id:
            _envelope_error(record, event)
        move = self._moves[record.status].get(event.type)
        if move is None:
            state = record.status  # the refusal path is hot too: validators probe with it
            raise IllegalTransitionError.quick(
                record.run_id, event.sequence, state, event.type,
                self._allowed.get(state, ()), state in self._terminal, (),
            )  # fmt: skip
        new = self._handlers[event.type](self, record, event, move)
        if event.type in self._guarded and (
            self._always or record.limits is not None or ctx is not None
        ):
            verdict = self.guards.check(record, event, new.status, ctx)
            if verdict is not None:
                raise verdict.error(record, event)
        return new

    def overrun(
        self, before: RunRecord, event: Event, after: RunRecord, ctx: GuardContext | None = None
    ) -> OverrunError | None:
        """The `OverrunError` when `event`, accepted (`before` -> `after`), overran a budget.

        `reduce` accepts such an event: the usage it records is a fact. This says whether it
        took the run past a limit (see `GuardSet.overrun`), for those who must then stop
        the run (the runtime, the adapters) or report it (audits, validation).
        """
        verdict = self.guards.overrun(after, event, ctx)
        return verdict.overrun(before, event) if verdict is not None else None

    def replay(self, events: Iterable[Event], snapshot: Snapshot | None = None) -> RunRecord:
        """Fold `events` from the start of the run, or after `snapshot`.

        Raises:
            ValueError: no events and no snapshot (there is no run to speak of).
        """
        it = iter(events)
        if snapshot is not None:
            record = snapshot.record
        else:
            first = next(it, None)
            if first is None:
                raise ValueError("replay needs at least one event or a snapshot")
            record = self.reduce(self.initial(first.run_id), first)
        reduce = self.reduce
        for event in it:
            record = reduce(record, event)
        return record


def _to(r: Reducer, rec: RunRecord, ev: Any, move: Move) -> str:
    """Resolve a move: a plain target, or the first alternative whose condition holds."""
    if isinstance(move, str):
        return move
    for condition, target in move:  # inlined from TransitionTable.choose: hot
        if condition is None or condition.predicate(rec, ev):
            return target
    return r.table.choose(move, rec.status, ev.type, rec, ev, rec.run_id, ev.sequence)


def _custom_event(r: Reducer, rec: RunRecord, ev: Any, move: Move) -> RunRecord:
    """A lifecycle's own event: the table moves the run, the event's `fold` records fields."""
    target = _to(r, rec, ev, move)
    custom = ev.fold(rec.custom)
    if custom is not rec.custom:
        problem = unstorable(dict(custom)) if isinstance(custom, Mapping) else "not a mapping"
        if problem is not None:
            raise TypeError(
                f"{type(ev).__name__}.fold returned what no run record can hold: {problem}"
            )
    return _set_custom(rec, target, ev.sequence, ev.occurred_at, custom)


def _envelope_error(record: RunRecord, event: Event) -> None:
    if event.run_id != record.run_id:
        raise RunMismatchError(
            run_id=record.run_id,
            event_run_id=event.run_id,
            sequence=event.sequence,
            state=record.status,
            event=event.type,
        )
    raise SequenceError(
        run_id=record.run_id,
        sequence=event.sequence,
        expected=record.version + 1,
        state=record.status,
        event=event.type,
    )


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


def _no_open_model_call(record: RunRecord, event: Any) -> None:
    if record.model_call_open:
        raise _refuse(record, event, "a model call is open (model.started has no model.completed)")


def _known_action(record: RunRecord, event: Any) -> Action:
    action = record.actions.get(event.action_id)
    if action is None:
        raise _action_error(
            record, event, event.action_id, "no such action was proposed or requested"
        )
    return action


def _with(actions: Mapping[str, Action], action: Action) -> dict[str, Action]:
    new = dict(actions)
    new[action.action_id] = action
    return new


# -- handlers, one per event type ---------------------------------------------------------


def _run_started(r: Reducer, rec: RunRecord, ev: m.RunStarted, move: Move) -> RunRecord:
    started = ev.table
    if started is not None and started.digest != r.table.digest:
        # Folding a run with another table (or another version of it) would read its log
        # under rules it was never written under.
        raise TableMismatchError(
            run_id=rec.run_id,
            sequence=ev.sequence,
            started_under=f"'{started.name}' ({started.digest})",
            folded_with=f"'{r.table.name}' ({r.table.digest})",
        )
    agent = ev.agent if ev.agent is not None else rec.current_agent
    return _set_started(
        rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at,
        ev.objective, agent, ev.limits, ev.occurred_at,
    )  # fmt: skip


def _model_started(r: Reducer, rec: RunRecord, ev: m.ModelStarted, move: Move) -> RunRecord:
    _no_open_model_call(rec, ev)
    actions = rec.actions
    for aid in rec.batch:
        status = actions[aid].status
        if status not in RESOLVED:
            raise _action_error(
                rec, ev, aid,
                f"the model cannot be called while an action of the batch is '{status}'",
            )  # fmt: skip
    return _set_model_started(
        rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at, rec.turn + 1, True,
        ev.reserved_tokens or 0, ev.reserved_cost or 0.0,
    )  # fmt: skip


def _model_completed(r: Reducer, rec: RunRecord, ev: m.ModelCompleted, move: Move) -> RunRecord:
    if not rec.model_call_open:
        raise _refuse(rec, ev, "no model call is open (model.completed without model.started)")
    actions: Mapping[str, Action] = rec.actions
    batch: tuple[str, ...] = ()
    if ev.tool_calls:
        new = dict(actions)
        key_prefix = rec.run_id + ":"
        for call in ev.tool_calls:
            aid = call.action_id
            if aid in new:
                raise _action_error(rec, ev, aid, "the action id is already used")
            new[aid] = _new_action(
                aid, call.tool, call.arguments, A.PROPOSED, 0, key_prefix + aid,
                None, None, None, None, None, None,
            )  # fmt: skip
        actions = new
        batch = tuple(c.action_id for c in ev.tool_calls)
    usage = rec.usage
    if ev.usage is not None:
        u = ev.usage
        usage = _new_usage(
            usage.input_tokens + u.input_tokens,
            usage.output_tokens + u.output_tokens,
            usage.cost + u.cost,
        )
    final = ev.output if ev.decision == "final" else rec.final_output
    return _set_model_completed(
        rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at, False, 0, 0.0,
        usage, ev.decision, final, actions, batch,
    )  # fmt: skip


def _handoff(r: Reducer, rec: RunRecord, ev: m.Handoff, move: Move) -> RunRecord:
    _no_open_model_call(rec, ev)
    return _set_agent(rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at, ev.to_agent)


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
    r: Reducer, rec: RunRecord, ev: m.ApprovalRequested, move: Move
) -> RunRecord:
    _no_open_model_call(rec, ev)
    action = rec.actions.get(ev.action_id)
    batch = rec.batch
    if action is None:
        action = Action(
            ev.action_id, ev.tool, ev.arguments, A.APPROVAL_PENDING, 0,
            f"{rec.run_id}:{ev.action_id}", expires_at=ev.expires_at,
        )  # fmt: skip
        batch = (*batch, ev.action_id)
    elif action.status == A.PROPOSED:
        _bound_to_call(rec, ev, action, "proposed")
        action = _action_pending(action, A.APPROVAL_PENDING, ev.expires_at)
    elif action.status == A.APPROVED:
        # An approved call that has not run may be put to a person again (its approval
        # lapsed, or the runtime went on without it): the decision reopens, never widens.
        _bound_to_call(rec, ev, action, "approved")
        action = _action_asked_again(action, A.APPROVAL_PENDING, ev.expires_at, None)
    else:
        raise _action_error(
            rec, ev, ev.action_id,
            "approval can only be asked for a new, proposed or approved (not yet run) "
            f"action; it is '{action.status}'",
        )  # fmt: skip
    target = _to(r, rec, ev, move)
    actions = _with(rec.actions, action)
    return _set_actions_batch(rec, target, ev.sequence, ev.occurred_at, actions, batch)


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


def _approval_accepted(r: Reducer, rec: RunRecord, ev: m.ApprovalAccepted, move: Move) -> RunRecord:
    action = _pending_approval(rec, ev)
    if _expired(action, ev):
        # Too late to approve; a rejection still settles the call.
        raise _action_error(rec, ev, ev.action_id, f"its approval expired at {action.expires_at}")
    target = _to(r, rec, ev, move)
    action = _action_approved(action, A.APPROVED, ev.approver)
    return _set_actions(rec, target, ev.sequence, ev.occurred_at, _with(rec.actions, action))


def _approval_rejected(r: Reducer, rec: RunRecord, ev: m.ApprovalRejected, move: Move) -> RunRecord:
    action = _pending_approval(rec, ev)
    target = _to(r, rec, ev, move)
    action = _action_rejected(action, A.REJECTED, ev.approver, ev.reason)
    return _set_actions(rec, target, ev.sequence, ev.occurred_at, _with(rec.actions, action))


def _tool_requested(r: Reducer, rec: RunRecord, ev: m.ToolRequested, move: Move) -> RunRecord:
    _no_open_model_call(rec, ev)
    key = ev.idempotency_key or f"{rec.run_id}:{ev.action_id}"
    action = rec.actions.get(ev.action_id)
    batch = rec.batch
    if action is None:
        action = _new_action(
            ev.action_id, ev.tool, ev.arguments, A.REQUESTED, 0, key,
            None, None, None, None, None, None,
        )  # fmt: skip
        batch = (*batch, ev.action_id)
    elif action.status == A.PROPOSED or action.status == A.APPROVED:
        _bound_to_call(rec, ev, action, "approved" if action.status == A.APPROVED else "proposed")
        if _expired(action, ev):
            raise _action_error(
                rec, ev, ev.action_id, f"its approval expired at {action.expires_at}"
            )
        action = _action_requested(action, A.REQUESTED, key)
    elif action.status == A.APPROVAL_PENDING:
        raise _action_error(rec, ev, ev.action_id, "it is still waiting for approval")
    else:
        raise _action_error(
            rec, ev, ev.action_id, f"the action id is already used; it is '{action.status}'"
        )
    target = _to(r, rec, ev, move)
    actions = _with(rec.actions, action)
    return _set_actions_batch(rec, target, ev.sequence, ev.occurred_at, actions, batch)


def _tool_started(r: Reducer, rec: RunRecord, ev: m.ToolStarted, move: Move) -> RunRecord:
    action = _known_action(rec, ev)
    target = _to(r, rec, ev, move)
    if ev.attempt != action.attempts + 1:
        raise _action_error(
            rec, ev, ev.action_id,
            f"attempt {ev.attempt} does not follow {action.attempts} attempts: "
            f"expected attempt {action.attempts + 1}",
        )  # fmt: skip
    action = _action_started(action, A.STARTED, ev.attempt, None)
    return _set_actions(rec, target, ev.sequence, ev.occurred_at, _with(rec.actions, action))


def _in_flight_action(rec: RunRecord, ev: Any) -> Action:
    action = _known_action(rec, ev)
    if action.status not in _IN_FLIGHT:
        raise _action_error(rec, ev, ev.action_id, f"it is not in flight; it is '{action.status}'")
    return action


def _tool_completed(r: Reducer, rec: RunRecord, ev: m.ToolCompleted, move: Move) -> RunRecord:
    action = _in_flight_action(rec, ev)
    target = _to(r, rec, ev, move)
    usage = rec.usage
    if ev.cost:
        usage = _new_usage(usage.input_tokens, usage.output_tokens, usage.cost + ev.cost)
    facts = dict(rec.facts)
    facts[action.tool] = ev.result
    action = _action_succeeded(action, A.SUCCEEDED, ev.result, ev.cost)
    actions = _with(rec.actions, action)
    return _set_completed(rec, target, ev.sequence, ev.occurred_at, actions, usage, facts)


def _tool_failed(r: Reducer, rec: RunRecord, ev: m.ToolFailed, move: Move) -> RunRecord:
    action = _in_flight_action(rec, ev)
    target = _to(r, rec, ev, move)
    action = _action_failed(action, A.FAILED, ev.error)
    return _set_actions(rec, target, ev.sequence, ev.occurred_at, _with(rec.actions, action))


def _tool_outcome_unknown(
    r: Reducer, rec: RunRecord, ev: m.ToolOutcomeUnknown, move: Move
) -> RunRecord:
    action = _in_flight_action(rec, ev)
    target = _to(r, rec, ev, move)
    action = _action_unknown(action, A.UNKNOWN, ev.reason)
    return _set_actions(rec, target, ev.sequence, ev.occurred_at, _with(rec.actions, action))


def _run_paused(r: Reducer, rec: RunRecord, ev: m.RunPaused, move: Move) -> RunRecord:
    _no_open_model_call(rec, ev)
    return _set_pause(rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at, ev.reason)


def _run_resumed(r: Reducer, rec: RunRecord, ev: m.RunResumed, move: Move) -> RunRecord:
    return _set_pause(rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at, None)


def _run_cancel_requested(
    r: Reducer, rec: RunRecord, ev: m.RunCancelRequested, move: Move
) -> RunRecord:
    return _set_cancel(
        rec, _to(r, rec, ev, move), ev.sequence, ev.occurred_at,
        ev.reason, ev.requested_by, None,
    )  # fmt: skip


_ENDED_IN_FLIGHT = "the run ended while it was in flight"
_ENDED_NOT_RUN = "the run ended before it ran"


def _settled(actions: Mapping[str, Action]) -> Mapping[str, Action]:
    """The ledger of an ended run: nothing left in flight or waiting to run."""
    changed = None
    for aid, action in actions.items():
        if action.status in _IN_FLIGHT:
            settled = _action_unknown(action, A.UNKNOWN, _ENDED_IN_FLIGHT)
        elif action.status in _NOT_RUN:
            settled = _action_rejected(action, A.REJECTED, action.approver, _ENDED_NOT_RUN)
        else:
            continue
        if changed is None:
            changed = dict(actions)
        changed[aid] = settled
    return actions if changed is None else changed


def _end(
    r: Reducer,
    rec: RunRecord,
    ev: Any,
    move: Move,
    error: m.ErrorInfo | None = None,
    stop_reason: str | None = None,
    detail: str | None = None,
) -> RunRecord:
    target = _to(r, rec, ev, move)
    return _set_ended(
        rec, target, ev.sequence, ev.occurred_at, _settled(rec.actions), False, 0, 0.0, None,
        error, stop_reason, detail,
    )  # fmt: skip


def _run_cancelled(r: Reducer, rec: RunRecord, ev: m.RunCancelled, move: Move) -> RunRecord:
    return _end(r, rec, ev, move)


def _run_completed(r: Reducer, rec: RunRecord, ev: m.RunCompleted, move: Move) -> RunRecord:
    return _end(r, rec, ev, move)


def _run_failed(r: Reducer, rec: RunRecord, ev: m.RunFailed, move: Move) -> RunRecord:
    return _end(r, rec, ev, move, error=ev.error)


def _run_terminated(r: Reducer, rec: RunRecord, ev: m.RunTerminated, move: Move) -> RunRecord:
    return _end(r, rec, ev, move, stop_reason=ev.stop_reason, detail=ev.detail)


_HANDLERS: dict[str, Handler] = {
    "run.started": _run_started,
    "model.started": _model_started,
    "model.completed": _model_completed,
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
}

#: The reducer of the default agent-run table.
DEFAULT_REDUCER = Reducer()


def reduce(record: RunRecord, event: Event) -> RunRecord:
    """Fold one event into a record under the default table (see `Reducer.reduce`)."""
    return DEFAULT_REDUCER.reduce(record, event)


def replay(events: Iterable[Event], snapshot: Snapshot | None = None) -> RunRecord:
    """Fold a run's events (after `snapshot`, if given) under the default table."""
    return DEFAULT_REDUCER.replay(events, snapshot)
