"""The drive loop, once, with no I/O of its own: both runners are shells around it.

`Driver` holds what a runner is configured with and decides, step by step, what to do next
(with the planner in `_plan`): its `_run_new`, `_drive_stored` and `_drive` methods are
generators that yield effects (`_effects`: append these specs, ask the model, call this
tool, sleep, load or start a run, run a batch) and are sent back what happened. `Runner`
performs the effects with direct calls, `AsyncRunner` with awaits (a batch's calls
concurrently). So the two cannot drift: every decision, retry and recovery rule is in the
core.

The core is two classes, split where the loop hands a batch over. Here, `Driver`: a run's
start and its drive from the store, the loop, a model turn (asking, retrying a model error,
admitting the answer, an answer that comes back after a cancel) and the run's result. In
`_calls`, the `Calls` a driver holds: how each call of a batch goes, retries and subagents'
child runs with it. The loop reads a batch's end (`settle`); it never sees how a call got there.

A step's append may take the next step's opening event along (`Append.then`, see
`Writer.append`): the first call's `tool.started` goes in with the decision that requested it
(`Planner.opening`; the writer's `fresh` then tells the planner to call it, `Work` mode
`started`, where a started call it did not start itself is a dead worker's), and a call's
result with the next turn's `model.started` (`Calls._turn_opening`, the turn then reopens).
So a one-tool turn is two appends. Whatever would make the ride-along differ from the step
on its own (an approval, a guard's refusal, another process's events) leaves it out, and the
step goes its own way. A heartbeat does not: it is not called between a decision and the
call whose start rode along with it (that call is under way; `confirm`, after the durable
start and before the side effect, is its ownership check), so a job too commits a one-tool
turn in two appends.

A subclass supplies two constructors and nothing else: `_writer` (its own writer over its
store, for one run) and `_child` (a runner like itself, for a subagent's run).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeGuard

from agentfsm._log import get_logger
from agentfsm.errors import (
    GuardRejectedError,
    IllegalTransitionError,
    InvalidTableError,
    LeaseLostError,
    LifecycleError,
    ModelError,
    RunSupersededError,
)
from agentfsm.events import models as m
from agentfsm.events.models import Limits
from agentfsm.fsm.needs import runner_problems
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import Guard
from agentfsm.guards.limits import with_caps
from agentfsm.names import ActionStatus, StateKind
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import _emits
from agentfsm.runtime import _outcomes as o
from agentfsm.runtime import _plan as p
from agentfsm.runtime._calls import Calls, new_tree
from agentfsm.runtime._effects import (
    Append,
    Ask,
    Batch,
    Beat,
    Cancel,
    End,
    Largest,
    Later,
    Load,
    Raised,
    Refused,
    Sleep,
    Start,
    Steps,
    Waiting,
    appended,
    settle,
)
from agentfsm.runtime._recovery import rebuild_steps
from agentfsm.runtime._writer import BudgetTree, RunWriter, Spec, StateChanged, refused, terminated
from agentfsm.runtime.agent import Agent, RunnerConfig, RunResult, Subagent, SubagentTool
from agentfsm.runtime.model import Decision
from agentfsm.stores.lease import HeldLease

__all__ = ["Driver", "utc_now"]


def utc_now() -> datetime:
    """The default clock: the current time in UTC."""
    return datetime.now(UTC)


def _agents(agents: Agent | Iterable[Agent]) -> tuple[Agent, ...]:
    found = (agents,) if isinstance(agents, Agent) else tuple(agents)
    if not found:
        raise ValueError("a Runner needs at least one agent")
    names = [a.name for a in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"agent names must be unique; repeated: {', '.join(dup)}")
    return found


def _strands(error: Exception, writer: RunWriter) -> TypeGuard[IllegalTransitionError]:
    """Whether `error` is the table refusing the Runner's own next move in `writer`'s run:
    no edge for it, or none whose condition holds (a table that dropped one alternative of
    several); not another run's refusal. Either would come back on every drive."""
    return isinstance(error, IllegalTransitionError) and error.run_id == writer.run_id


#: Tables found drivable: a subagent's Runner is built per call, with its parent's table.
_DRIVABLE: weakref.WeakSet[TransitionTable] = weakref.WeakSet()


