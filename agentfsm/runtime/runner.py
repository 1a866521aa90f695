"""`Runner`: drives one run through the table, from the store, one durable step at a time.

Each step is decided from the run's record (see `_plan`), and every fact is appended
before the code that depends on it runs: `model.started` before the model is called,
`tool.requested` and `tool.started` before the tool runs, its result right after. A crash
at any point leaves a log that `resume(run_id)` continues from:

- a call requested but never started is started (it cannot have run);
- a call started with no outcome is run again only if its tool is safe to repeat (no side
  effects, or idempotent with the same idempotency key); otherwise it is recorded
  `tool.outcome_unknown` and surfaced in `RunResult.unknown_outcomes`, never repeated;
- a model call started with no decision is made again (within the same turn).

The sync Runner runs a batch's calls one after another; `AsyncRunner` runs them concurrently.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from agentfsm._log import get_logger
from agentfsm.errors import GuardRejectedError, LifecycleError, RunNotFoundError
from agentfsm.events import models as m
from agentfsm.events.models import Limits
from agentfsm.guards.base import Guard, Verdict
from agentfsm.guards.budget import SharedBudget
from agentfsm.names import ActionStatus, RunStatus
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import _plan as p
from agentfsm.runtime.agent import Agent, RunnerConfig, RunResult, Subagent
from agentfsm.runtime.control import cancel
from agentfsm.runtime.errors import RunSupersededError
from agentfsm.runtime.model import Decision, ModelError, StreamAssembler
from agentfsm.runtime.recovery import rebuild_tree
from agentfsm.runtime.tools import InvalidCall, Tool, ToolContext
from agentfsm.runtime.writer import BudgetTree, Spec, StateChanged, Writer
from agentfsm.stores.base import EventStore

__all__ = ["Runner", "utc_now"]


def utc_now() -> datetime:
    """The default clock: the current time in UTC."""
    return datetime.now(UTC)


class _ChildWaiting(Exception):  # noqa: N818  (a signal, not a failure)
    """A subagent's run waits for a person: the parent's call stays in flight."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.run_id)
        self.result = result


def _agents(agents: Agent | Iterable[Agent]) -> tuple[Agent, ...]:
    found = (agents,) if isinstance(agents, Agent) else tuple(agents)
    if not found:
        raise ValueError("a Runner needs at least one agent")
    names = [a.name for a in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"agent names must be unique; repeated: {', '.join(dup)}")
    return found


