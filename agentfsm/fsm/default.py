"""The default agent-run table, exactly as DESIGN.md declares it.

Its conditions read the run record *before* the event (`context`) and the event itself
(`payload`); they assume the reducer has already checked that the event's action exists.
"""

from __future__ import annotations

from typing import Any

from agentfsm.fsm.table import Condition, State, Transition, TransitionTable
from agentfsm.names import RESOLVED, ActionStatus, DecisionKind, StateKind, StopReason
from agentfsm.names import EventType as E
from agentfsm.names import RunStatus as S

__all__ = [
    "ALL_DECIDED",
    "BATCH_RESOLVED",
    "CALLS_LEFT",
    "DECISIONS_LEFT",
    "DEFAULT_TABLE",
    "EARLIER_DEFAULT_TABLES",
    "FINAL_ACCEPTABLE",
    "NOTHING_IN_FLIGHT",
    "NO_CALLS_LEFT",
    "OTHERS_PENDING",
    "RETRY",
    "STARTABLE",
]

_IN_FLIGHT = frozenset({ActionStatus.REQUESTED, ActionStatus.STARTED})
# Statuses of a call the batch still has to run (or is running): not decided, not waiting.
_TO_RUN = frozenset(
    {ActionStatus.PROPOSED, ActionStatus.APPROVED, ActionStatus.REQUESTED, ActionStatus.STARTED}
)


def _batch_resolved(rec: Any, ev: Any) -> bool:
    # Plain loops: these run on every tool result, and a generator costs twice as much.
    actions = rec.actions
    me = ev.action_id
    for aid in rec.batch:  # noqa: SIM110 - see above
        if aid != me and actions[aid].status not in RESOLVED:
            return False
    return True


def _calls_left(rec: Any, ev: Any) -> bool:
    actions = rec.actions
    me = ev.action_id
    for aid in rec.batch:  # noqa: SIM110 - a plain loop, as above
        if aid != me and actions[aid].status in _TO_RUN:
            return True
    return False


def _decisions_left(rec: Any, ev: Any) -> bool:
    # Nothing else to run, yet the batch is not resolved: what is left waits for a human.
    actions = rec.actions
    me = ev.action_id
    pending = False
    for aid in rec.batch:
        if aid != me:
            status = actions[aid].status
            if status in _TO_RUN:
                return False
            if status == ActionStatus.APPROVAL_PENDING:
                pending = True
    return pending


def _others_pending(rec: Any, ev: Any) -> bool:
    actions = rec.actions
    me = ev.action_id
    for aid in rec.batch:
        if aid != me and actions[aid].status == ActionStatus.APPROVAL_PENDING:
            return True
    return False


def _retryable_failure(action: Any) -> bool:
    return action.status == ActionStatus.FAILED and bool(action.error and action.error.retryable)


def _retry(rec: Any, ev: Any) -> bool:
    action = rec.actions[ev.action_id]
    return ev.action_id in rec.batch and not rec.model_call_open and _retryable_failure(action)


def _startable(rec: Any, ev: Any) -> bool:
    action = rec.actions[ev.action_id]
    return action.status == ActionStatus.REQUESTED or _retryable_failure(action)


def _final_acceptable(rec: Any, ev: Any) -> bool:
    actions = rec.actions
    return (
        rec.last_decision == DecisionKind.FINAL
        and not rec.model_call_open
        and all(actions[a].status in RESOLVED for a in rec.batch)
    )


def _nothing_in_flight(rec: Any, ev: Any) -> bool:
    return not any(a.status in _IN_FLIGHT for a in rec.actions.values())


