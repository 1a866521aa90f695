"""The Runner's decisions, apart from its I/O: what to do next, given the durable record.

Both runners (sync and asyncio) ask `Planner.next(record, now)` what to do, do it, and ask
again. The answer depends only on the record, the agents and the settings, never on what the
process remembers, so resuming after a crash is the same code as going on: a run is always
continued from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs
from pydantic import JsonValue, TypeAdapter, ValidationError

from agentfsm.errors import GuardRejectedError, OverrunError
from agentfsm.events import models as m
from agentfsm.events.bounds import unstorable
from agentfsm.events.models import parse_timestamp
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import AnyOf, Guard
from agentfsm.guards.limits import Budget, MaxTurns
from agentfsm.names import (
    RESOLVED,
    ActionStatus,
    DecisionKind,
    EventType,
    RunStatus,
    StopReason,
)
from agentfsm.record import Action, RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime.agent import Agent, RunnerConfig
from agentfsm.runtime.errors import UnknownAgentError
from agentfsm.runtime.model import Decision as ModelDecision
from agentfsm.runtime.model import ModelContext
from agentfsm.runtime.policy import POLICY_APPROVER
from agentfsm.runtime.tools import (
    InvalidCall,
    OutcomeUnknownError,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
)
from agentfsm.runtime.writer import Spec, approval_asked, declined, requested

A = ActionStatus
S = RunStatus

#: action ids for calls the model gave none (or a used one) for: (record, index) -> id.
ActionIds = Callable[[RunRecord, int], str]


def turn_action_ids(record: RunRecord, index: int) -> str:
    """The default action ids: `t<turn>.<n>` (deterministic, so replays and tests agree)."""
    return f"t{record.turn}.{index + 1}"


# -- steps ------------------------------------------------------------------------------------


@attrs.frozen
class Finish:
    """Return to the caller: the run is terminal, or waits for a person."""


@attrs.frozen
class Append:
    """Append these events (one atomic batch)."""

    specs: tuple[Spec, ...]


@attrs.frozen
class Turn:
    """Call the model: append `model.started` first unless a model call is already open."""

    agent: Agent
    reopen: bool
    wrap_up: bool


@attrs.frozen
class Work:
    """Run one action: `start` (a requested action), `retry` (after a retryable failure),
    `reexecute` (started by a worker that died, and safe to repeat)."""

    action_id: str
    tool: Tool
    mode: Literal["start", "retry", "reexecute"]


@attrs.frozen
class Execute:
    """Run these actions (sequentially, or concurrently by concurrency key)."""

    work: tuple[Work, ...]


Step = Finish | Append | Turn | Execute


def error(kind: str, message: str, *, retryable: bool = False) -> dict[str, Any]:
    """An `ErrorInfo` as event fields."""
    return {"kind": kind, "message": message, "retryable": retryable}


def max_turns_of(record: RunRecord, guards: Sequence[Guard]) -> int | None:
    """The tightest turn limit on the run: its own `limits.max_turns` or a `MaxTurns` guard."""
    limits = [g.limit for g in _flat(guards) if isinstance(g, MaxTurns)]
    if record.limits is not None and record.limits.max_turns is not None:
        limits.append(record.limits.max_turns)
    return min(limits) if limits else None


def _flat(guards: Sequence[Guard]) -> list[Guard]:
    out: list[Guard] = []
    for g in guards:
        if isinstance(g, AnyOf):
            out.extend(_flat(g.members))
        else:
            out.append(g)
    return out


def working(table: TransitionTable, status: str) -> bool:
    """Whether a run in `status` may start more calls: active or in flight, and not where
    a cancellation settles."""
    return status in table.runnable_states and not table.settles_cancel(status)


def retry_allowed(
    record: RunRecord, action: Action, tool: Tool | None, table: TransitionTable
) -> bool:
    """A failed action may run again: retryable error, safe tool, attempts left, same batch."""
    return (
        tool is not None
        and action.status == A.FAILED
        and action.error is not None
        and action.error.retryable
        and tool.safe_to_repeat
        and action.attempts < tool.max_attempts
        and action.action_id in record.batch
        and not record.model_call_open
        # Where the table lets a call start again (running and waiting_tool by default).
        and "tool.started" in table.allowed(record.status)
    )


class Planner:
    """Decides the next step of a run (see the module docstring)."""

    def __init__(
        self,
        agents: Mapping[str, Agent],
        default_agent: str,
        reducer: Reducer,
        config: RunnerConfig,
        action_ids: ActionIds,
    ) -> None:
        self.agents = agents
        self.default_agent = default_agent
        self.reducer = reducer
        self.config = config
        self.action_ids = action_ids

    def agent_of(self, record: RunRecord) -> Agent:
        """The agent in charge of the run."""
        name = record.current_agent or self.default_agent
        agent = self.agents.get(name)
        if agent is None:
            raise UnknownAgentError(
                run_id=record.run_id, agent=name, known=tuple(sorted(self.agents))
            )
        return agent

    def next(self, record: RunRecord, now: datetime) -> Step:
        """The next step for `record`."""
        status = record.status
        table = self.reducer.table
        # By the kinds the table declares, never by the default table's names: a state of
        # a user's own (a ticket escalated to a person) stops the Runner like one of ours.
        if table.stops_driving(status):
            return Finish()
        if table.settles_cancel(status):
            return Append(self.settle_cancel(record))
        overspent = self.reducer.guards.overspent(record)
        if overspent is not None:
            # Only after a crash between a call that overran and the stop it calls for.
            stop = {"stop_reason": overspent.stop_reason, "detail": overspent.detail}
            return Append(((m.RunTerminated, stop),))
        agent = self.agent_of(record)
        if record.model_call_open:
            return Turn(agent, reopen=True, wrap_up=self._wrap_up(record, record.turn))
        batch = [record.actions[a] for a in record.batch]
        if any(a.status in (A.PROPOSED, A.APPROVED) for a in batch):
            return Append(self.admit(record, agent, batch, now))
        work: list[Work] = []
        orphans: list[Spec] = []
        for action in batch:
            tool = agent.tools.get(action.tool)
            if action.status == A.REQUESTED:
                if tool is None:
                    orphans.append(_gone(action))
                else:
                    work.append(Work(action.action_id, tool, "start"))
            elif action.status == A.STARTED:
                if tool is not None and tool.safe_to_repeat:
                    work.append(Work(action.action_id, tool, "reexecute"))
                else:
                    orphans.append(_unknown_orphan(action, tool))
            elif retry_allowed(record, action, tool, self.reducer.table):
                assert tool is not None
                work.append(Work(action.action_id, tool, "retry"))
        if orphans:
            return Append(tuple(orphans))
        if work:
            return Execute(tuple(work))
        if record.last_decision == DecisionKind.FINAL:
            return Append(self.accept(record))
        return Turn(agent, reopen=False, wrap_up=self._wrap_up(record, record.turn + 1))

    # -- pieces -------------------------------------------------------------------------

    def _wrap_up(self, record: RunRecord, turn: int) -> bool:
        if not self.config.wrap_up_turn:
            return False
        limit = max_turns_of(record, self.reducer.guards.guards)
        return limit is not None and turn >= limit

    def settle_cancel(self, record: RunRecord) -> tuple[Spec, ...]:
        """Resolve what is still in flight, then `run.cancelled`."""
        specs: list[Spec] = []
        for action in record.actions.values():
            if action.status == A.REQUESTED:
                specs.append(
                    (
                        m.ToolFailed,
                        {
                            "action_id": action.action_id,
                            "error": error("cancelled", "the run was cancelled before it started"),
                        },
                    )
                )
            elif action.status == A.STARTED:
                specs.append(
                    (
                        m.ToolOutcomeUnknown,
                        {
                            "action_id": action.action_id,
                            "reason": "the run was cancelled while it was in flight",
                        },
                    )
                )
        specs.append((m.RunCancelled, {}))
        return tuple(specs)

    def admit(
        self, record: RunRecord, agent: Agent, batch: list[Action], now: datetime
    ) -> tuple[Spec, ...]:
        """Policy and validation for the batch's proposed and approved calls.

        Approvals come first: a person sees the batch before any of it runs (the table
        would also take them beside running calls, as SDKs do). If any is asked for, the
        run waits and the rest stay proposed until the decisions are in. An approval that
        lapsed (`expires_at`) before its call ran is asked for again — unless the policy now
        denies the call — with the expiry the policy gives now.
        """
        ask: list[Spec] = []
        denied: list[Spec] = []
        run: list[Spec] = []
        for action in batch:
            lapsed = action.status == A.APPROVED and _lapsed(action, now)
            if action.status == A.PROPOSED or lapsed:
                checked = agent.tools.check(action.tool, action.arguments)
                if isinstance(checked, InvalidCall):
                    run.extend(_invalid(action, checked))
                    continue
                decision = agent.policy(action, record)
                if decision.kind == "allow" and not lapsed:
                    run.append(_requested(action))
                elif decision.kind == "deny":
                    reason = decision.reason or "denied by policy"
                    denied += declined(
                        action.action_id, action.tool, action.arguments, POLICY_APPROVER, reason
                    )
                else:
                    expires = (
                        (now + decision.expires_in).isoformat()
                        if decision.expires_in is not None
                        else None
                    )
                    ask.append(_approval_requested(action, expires))
            elif action.status == A.APPROVED:
                checked = agent.tools.check(action.tool, action.arguments)
                if isinstance(checked, InvalidCall):
                    run.extend(_invalid(action, checked))
                    continue
                decision = agent.policy(action, record)
                if decision.kind == "deny":
                    run.append(_requested(action))
                    run.append(
                        _failed(
                            action,
                            "policy_denied",
                            f"approved, but the policy refused it before it ran: "
                            f"{decision.reason or 'denied by policy'}",
                        )
                    )
                else:
                    run.append(_requested(action))
        if ask:
            return (*ask, *denied)
        return (*denied, *run)

    def accept(self, record: RunRecord) -> tuple[Spec, ...]:
        """Accept the final answer (`run.completed`) or fail the run with the check's reason."""
        check = self.config.accept
        reason = check(record.final_output, record) if check is not None else None
        if reason is None:
            return ((m.RunCompleted, {}),)
        return ((m.RunFailed, {"error": error("output_rejected", reason)}),)

    def context(
        self, record: RunRecord, agent: Agent, wrap_up: bool, now: datetime
    ) -> ModelContext:
        """What the model sees on this turn."""
        return ModelContext(
            run_id=record.run_id,
            agent=agent.name,
            turn=record.turn,
            objective=record.objective,
            record=record,
            results=tuple(record.actions[a] for a in record.batch),
            wrap_up=wrap_up,
            remaining=self.reducer.guards.remaining(record, now),
            now=now,
        )

    def reserves_by_default(self, record: RunRecord, shared: bool) -> bool:
        """Whether the next model call reserves the largest call so far (`model_started`).

        Only without a configured `reserve`, and only where a budget applies: the run's own
        `max_tokens`/`max_cost`, a `Budget` guard, or a tree's shared budget (`shared`).
        """
        if self.config.reserve is not None:
            return False
        limits = record.limits
        if limits is not None and (limits.max_tokens is not None or limits.max_cost is not None):
            return True
        return shared or any(isinstance(g, Budget) for g in _flat(self.reducer.guards.guards))

    def model_started(self, largest: tuple[int, float] | None = None) -> Spec:
        """`model.started`, reserving the configured `reserve`, or else `largest`.

        `largest` is the most tokens and cost one model call of the run has used so far: the
        next call is likely to use as much, so a budget refuses it *before* it would
        overrun rather than after (see `reserves_by_default`).
        """
        reserve = self.config.reserve
        if reserve is not None:
            tokens, cost = reserve.input_tokens + reserve.output_tokens, reserve.cost
        elif largest is not None:
            tokens, cost = largest
        else:
            return (m.ModelStarted, {})
        return (m.ModelStarted, {"reserved_tokens": tokens or None, "reserved_cost": cost or None})

    def decided_and_admitted(
        self, record: RunRecord, decision: ModelDecision, wrap_up: bool, agent: Agent, now: datetime
    ) -> tuple[Spec, ...]:
        """`decided`, followed in the same atomic batch by the admission of its calls.

        One append instead of two per batch, and no window in which the decision is durable
        but its calls are not yet requested (approvals still come first; nothing runs yet).
        """
        specs = self.decided(record, decision, wrap_up)
        if len(specs) != 1 or decision.kind != "tool_calls":
            return specs
        spec = specs[0]
        assert not callable(spec)
        cls, fields = spec
        event = cls(
            run_id=record.run_id,
            sequence=record.version + 1,
            occurred_at=now.isoformat(),
            **{k: v for k, v in fields.items() if v is not None},
        )
        after = self.reducer.reduce(record, event)
        batch = [after.actions[a] for a in after.batch]
        return (*specs, *self.admit(after, agent, batch, now))

    def decided(
        self, record: RunRecord, decision: ModelDecision, wrap_up: bool
    ) -> tuple[Spec, ...]:
        """The events that record a model's decision (and what it implies at once)."""
        output = _storable(decision.output)
        usage = decision.usage.model_dump() if decision.usage is not None else None
        fields: dict[str, Any] = {"decision": decision.kind, "output": output, "usage": usage}
        if decision.kind == "tool_calls":
            used = set(record.actions)
            calls = []
            for i, proposed in enumerate(decision.tool_calls):
                aid = proposed.action_id
                if not aid or aid in used:
                    aid = self.action_ids(record, i)
                    n = 1
                    while aid in used:
                        n += 1
                        aid = f"{self.action_ids(record, i)}.{n}"
                used.add(aid)
                calls.append(
                    {"action_id": aid, "tool": proposed.tool, "arguments": proposed.arguments}
                )
            fields["tool_calls"] = _storable(calls)
        completed: Spec = (m.ModelCompleted, fields)
        if decision.kind == "tool_calls" and wrap_up:
            detail = (
                f"turn {record.turn} was the wrap-up turn, reserved for an answer, and the "
                f"model called tools instead ({len(decision.tool_calls)} calls not run)"
            )
            return (
                completed,
                (m.RunTerminated, {"stop_reason": StopReason.MAX_TURNS, "detail": detail}),
            )
        if decision.kind == "handoff":
            assert decision.to_agent is not None
            if decision.to_agent not in self.agents:
                known = ", ".join(f"'{n}'" for n in sorted(self.agents))
                message = f"the model handed off to '{decision.to_agent}', unknown here: {known}"
                return (completed, (m.RunFailed, {"error": error("unknown_agent", message)}))
            return (completed, (m.Handoff, {"to_agent": decision.to_agent}))
        return (completed,)


