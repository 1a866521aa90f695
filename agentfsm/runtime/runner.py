"""`Runner`: drives one run through the table, from the store, one durable step at a time.

Each step is decided from the run's record (see `_plan`), and every fact is appended
before the code that depends on it runs: `model.started` before the model is called,
`tool.requested` and `tool.started` before the tool runs, its result right after. A crash
at any point leaves a log that `drive(run_id)` continues from:

- a call requested but never started is started (it cannot have run);
- a call started with no outcome is run again only if its tool is safe to repeat (no side
  effects, or idempotent with the same idempotency key); otherwise it is recorded
  `tool.outcome_unknown` and surfaced in `RunResult.unknown_outcomes`, never repeated;
- a model call started with no decision is made again (within the same turn).

One driver per run: `run` and `drive` hold the run's lease for the whole drive (taken from
the store once, renewed by this process's heartbeat thread while tools and models run,
released at the end, also when the drive raises). A second driver is refused at once with
`RunHeldError` naming the holder, or waits `wait=` seconds; a `Worker` hands its claim over
(`lease=`). So a call in flight is declared `tool.outcome_unknown` only by a driver that took
the lease over from one whose heartbeat stopped (see `agentfsm.stores.lease`).

The decisions are all in the sans-IO core (`_drive.Driver`); the Runner performs its effects
with direct calls, a batch's calls one after another (`AsyncRunner` runs them concurrently).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from agentfsm.errors import GuardRejectedError, LifecycleError, RunNotFoundError, RunSupersededError
from agentfsm.events.models import Limits
from agentfsm.guards.base import Guard
from agentfsm.record import RunRecord
from agentfsm.runtime import _effects as fx
from agentfsm.runtime import _plan as p
from agentfsm.runtime._drive import Driver, utc_now
from agentfsm.runtime._writer import BudgetTree, RunWriter, StateChanged, Writer
from agentfsm.runtime.agent import Agent, RunnerConfig, RunResult, Subagent
from agentfsm.runtime.control import cancel
from agentfsm.runtime.model import Decision, StreamAssembler
from agentfsm.runtime.tools import ToolContext
from agentfsm.stores.base import EventStore
from agentfsm.stores.lease import AsyncLease, Lease, new_holder, root_of

__all__ = ["Runner", "utc_now"]

T = TypeVar("T")

#: What an append may be refused with; handed to the core as a `Refused` value.
REFUSALS = (GuardRejectedError, StateChanged, RunSupersededError, LifecycleError)


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


class Runner(Driver):
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

    Raises:
        InvalidTableError: the store's table has a state no Runner can drive a run in (a
            state declared without a kind, so `active`, that only a person moves on: declare
            it `kind="waiting"`); `agentfsm check-table` reports the same.
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

    def run(
        self,
        run_id: str,
        objective: str | None = None,
        *,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Start a new run and drive it here until it ends or waits for a person (holding its
        lease: see the module docstring). To start one for a `Worker` to drive, `submit` it.

        Raises:
            ConcurrencyConflictError: a run with this id already exists.
            RunHeldError: another driver holds the id's lease.
        """
        with self._held(run_id, None, None) as lease:
            return self._run(self._run_new(run_id, objective, agent, limits, lease))

    def drive(
        self,
        run_id: str,
        *,
        wait: float | None = None,
        lease: Lease | None = None,
        heartbeat: Callable[[RunRecord], None] | None = None,
        resume_paused: bool = True,
        defer_retries: bool = False,
        confirm: Callable[[RunRecord], None] | None = None,
    ) -> RunResult:
        """Continue a run from the store: after a crash, an approval, a pause, or a cancel.

        A paused run is resumed (`run.resumed`) first, unless `resume_paused` is False. A run
        waiting for approval returns at once, still waiting.

        Args:
            run_id: the run.
            wait: seconds to wait for another driver's lease to be let go (None: refused at
                once while a live driver holds the run).
            lease: the run's lease, already held (a `Worker`'s claim): the Runner keeps it
                alive while it drives and leaves releasing it to its owner.
            heartbeat: called before every step (a job checks its fence there; raise to
                stop driving), but the call whose `tool.started` went in with the decision
                that asked for it: that call is under way (`confirm` is its check).
            resume_paused: resume a paused run (`run.resumed`) first; with False a paused run
                stays paused and only what is overdue is settled (a wake-up job uses it:
                a timer or a late job must not undo a person's pause).
            defer_retries: where a failed safe call's retry must wait out its backoff,
                return instead of sleeping, with `RunResult.wake_at` = when it is due (the
                run stays runnable); driven at or after that time, the retry is made. A
                driver keeps the time as a durable timer, so no process sleeps through a
                backoff and a crash during one loses nothing. (A subagent run's retries,
                inside its parent's call, are still waited out in place.)
            confirm: called after a call's `tool.started` is durable and right before its
                tool runs, for a tool with side effects (a job confirms there, in the
                database, that it still owns its attempt: raise `LeaseLostError` to stop,
                the tool not called). The run's lease, if any, is checked there too.

        Raises:
            RunNotFoundError: the store has no such run.
            RunHeldError: another driver holds the run (still, after `wait` seconds).
            ValueError: `lease` is another run's, or comes with a `wait`.
        """
        with self._held(run_id, lease, wait) as held:
            steps = self._drive_stored(
                run_id, heartbeat is not None, resume_paused, defer_retries, held
            )
            return self._run(steps, heartbeat, confirm)

    @contextmanager
    def _held(self, run_id: str, given: Lease | None, wait: float | None) -> Iterator[Lease | None]:
        """The drive's lease, kept alive for the block: `given`, or taken from the store
        (and released after it). None for a store that keeps no leases."""
        if given is not None:
            check_given(run_id, given, wait)
            with given.kept():
                yield given
            return
        try:
            lease = self.store.hold(
                run_id, ttl=self.config.lease_ttl, wait=wait, holder=new_holder("runner")
            )
        except NotImplementedError:  # a store of someone else's, without leases
            lease = None
        if lease is None:
            yield None
            return
        try:
            with lease.kept():
                yield lease
        finally:
            lease.release()

    # -- the shell: what the core's effects are, done with direct calls ------------------

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

    def _child(self, sub: Subagent) -> Runner:
        agents = (sub.agent, *sub.agents)
        return Runner(self.store, agents, sleep=self.sleep, **self._child_runner_args())

    def _run(
        self,
        steps: fx.Steps[T],
        heartbeat: Callable[[RunRecord], None] | None = None,
        confirm: Callable[[RunRecord], None] | None = None,
    ) -> T:
        """Drive the core's generator to its end, performing each effect it yields."""
        got: Any = None
        while True:
            try:
                effect = steps.send(got)
            except StopIteration as done:
                result: T = done.value
                return result
            if effect.__class__ is fx.Append:  # inline: half of a turn's effects are appends
                try:
                    got = _own(effect.writer).append(effect.specs, effect.then)
                except REFUSALS as exc:
                    got = fx.Refused(exc)
            else:
                got = self._perform(effect, heartbeat, confirm)

    def _perform(
        self,
        effect: fx.Effect,
        heartbeat: Callable[[RunRecord], None] | None,
        confirm: Callable[[RunRecord], None] | None = None,
    ) -> Any:
        # Most frequent first: a turn is two appends (inlined in `_run`), a model call, a
        # batch and its tool calls.
        if isinstance(effect, fx.Batch):
            # One call after another; the first that stops the batch ends it.
            for work in effect.works:
                end = self._run(effect.job(work, _never), None, confirm)
                if end is not None:
                    return (end,)
            return ()
        if isinstance(effect, fx.Call):
            return _call(effect.tool.fn, effect.ctx, effect.tool.name)
        if isinstance(effect, fx.Ask):
            try:
                return _assemble(effect.agent.model(effect.ctx), effect.agent.name)
            except Exception as exc:  # noqa: BLE001  (any model bug ends the run as failed)
                return fx.Raised(exc)
        if isinstance(effect, fx.Beat):
            hook = confirm if effect.before_call else heartbeat
            if hook is not None:
                hook(effect.record)
            return None
        if isinstance(effect, fx.Append):
            try:
                return _own(effect.writer).append(effect.specs, effect.then)
            except REFUSALS as exc:
                return fx.Refused(exc)
        if isinstance(effect, fx.Largest):
            return _own(effect.writer).largest_call()
        if isinstance(effect, fx.Sleep):
            self.sleep(effect.seconds)
            return None
        if isinstance(effect, fx.Load):
            try:
                return self.store.load(effect.run_id)
            except RunNotFoundError:
                if effect.required:
                    raise
                return None
        if isinstance(effect, fx.Start):
            return self.store.append(effect.event.run_id, [effect.event], 0)
        cancel(self.store, effect.run_id, reason=effect.reason, clock=self.clock)
        return None


def _own(writer: RunWriter) -> Writer:
    """The Runner's own writer: every one the core hands back is one `_writer` made."""
    assert isinstance(writer, Writer)
    return writer


def _never() -> bool:
    return False


def check_given(run_id: str, lease: Lease | AsyncLease, wait: float | None) -> None:
    """A lease handed to a drive must be the run's (its root's), and leaves nothing to wait
    for."""
    if lease.run_id != root_of(run_id):
        raise ValueError(f"the lease given is of run '{lease.run_id}', not of run '{run_id}'")
    if wait is not None:
        raise ValueError("give a held lease or a time to wait for one, not both")


def _call(fn: Callable[[ToolContext], Any], ctx: ToolContext, name: str) -> Any:
    """A tool's answer as the core takes it: `Returned`, or `Raised` (an async tool too)."""
    try:
        value = fn(ctx) if ctx.timeout is None else call_within(fn, ctx, ctx.timeout)
    except Exception as exc:  # noqa: BLE001  (a tool's exception is its failure, recorded)
        return fx.Raised(exc)
    if hasattr(value, "__await__"):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        return fx.Raised(TypeError(f"tool '{name}' is async: run it with AsyncRunner"))
    return fx.Returned(value)


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
