"""SDK adapters' runs driven as jobs: a waiting run is driven on by whichever worker takes its job.

A job engine (`agentfsm.runtime.procrastinate.ProcrastinateEngine`) advances a run when an
append leaves it with work to do: an approval decided, a cancel asked, a lifecycle's event
that lets it go on. Its workers drive runs through a `Runner`'s `drive`; `AdapterJobs` is
that same `drive` for the runs an SDK adapter drives (a `ClaudeRun`, an `AgentsRun`, ...),
so they are jobs too::

    def claude(store, run_id):
        if store.load(run_id).current_agent != "refunds":
            return None                                  # not one of ours: `runner` drives it
        return ClaudeRun(store, run_id, needs_approval={REFUND}).adrive(options())

    engine = ProcrastinateEngine(dsn, lambda store: AdapterJobs(store, claude, runner=...))

`adapter(store, run_id)` drives the run with your adapter, built as this worker builds it
(its tools, its `ClaudeAgentOptions` with this machine's `CLAUDE_CONFIG_DIR`): a coroutine
(run to its end in the job's thread) or its result. It runs under the job's lease on the
run (`given_lease`): the adapter holds that one instead of taking its own, keeps it renewed
while it drives, and the engine releases it. What driving it on needs is in the store (the
adapter's kept state: for Claude the session id, the deferred call and the CLI's
transcript), so any worker, on any machine, drives any run.

What a job of an adapter's run does not do, since the SDK runs a leg as one piece: it is
not sliced (`slice_turns` / `slice_seconds`), a stopping worker lets the leg end rather
than hand the run back at its next step, and the engine's fence is not checked between its
steps. The lease stands in for the fence: a worker cut off from the database loses it
within `stalled_after` seconds, and its writer stops before its next append, as any
adapter's drive does when its lease is lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from agentfsm._log import get_logger
from agentfsm.adapters._observed import ObservedRun
from agentfsm.adapters._recorder import given_lease
from agentfsm.record import RunRecord
from agentfsm.runtime.agent import RunResult
from agentfsm.runtime.runner import Runner
from agentfsm.stores.base import EventStore
from agentfsm.stores.lease import Lease

__all__ = ["AdapterJobs", "Drive", "given_lease"]

#: Drive a run with your adapter: a coroutine giving its `ObservedRun` (or that run
#: itself), or None for a run that is not the adapter's.
Drive = Callable[[EventStore, str], Awaitable[ObservedRun] | ObservedRun | None]


class AdapterJobs:
    """A job engine's driver of the runs your SDK adapter drives (see the module docstring).

    Args:
        store: the worker's store (the engine's, one per worker thread).
        adapter: `adapter(store, run_id)`: drive the run with your adapter, or None if the
            run is not its own.
        runner: drives the runs `adapter` leaves (a `Runner` of your agents); without one such
            a run is left as it is (logged `engine.not_driven`).
    """

    def __init__(self, store: EventStore, adapter: Drive, *, runner: Runner | None = None) -> None:
        self.store = store
        self.adapter = adapter
        self.runner = runner

    @property
    def reducer(self) -> Any:
        """The fallback Runner's reducer (its guards' deadlines set timers), or the store's."""
        return self.runner.reducer if self.runner is not None else self.store.reducer

    def drive(
        self,
        run_id: str,
        *,
        lease: Lease | None = None,
        heartbeat: Callable[[RunRecord], None] | None = None,
        resume_paused: bool = True,
        defer_retries: bool = False,
        confirm: Callable[[RunRecord], None] | None = None,
        wait: float | None = None,
    ) -> RunResult:
        """Advance run `run_id` as `Runner.drive` does, with your adapter if it is its own.

        `heartbeat`, `resume_paused`, `defer_retries` and `confirm` go to the fallback Runner; an
        adapter's leg runs as the SDK runs it (see the module docstring).
        """
        with given_lease(lease):
            done = self.adapter(self.store, run_id)
            if inspect.isawaitable(done):
                done = _run(_awaited(done))
        if isinstance(done, ObservedRun):
            return RunResult(record=done.record, kind=done.kind)
        if self.runner is not None:
            return self.runner.drive(
                run_id, wait=wait, lease=lease, heartbeat=heartbeat, resume_paused=resume_paused,
                defer_retries=defer_retries, confirm=confirm,
            )  # fmt: skip
        get_logger().warning("engine.not_driven", run_id=run_id, reason="no driver for it")
        return RunResult(record=self.store.load(run_id))


async def _awaited(done: Awaitable[ObservedRun]) -> ObservedRun:
    return await done


def _run(coro: Any) -> ObservedRun:
    """Run `coro` to its end: in this thread (a job's, with no event loop of its own), or
    on a thread of its own if this one runs a loop already (the context goes with it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)  # type: ignore[no-any-return]
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(context.run, asyncio.run, coro).result()  # type: ignore[no-any-return]
