"""A batch's calls, for the drive core: each call to its end, retries and subagents included.

Apart from `_drive` where the loop hands a batch over: `Driver._drive` decides *that* a batch
runs and what its end means for the run; `Calls` decides how each call of it goes (its
`tool.started`, the tool or a subagent's child run, the outcome and the events it proposed, a
retry now or deferred to a `Later`). The two meet at `Calls.job_for`, the job factory a
shell's `Batch` effect is given, and at the signals a call's end is turned into (`Waiting`,
`Later`, or the error that stops the batch).

A `Driver` holds one `Calls`, made with what it reads (the planner, the reducer, the clock,
the settings, the logger) and the subagent runner factory its shell supplies (typed by what
a call does with it, `ChildRunner`, so this module does not import the driver back).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from agentfsm.errors import GuardRejectedError, IllegalTransitionError, RunSupersededError
from agentfsm.events import models as m
from agentfsm.events.models import Limits, parse_timestamp
from agentfsm.guards.budget import SharedBudget
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import _emits
from agentfsm.runtime import _outcomes as o
from agentfsm.runtime import _plan as p
from agentfsm.runtime._effects import (
    Append,
    Beat,
    Call,
    Job,
    Later,
    Load,
    Raised,
    Sleep,
    Steps,
    Waiting,
    appended,
)
from agentfsm.runtime._writer import BudgetTree, RunWriter, Spec, StateChanged, Then
from agentfsm.runtime.agent import RunnerConfig, RunResult, Subagent, SubagentTool
from agentfsm.runtime.tools import InvalidCall, Tool, ToolContext

__all__ = ["Calls", "ChildRunner", "child_budget", "new_tree"]


class _RetryLater(Exception):  # noqa: N818  (a signal inside the core, a `Later` outside)
    """A failed call's retry is due at `at`, and the drive defers retries to its driver."""

    def __init__(self, at: datetime) -> None:
        super().__init__(at.isoformat())
        self.at = at


class _ChildWaiting(Exception):  # noqa: N818  (a signal inside the core, a `Waiting` outside)
    """A subagent's run waits for a person: the parent's call stays in flight."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.run_id)
        self.result = result


def new_tree(record: RunRecord) -> BudgetTree | None:
    """A budget tree rooted at `record`'s run, if it has token or cost limits."""
    limits = record.limits
    if limits is None or (limits.max_tokens is None and limits.max_cost is None):
        return None
    tree = BudgetTree(SharedBudget(record.run_id, limits.max_tokens, limits.max_cost))
    tree.charge(record)
    return tree


def child_budget(writer: RunWriter, record: RunRecord, aid: str) -> tuple[str, BudgetTree | None]:
    """A subagent call's child run id, and the budget tree it is charged to.

    The tree is the writer's, made on first use (the SDK adapters charge children alike).
    """
    child_id = f"{record.run_id}/{aid}"
    tree = writer.budget
    if tree is None:
        tree = writer.budget = new_tree(record)
    if tree is not None:
        tree.spawn(child_id, parent=record.run_id)
    return child_id, tree


class ChildRunner(Protocol):
    """What a subagent call does with the runner of its child run (a `Driver` is one)."""

    def _start(
        self, run_id: str, objective: str | None, agent: str | None, limits: Limits | None
    ) -> Steps[RunRecord]: ...

    def _proceed(
        self,
        writer: RunWriter,
        beat: bool = False,
        resume_paused: bool = True,
        defer: bool = False,
    ) -> Steps[RunResult]: ...

    def _writer(self, record: RunRecord, budget: BudgetTree | None) -> RunWriter: ...


