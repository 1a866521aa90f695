"""`AsyncRunner`: the Runner for asyncio, running a batch's calls concurrently.

The same decisions as `Runner` (both ask the same planner what to do next, from the stored
record), with two differences:

- the calls of one batch run concurrently; calls whose tools share a `concurrency_key` run
  one after another, in batch order, never overlapping;
- while calls are in flight it checks the store every `cancel_poll` seconds, so a cancel
  from another process is noticed even while a long call runs; it then starts nothing new,
  waits up to `cancel_grace` seconds for the calls in flight, cancels the rest (recorded
  `tool.outcome_unknown`) and appends `run.cancelled`.

A tool's `timeout` (capped to the run's deadline) is enforced: a call that overruns is
recorded `outcome_unknown` if the tool has side effects, else as a retryable `timeout`
failure. Plain (non-async) tools run on worker threads; plain models run on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs

from agentfsm.errors import GuardRejectedError, LifecycleError, RunNotFoundError
from agentfsm.events import models as m
from agentfsm.events.models import Limits
from agentfsm.guards.base import Guard, Verdict
from agentfsm.names import RunStatus
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer
from agentfsm.runtime import _plan as p
from agentfsm.runtime.agent import Agent, RunnerConfig, RunResult
from agentfsm.runtime.control import acancel
from agentfsm.runtime.errors import RunSupersededError
from agentfsm.runtime.model import Decision, StreamAssembler
from agentfsm.runtime.runner import _ChildWaiting, _Core, child_budget, new_tree, utc_now
from agentfsm.runtime.tools import Tool, ToolContext
from agentfsm.runtime.writer import AsyncWriter, BudgetTree, Spec, StateChanged
from agentfsm.stores.base import AsyncEventStore

__all__ = ["AsyncRunner"]


def store_reducer(store: AsyncEventStore) -> Reducer:
    """The reducer an async store validates with (its options', or the wrapped store's)."""
    options = getattr(store, "options", None)
    if options is not None:
        reducer: Reducer = options.reducer
        return reducer
    inner = getattr(store, "store", None)
    if inner is not None:
        return store_reducer(inner)
    return DEFAULT_REDUCER


@attrs.define
class _Batch:
    """What the concurrent calls of one batch tell each other."""

    stopping: bool = False
    verdict: GuardRejectedError | None = None
    superseded: RunSupersededError | None = None
    waiting: _ChildWaiting | None = None
    crashed: BaseException | None = None


class AsyncRunner(_Core):
    """Drives runs with asyncio (see the module docstring and `Runner`).

    Args:
        store: an `AsyncEventStore` (`AsyncPostgresEventStore`, or any sync store wrapped
            in `ThreadedAsyncEventStore`).
        agents: one agent or several (the first is the default).
        guards: limit guards checked before every append.
        clock: the time source (aware datetimes).
        sleep: how to wait before a retry (`asyncio.sleep` by default).
        config: the Runner's settings.
        action_ids: ids for calls the model gave none for.
        logger: a structlog logger.
    """

    def __init__(
        self,
        store: AsyncEventStore,
        agents: Agent | Iterable[Agent],
        *,
        guards: Sequence[Guard] = (),
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        config: RunnerConfig | None = None,
        action_ids: p.ActionIds = p.turn_action_ids,
        logger: Any = None,
    ) -> None:
        super().__init__(
            agents,
            store_reducer=store_reducer(store),
            guards=guards,
            clock=clock,
            config=config,
            action_ids=action_ids,
            logger=logger,
        )
        self.store = store
        self.sleep = sleep
        self._store_reducer = store_reducer(store)

    async def start(
        self,
        run_id: str,
        objective: str | None = None,
        *,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> RunRecord:
        """Append `run.started` for a new run (see `Runner.start`)."""
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
        record = await self.store.append(run_id, [event], 0)
        writer = self._writer(self.reducer.initial(run_id), None)
        writer._applied(writer.record, [event], [record])
        return record

    async def run(
        self,
        run_id: str,
        objective: str | None = None,
        *,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Start a new run and drive it until it ends or waits (see `Runner.run`)."""
        record = await self.start(run_id, objective, agent=agent, limits=limits)
        tree = new_tree(record) if self._subagent_tools else None
        return await self._drive(self._writer(record, tree))

    async def resume(
        self,
        run_id: str,
        *,
        heartbeat: Callable[[RunRecord], Awaitable[None] | None] | None = None,
    ) -> RunResult:
        """Continue a run from the store (see `Runner.resume`)."""
        record = await self.store.load(run_id)
        tree = await self._tree_for(record)
        writer = self._writer(record, tree)
        if record.status == RunStatus.PAUSED:
            await writer.append([(m.RunResumed, {})])
        return await self._drive(writer, heartbeat)

    # -- driving -------------------------------------------------------------------------

    def _writer(self, record: RunRecord, budget: BudgetTree | None) -> AsyncWriter:
        return AsyncWriter(
            self.store,
            record,
            reducer=self.reducer,
            store_reducer=self._store_reducer,
            clock=self.clock,
            logger=self.log,
            budget=budget,
            max_conflicts=self.config.max_conflicts,
        )

    async def _tree_for(self, record: RunRecord) -> BudgetTree | None:
        tree = new_tree(record) if self._subagent_tools else None
        if tree is None:
            return None
        await self._add_children(record, tree)
        return tree

    async def _add_children(self, record: RunRecord, tree: BudgetTree) -> None:
        for action in record.actions.values():
            if action.tool not in self._subagent_tools:
                continue
            child_id = f"{record.run_id}/{action.action_id}"
            try:
                child = await self.store.load(child_id)
            except RunNotFoundError:
                continue
            tree.spawn(child_id, parent=record.run_id)
            tree.charge(child)
            await self._add_children(child, tree)

    async def _end_children(self, record: RunRecord) -> None:
        for child_id, sub in self._open_children(record):
            try:
                child = await self.store.load(child_id)
            except RunNotFoundError:
                continue
            if child.status in self.reducer.table.terminal_states:
                continue
            await acancel(self.store, child_id, reason=self._end_reason(record), clock=self.clock)
            runner = AsyncRunner(
                self.store, (sub.agent, *sub.agents), sleep=self.sleep, **self._child_runner_args()
            )
            await runner.resume(child_id)  # settles the cancel, and ends the child's children

    async def _drive(
        self,
        writer: AsyncWriter,
        heartbeat: Callable[[RunRecord], Awaitable[None] | None] | None = None,
    ) -> RunResult:
        children: dict[str, RunResult] = {}
        while True:
            record = writer.record
            if heartbeat is not None:
                beat = heartbeat(record)
                if beat is not None:
                    await beat
            writer.begin_step()
            try:
                step = self.planner.next(record, self.clock())
                if isinstance(step, p.Finish):
                    await self._end_children(record)
                    return self._result(record, children)
                if isinstance(step, p.Append):
                    await writer.append(step.specs)
                elif isinstance(step, p.Turn):
                    await self._turn(writer, step)
                else:
                    await self._execute(writer, step.work, children)
            except GuardRejectedError as exc:
                with contextlib.suppress(StateChanged):  # it already ended some other way
                    await writer.append([Verdict.of(exc).terminated_event])
            except StateChanged:
                continue
            except _ChildWaiting as waiting:
                children[waiting.result.run_id] = waiting.result
                return self._result(writer.record, children)
            except RunSupersededError as exc:
                self.log.warning("run.superseded", run_id=exc.run_id, by_event=exc.event)
                record = await self.store.load(writer.run_id)
                return RunResult(record, superseded=True, children=children)

    async def _turn(self, writer: AsyncWriter, step: p.Turn) -> None:
        if not step.reopen:
            default = self.planner.reserves_by_default(writer.record, writer.budget is not None)
            largest = await writer.largest_call() if default else None
            await writer.append([self.planner.model_started(largest)])
        record = writer.record
        decided = self._admit(record, await self._ask(step, record), step)
        try:
            await writer.append(decided)
        except GuardRejectedError as exc:
            # The model was called: its answer and usage go in the log before the stop.
            kept = p.stopped_after(decided, exc)
            if kept is None:
                raise
            await writer.append(kept)
        except StateChanged as changed:
            # A cancel asked while the model was called: its answer still goes in the log
            # (when the table takes it), then the caller re-decides from the new state.
            late = p.late_answer(decided, changed.record)
            recorded = False
            if late is not None:
                with contextlib.suppress(StateChanged, LifecycleError):
                    await writer.append(late)
                    recorded = True
            if not recorded:
                self._unrecorded(changed.record, decided)
            raise StateChanged(writer.record) from None

    async def _ask(self, step: p.Turn, record: RunRecord) -> Decision | Spec:
        attempt = 0
        while True:
            attempt += 1
            ctx = self.planner.context(record, step.agent, step.wrap_up, self.clock())
            try:
                return await _assemble(step.agent.model(ctx))
            except Exception as exc:  # noqa: BLE001  (any model bug ends the run as failed)
                wait = self._model_error(exc, record, step.agent, attempt)
                if not isinstance(wait, float | int):
                    return wait
                await self.sleep(wait)

    async def _execute(
        self, writer: AsyncWriter, work: Sequence[p.Work], children: dict[str, RunResult]
    ) -> None:
        groups: dict[str, list[p.Work]] = {}
        solo: list[list[p.Work]] = []
        for w in work:
            key = w.tool.concurrency_key
            if key is None:
                solo.append([w])
            else:
                groups.setdefault(key, []).append(w)
        batch = _Batch()
        tasks = [
            asyncio.create_task(self._group(writer, g, batch, children))
            for g in (*groups.values(), *solo)
        ]
        pending: set[asyncio.Task[None]] = set(tasks)
        poll = self.config.cancel_poll
        while pending:
            _, pending = await asyncio.wait(pending, timeout=poll)
            if pending and not batch.stopping:
                try:
                    await writer.poll()
                except RunSupersededError as exc:
                    batch.superseded = exc
                    batch.stopping = True
                if writer.record.status not in p.ACTIVE:
                    batch.stopping = True
            if pending and batch.stopping:
                _, pending = await asyncio.wait(pending, timeout=self.config.cancel_grace)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                if pending:
                    self.log.warning(
                        "tool.abandoned",
                        run_id=writer.run_id,
                        calls=len(pending),
                        grace=self.config.cancel_grace,
                    )
                pending = set()
        for task in tasks:  # a BaseException (the process is going down) goes on up
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        if batch.crashed is not None:
            raise batch.crashed
        if batch.superseded is not None:
            raise batch.superseded
        if batch.verdict is not None:
            raise batch.verdict
        if batch.waiting is not None:
            raise batch.waiting

    async def _group(
        self,
        writer: AsyncWriter,
        works: list[p.Work],
        batch: _Batch,
        children: dict[str, RunResult],
    ) -> None:
        for w in works:
            if batch.stopping or writer.record.status not in p.ACTIVE:
                return
            try:
                await self._work(writer, w, batch, children)
            except GuardRejectedError as exc:
                batch.verdict = batch.verdict or exc
                batch.stopping = True
            except StateChanged:
                batch.stopping = True
            except RunSupersededError as exc:
                batch.superseded = exc
                batch.stopping = True
            except _ChildWaiting as exc:
                batch.waiting = exc
            except Exception as exc:  # noqa: BLE001  (re-raised once the batch has settled)
                batch.crashed = exc
                batch.stopping = True

    async def _work(
        self,
        writer: AsyncWriter,
        work: p.Work,
        batch: _Batch,
        children: dict[str, RunResult],
    ) -> None:
        aid = work.action_id
        mode = work.mode
        tool = work.tool
        while True:
            action = writer.record.actions[aid]
            if mode == "retry":
                await self.sleep(self._retry_delay(writer.run_id, aid, action.attempts))
                if batch.stopping:
                    return
            if mode != "reexecute":
                await writer.append(
                    [(m.ToolStarted, {"action_id": aid, "attempt": action.attempts + 1})]
                )
            record = writer.record
            spec = await self._invoke(writer, record, tool, aid, children)
            record = await writer.append([spec])
            if not p.retry_allowed(record, record.actions[aid], tool) or batch.stopping:
                return
            mode = "retry"

    async def _invoke(
        self,
        writer: AsyncWriter,
        record: RunRecord,
        tool: Tool,
        aid: str,
        children: dict[str, RunResult],
    ) -> Spec:
        ctx = self._tool_context(record, tool, aid)
        if not isinstance(ctx, ToolContext):
            return ctx
        if tool.subagent is not None:
            return await self._child(writer, record, tool, ctx.args, aid, children)
        try:
            if tool.is_async:
                call: Awaitable[Any] = tool.fn(ctx)
            else:
                call = asyncio.to_thread(tool.fn, ctx)
            if ctx.timeout is not None:
                value = await asyncio.wait_for(call, ctx.timeout)
            else:
                value = await call
            if inspect.isawaitable(value):
                value = await value
        except TimeoutError:
            return p.timed_out(aid, tool, ctx.timeout or 0.0)
        except Exception as exc:  # noqa: BLE001  (a tool's exception is its failure, recorded)
            return p.failure(aid, exc)
        return p.outcome(aid, value)

    async def _child(
        self,
        writer: AsyncWriter,
        record: RunRecord,
        tool: Tool,
        args: Any,
        aid: str,
        children: dict[str, RunResult],
    ) -> Spec:
        sub = tool.subagent
        assert sub is not None
        child_id, tree = child_budget(writer, record, aid)
        runner = AsyncRunner(
            self.store, (sub.agent, *sub.agents), sleep=self.sleep, **self._child_runner_args()
        )
        try:
            child = await self.store.load(child_id)
        except RunNotFoundError:
            child = await runner.start(
                child_id, sub.objective(args), agent=sub.agent.name, limits=sub.limits
            )
        if tree is not None:
            tree.charge(child)
        cwriter = runner._writer(child, tree)
        if child.status == RunStatus.PAUSED:
            await cwriter.append([(m.RunResumed, {})])
        result = await runner._drive(cwriter)
        children[child_id] = result
        return p.child_outcome(aid, result, _ChildWaiting)


async def _assemble(reply: Any) -> Decision:
    if inspect.isawaitable(reply):
        reply = await reply
    if isinstance(reply, Decision):
        return reply
    assembler = StreamAssembler()
    if hasattr(reply, "__aiter__"):
        async for chunk in reply:
            assembler.feed(chunk)
    else:
        for chunk in reply:
            assembler.feed(chunk)
    return assembler.finish()
