"""`Worker` / `AsyncWorker`: claim runnable runs from a store by lease and drive them.

Start N workers (threads, processes, machines) on one store and they share the runs: each
claims one run at a time (`LeaseStore.claim`), drives it from the store, renews its lease
while it drives it, and releases it when the run ends or waits for a person. A worker that
dies stops renewing; once its lease expires another worker claims the run and drives it on —
calls the dead one left in flight are re-run only if safe, else recorded `outcome_unknown`.

A claim is the run's lease, the one every driver holds (`agentfsm.stores.lease`): the worker
hands it to the Runner (`drive(run_id, lease=...)`), whose heartbeat renews it while tools
run, so a `Runner.drive` elsewhere is refused while the worker drives, and the worker never
claims a run someone else drives. A worker whose lease is lost stops before its next write.

New runs are created with `control.submit(store, run_id, objective, ...)`; approvals,
rejections, resumes and cancels make runs runnable again.

Timers (`agentfsm.runtime.timers`): a worker drives a run with `resume_paused=False` (a person's
pause stands) and `defer_retries=True`, and when it lets the run go it leaves on the lease
row the next time the run needs driving by itself: its deadline, an approval's expiry, a
retry's end of backoff (`release(..., wake_at=...)`); a due scheduled resume
(`pause_until`) is made first, exactly (`resume_paused`). With `SQLiteLeases` and
`install_timers(store, leases)`, steering appends set wake-ups and timers in their own
transaction, so nothing waits in a process: a worker that comes back later settles what
fell due meanwhile.

`AsyncWorker` does the same with an `AsyncRunner`, driving up to `concurrency` runs at once
in one event loop (runs that wait on models and tools interleave); its lease calls run on a
thread, one at a time, so the loop never blocks on the lease table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentfsm._log import get_logger
from agentfsm.errors import ConcurrencyConflictError, LifecycleError, RunNotFoundError
from agentfsm.events import models as m
from agentfsm.names import StateKind
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime.agent import RunResult
from agentfsm.runtime.async_runner import AsyncRunner
from agentfsm.runtime.runner import Runner
from agentfsm.runtime.timers import next_wake, resume_paused
from agentfsm.stores.lease import AsyncLease, Holder, Lease
from agentfsm.stores.leases import LeaseStore

__all__ = ["AsyncWorker", "Worker"]


class _Leasing:
    """What both workers share: the lease settings and when a lease is due for renewal."""

    def __init__(
        self,
        leases: LeaseStore,
        *,
        worker_id: str,
        ttl: float,
        renew_every: float | None,
        retry_after: float,
        clock: Callable[[], float],
        reducer: Reducer,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl!r}")
        self.leases = leases
        self.worker_id = worker_id
        self.ttl = ttl
        self.renew_every = renew_every if renew_every is not None else ttl / 3
        self.retry_after = retry_after
        self.clock = clock
        self.table = reducer.table
        # The driving Runner's guards: their deadlines are timers too.
        self.guards = reducer.guards
        self.runnable = frozenset(self.table.runnable_states)
        self.log = get_logger()

    def _claimed(self, run_id: str) -> None:
        self.log.info("worker.claimed", worker_id=self.worker_id, run_id=run_id)

    def _new_lease(self, run_id: str) -> Lease:
        """The claim as the lease a Runner drives under (renewed by its heartbeat)."""
        leases, worker, ttl = self.leases, self.worker_id, self.ttl
        return Lease(
            run_id,
            worker,
            ttl,
            renew=lambda: leases.renew(run_id, worker, ttl),
            every=self.renew_every,
            clock=self.clock,
            takeover=self._taken_over(run_id),
        )

    def _taken_over(self, run_id: str) -> Holder | None:
        """Whose lapsed lease the claim took (lease stores that tell it only)."""
        taken = getattr(self.leases, "taken_over", None)
        return None if taken is None else taken(run_id)

    def _lost(self, run_id: str, result: RunResult) -> RunResult:
        self.log.warning("worker.lease_lost", worker_id=self.worker_id, run_id=run_id)
        return result

    def _retry_after(self, result: RunResult | None) -> float:
        """How long a released run stays unclaimable: a while if it is still runnable (until
        its retry is due, if one is)."""
        if result is not None and result.wake_at is not None:
            return max(0.0, result.wake_at.timestamp() - time.time())
        still = result is None or result.status in self.runnable
        return self.retry_after if still else 0.0

    def _release_args(self, result: RunResult | None) -> dict[str, Any]:
        """`release`'s keywords: the hold, and the run's next time if it has one."""
        args: dict[str, Any] = {"retry_after": self._retry_after(result)}
        due = None if result is None else next_wake(result, self.table, self.guards)
        if due is not None:
            args["wake_at"] = due.timestamp()
        return args

    def _resume_due(self, run_id: str) -> int | None:
        """The pause version whose scheduled resume the claim found due (leases that keep
        timers only)."""
        due = getattr(self.leases, "resume_due", None)
        return None if due is None else due(run_id)

    def _released(self, run_id: str, result: RunResult) -> RunResult:
        self.log.info(
            "worker.released", worker_id=self.worker_id, run_id=run_id, status=result.status
        )
        return result


class Worker(_Leasing):
    """Drives the runs it can claim, one at a time.

    Args:
        runner: the Runner (its store, agents and settings) runs are driven with.
        leases: the lease store shared with the other workers.
        worker_id: this worker's name (unique among the workers).
        ttl: seconds a lease lasts without renewal (a dead worker's runs wait this long for
            another worker; a `Runner.drive` on its host takes them at once).
        renew_every: seconds between renewals while driving (a third of `ttl` by default;
            the Runner's heartbeat renews on its own clock, tools running or not).
        retry_after: seconds before a run released while still runnable (e.g. superseded,
            or waiting on a child) may be claimed again.
        clock: monotonic seconds, for renewal timing (and for telling the lease lost).
        sleep: how to wait when there is nothing to claim (`serve`).
    """

    def __init__(
        self,
        runner: Runner,
        leases: LeaseStore,
        *,
        worker_id: str,
        ttl: float = 30.0,
        renew_every: float | None = None,
        retry_after: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(
            leases,
            worker_id=worker_id,
            ttl=ttl,
            renew_every=renew_every,
            retry_after=retry_after,
            clock=clock,
            reducer=runner.reducer,
        )
        self.runner = runner
        self.sleep = sleep

    def run_once(self) -> RunResult | None:
        """Claim one run and drive it until it ends or waits; None if nothing was claimable.

        A run whose lease was lost midway is abandoned to the worker that took it, and
        reported `superseded`.
        """
        run_id = self.leases.claim(self.worker_id, self.ttl)
        if run_id is None:
            return None
        self._claimed(run_id)
        lease = self._new_lease(run_id)
        result: RunResult | None = None
        try:
            version = self._resume_due(run_id)
            if version is not None:
                resume_paused(self.runner.store, run_id, version, self.table, self.runner.clock)
            result = self.runner.drive(run_id, lease=lease, resume_paused=False, defer_retries=True)
        finally:
            self.leases.release(run_id, self.worker_id, **self._release_args(result))
        if result.superseded and lease.lost:
            return self._lost(run_id, result)
        return self._released(run_id, result)

    def drain(self, *, max_runs: int | None = None) -> list[RunResult]:
        """Drive runs until none can be claimed (or `max_runs` were driven)."""
        results: list[RunResult] = []
        while max_runs is None or len(results) < max_runs:
            result = self.run_once()
            if result is None:
                return results
            results.append(result)
        return results

    def serve(self, *, idle: float = 1.0, stop: Callable[[], bool] = lambda: False) -> None:
        """Drive runs until `stop()` says so, sleeping `idle` seconds when there is none.

        A run whose driving raises (a policy or model adapter bug, a store outage) is
        logged as `worker.run_error` and left for `retry_after` seconds; the worker goes on.
        """
        while not stop():
            try:
                result = self.run_once()
            except Exception as exc:  # noqa: BLE001  (one bad run must not stop the worker)
                self.log.error("worker.run_error", worker_id=self.worker_id, error=repr(exc))
                self.sleep(idle)
                continue
            if result is None:
                self.sleep(idle)


class AsyncWorker(_Leasing):
    """Drives the runs it can claim with an `AsyncRunner`, up to `concurrency` at once.

    Args:
        runner: the AsyncRunner (its store, agents and settings) runs are driven with.
        leases: the lease store shared with the other workers (sync or async workers alike).
        worker_id: this worker's name (unique among the workers).
        concurrency: how many runs this worker drives at the same time.
        ttl: seconds a lease lasts without renewal (a dead worker's runs wait this long).
        renew_every: seconds between renewals while driving (a third of `ttl` by default).
        retry_after: seconds before a run released while still runnable may be claimed again.
        clock: monotonic seconds, for renewal timing.
        sleep: how to wait when there is nothing to claim (`serve`).
    """

    def __init__(
        self,
        runner: AsyncRunner,
        leases: LeaseStore,
        *,
        worker_id: str,
        concurrency: int = 1,
        ttl: float = 30.0,
        renew_every: float | None = None,
        retry_after: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
        super().__init__(
            leases,
            worker_id=worker_id,
            ttl=ttl,
            renew_every=renew_every,
            retry_after=retry_after,
            clock=clock,
            reducer=runner.reducer,
        )
        self.runner = runner
        self.concurrency = concurrency
        self.sleep = sleep
        # One lease call at a time, on a thread: a lease store holds one connection.
        self._lease_lock = asyncio.Lock()

    async def run_once(self) -> RunResult | None:
        """Claim one run and drive it until it ends or waits; None if nothing was claimable.

        A run whose lease was lost midway is abandoned to the worker that took it, and
        reported `superseded`.
        """
        run_id = await self._claim()
        return None if run_id is None else await self._drive_claimed(run_id)

    async def drain(self, *, max_runs: int | None = None) -> list[RunResult]:
        """Drive runs, `concurrency` at a time, until none can be claimed (or `max_runs`)."""
        results: list[RunResult] = []
        claimed = 0
        running: set[asyncio.Task[RunResult]] = set()
        while True:
            while len(running) < self.concurrency and (max_runs is None or claimed < max_runs):
                run_id = await self._claim()
                if run_id is None:
                    break
                claimed += 1
                running.add(asyncio.create_task(self._drive_claimed(run_id)))
            if not running:
                return results
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            # A driving error goes up, as in `Worker.drain` (the others are cancelled first).
            failed = [t for t in done if t.exception() is not None]
            if failed:
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
                raise failed[0].exception()  # type: ignore[misc]
            results.extend(t.result() for t in done)

    async def serve(self, *, idle: float = 1.0, stop: Callable[[], bool] = lambda: False) -> None:
        """Drive runs until `stop()` says so, sleeping `idle` seconds when there is none.

        A driving error is logged as `worker.run_error` and its run left for `retry_after`
        seconds; the worker goes on.
        """
        while not stop():
            try:
                results = await self.drain()
            except Exception as exc:  # noqa: BLE001  (one bad run must not stop the worker)
                self.log.error("worker.run_error", worker_id=self.worker_id, error=repr(exc))
                results = []
            if not results:
                await self.sleep(idle)

    async def _lease(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async with self._lease_lock:
            return await asyncio.to_thread(fn, *args, **kwargs)

    async def _claim(self) -> str | None:
        run_id: str | None = await self._lease(self.leases.claim, self.worker_id, self.ttl)
        if run_id is not None:
            self._claimed(run_id)
        return run_id

    async def _drive_claimed(self, run_id: str) -> RunResult:
        worker, ttl = self.worker_id, self.ttl

        async def renew() -> bool:
            ok: bool = await self._lease(self.leases.renew, run_id, worker, ttl)
            return ok

        taken = await self._lease(self._taken_over, run_id)
        lease = AsyncLease(
            run_id, worker, ttl, renew=renew, every=self.renew_every, clock=self.clock,
            takeover=taken,
        )  # fmt: skip
        result: RunResult | None = None
        try:
            version = await self._lease(self._resume_due, run_id)
            if version is not None:
                await self._resume_paused(run_id, version)
            result = await self.runner.drive(
                run_id, lease=lease, resume_paused=False, defer_retries=True
            )
        finally:
            args = self._release_args(result)
            await self._lease(self.leases.release, run_id, self.worker_id, **args)
        if result.superseded and lease.lost:
            return self._lost(run_id, result)
        return self._released(run_id, result)

    async def _resume_paused(self, run_id: str, version: int) -> None:
        """`timers.resume_paused` over the async store: resume exactly that pause."""
        store = self.runner.store
        try:
            record = await store.load(run_id)
        except RunNotFoundError:
            return
        if record.version != version or self.table.kind(record.status) != StateKind.PAUSED:
            return
        now = self.runner.clock().isoformat()
        event = m.RunResumed(run_id=run_id, sequence=version + 1, occurred_at=now)
        try:
            await store.append(run_id, [event], version)
        except (ConcurrencyConflictError, LifecycleError):
            return  # moved on meanwhile