def _drivable(table: TransitionTable) -> None:
    """Refuse a table with a state no Runner can drive a run in, before any run is written:
    every run that came there would fail (`agentfsm.fsm.needs.runner_problems`)."""
    if table in _DRIVABLE:
        return
    problems = runner_problems(table)
    if not problems:
        _DRIVABLE.add(table)
    else:
        error = InvalidTableError(table.name, problems)
        error.add_note(
            "a Runner drives runs of this table: each state above needs the moves it names "
            "(`agentfsm check-table` reports the same)"
        )
        raise error


class Driver:
    """What both runners are configured with, and the drive loop they share."""

    def __init__(
        self,
        agents: Agent | Iterable[Agent],
        *,
        store_reducer: Reducer,
        guards: Sequence[Guard] = (),
        clock: Callable[[], datetime] = utc_now,
        config: RunnerConfig | None = None,
        action_ids: p.ActionIds = p.turn_action_ids,
        logger: Any = None,
    ) -> None:
        self.agents = _agents(agents)
        self.guards = tuple(guards)
        self.clock = clock
        self.config = config if config is not None else RunnerConfig()
        self.action_ids = action_ids
        self.log = logger if logger is not None else get_logger()
        # The Runner's reducer: the store's table, with the Runner's guards, checked with
        # the Runner's clock (and a subagent tree's shared budget) before every append.
        self.reducer = Reducer(store_reducer.table, self.guards, tables=store_reducer.tables)
        _drivable(self.reducer.table)
        problems = _emits.declared_problems(
            ((a.name, t) for a in self.agents for t in a.tools), self.reducer.table
        )
        if problems:
            raise ValueError("; ".join(problems))
        by_name = {a.name: a for a in self.agents}
        #: The subagent tools any agent has, by name (a budget tree is needed only with them).
        self._subagents = {
            t.name: t.subagent for a in self.agents for t in a.tools if isinstance(t, SubagentTool)
        }
        self._subagent_tools = frozenset(self._subagents)
        self.planner = p.Planner(
            by_name, self.agents[0].name, self.reducer, self.config, action_ids
        )
        #: How each call of a batch goes (`_calls`); a subagent's with a runner like this one.
        self.calls = Calls(
            self.planner, self.reducer, self.clock, self.config, self.log, self._child
        )

    # -- what a shell supplies ----------------------------------------------------------

    def _writer(self, record: RunRecord, budget: BudgetTree | None) -> RunWriter:
        """The shell's writer for one run (a `Writer` or an `AsyncWriter`)."""
        raise NotImplementedError

    def _child(self, sub: Subagent) -> Driver:
        """A runner like this one (same store and settings) for a subagent's run."""
        raise NotImplementedError

    def _child_runner_args(self) -> dict[str, Any]:
        return {
            "guards": self.guards,
            "clock": self.clock,
            "config": self.config,
            "action_ids": self.action_ids,
            "logger": self.log,
        }

    # -- runs -----------------------------------------------------------------------------

    def _start(
        self, run_id: str, objective: str | None, agent: str | None, limits: Limits | None
    ) -> Steps[RunRecord]:
        """Append `run.started` for a new run (a conflict means it exists: raised)."""
        fields: dict[str, Any] = {
            "objective": objective,
            "agent": agent or self.agents[0].name,
            # The log says the caps the run is under (turns, calls per decision): any
            # reader checks them.
            "limits": with_caps(
                limits,
                max_turns=self.config.max_turns,
                max_calls_per_decision=self.config.max_calls_per_decision,
            ),
            "table": self.reducer.table.ref,  # the run is folded with this table, always
        }
        event = m.RunStarted(
            run_id=run_id,
            sequence=1,
            occurred_at=self._aware_now().isoformat(),
            **{k: v for k, v in fields.items() if v is not None},
        )
        record: RunRecord = yield Start(event)
        writer = self._writer(self.reducer.initial(run_id), None)
        writer.applied(writer.record, [event], [record])  # logs it like any append
        return record

    def _aware_now(self) -> datetime:
        """The clock's reading, refused by name when it has no timezone: checked as a drive
        starts (not each turn), where a new user's `clock=datetime.now` first shows."""
        now = self.clock()
        if not isinstance(now, datetime) or now.utcoffset() is None:
            raise TypeError(
                "the Runner's clock must return aware datetimes (with a timezone, like "
                f"datetime.now(UTC)); it returned {now!r}"
            )
        return now

    def _run_new(
        self,
        run_id: str,
        objective: str | None,
        agent: str | None,
        limits: Limits | None,
        lease: HeldLease | None = None,
    ) -> Steps[RunResult]:
        """Start a new run and drive it (under `lease`, if given)."""
        record = yield from self._start(run_id, objective, agent, limits)
        tree = new_tree(record) if self._subagent_tools else None
        return (yield from self._drive(self._leased(self._writer(record, tree), lease)))

    def _drive_stored(
        self,
        run_id: str,
        beat: bool = False,
        resume_paused: bool = True,
        defer: bool = False,
        lease: HeldLease | None = None,
    ) -> Steps[RunResult]:
        """Load a run, put its budget tree back, resume it (unless not to), and drive it
        (returning at a retry's backoff instead of sleeping, with `defer`; under `lease`, if
        given)."""
        record: RunRecord = yield Load(run_id, required=True)
        tree = None
        if self._subagent_tools:
            is_sub = self._subagent_tools.__contains__
            tree = yield from rebuild_steps(record, new_tree(record), is_sub)
        writer = self._leased(self._writer(record, tree), lease)
        return (yield from self._proceed(writer, beat, resume_paused, defer))

    @staticmethod
    def _leased(writer: RunWriter, lease: HeldLease | None) -> RunWriter:
        """`writer`, checking `lease` before every write (see `Writer.check_lease`)."""
        writer.lease = lease
        return writer

    def _proceed(
        self,
        writer: RunWriter,
        beat: bool = False,
        resume_paused: bool = True,
        defer: bool = False,
    ) -> Steps[RunResult]:
        record = writer.record
        # A pause whose clock ran out meanwhile (its timeout, a deadline) is settled by the
        # drive first, as it would have been had a timer driven it in time.
        if (
            resume_paused
            and self.reducer.table.kind(record.status) == StateKind.PAUSED
            and not self.planner.overdue(record, self.clock())
        ):
            got = yield Append(writer, [Spec(m.RunResumed, {})])
            if isinstance(got, Refused) and _strands(got.error, writer):
                yield from self._stranded(writer, got.error)
            else:
                appended(got)
        return (yield from self._drive(writer, beat, defer))

    def _stranded(self, writer: RunWriter, refused: IllegalTransitionError) -> Steps[None]:
        """Fail the run its table leaves no move for the Runner's next step (`refused`).

        The refusal would come back on every drive, the run standing still: failing it
        once, with the state and the move named, ends that (a table that lacks a move every
        run of a kind makes is refused up front: `agentfsm.fsm.needs`; this is for moves only
        some runs make, a call or an approval). Where `run.failed` is refused as well (a
        condition on it), the refusal is raised with a note saying why it was not failed.
        """
        self.log.warning(
            "run.stranded", run_id=writer.run_id, state=refused.state, event_type=refused.event
        )
        got = yield Append(writer, [o.stranded(refused, self.reducer.table)])
        if isinstance(got, Refused) and not isinstance(got.error, StateChanged):
            # Said from where the run stands: the refused move may have been a later event
            # of the same append (a batch's second call), so not `refused.state`.
            refused.add_note(f"the run could not be failed either: {got.error}")
            raise refused

    # -- the loop ---------------------------------------------------------------------------

    def _drive(
        self, writer: RunWriter, beat: bool = False, defer: bool = False
    ) -> Steps[RunResult]:
        """Step the run until it ends or waits for a person (or someone else drives it, or,
        with `defer`, a failed call's retry is due later: `RunResult.wake_at`)."""
        children: dict[str, RunResult] = {}
        self._aware_now()
        # Whose lapsed lease this drive took over: a started call it did not start is that
        # holder's (None: the lease was free, or the drive is unleased).
        stopped = writer.lease.takeover if writer.lease is not None else None
        # A call whose `tool.started` rode along with the decision is under way: no
        # heartbeat between the two (one that stopped the drive there would leave a call
        # started and not made, an unknown outcome for the next driver); its check is the
        # `confirm` before its side effect, after the durable start.
        started = False
        while True:
            record = writer.record
            if beat and not started:
                yield Beat(record)
            started = False
            writer.begin_step()
            try:
                step = self.planner.next(record, self.clock(), writer.fresh, stopped)
                if isinstance(step, p.Finish):
                    yield from self._end_children(record, writer)
                    return self._result(record, children)
                if isinstance(step, p.Append):
                    appended((yield Append(writer, step.specs)))
                    continue
                if isinstance(step, p.Turn):
                    started = yield from self._turn(writer, step)
                    continue
                job = self.calls.job_for(writer, children, defer)
                end: End = settle((yield Batch(writer, step.work, job)))
                if isinstance(end, Waiting):
                    children[end.result.run_id] = end.result
                    return self._result(writer.record, children)
                if isinstance(end, Later):
                    return self._result(writer.record, children, wake_at=end.at)
                if end is not None:
                    raise end
            except GuardRejectedError as exc:
                got = yield Append(writer, [terminated(exc)])
                if isinstance(got, Refused) and not isinstance(got.error, StateChanged):
                    raise got.error from None  # (a run that already ended some other way)
            except StateChanged:
                continue
            except IllegalTransitionError as exc:
                if not _strands(exc, writer):
                    raise
                yield from self._stranded(writer, exc)
            except RunSupersededError as exc:
                if isinstance(exc, LeaseLostError):
                    # Nothing more is read or written: the run may be someone else's now.
                    self.log.warning("run.superseded", run_id=exc.run_id, lease_lost=exc.worker_id)
                    record = writer.record
                else:
                    self.log.warning("run.superseded", run_id=exc.run_id, by_event=exc.event)
                    record = yield Load(writer.run_id, required=True)
                return RunResult(
                    record,
                    superseded=True,
                    children=children,
                    kind=self.reducer.table.kind(record.status),
                )

    def _end_children(self, record: RunRecord, writer: RunWriter) -> Steps[None]:
        """Cancel the subagent runs an ended run leaves open, and settle each.

        A child waiting for a person when its caller was cancelled or stopped would wait
        forever.
        """
        if not self._subagents or record.status not in self.reducer.table.terminal_states:
            return
        for action in record.actions.values():
            sub = self._subagents.get(action.tool)
            if sub is None:
                continue
            child_id = f"{record.run_id}/{action.action_id}"
            child = yield Load(child_id)
            if child is None or child.status in self.reducer.table.terminal_states:
                continue
            reason = f"the run '{record.run_id}' that called it ended ({record.status})"
            writer.check_lease()
            yield Cancel(child_id, reason)
            # Driving it settles the cancel, and ends the child's own children.
            yield from self._child(sub)._drive_stored(child_id, lease=writer.lease)

    def _result(
        self,
        record: RunRecord,
        children: dict[str, RunResult],
        wake_at: datetime | None = None,
    ) -> RunResult:
        unknown = [a.action_id for a in record.actions.values() if a.status == ActionStatus.UNKNOWN]
        self.log.info(
            "run.returned",
            run_id=record.run_id,
            status=record.status,
            version=record.version,
            stop_reason=record.stop_reason,
            pending_approvals=list(record.pending_approvals),
            unknown_outcomes=unknown,
            **({"wake_at": wake_at.isoformat()} if wake_at is not None else {}),
        )
        kind = self.reducer.table.kind(record.status)
        return RunResult(record, children=children, kind=kind, wake_at=wake_at)

    # -- a model turn -----------------------------------------------------------------------

    def _turn(self, writer: RunWriter, step: p.Turn) -> Steps[bool]:
        """A model turn: ask, and append the decision with what may ride along with it
        (`Planner.opening`). Whether the first call's `tool.started` went in with it (the
        call is made next, with no step between)."""
        if not step.reopen:
            default = self.planner.reserves_by_default(writer.record, writer.budget is not None)
            largest = (yield Largest(writer)) if default else None
            appended((yield Append(writer, [self.planner.model_started(largest)])))
        record = writer.record
        decided = self._admit(record, (yield from self._ask(step, record)), step)
        got = yield Append(writer, decided, self.planner.opening)
        if not isinstance(got, Refused):
            if not writer.rode:
                return False
            # The first call's `tool.started` went in with it (or the run completed).
            begun = [a for a in got.batch if got.actions[a].status == ActionStatus.STARTED]
            writer.fresh.update(begun)
            return bool(begun)
        exc = got.error
        if isinstance(exc, GuardRejectedError):
            # A guard refused the decision itself (too many calls): it is recorded as refused,
            # alone, and the run goes on; the model's next turn sees why.
            instead = refused(decided[0], exc) if decided else None
            if instead is not None:
                appended((yield Append(writer, [instead])))
                return False
            # The model was called: its answer and usage go in the log before the stop.
            kept = o.stopped_after(decided, exc)
            if kept is None:
                raise exc
            appended((yield Append(writer, kept)))
            return False
        if not isinstance(exc, StateChanged):
            raise exc
        # A cancel asked while the model was called: its answer still goes in the log
        # (when the table takes it), then the loop re-decides from the new state.
        late = o.late_answer(decided, exc.record)
        recorded = False
        if late is not None:
            again = yield Append(writer, late)
            if isinstance(again, Refused) and isinstance(again.error, GuardRejectedError):
                instead = refused(late[0], again.error)  # too many calls: summed up instead
                if instead is not None:
                    again = yield Append(writer, [instead])
            recorded = not isinstance(again, Refused)
            if isinstance(again, Refused) and not isinstance(
                again.error, StateChanged | LifecycleError
            ):
                raise again.error
        if not recorded:
            self._unrecorded(exc.record, decided)
        raise StateChanged(writer.record)

    def _ask(self, step: p.Turn, record: RunRecord) -> Steps[Decision | Spec]:
        """The model's decision, retrying retryable errors; or the `run.failed` spec."""
        attempt = 0
        while True:
            attempt += 1
            ctx = self.planner.context(record, step.agent, step.wrap_up, self.clock())
            got = yield Ask(step.agent, ctx)
            if not isinstance(got, Raised):
                decision: Decision = got
                return decision
            wait = self._model_error(got.error, record, step.agent, attempt)
            if not isinstance(wait, float | int):
                return wait
            yield Sleep(wait)

    def _admit(self, record: RunRecord, decision: Decision | Spec, step: p.Turn) -> Sequence[Spec]:
        """What to append after the model answered `decision` (or failed: a spec)."""
        if not isinstance(decision, Decision):
            return (decision,)
        try:
            return self.planner.decided_and_admitted(
                record, decision, step.wrap_up, step.agent, self.clock()
            )
        except ValueError as exc:  # pydantic's ValidationError is one
            failed = o.model_failed(f"the model's decision is not JSON: {exc}")
            return (o.unrecordable(decision), failed)

    def _unrecorded(self, record: RunRecord, decided: Sequence[Spec]) -> None:
        """Log the usage of a model answer the run can no longer take (it was cancelled).

        The table has no `model.completed` after `run.cancel_requested`, so a call that
        returns after a cancel cannot be recorded; its usage is logged, not lost silently.
        """
        first = decided[0] if decided else None
        if first is None or first.cls is not m.ModelCompleted:
            return
        self.log.warning(
            "model.unrecorded",
            run_id=record.run_id,
            status=record.status,
            decision=first.fields.get("decision"),
            usage=first.fields.get("usage"),
        )

    def _model_error(
        self, exc: Exception, record: RunRecord, agent: Agent, attempt: int
    ) -> Spec | float:
        """Log a failed model call: the `run.failed` spec, or how long to wait and retry."""
        if not isinstance(exc, ModelError):
            self.log.warning("model.error", run_id=record.run_id, agent=agent.name, error=repr(exc))
            return o.model_failed(f"the model raised {type(exc).__name__}: {exc}")
        self.log.warning(
            "model.error",
            run_id=record.run_id,
            agent=agent.name,
            attempt=attempt,
            retryable=exc.retryable,
            message=exc.message,
        )
        if not exc.retryable or attempt >= self.config.model_max_attempts:
            return o.model_failed(
                f"the model call failed after {attempt} attempt(s): {exc.message}"
            )
        return self.config.backoff(attempt)