#: The default table's condition "batch resolved": after this result, every action of the batch is
#: resolved.
BATCH_RESOLVED = Condition(
    "batch resolved", _batch_resolved, "after this result, every action of the batch is resolved"
)
#: The default table's condition "calls left": another action of the batch is still to run or
#: running.
CALLS_LEFT = Condition(
    "calls left",
    _calls_left,
    "another action of the batch is still to run or running",
)
#: The default table's condition "no calls left": no other action of the batch is to run or
#: running.
NO_CALLS_LEFT = Condition(
    "no calls left",
    lambda rec, ev: not _calls_left(rec, ev),
    "no other action of the batch is to run or running",
)
#: The default table's condition "only decisions left": nothing of the batch is left to run, but an
#: action still waits for a decision.
DECISIONS_LEFT = Condition(
    "only decisions left",
    _decisions_left,
    "nothing of the batch is left to run, but an action still waits for a decision",
)
#: The default table's condition "others still pending": another action of the batch still waits
#: for a decision.
OTHERS_PENDING = Condition(
    "others still pending",
    _others_pending,
    "another action of the batch still waits for a decision",
)
#: The default table's condition "all decided": this decision was the last one the batch waited
#: for.
ALL_DECIDED = Condition(
    "all decided",
    lambda rec, ev: not _others_pending(rec, ev),
    "this decision was the last one the batch waited for",
)
#: The default table's condition "retry": the action's last attempt failed retryably, in the
#: current batch, no model call since.
RETRY = Condition(
    "retry",
    _retry,
    "the action's last attempt failed retryably, in the current batch, no model call since",
)
#: The default table's condition "first attempt or retry": the action is requested and not started,
#: or its last attempt failed retryably.
STARTABLE = Condition(
    "first attempt or retry",
    _startable,
    "the action is requested and not started, or its last attempt failed retryably",
)
#: The default table's condition "final output recorded, nothing unresolved": the last model
#: decision is final and every action is resolved.
FINAL_ACCEPTABLE = Condition(
    "final output recorded, nothing unresolved",
    _final_acceptable,
    "the last model decision is final and every action is resolved",
)
#: The default table's condition "nothing in flight": no action is requested or started.
NOTHING_IN_FLIGHT = Condition(
    "nothing in flight", _nothing_in_flight, "no action is requested or started"
)

_STATES = (
    State(S.CREATED, description="the run exists, nothing has happened"),
    State(S.RUNNING, description="the model's side of a turn: context, model call, deciding"),
    State(
        S.WAITING_TOOL,
        description="the current batch has calls running or left to run",
        kind=StateKind.IN_FLIGHT,
    ),
    State(
        S.WAITING_APPROVAL,
        description="a proposed action waits for a human decision",
        kind=StateKind.WAITING,
    ),
    State(
        S.PAUSED,
        description="waiting for user input, a callback, a timer or quota",
        kind=StateKind.PAUSED,
    ),
    State(
        S.CANCEL_REQUESTED,
        description="cancellation accepted; in-flight actions settle",
        kind=StateKind.IN_FLIGHT,
    ),
    State(S.COMPLETED, terminal=True, description="a final output exists and was accepted"),
    State(S.FAILED, terminal=True, description="the run cannot go on by its current path"),
    State(S.CANCELLED, terminal=True, description="stopped on request, nothing in flight"),
    State(S.TERMINATED, terminal=True, description="a guard stopped it"),
)

_NON_TERMINAL = tuple(s.name for s in _STATES if not s.terminal)
_RESULTS = (E.TOOL_COMPLETED, E.TOOL_FAILED, E.TOOL_OUTCOME_UNKNOWN)
# Guard names are the built-in guards' stop reasons (agentfsm.guards.limits, .loops). Tools
# spend cost, so the budget is checked before each tool call as well as each model call.
_MODEL_GUARDS = (StopReason.MAX_TURNS, StopReason.DEADLINE, StopReason.BUDGET)
_TOOL_GUARDS = (StopReason.DEADLINE, StopReason.BUDGET, StopReason.MAX_ATTEMPTS)
_REQUEST_GUARDS = (StopReason.LOOP_DETECTED,)
# A decision proposing more calls than allowed is refused (recorded as `refused`), wherever
# the answer comes in: a late answer after a cancel would put its calls in the ledger too.
_DECISION_GUARDS = (StopReason.MAX_CALLS_PER_DECISION,)