_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


def _storable(value: Any) -> Any:
    """`value`, if an event can carry it and every reader read it back; else `ValueError`.

    Checked before anything is appended, so a model's answer or a tool's result that no log
    can hold is recorded as such (a failed call, a failed run) instead of raising out of the
    runner after the side effect.
    """
    if value is None:
        return None
    reason = unstorable(value)  # one walk: types, limits and size
    if reason is not None:
        _JSON.validate_python(value, strict=True)  # not JSON at all: say so (a ValidationError)
        raise ValueError(reason)
    return value


def _requested(action: Action) -> Spec:
    return requested(action.action_id, action.tool, action.arguments)


def _lapsed(action: Action, now: datetime) -> bool:
    """The action's approval expired before its call ran."""
    return action.expires_at is not None and now > parse_timestamp(action.expires_at)


def _approval_requested(action: Action, expires_at: str | None) -> Spec:
    return approval_asked(action.action_id, action.tool, action.arguments, expires_at)


def _failed(action: Action, kind: str, message: str, retryable: bool = False) -> Spec:
    return (
        m.ToolFailed,
        {"action_id": action.action_id, "error": error(kind, message, retryable=retryable)},
    )


def _invalid(action: Action, why: InvalidCall) -> list[Spec]:
    return [_requested(action), _failed(action, why.kind, why.message)]


