"""`AsyncRunner`: the Runner for asyncio, running a batch's calls concurrently.

The same decisions as `Runner`: both are shells around one sans-IO core (`_drive.Driver`),
which this one performs with awaits. Two differences are the shell's own:

- the calls of one batch run concurrently; calls whose tools share a `concurrency_key` run
  one after another, in batch order, never overlapping;
- while calls are in flight it checks the store every `cancel_poll` seconds, so a cancel
  from another process is noticed even while a long call runs; it then starts nothing new,
  waits up to `cancel_grace` seconds for the calls in flight, cancels the rest (recorded
  `tool.outcome_unknown`) and appends `run.cancelled`.

A tool's `timeout` (capped to the run's deadline) is enforced: a call that overruns is
recorded `outcome_unknown` if the tool has side effects, else as a retryable `timeout`
failure. Plain (non-async) tools run on worker threads; plain models run on the loop.

The drive holds the run's lease as the `Runner`'s does, renewed by a task of the loop; a
batch whose lease is lost while its calls run stops as it does for a cancel (nothing of it
is recorded).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

from agentfsm.errors import RunNotFoundError, RunSupersededError
from agentfsm.events.models import Limits
from agentfsm.guards.base import Guard
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer
from agentfsm.runtime import _effects as fx
from agentfsm.runtime import _plan as p
from agentfsm.runtime._drive import Driver, utc_now
from agentfsm.runtime._writer import AsyncWriter, BudgetTree, RunWriter
from agentfsm.runtime.agent import Agent, RunnerConfig, RunResult, Subagent
from agentfsm.runtime.control import acancel
from agentfsm.runtime.model import Decision, StreamAssembler
from agentfsm.runtime.runner import REFUSALS, check_given
from agentfsm.runtime.tools import Tool, ToolContext
from agentfsm.stores.base import AsyncEventStore
from agentfsm.stores.lease import AsyncLease, new_holder

__all__ = ["AsyncRunner"]

T = TypeVar("T")
Heartbeat = Callable[[RunRecord], Awaitable[None] | None]


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


class AsyncRunner(Driver):
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

    Raises:
        InvalidTableError: the store's table has a state no Runner can drive a run in (as
            `Runner`).
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

    async def run(
        self,
        run_id: str,
        objective: str | None = None,
        *,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Start a new run and drive it until it ends or waits (see `Runner.run`)."""
        async with self._held(run_id, None, None) as lease:
            return await self._run(self._run_new(run_id, objective, agent, limits, lease))

    async def drive(
        self,
        run_id: str,
        *,
        wait: float | None = None,
        lease: AsyncLease | None = None,
        heartbeat: Heartbeat | None = None,
        resume_paused: bool = True,
        defer_retries: bool = False,
        confirm: Heartbeat | None = None,
    ) -> RunResult:
        """Continue a run from the store (see `Runner.drive`; `lease` is an `AsyncLease`)."""
        async with self._held(run_id, lease, wait) as held:
            steps = self._drive_stored(
                run_id, heartbeat is not None, resume_paused, defer_retries, held
            )
            return await self._run(steps, heartbeat, confirm)

    @asynccontextmanager
    async def _held(
        self, run_id: str, given: AsyncLease | None, wait: float | None
    ) -> AsyncIterator[AsyncLease | None]:
        """The drive's lease, renewed by a task for the block (see `Runner._held`)."""
        if given is not None:
            check_given(run_id, given, wait)
            async with given.kept():
                yield given
            return
        try:
            lease = await self.store.hold(
                run_id, ttl=self.config.lease_ttl, wait=wait, holder=new_holder("runner")
            )
        except NotImplementedError:  # a store of someone else's, without leases
            lease = None
        if lease is None:
            yield None
            return
        try:
            async with lease.kept():
                yield lease
        finally:
            await lease.release()

    # -- the shell: what the core's effects are, done with awaits ----------------------------

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

    def _child(self, sub: Subagent) -> AsyncRunner:
        agents = (sub.agent, *sub.agents)
        return AsyncRunner(self.store, agents, sleep=self.sleep, **self._child_runner_args())

    async def _run(
        self,
        steps: fx.Steps[T],
        heartbeat: Heartbeat | None = None,
        confirm: Heartbeat | None = None,
    ) -> T:
        """Drive the core's generator to its end, performing each effect it yields."""
        got: Any = None
        while True:
            try:
                effect = steps.send(got)
            except StopIteration as done:
                result: T = done.value
                return result
            got = await self._perform(effect, heartbeat, confirm)

    async def _perform(
        self, effect: fx.Effect, heartbeat: Heartbeat | None, confirm: Heartbeat | None = None
    ) -> Any:
        if isinstance(effect, fx.Append):
            try:
                return await _own(effect.writer).append(effect.specs, effect.then)
            except REFUSALS as exc:
                return fx.Refused(exc)
        if isinstance(effect, fx.Batch):
            return await self._batch(effect, confirm)
        if isinstance(effect, fx.Call):
            return await _call(effect.tool, effect.ctx)
        if isinstance(effect, fx.Ask):
            try:
                return await _assemble(effect.agent.model(effect.ctx))
            except Exception as exc:  # noqa: BLE001  (any model bug ends the run as failed)
                return fx.Raised(exc)
        if isinstance(effect, fx.Beat):
            hook = confirm if effect.before_call else heartbeat
            beat = hook(effect.record) if hook is not None else None
            if beat is not None:
                await beat
            return None
        if isinstance(effect, fx.Largest):
            return await _own(effect.writer).largest_call()
        if isinstance(effect, fx.Sleep):
            await self.sleep(effect.seconds)
            return None
        if isinstance(effect, fx.Load):
            try:
                return await self.store.load(effect.run_id)
            except RunNotFoundError:
                if effect.required:
                    raise
                return None
        if isinstance(effect, fx.Start):
            return await self.store.append(effect.event.run_id, [effect.event], 0)
        await acancel(self.store, effect.run_id, reason=effect.reason, clock=self.clock)
        return None

    async def _batch(self, batch: fx.Batch, confirm: Heartbeat | None = None) -> list[fx.End]:
        """Run a batch's calls concurrently (by concurrency key, in order), watching for a
        cancel from elsewhere; the ends in the order they came, for the core to settle."""
        groups: dict[str, list[p.Work]] = {}
        solo: list[list[p.Work]] = []
        for w in batch.works:
            key = w.tool.concurrency_key
            if key is None:
                solo.append([w])
            else:
                groups.setdefault(key, []).append(w)
        ends: list[fx.End] = []
        stopping = False
        crashed: list[Exception] = []

        def stop_now() -> bool:
            return stopping

        async def group(works: list[p.Work]) -> None:
            nonlocal stopping
            for w in works:
                try:
                    end = await self._run(batch.job(w, stop_now), None, confirm)
                except Exception as exc:  # noqa: BLE001  (re-raised once the batch has settled)
                    crashed.append(exc)
                    stopping = True
                    return
                if end is not None:
                    ends.append(end)
                    stopping = stopping or fx.stops(end)

        tasks = [asyncio.create_task(group(g)) for g in (*groups.values(), *solo)]
        writer = _own(batch.writer)
        pending: set[asyncio.Task[None]] = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=self.config.cancel_poll)
            if pending and not stopping:
                try:
                    writer.check_lease()
                    await writer.poll()
                except RunSupersededError as exc:  # a `LeaseLostError` too
                    ends.append(exc)
                    stopping = True
                if not p.working(self.reducer.table, writer.record.status):
                    stopping = True
            if pending and stopping:
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
        if crashed:
            raise crashed[-1]
        return ends


def _own(writer: RunWriter) -> AsyncWriter:
    """The AsyncRunner's own writer: every one the core hands back is one `_writer` made."""
    assert isinstance(writer, AsyncWriter)
    return writer


async def _call(tool: Tool, ctx: ToolContext) -> Any:
    """A tool's answer as the core takes it: `Returned` or `Raised`; plain tools on a thread."""
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
    except Exception as exc:  # noqa: BLE001  (a tool's exception is its failure, recorded)
        return fx.Raised(exc)
    return fx.Returned(value)


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