def _transitions(decision_guards: tuple[str, ...] = _DECISION_GUARDS) -> list[Transition]:
    t = [
        Transition(S.CREATED, E.RUN_STARTED, S.RUNNING),
        Transition(S.RUNNING, E.MODEL_STARTED, S.RUNNING, guards=_MODEL_GUARDS),
        Transition(S.RUNNING, E.MODEL_COMPLETED, S.RUNNING, guards=decision_guards),
        Transition(S.RUNNING, E.HANDOFF, S.RUNNING),
        Transition(S.RUNNING, E.APPROVAL_REQUESTED, S.WAITING_APPROVAL),
        Transition(S.WAITING_APPROVAL, E.APPROVAL_REQUESTED, S.WAITING_APPROVAL),
        # SDKs (OpenAI Agents, pydantic-ai) run a batch's free calls first and then pause for
        # the calls that need approval: the request may come while the batch is at its tools.
        Transition(S.WAITING_TOOL, E.APPROVAL_REQUESTED, S.WAITING_TOOL, CALLS_LEFT),
        Transition(S.WAITING_TOOL, E.APPROVAL_REQUESTED, S.WAITING_APPROVAL, NO_CALLS_LEFT),
    ]
    for decision in (E.APPROVAL_ACCEPTED, E.APPROVAL_REJECTED):
        t += [
            Transition(S.WAITING_APPROVAL, decision, S.WAITING_APPROVAL, OTHERS_PENDING),
            Transition(S.WAITING_APPROVAL, decision, S.RUNNING, ALL_DECIDED),
            # A human may decide while other calls of the batch still run.
            Transition(S.WAITING_TOOL, decision, S.WAITING_TOOL),
        ]
    t += [
        Transition(S.RUNNING, E.TOOL_REQUESTED, S.WAITING_TOOL, guards=_REQUEST_GUARDS),
        Transition(S.WAITING_TOOL, E.TOOL_REQUESTED, S.WAITING_TOOL, guards=_REQUEST_GUARDS),
        Transition(S.WAITING_TOOL, E.TOOL_STARTED, S.WAITING_TOOL, STARTABLE, _TOOL_GUARDS),
        Transition(S.RUNNING, E.TOOL_STARTED, S.WAITING_TOOL, RETRY, _TOOL_GUARDS),
    ]
    for result in _RESULTS:
        # Most results end their batch, so that condition is tried first (a loop that stops
        # at the first open call); the order only saves work, the three never overlap.
        t += [
            Transition(S.WAITING_TOOL, result, S.RUNNING, BATCH_RESOLVED),
            Transition(S.WAITING_TOOL, result, S.WAITING_TOOL, CALLS_LEFT),
            Transition(S.WAITING_TOOL, result, S.WAITING_APPROVAL, DECISIONS_LEFT),
        ]
    t += [
        Transition(S.RUNNING, E.RUN_PAUSED, S.PAUSED),
        Transition(S.PAUSED, E.RUN_RESUMED, S.RUNNING),
        Transition(S.RUNNING, E.RUN_COMPLETED, S.COMPLETED, FINAL_ACCEPTABLE),
    ]
    t += [Transition(s, E.RUN_CANCEL_REQUESTED, S.CANCEL_REQUESTED) for s in _NON_TERMINAL]
    t += [Transition(S.CANCEL_REQUESTED, r, S.CANCEL_REQUESTED) for r in _RESULTS]
    # A model call that returns after the cancel was asked happened all the same: its
    # answer and usage are recorded (the calls it proposes never run).
    t.append(
        Transition(
            S.CANCEL_REQUESTED, E.MODEL_COMPLETED, S.CANCEL_REQUESTED, guards=decision_guards
        )
    )
    t.append(Transition(S.CANCEL_REQUESTED, E.RUN_CANCELLED, S.CANCELLED, NOTHING_IN_FLIGHT))
    t += [Transition(s, E.RUN_FAILED, S.FAILED) for s in _NON_TERMINAL]
    t += [Transition(s, E.RUN_TERMINATED, S.TERMINATED) for s in _NON_TERMINAL]
    return t


#: The agent-run lifecycle of DESIGN.md. Derive your own with `DEFAULT_TABLE.derive(...)`.
DEFAULT_TABLE = TransitionTable(
    name="agent_run", states=_STATES, initial=S.CREATED, transitions=_transitions()
)

#: The earlier versions of the default table that stored runs may have been started under,
#: newest first; the registry knows them, so those runs still load, each folded under the
#: rules it was written under. The first is the table before `max_calls_per_decision` was
#: checked on `model.completed`.
EARLIER_DEFAULT_TABLES = (
    TransitionTable(
        name="agent_run", states=_STATES, initial=S.CREATED, transitions=_transitions(())
    ),
)