def _gone(action: Action) -> Spec:
    return _failed(
        action, "unknown_tool", f"tool '{action.tool}' is no longer registered; it was not run"
    )


def _unknown_orphan(action: Action, tool: Tool | None) -> Spec:
    why = (
        f"'{action.tool}' has side effects and is not idempotent, so it was not run again"
        if tool is not None
        else f"'{action.tool}' is no longer registered"
    )
    return (
        m.ToolOutcomeUnknown,
        {
            "action_id": action.action_id,
            "reason": f"the worker stopped while attempt {action.attempts} was in flight; {why}",
        },
    )


# -- calling a tool ---------------------------------------------------------------------------


def tool_context(record: RunRecord, action: Action, tool: Tool, remaining: float | None) -> Any:
    """The `ToolContext` for the action's current attempt, or an `InvalidCall`."""
    args = tool.validate(action.arguments)
    if isinstance(args, InvalidCall):
        return args
    timeout = tool.timeout
    if remaining is not None:
        timeout = remaining if timeout is None else min(timeout, remaining)
    return ToolContext(
        run_id=record.run_id,
        action_id=action.action_id,
        tool=tool.name,
        arguments=action.arguments,
        args=args,
        idempotency_key=action.idempotency_key or f"{record.run_id}:{action.action_id}",
        attempt=max(1, action.attempts),
        remaining=remaining,
        timeout=timeout,
    )