class _Core:
    """What both runners are configured with."""

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
        self.reducer = Reducer(store_reducer.table, self.guards)
        by_name = {a.name: a for a in self.agents}
        #: The subagent tools any agent has, by name (a budget tree is needed only with them).
        self._subagents = {
            t.name: t.subagent for a in self.agents for t in a.tools if t.subagent is not None
        }
        self._subagent_tools = frozenset(self._subagents)
        self.planner = p.Planner(
            by_name, self.agents[0].name, self.reducer, self.config, action_ids
        )

    def _open_children(self, record: RunRecord) -> list[tuple[str, Subagent]]:
        """The child run ids of `record`'s subagent calls, if it ended (else none).

        A run that ended leaves no child open: a child waiting for a person when its caller
        was cancelled or stopped would wait forever. The runners cancel each one still open.
        """
        if not self._subagents or record.status not in self.reducer.table.terminal_states:
            return []
        return [
            (f"{record.run_id}/{a.action_id}", self._subagents[a.tool])
            for a in record.actions.values()
            if a.tool in self._subagents
        ]

    def _end_reason(self, record: RunRecord) -> str:
        return f"the run '{record.run_id}' that called it ended ({record.status})"

    def _result(self, record: RunRecord, children: dict[str, RunResult]) -> RunResult:
        unknown = [a.action_id for a in record.actions.values() if a.status == ActionStatus.UNKNOWN]
        self.log.info(
            "run.returned",
            run_id=record.run_id,
            status=record.status,
            version=record.version,
            stop_reason=record.stop_reason,
            pending_approvals=list(record.pending_approvals),
            unknown_outcomes=unknown,
        )
        return RunResult(record, children=children)

    def _admit(self, record: RunRecord, decision: Decision | Spec, step: p.Turn) -> Sequence[Spec]:
        """What to append after the model answered `decision` (or failed: a spec)."""
        if not isinstance(decision, Decision):
            return (decision,)
        try:
            return self.planner.decided_and_admitted(
                record, decision, step.wrap_up, step.agent, self.clock()
            )
        except ValueError as exc:  # pydantic's ValidationError is one
            failed = p.model_failed(f"the model's decision is not JSON: {exc}")
            return (p.unrecordable(decision), failed)

    def _unrecorded(self, record: RunRecord, decided: Sequence[Spec]) -> None:
        """Log the usage of a model answer the run can no longer take (it was cancelled).

        The table has no `model.completed` after `run.cancel_requested`, so a call that
        returns after a cancel cannot be recorded; its usage is logged, not lost silently.
        """
        first = decided[0] if decided else None
        if first is None or callable(first) or first[0] is not m.ModelCompleted:
            return
        self.log.warning(
            "model.unrecorded",
            run_id=record.run_id,
            status=record.status,
            decision=first[1].get("decision"),
            usage=first[1].get("usage"),
        )

    def _model_error(
        self, exc: Exception, record: RunRecord, agent: Agent, attempt: int
    ) -> Spec | float:
        """Log a failed model call: the `run.failed` spec, or how long to wait and retry."""
        if not isinstance(exc, ModelError):
            self.log.warning("model.error", run_id=record.run_id, agent=agent.name, error=repr(exc))
            return p.model_failed(f"the model raised {type(exc).__name__}: {exc}")
        self.log.warning(
            "model.error",
            run_id=record.run_id,
            agent=agent.name,
            attempt=attempt,
            retryable=exc.retryable,
            message=exc.message,
        )
        if not exc.retryable or attempt >= self.config.model_max_attempts:
            return p.model_failed(
                f"the model call failed after {attempt} attempt(s): {exc.message}"
            )
        return self.config.backoff(attempt)

    def _retry_delay(self, run_id: str, aid: str, attempts: int) -> float:
        """How long to wait before retrying call `aid` (logged as scheduled)."""
        delay = self.config.backoff(attempts)
        self.log.info(
            "tool.retry_scheduled", run_id=run_id, action_id=aid, attempt=attempts + 1, delay=delay
        )
        return delay

    def _tool_context(self, record: RunRecord, tool: Tool, aid: str) -> ToolContext | Spec:
        """The context to call `tool` for `aid` with, or the spec refusing a now-invalid call."""
        remaining = self.reducer.guards.remaining(record, self.clock())
        ctx = p.tool_context(record, record.actions[aid], tool, remaining)
        return p.invalid_now(aid, ctx) if isinstance(ctx, InvalidCall) else ctx

    def _child_runner_args(self) -> dict[str, Any]:
        return {
            "guards": self.guards,
            "clock": self.clock,
            "config": self.config,
            "action_ids": self.action_ids,
            "logger": self.log,
        }


def _has_money_limits(record: RunRecord) -> bool:
    limits = record.limits
    return limits is not None and (limits.max_tokens is not None or limits.max_cost is not None)


def new_tree(record: RunRecord) -> BudgetTree | None:
    """A budget tree rooted at `record`'s run, if it has token or cost limits."""
    if not _has_money_limits(record):
        return None
    assert record.limits is not None
    tree = BudgetTree(SharedBudget(record.run_id, record.limits.max_tokens, record.limits.max_cost))
    tree.charge(record)
    return tree


