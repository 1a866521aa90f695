"""`Worker`: claims runnable runs from a store by lease and drives each with a Runner.

Start N workers (threads, processes, machines) on one store and they share the runs: each
claims one run at a time (`LeaseStore.claim`), resumes it from the store, renews its lease
while it drives it, and releases it when the run ends or waits for a person. A worker that
dies stops renewing; once its lease expires another worker claims the run and resumes it —
calls the dead one left in flight are re-run only if safe, else recorded `outcome_unknown`.

New runs are created with `control.submit(store, run_id, objective, ...)` (or
`Runner.start`); approvals, rejections, resumes and cancels make runs runnable again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from agentfsm.adapters.stores.leases import RUNNABLE_STATUSES, LeaseStore
from agentfsm.reducers.record import RunRecord
from agentfsm.runtime.agent import RunResult
from agentfsm.runtime.errors import LeaseLostError
from agentfsm.runtime.runner import Runner

__all__ = ["Worker"]


class Worker:
    """Drives the runs it can claim, one at a time.

    Args:
        runner: the Runner (its store, agents and settings) runs are driven with.
        leases: the lease store shared with the other workers.
        worker_id: this worker's name (unique among the workers).
        ttl: seconds a lease lasts without renewal (a dead worker's runs wait this long).
        renew_every: seconds between renewals while driving (a third of `ttl` by default).
        retry_after: seconds before a run released while still runnable (e.g. superseded,
            or waiting on a child) may be claimed again.
        clock: monotonic seconds, for renewal timing.
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
        self.runner = runner
        self.leases = leases
        self.worker_id = worker_id
        self.ttl = ttl
        self.renew_every = renew_every if renew_every is not None else ttl / 3
        self.retry_after = retry_after
        self.clock = clock
        self.sleep = sleep
        self.log = structlog.get_logger("agentfsm")

    def run_once(self) -> RunResult | None:
        """Claim one run and drive it until it ends or waits; None if nothing was claimable.

        A run whose lease was lost midway is abandoned to the worker that took it, and
        reported `superseded`.
        """
        run_id = self.leases.claim(self.worker_id, self.ttl)
        if run_id is None:
            return None
        self.log.info("worker.claimed", worker_id=self.worker_id, run_id=run_id)
        renewed = self.clock()

        def heartbeat(record: RunRecord) -> None:
            nonlocal renewed
            now = self.clock()
            if now - renewed < self.renew_every:
                return
            if not self.leases.renew(run_id, self.worker_id, self.ttl):
                raise LeaseLostError(run_id=run_id, worker_id=self.worker_id)
            renewed = now

        result: RunResult | None = None
        try:
            result = self.runner.resume(run_id, heartbeat=heartbeat)
        except LeaseLostError:
            self.log.warning("worker.lease_lost", worker_id=self.worker_id, run_id=run_id)
            return RunResult(self.runner.store.load(run_id), superseded=True)
        finally:
            still = result is None or result.status in RUNNABLE_STATUSES
            self.leases.release(
                run_id, self.worker_id, retry_after=self.retry_after if still else 0
            )
        self.log.info(
            "worker.released", worker_id=self.worker_id, run_id=run_id, status=result.status
        )
        return result

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