def outcome(action_id: str, value: Any) -> Spec:
    """The event recording a tool's return value."""
    cost = None
    if isinstance(value, ToolResult):
        cost = value.cost
        value = value.value
    try:
        _storable(value)
    except ValidationError:
        return (
            m.ToolFailed,
            {
                "action_id": action_id,
                "error": error(
                    "invalid_result",
                    f"the tool returned a value that is not JSON: {type(value).__name__}",
                ),
            },
        )
    except ValueError as exc:
        # The call ran; what it returned cannot be stored. Not retryable: a retry would act
        # again for the same reason.
        message = f"the tool ran, but its result cannot be stored: {exc}"
        return (
            m.ToolFailed,
            {"action_id": action_id, "error": error("unstorable_result", message)},
        )
    return (m.ToolCompleted, {"action_id": action_id, "result": value, "cost": cost})


def failure(action_id: str, exc: Exception) -> Spec:
    """The event recording an exception a tool raised."""
    if isinstance(exc, OutcomeUnknownError):
        return (m.ToolOutcomeUnknown, {"action_id": action_id, "reason": exc.reason})
    if isinstance(exc, ToolError):
        info = error(exc.kind, exc.message, retryable=exc.retryable)
    else:
        info = error("exception", f"{type(exc).__name__}: {exc}")
    return (m.ToolFailed, {"action_id": action_id, "error": info})