def call_within(fn: Callable[[ToolContext], Any], ctx: ToolContext, seconds: float) -> Any:
    """`fn(ctx)` on a worker thread, waited for at most `seconds`.

    Raises:
        TimeoutError: it did not return in time. Python cannot stop a thread, so the call
            goes on in the background and its result is dropped, exactly as under the
            `AsyncRunner` (`asyncio.to_thread` + `wait_for`); the run records the call as
            outcome unknown (or a retryable timeout for a tool without side effects).
    """
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, fn(ctx)))
        except BaseException as exc:  # noqa: BLE001  (handed to the caller's thread below)
            outcome.append((False, exc))

    # The tool sees the caller's context variables (structlog's bound ones, say).
    context = contextvars.copy_context()
    worker = threading.Thread(
        target=context.run, args=(target,), name=f"agentfsm-tool-{ctx.tool}", daemon=True
    )
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise TimeoutError(f"no answer within {seconds:g} s")
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def child_budget(writer: Any, record: RunRecord, aid: str) -> tuple[str, BudgetTree | None]:
    """A subagent call's child run id, and the budget tree it is charged to.

    The tree is the writer's, made on first use; both runners call this before driving the
    child, so the sync and async paths charge children alike.
    """
    child_id = f"{record.run_id}/{aid}"
    tree = writer.budget
    if tree is None:
        tree = writer.budget = new_tree(record)
    if tree is not None:
        tree.spawn(child_id, parent=record.run_id)
    return child_id, tree