class Calls:
    """The drive core's part that runs a batch's calls (see the module docstring).

    Args:
        planner: decides what a call's outcome lets ride along (the next turn's opening).
        reducer: the Runner's reducer (its table, guards and event types).
        clock: the Runner's clock.
        config: the Runner's settings (backoff).
        log: the Runner's logger.
        child: the runner of a subagent's child run, like the one running its parent.
    """

    def __init__(
        self,
        planner: p.Planner,
        reducer: Reducer,
        clock: Callable[[], datetime],
        config: RunnerConfig,
        log: Any,
        child: Callable[[Subagent], ChildRunner],
    ) -> None:
        self.planner = planner
        self.reducer = reducer
        self.clock = clock
        self.config = config
        self.log = log
        self._child = child

    def job_for(
        self, writer: RunWriter, children: dict[str, RunResult], defer: bool = False
    ) -> Callable[[p.Work, Callable[[], bool]], Job]:
        """The job of each call of a batch of `writer`'s run (a shell's `Batch.job`)."""
        return lambda work, stopping: self._job(writer, work, children, stopping, defer)

    def _job(
        self,
        writer: RunWriter,
        work: p.Work,
        children: dict[str, RunResult],
        stopping: Callable[[], bool],
        defer: bool = False,
    ) -> Job:
        """One call of a batch, to its end: what stops the batch is returned, not raised."""
        if stopping() or not p.working(self.reducer.table, writer.record.status):
            return None
        try:
            yield from self._work(writer, work, children, stopping, defer)
        except (
            GuardRejectedError,
            IllegalTransitionError,
            StateChanged,
            RunSupersededError,
        ) as exc:
            return exc
        except _ChildWaiting as waiting:
            return Waiting(waiting.result)
        except _RetryLater as later:
            return Later(later.at)
        return None

    def _work(
        self,
        writer: RunWriter,
        work: p.Work,
        children: dict[str, RunResult],
        stopping: Callable[[], bool],
        defer: bool = False,
    ) -> Steps[None]:
        aid = work.action_id
        mode = work.mode
        tool = work.tool
        while True:
            action = writer.record.actions[aid]
            if mode == "retry":
                delay = self.config.backoff(action.attempts)
                if defer:
                    # The backoff runs from the run's last event (the failure, unless
                    # something happened since): the same due time after any restart.
                    due = self._retry_due(writer.record, delay)
                    if self.clock() < due:
                        self._retry_scheduled(writer.run_id, aid, action.attempts, delay, due)
                        raise _RetryLater(due)
                else:
                    self._retry_scheduled(writer.run_id, aid, action.attempts, delay)
                    yield Sleep(delay)
                    if stopping():
                        return
            if mode == "started":
                writer.fresh.discard(aid)  # its `tool.started` rode along with the decision
            elif mode != "reexecute":
                started = Spec(m.ToolStarted, {"action_id": aid, "attempt": action.attempts + 1})
                appended((yield Append(writer, [started])))
            specs = yield from self._invoke(writer, writer.record, tool, aid, children)
            then = None if stopping() else self._turn_opening(writer)
            record = appended((yield Append(writer, specs, then)))
            if (
                not p.retry_allowed(record, record.actions[aid], tool, self.reducer.table)
                or stopping()
            ):
                return
            mode = "retry"

    def _turn_opening(self, writer: RunWriter) -> Then:
        """What may ride along with a call's outcome: once it resolves the batch, the events
        its calls proposed, judged (`Planner.next`'s `Judge`: so they are in the same commit
        as the outcome), then the next model turn's `model.started`, when that turn is what
        the run does next (nothing to retry) and its reservation is known without reading
        the log."""

        def then(after: RunRecord, now: datetime) -> tuple[Spec, ...]:
            planner = self.planner
            try:
                step = planner.next(after, now)
            except GuardRejectedError:
                return ()  # a guard refuses a proposed event: the step on its own stops the run
            judged: tuple[Spec, ...] = ()
            if isinstance(step, p.Judge):
                judged, after = step.specs, step.after
                step = planner.next(after, now)
            if not isinstance(step, p.Turn) or step.reopen:
                return judged
            if not planner.reserves_by_default(after, writer.budget is not None):
                return (*judged, planner.model_started())
            largest = writer.known_largest
            return judged if largest is None else (*judged, planner.model_started(largest))

        return then

    @staticmethod
    def _retry_due(record: RunRecord, delay: float) -> datetime:
        last = record.updated_at
        assert last is not None  # a failed call is in the log
        return parse_timestamp(last) + timedelta(seconds=delay)

    def _retry_scheduled(
        self, run_id: str, aid: str, attempts: int, delay: float, due: datetime | None = None
    ) -> None:
        self.log.info(
            "tool.retry_scheduled",
            run_id=run_id,
            action_id=aid,
            attempt=attempts + 1,
            delay=delay,
            **({"due": due.isoformat()} if due is not None else {}),
        )

    def _invoke(
        self,
        writer: RunWriter,
        record: RunRecord,
        tool: Tool,
        aid: str,
        children: dict[str, RunResult],
    ) -> Steps[tuple[Spec, ...]]:
        remaining = self.reducer.guards.remaining(record, self.clock())
        ctx = o.tool_context(record, record.actions[aid], tool, remaining)
        if isinstance(ctx, InvalidCall):
            return (o.invalid_now(aid, ctx),)
        assert isinstance(ctx, ToolContext)
        if isinstance(tool, SubagentTool):
            sub = tool.subagent
            return (yield from self._subagent(writer, record, sub, ctx.args, aid, children))
        if tool.side_effects:
            # The call's `tool.started` is durable; its side effect is not done yet. A
            # partition may have swallowed the reply to that write while the run was taken
            # over elsewhere (its call recorded unknown): the driver confirms it still owns
            # the run here, where stopping leaves the world untouched.
            writer.check_lease()
            yield Beat(record, before_call=True)
        got = yield Call(tool, ctx)
        if not isinstance(got, Raised):
            types = self.reducer.event_types_for
            return o.outcome(
                aid, got.value, lambda emit: _emits.check(emit, types(record), tool.emits)
            )
        if isinstance(got.error, TimeoutError):
            return (o.timed_out(aid, tool, ctx.timeout or 0.0),)
        return (o.failure(aid, got.error),)

    def _subagent(
        self,
        writer: RunWriter,
        record: RunRecord,
        sub: Subagent,
        args: Any,
        aid: str,
        children: dict[str, RunResult],
    ) -> Steps[tuple[Spec, ...]]:
        """Run (or drive on) a subagent call's child run; its end is the call's outcome."""
        child_id, tree = child_budget(writer, record, aid)
        runner = self._child(sub)
        child = yield Load(child_id)
        if child is None:
            objective = sub.objective(args)
            writer.check_lease()  # the child is driven under its root's lease
            child = yield from runner._start(child_id, objective, sub.agent.name, sub.limits)
        if tree is not None:
            tree.charge(child)
        child_writer = runner._writer(child, tree)
        child_writer.lease = writer.lease
        result = yield from runner._proceed(child_writer)
        children[child_id] = result
        return o.child_outcome(aid, result, _ChildWaiting, self.reducer.table)