def invalid_now(action_id: str, why: InvalidCall) -> Spec:
    """A call whose arguments no longer validate when it is about to run."""
    return (m.ToolFailed, {"action_id": action_id, "error": error(why.kind, why.message)})


def timed_out(action_id: str, tool: Tool, seconds: float) -> Spec:
    """A call that did not return in time: unknown if it acts on the world, else retryable."""
    if tool.side_effects:
        return (
            m.ToolOutcomeUnknown,
            {"action_id": action_id, "reason": f"no answer within {seconds:g} s"},
        )
    return (
        m.ToolFailed,
        {
            "action_id": action_id,
            "error": error("timeout", f"no answer within {seconds:g} s", retryable=True),
        },
    )


def unrecordable(decision: ModelDecision) -> Spec:
    """`model.completed` for a decision that is not JSON, keeping what the call used.

    The call happened, so its usage counts; its output (and calls, whose arguments cannot be
    recorded either) are left out: a `tool_calls` decision is recorded as `final` with no
    output, and the `run.failed` that follows says what was wrong.
    """
    kind = DecisionKind.FINAL if decision.kind == "tool_calls" else decision.kind
    usage = decision.usage.model_dump() if decision.usage is not None else None
    return (m.ModelCompleted, {"decision": kind, "usage": usage})


def late_answer(decided: Sequence[Spec], record: RunRecord) -> tuple[Spec, ...] | None:
    """The model's answer alone, when the run changed under the call (a cancel was asked)
    and still has the call open: it happened, so it is recorded, without what it led to."""
    first = decided[0] if decided else None
    if first is None or callable(first) or first[0] is not m.ModelCompleted:
        return None
    return (first,) if record.model_call_open else None


def stopped_after(decided: Sequence[Spec], error: GuardRejectedError) -> tuple[Spec, ...] | None:
    """The model's answer and the stop, when a guard refused what the answer led to.

    A guard may refuse an event the decision brings with it (a call the loop detector
    stops); the call itself happened, so `model.completed` (the batch's first spec) is kept
    with its usage, followed by `run.terminated`. None when the refusal is of something
    else (then the usual stop records it).
    """
    first = decided[0] if decided else None
    if first is None or callable(first) or first[0] is not m.ModelCompleted:
        return None
    if error.event == EventType.MODEL_COMPLETED or isinstance(error, OverrunError):
        return None
    stop = {"stop_reason": error.stop_reason, "detail": error.detail}
    return (first, (m.RunTerminated, stop))


def model_failed(message: str, *, kind: str = "model_error") -> Spec:
    """`run.failed` for a model call that could not be made to answer."""
    return (m.RunFailed, {"error": error(kind, message)})


def resolved(record: RunRecord) -> bool:
    """Every action of the current batch is resolved."""
    return all(record.actions[a].status in RESOLVED for a in record.batch)


def child_outcome(
    action_id: str, result: Any, waiting: Callable[[Any], Exception], table: TransitionTable
) -> Spec:
    """The parent's record of a subagent's run: its answer, or why it has none.

    A child that waits (for approval, a pause, its own child) leaves the parent's call in
    flight: `waiting(result)` is raised, and resuming the parent resumes the child.
    """
    record = result.record
    # By what the child's log says, not by the default table's names: a table of your own
    # may end runs in states of its own.
    if result.superseded or not table.is_terminal(record.status):
        raise waiting(result)
    if record.stop_reason is not None:
        why = f"stopped by '{record.stop_reason}': {record.stop_detail}"
    elif record.error is not None:
        why = f"failed ({record.error.kind}): {record.error.message}"
    elif record.cancel_reason is not None or record.status == S.CANCELLED:
        why = "was cancelled"
    else:
        return outcome(action_id, record.final_output)
    return (
        m.ToolFailed,
        {
            "action_id": action_id,
            "error": error(f"subagent_{record.status}", f"subagent run '{record.run_id}' {why}"),
        },
    )