class Runner(_Core):
    """Drives runs of `agents` through the table, persisting every step in `store`.

    Args:
        store: where the runs' events are kept (memory, SQLite, PostgreSQL).
        agents: one agent, or several (the first is the default; others are reachable by
            handoff).
        guards: limit guards checked before every append with the Runner's clock
            (`MaxTurns`, `Deadline`, `Budget`, `LoopDetector`, your own); the run's own
            `limits` apply too.
        clock: the time source (aware datetimes); stamps every event.
        sleep: how to wait before a retry (tests pass a recorder; nothing sleeps for real).
        config: the Runner's settings (`RunnerConfig`).
        action_ids: ids for calls the model gave none for: `(record, index) -> id`.
        logger: a structlog logger (by default `agentfsm._log.get_logger()`: see there).
    """

    def __init__(
        self,
        store: EventStore,
        agents: Agent | Iterable[Agent],
        *,
        guards: Sequence[Guard] = (),
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        config: RunnerConfig | None = None,
        action_ids: p.ActionIds = p.turn_action_ids,
        logger: Any = None,
    ) -> None:
        super().__init__(
            agents,
            store_reducer=store.reducer,
            guards=guards,
            clock=clock,
            config=config,
            action_ids=action_ids,
            logger=logger,
        )
        self.store = store
        self.sleep = sleep

    # -- the public API ------------------------------------------------------------------

    def start(
        self,
        run_id: str,
        objective: str | None = None,
        *,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> RunRecord:
        """Append `run.started` for a new run and return its record (without driving it).

        A `Worker` (or `resume`) drives it from there.

        Raises:
            ConcurrencyConflictError: a run with this id already exists.
        """
        writer = self._writer(self.reducer.initial(run_id), None)
        fields: dict[str, Any] = {
            "objective": objective,
            "agent": agent or self.agents[0].name,
            "limits": limits,
        }
        event = m.RunStarted(
            run_id=run_id,
            sequence=1,
            occurred_at=self.clock().isoformat(),
            **{k: v for k, v in fields.items() if v is not None},
        )
        record = self.store.append(run_id, [event], 0)
        writer._applied(writer.record, [event], [record])
        return record

    def run(
        self,
        run_id: str,
        objective: str | None = None,
        *,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Start a new run and drive it until it ends or waits for a person."""
        record = self.start(run_id, objective, agent=agent, limits=limits)
        tree = new_tree(record) if self._subagent_tools else None
        return self._drive(self._writer(record, tree))

    def resume(
        self, run_id: str, *, heartbeat: Callable[[RunRecord], None] | None = None
    ) -> RunResult:
        """Continue a run from the store: after a crash, an approval, a pause, or a cancel.

        A paused run is resumed (`run.resumed`) first. A run waiting for approval returns
        at once, still waiting.

        Args:
            run_id: the run.
            heartbeat: called before every step (a `Worker` renews its lease there; raise
                to stop driving).

        Raises:
            RunNotFoundError: the store has no such run.
        """
        record = self.store.load(run_id)
        writer = self._writer(record, self._tree_for(record))
        if record.status == RunStatus.PAUSED:
            writer.append([(m.RunResumed, {})])
        return self._drive(writer, heartbeat)

    # -- driving -------------------------------------------------------------------------

    def _writer(self, record: RunRecord, budget: BudgetTree | None) -> Writer:
        return Writer(
            self.store,
            record,
            reducer=self.reducer,
            clock=self.clock,
            logger=self.log,
            budget=budget,
            max_conflicts=self.config.max_conflicts,
        )

    def _tree_for(self, record: RunRecord) -> BudgetTree | None:
        if not self._subagent_tools:
            return None
        return rebuild_tree(self.store, record, new_tree(record), self._subagent_tools.__contains__)

    def _drive(
        self, writer: Writer, heartbeat: Callable[[RunRecord], None] | None = None
    ) -> RunResult:
        children: dict[str, RunResult] = {}
        while True:
            record = writer.record
            if heartbeat is not None:
                heartbeat(record)
            writer.begin_step()
            now = self.clock()
            try:
                step = self.planner.next(record, now)
                if isinstance(step, p.Finish):
                    self._end_children(record)
                    return self._result(record, children)
                if isinstance(step, p.Append):
                    writer.append(step.specs)
                elif isinstance(step, p.Turn):
                    self._turn(writer, step)
                else:
                    for work in step.work:
                        if writer.record.status not in p.ACTIVE:
                            break
                        self._work(writer, work, children)
            except GuardRejectedError as exc:
                self._stop(writer, exc)
            except StateChanged:
                continue
            except _ChildWaiting as waiting:
                children[waiting.result.run_id] = waiting.result
                return self._result(writer.record, children)
            except RunSupersededError as exc:
                self.log.warning("run.superseded", run_id=exc.run_id, by_event=exc.event)
                return RunResult(self.store.load(writer.run_id), superseded=True, children=children)

    def _end_children(self, record: RunRecord) -> None:
        for child_id, sub in self._open_children(record):
            try:
                child = self.store.load(child_id)
            except RunNotFoundError:
                continue
            if child.status in self.reducer.table.terminal_states:
                continue
            cancel(self.store, child_id, reason=self._end_reason(record), clock=self.clock)
            runner = Runner(
                self.store, (sub.agent, *sub.agents), sleep=self.sleep, **self._child_runner_args()
            )
            runner.resume(child_id)  # settles the cancel, and ends the child's own children

    def _stop(self, writer: Writer, exc: GuardRejectedError) -> None:
        with contextlib.suppress(StateChanged):  # the run already ended some other way
            writer.append([Verdict.of(exc).terminated_event])

    def _turn(self, writer: Writer, step: p.Turn) -> None:
        if not step.reopen:
            default = self.planner.reserves_by_default(writer.record, writer.budget is not None)
            largest = writer.largest_call() if default else None
            writer.append([self.planner.model_started(largest)])
        record = writer.record
        decided = self._admit(record, self._ask(step, record), step)
        try:
            writer.append(decided)
        except GuardRejectedError as exc:
            # The model was called: its answer and usage go in the log before the stop.
            kept = p.stopped_after(decided, exc)
            if kept is None:
                raise
            writer.append(kept)
        except StateChanged as changed:
            # A cancel asked while the model was called: its answer still goes in the log
            # (when the table takes it), then the caller re-decides from the new state.
            late = p.late_answer(decided, changed.record)
            recorded = False
            if late is not None:
                with contextlib.suppress(StateChanged, LifecycleError):
                    writer.append(late)
                    recorded = True
            if not recorded:
                self._unrecorded(changed.record, decided)
            raise StateChanged(writer.record) from None

    def _ask(self, step: p.Turn, record: RunRecord) -> Decision | Spec:
        """The model's decision, retrying retryable errors; or the `run.failed` spec."""
        attempt = 0
        while True:
            attempt += 1
            ctx = self.planner.context(record, step.agent, step.wrap_up, self.clock())
            try:
                return _assemble(step.agent.model(ctx), step.agent.name)
            except Exception as exc:  # noqa: BLE001  (any model bug ends the run as failed)
                wait = self._model_error(exc, record, step.agent, attempt)
                if not isinstance(wait, float | int):
                    return wait
                self.sleep(wait)

    def _work(self, writer: Writer, work: p.Work, children: dict[str, RunResult]) -> None:
        aid = work.action_id
        mode = work.mode
        tool = work.tool
        while True:
            action = writer.record.actions[aid]
            if mode == "retry":
                self.sleep(self._retry_delay(writer.run_id, aid, action.attempts))
            if mode != "reexecute":
                writer.append([(m.ToolStarted, {"action_id": aid, "attempt": action.attempts + 1})])
            record = writer.record
            spec = self._invoke(writer, record, tool, aid, children)
            record = writer.append([spec])
            action = record.actions[aid]
            if not p.retry_allowed(record, action, tool):
                return
            mode = "retry"

    def _invoke(
        self,
        writer: Writer,
        record: RunRecord,
        tool: Tool,
        aid: str,
        children: dict[str, RunResult],
    ) -> Spec:
        ctx = self._tool_context(record, tool, aid)
        if not isinstance(ctx, ToolContext):
            return ctx
        if tool.subagent is not None:
            return self._child(writer, record, tool, ctx.args, aid, children)
        try:
            value = tool.fn(ctx) if ctx.timeout is None else call_within(tool.fn, ctx, ctx.timeout)
        except TimeoutError:
            return p.timed_out(aid, tool, ctx.timeout or 0.0)
        except Exception as exc:  # noqa: BLE001  (a tool's exception is its failure, recorded)
            return p.failure(aid, exc)
        if hasattr(value, "__await__"):
            close = getattr(value, "close", None)
            if close is not None:
                close()
            return p.failure(
                aid,
                TypeError(f"tool '{tool.name}' is async: run it with AsyncRunner"),
            )
        return p.outcome(aid, value)

    def _child(
        self,
        writer: Writer,
        record: RunRecord,
        tool: Tool,
        args: Any,
        aid: str,
        children: dict[str, RunResult],
    ) -> Spec:
        sub = tool.subagent
        assert sub is not None
        child_id, tree = child_budget(writer, record, aid)
        runner = Runner(
            self.store, (sub.agent, *sub.agents), sleep=self.sleep, **self._child_runner_args()
        )
        try:
            child = self.store.load(child_id)
        except RunNotFoundError:
            child = runner.start(
                child_id, sub.objective(args), agent=sub.agent.name, limits=sub.limits
            )
        if tree is not None:
            tree.charge(child)
        cwriter = runner._writer(child, tree)
        if child.status == RunStatus.PAUSED:
            cwriter.append([(m.RunResumed, {})])
        result = runner._drive(cwriter)
        children[child_id] = result
        return p.child_outcome(aid, result, _ChildWaiting)


def _assemble(reply: Any, agent: str) -> Decision:
    if isinstance(reply, Decision):
        return reply
    if hasattr(reply, "__await__") or hasattr(reply, "__aiter__"):
        close = getattr(reply, "close", None) or getattr(reply, "aclose", None)
        if close is not None and hasattr(reply, "__await__"):
            close()
        raise TypeError(f"the model of agent '{agent}' is async: run it with AsyncRunner")
    assembler = StreamAssembler()
    for chunk in reply:
        assembler.feed(chunk)
    return assembler.finish()
