"""The Runner's decisions, apart from its I/O: what to do next, given the durable record.

Both runners (sync and asyncio) ask `Planner.next(record, now)` what to do, do it, and ask
again. The answer depends only on the record, the agents and the settings, never on what the
process remembers, so driving a run on after a crash is the same code as going on: a run is always
continued from the store.

How a batch of proposed calls is admitted (policy, approvals) is `_admission`; the events
that record what a performed step came to are `_outcomes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import Any, Literal

import attrs

from agentfsm.errors import GuardRejectedError, UnknownAgentError
from agentfsm.events import models as m
from agentfsm.events.models import EmittedBy, Refusal, parse_timestamp
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import AnyOf, Guard
from agentfsm.guards.limits import Budget, MaxTurns
from agentfsm.names import RESOLVED, ActionStatus, DecisionKind, StopReason
from agentfsm.record import Action, RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import _emits
from agentfsm.runtime._admission import admit
from agentfsm.runtime._outcomes import error, stopped_after, storable
from agentfsm.runtime._writer import Spec, built, refused, refused_decision
from agentfsm.runtime.agent import Agent, RunnerConfig
from agentfsm.runtime.model import Decision as ModelDecision
from agentfsm.runtime.model import ModelContext
from agentfsm.runtime.tools import Tool
from agentfsm.stores.lease import Holder

A = ActionStatus

#: Who rejects an approval that expired before a person decided (`Planner.overdue`).
EXPIRY_APPROVER = "expiry"

#: action ids for calls the model gave none (or a used one) for: (record, index) -> id.
ActionIds = Callable[[RunRecord, int], str]


def turn_action_ids(record: RunRecord, index: int) -> str:
    """The default action ids: `t<turn>.<n>` (deterministic, so replays and tests agree)."""
    return f"t{record.turn}.{index + 1}"


# -- steps ------------------------------------------------------------------------------------
# `attrs.define` (slotted, not frozen), as the effects are: a frozen instance costs twice as
# much to build, a turn builds several, and nothing mutates them.


@attrs.define
class Finish:
    """Return to the caller: the run is terminal, or waits for a person."""


@attrs.define
class Append:
    """Append these events (one atomic batch)."""

    specs: tuple[Spec, ...]


@attrs.define
class Judge(Append):
    """Append the events the resolved batch's calls proposed, judged (each the event, or its
    `emit.refused`): `after` is the record they lead to (see `_emits.judge`)."""

    after: RunRecord


@attrs.define
class Turn:
    """Call the model: append `model.started` first unless a model call is already open."""

    agent: Agent
    reopen: bool
    wrap_up: bool


@attrs.define
class Work:
    """Run one action: `start` (a requested action), `retry` (after a retryable failure),
    `reexecute` (started by a worker that died, and safe to repeat), `started` (its
    `tool.started` rode along with the batch that requested it, in this process: call it)."""

    action_id: str
    tool: Tool
    mode: Literal["start", "retry", "reexecute", "started"]


@attrs.define
class Execute:
    """Run these actions (sequentially, or concurrently by concurrency key)."""

    work: tuple[Work, ...]


Step = Finish | Append | Judge | Turn | Execute


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
        # What `next` reads on every step, looked up once.
        self._table = reducer.table
        self._guards = reducer.guards
        self._budget_guard = any(isinstance(g, Budget) for g in _flat(reducer.guards.guards))
        table = reducer.table
        #: The states where a Runner neither returns nor settles a cancel: most steps.
        self._driving = frozenset(
            s.name
            for s in table.states
            if not table.stops_driving(s.name) and not table.settles_cancel(s.name)
        )

    def agent_of(self, record: RunRecord) -> Agent:
        """The agent in charge of the run."""
        name = record.current_agent or self.default_agent
        agent = self.agents.get(name)
        if agent is None:
            raise UnknownAgentError(
                run_id=record.run_id, agent=name, known=tuple(sorted(self.agents))
            )
        return agent

    def next(
        self,
        record: RunRecord,
        now: datetime,
        fresh: AbstractSet[str] = frozenset(),
        stopped: Holder | None = None,
    ) -> Step:
        """The next step for `record`; `fresh` are the started calls this process has yet
        to make (`Work.mode` `started`): any other started call was left by a driver that
        stopped. A driver under a lease finds one only when no live driver holds the run:
        it took the lease over from `stopped` (whose heartbeat stopped, named in the
        reason of a call it left in flight), or the lease was free."""
        status = record.status
        table = self._table
        # By the kinds the table declares, never by the default table's names: a state of
        # a user's own (a ticket escalated to a person) stops the Runner like one of ours.
        if status not in self._driving:
            if table.stops_driving(status):
                overdue = self.overdue(record, now)
                return Append(overdue) if overdue else Finish()
            if table.settles_cancel(status):
                return Append(self.settle_cancel(record))
        overspent = self._guards.overspent(record)
        if overspent is not None:
            # Only after a crash between a call that overran and the stop it calls for.
            stop = {"stop_reason": overspent.stop_reason, "detail": overspent.detail}
            return Append((Spec(m.RunTerminated, stop),))
        agent = self.agent_of(record)
        if record.model_call_open:
            return Turn(agent, reopen=True, wrap_up=self._wrap_up(record, record.turn))
        actions = record.actions
        batch = [actions[a] for a in record.batch]
        for action in batch:
            if action.status == A.PROPOSED or action.status == A.APPROVED:
                return Append(admit(record, agent, batch, now))
        work: list[Work] = []
        orphans: list[Spec] = []
        tools = agent.tools
        for action in batch:
            tool = tools.get(action.tool)
            if action.status == A.REQUESTED:
                if tool is None:
                    orphans.append(_gone(action))
                else:
                    work.append(Work(action.action_id, tool, "start"))
            elif action.status == A.STARTED:
                if tool is not None and action.action_id in fresh:
                    work.append(Work(action.action_id, tool, "started"))
                elif tool is not None and tool.safe_to_repeat:
                    work.append(Work(action.action_id, tool, "reexecute"))
                else:
                    orphans.append(_unknown_orphan(action, tool, stopped))
            elif retry_allowed(record, action, tool, table):
                assert tool is not None
                work.append(Work(action.action_id, tool, "retry"))
        if orphans:
            return Append(tuple(orphans))
        if work:
            return Execute(tuple(work))
        if record.pending_emits and all(a.status in RESOLVED for a in batch):
            # Usually in the commit of the outcome that resolved the batch (the ride-along of
            # `_calls`); here after a crash between the two, or a person's decision that did.
            judged, after = _emits.judge(self.reducer, record, now.isoformat())
            return Judge(judged, after)
        if record.last_decision == DecisionKind.FINAL:
            return Append(self.accept(record))
        return Turn(agent, reopen=False, wrap_up=self._wrap_up(record, record.turn + 1))

    # -- pieces -------------------------------------------------------------------------

    def overdue(self, record: RunRecord, now: datetime) -> tuple[Spec, ...]:
        """What a waiting or paused run's clock settles by itself once its time has come.

        A run that waits for a person or is paused gets no append that would trip a guard,
        so its deadline, its approvals' expiries and its state's timeout are settled here
        when it is next driven (a timer wakes it, `agentfsm.runtime._wakeups`): past the
        deadline it is `run.terminated` (`deadline`); an approval past its `expires_at` is
        rejected by `expiry` (the table's way on, as a person's rejection would be); past
        its state's timeout (`RunRecord.timeout`, a `Transition(after=...)`) the timeout's
        event is appended, with no fields. What fell due first goes first: the others are
        looked at again from where it leads. Nothing for a terminal run, or where the table
        allows none of them.
        """
        table = self.reducer.table
        if record.status in table.terminal_states:
            return ()
        allowed = table.allowed(record.status)
        timeout = record.timeout
        timed_out = None
        if timeout is not None and timeout.event in allowed:
            at = parse_timestamp(timeout.at)
            timed_out = at if now >= at else None
        left = self.reducer.guards.remaining(record, now)
        deadline_passed = left is not None and left <= 0 and "run.terminated" in allowed
        # The deadline goes first unless the timeout fell due before it.
        if deadline_passed and (
            timed_out is None or now + timedelta(seconds=left or 0.0) < timed_out
        ):
            detail = f"the deadline passed while the run was '{record.status}'"
            return (Spec(m.RunTerminated, {"stop_reason": StopReason.DEADLINE, "detail": detail}),)
        expired: list[tuple[str, Action, datetime]] = []
        if "approval.rejected" in allowed:
            for aid in record.pending_approvals:
                action = record.actions[aid]
                if action.expires_at is not None and now > (
                    at := parse_timestamp(action.expires_at)
                ):
                    expired.append((aid, action, at))
        if (
            timeout is not None
            and timed_out is not None
            and all(timed_out <= at for _, _, at in expired)
        ):
            event = self.reducer.event_types_for(record).classes[timeout.event]
            return (Spec(event, {}),)
        return tuple(
            Spec(
                m.ApprovalRejected,
                {
                    "action_id": aid,
                    "approver": EXPIRY_APPROVER,
                    "reason": f"its approval expired at {action.expires_at}",
                    "arguments_digest": action.arguments_digest,
                },
            )
            for aid, action, _ in expired
        )

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
                    Spec(
                        m.ToolFailed,
                        {
                            "action_id": action.action_id,
                            "error": error("cancelled", "the run was cancelled before it started"),
                        },
                    )
                )
            elif action.status == A.STARTED:
                specs.append(
                    Spec(
                        m.ToolOutcomeUnknown,
                        {
                            "action_id": action.action_id,
                            "reason": "the run was cancelled while it was in flight",
                        },
                    )
                )
        specs.append(Spec(m.RunCancelled, {}))
        return tuple(specs)

    def accept(self, record: RunRecord) -> tuple[Spec, ...]:
        """Accept the final answer (`run.completed`) or fail the run with the check's reason."""
        check = self.config.accept
        reason = check(record.final_output, record) if check is not None else None
        if reason is None:
            return (Spec(m.RunCompleted, {}),)
        return (Spec(m.RunFailed, {"error": error("output_rejected", reason)}),)

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
            refusal=record.last_refusal,
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
        return shared or self._budget_guard

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
            return Spec(m.ModelStarted, {})
        return Spec(
            m.ModelStarted, {"reserved_tokens": tokens or None, "reserved_cost": cost or None}
        )

    def opening(self, after: RunRecord, now: datetime) -> tuple[Spec, ...]:
        """What may ride along with a model's decision (`Writer.append`'s `then`).

        The `tool.started` of the batch's first call when it is what the run does next (no
        approval to wait for): the driver then calls it at once. Only the first: a crash
        while it runs must not make a later call look as if it may have run. Or the
        `run.completed` of a final answer that no `accept` check has to judge.
        """
        step = self.next(after, now)
        if isinstance(step, Execute):
            first = step.work[0]
            if first.mode != "start":
                return ()
            attempt = after.actions[first.action_id].attempts + 1
            return (Spec(m.ToolStarted, {"action_id": first.action_id, "attempt": attempt}),)
        return self._completed(step, after)

    def _completed(self, step: Step, after: RunRecord) -> tuple[Spec, ...]:
        if (
            isinstance(step, Append)
            and self.config.accept is None
            and after.last_decision == DecisionKind.FINAL
        ):
            return step.specs
        return ()

    def decided_and_admitted(
        self, record: RunRecord, decision: ModelDecision, wrap_up: bool, agent: Agent, now: datetime
    ) -> tuple[Spec, ...]:
        """`decided`, followed in the same atomic batch by the admission of its calls.

        One append instead of two per batch, and no window in which the decision is durable
        but its calls are not yet requested (approvals still come first; nothing runs yet).
        A decision a guard refuses (more calls than `max_calls_per_decision`) is recorded
        as `refused` instead, alone: none of its calls is admitted.
        """
        specs = self.decided(record, decision, wrap_up)
        if len(specs) != 1 or decision.kind not in ("tool_calls", "emit"):
            return specs
        spec = specs[0]
        if spec.fields["decision"] == DecisionKind.REFUSED:
            return specs  # the event it proposed cannot be one (`_emits.check`)
        # Built once: the writer appends this event (restamped), not a second build of it.
        at = now.isoformat()
        try:
            after = self.reducer.reduce(record, built(spec, record, at))
        except GuardRejectedError as exc:
            instead = refused(spec, exc)
            if instead is None:
                raise
            return (instead,)
        if decision.kind == "emit":
            return self._emitted(spec, after, at)
        batch = [after.actions[a] for a in after.batch]
        return (spec, *admit(after, agent, batch, now))

    def _emitted(self, spec: Spec, after: RunRecord, at: str) -> tuple[Spec, ...]:
        """An `emit` decision (`spec`) and the event it proposes, judged where the decision
        leaves the run: both in one append, or the decision recorded as refused, alone."""
        proposal = spec.fields["emit"]
        by = EmittedBy(turn=after.turn)
        try:
            judged = _emits.judge_one(self.reducer, after, proposal, by, at)
        except GuardRejectedError as exc:
            # A limit refuses the event: the answer stays on record, and the run stops.
            kept = stopped_after((spec,), exc)
            if kept is None:
                raise
            return kept
        if isinstance(judged, Refusal):
            return (refused_decision(spec.fields, judged),)
        return (spec, judged[0])

    def decided(
        self, record: RunRecord, decision: ModelDecision, wrap_up: bool
    ) -> tuple[Spec, ...]:
        """The events that record a model's decision (and what it implies at once)."""
        output = storable(decision.output)
        usage = decision.usage.model_dump() if decision.usage is not None else None
        fields: dict[str, Any] = {"decision": decision.kind, "output": output, "usage": usage}
        if decision.kind == "emit":
            types = self.reducer.event_types_for(record)
            checked = _emits.check(decision.event, types, None, DecisionKind.EMIT)
            if isinstance(checked, Refusal):
                return (refused_decision(fields, checked),)
            fields["emit"] = checked
        if decision.kind == "tool_calls":
            # The run's ids are looked up, not copied: a long run has many.
            actions = record.actions
            used: set[str] = set()
            calls = []
            for i, proposed in enumerate(decision.tool_calls):
                aid = proposed.action_id
                if not aid or aid in used or aid in actions:
                    aid = self.action_ids(record, i)
                    n = 1
                    while aid in used or aid in actions:
                        n += 1
                        aid = f"{self.action_ids(record, i)}.{n}"
                used.add(aid)
                calls.append(
                    {"action_id": aid, "tool": proposed.tool, "arguments": proposed.arguments}
                )
            fields["tool_calls"] = storable(calls)
        completed: Spec = Spec(m.ModelCompleted, fields)
        if decision.kind == "tool_calls" and wrap_up:
            detail = (
                f"turn {record.turn} was the wrap-up turn, reserved for an answer, and the "
                f"model called tools instead ({len(decision.tool_calls)} calls not run)"
            )
            return (
                completed,
                Spec(m.RunTerminated, {"stop_reason": StopReason.MAX_TURNS, "detail": detail}),
            )
        if decision.kind == "handoff":
            assert decision.to_agent is not None
            if decision.to_agent not in self.agents:
                known = ", ".join(f"'{n}'" for n in sorted(self.agents))
                message = f"the model handed off to '{decision.to_agent}', unknown here: {known}"
                return (completed, Spec(m.RunFailed, {"error": error("unknown_agent", message)}))
            return (completed, Spec(m.Handoff, {"to_agent": decision.to_agent}))
        return (completed,)


def _gone(action: Action) -> Spec:
    message = f"tool '{action.tool}' is no longer registered; it was not run"
    return Spec(
        m.ToolFailed, {"action_id": action.action_id, "error": error("unknown_tool", message)}
    )


def _unknown_orphan(action: Action, tool: Tool | None, stopped: Holder | None) -> Spec:
    why = (
        f"'{action.tool}' has side effects and is not idempotent, so it was not run again"
        if tool is not None
        else f"'{action.tool}' is no longer registered"
    )
    held = f" (its lease was held by {stopped.stopped()})" if stopped is not None else ""
    return Spec(
        m.ToolOutcomeUnknown,
        {
            "action_id": action.action_id,
            "reason": f"the worker stopped while attempt {action.attempts} was in flight"
            f"{held}; {why}",
        },
    )
