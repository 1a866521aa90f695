"""Runs advance as Procrastinate jobs on PostgreSQL: many workers on many machines.

Needs the `procrastinate` extra: `pip install 'agentfsm[procrastinate]'`. Procrastinate keeps
its jobs as rows in the PostgreSQL the store already uses, so there is no second server and
a wake-up commits in the same transaction as the append that causes it.

The model:

- **One task, "advance run R"** (`agentfsm.advance`): load the run and drive it with the
  Runner until it ends, waits for a person, is paused, or its parent waits on a subagent.
  Every job of a run carries `lock=R` (one advance of a run at a time, in the order they
  were queued) and `queueing_lock=R` (a second wake-up while one waits to start is that
  one). Delivery is at least once, and that is safe: appends carry `expected_version` and
  tools their idempotency key, so a late or duplicate job finds the run moved on (or
  waiting) and ends quietly after one load. A job never undoes a pause (`resume_paused=False`).
- **No lost wake-ups.** `Waker.hook(table)` is the PostgreSQL store's `after_append`: in the
  append's transaction, on its connection, it defers what `agentfsm.runtime._wakeups` says
  the batch calls for (a steering verb's event that leaves the run runnable, a subagent
  run's decision, a deadline or an approval's expiry). Use `engine.store()` (or
  `Waker.store(...)`) wherever runs are steered: the API, `agentfsm approve` and the UI
  alike (the command line finds the engine recorded in the database by `migrate()`).
- **Routes.** A run's jobs go to the queue, at the priority, chosen when it was
  submitted (`submit_routed`, or the engine's `router`): the `Route` is recorded in the
  engine's `routes` table with `run.started` and kept by every later job of the run,
  whichever process queues it (a steering process reads it from the table; a worker
  takes it from the job it runs). A fork of a routed run has its source's route. A run
  with no route is in the engine's queue.
- **Timers** are scheduled jobs of their own (`agentfsm.timer`), with no lock: a scheduled
  job holding the run's lock would hold back every later job of the run until its time
  (Procrastinate runs a lock's jobs in id order). When due it queues the run's advance
  (kind `wake`), or resumes the pause it was set with (kind `resume`, `pause_until`).
  An advance that leaves a run waiting re-arms its next due time, so a timer that fired
  early (clock skew) or was never set (a run created without the hook) is set again; an
  advance drives with `defer_retries=True`, so a failed safe call's backoff is a timer
  too, never a sleep in the job. The rules are shared with the SQLite `Worker`'s timers
  (`agentfsm.runtime.timers`); the hook answers `wants` first, so appends that call for
  nothing stay one autocommit statement.
- **Failover.** Workers write a heartbeat every `heartbeat` seconds; every
  `recover_every` seconds one worker of the queue (whichever takes an advisory lock first;
  the others skip their turn) runs a recovery pass that closes (as `failed`) the jobs
  `doing` on a worker silent for `stalled_after` seconds and queues a fresh copy of each,
  in one transaction (`FOR UPDATE SKIP LOCKED` too, so recoverers never act twice), on a
  connection kept for the passes. A fresh job and
  not `retry_job`: the dead attempt keeps its id, so it is fenced — a driving job checks
  every `fence_every` seconds that its own job is still `doing` and stops (`superseded`)
  if not, and its late `finish` cannot end the new attempt. It checks again, always,
  after a call's durable `tool.started` and before a tool with side effects runs: a
  partition that held back the reply to that write must not let a closed attempt act
  once it heals. The run is driven on from its log:
  calls left in flight are re-run only if safe, else `tool.outcome_unknown`.
- **The run's lease.** A job drives under the store's lease on the run, like any driver
  (`EventStore.hold`), so a user's own `Runner.drive` cannot race a job, nor a job a
  user's drive. The job's lease lasts `stalled_after` seconds past its last heartbeat
  (renewed by the process's heartbeat thread, tools running or not), so a dead worker's
  lease has lapsed by the time its job runs elsewhere (on its own host, at once: its
  process is gone). A job waits that long for a live holder; then it leaves the run to
  it and sets a timer to look again (`held`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext, suppress
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import attrs

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    import procrastinate
    import psycopg
    import psycopg_pool
    from procrastinate import exceptions as pq_exceptions
    from procrastinate.jobs import Job
    from procrastinate.manager import JobManager
except ImportError as exc:
    raise missing_extra("ProcrastinateEngine", "procrastinate", exc) from exc

from agentfsm._log import get_logger
from agentfsm.errors import LeaseLostError, RunHeldError, RunNotFoundError, SchemaBehindError
from agentfsm.events.models import Event, Limits
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import _pq_schema
from agentfsm.runtime._wakeups import Wake, root_of
from agentfsm.runtime.agent import RunResult
from agentfsm.runtime.control import submit
from agentfsm.runtime.timers import due_wakes, next_wake, pause_until, resume_paused, wants_wakes
from agentfsm.stores._append import takes_fold
from agentfsm.stores._checks import check_prefix
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.stores.lease import Lease
from agentfsm.stores.postgres import AfterAppend, PostgresEventStore
from agentfsm.stores.rows import Folded

__all__ = [
    "ADVANCE",
    "TIMER",
    "EngineSettings",
    "ProcrastinateEngine",
    "Route",
    "RunDriver",
    "SchemaBehindError",
    "Waker",
    "pause_until",
    "recovery_lock_key",
    "submit_routed",
]

#: The task that drives a run; its jobs carry `lock` and `queueing_lock` = the run id.
ADVANCE = "agentfsm.advance"
#: The task of a timer: when due, it queues the run's advance (or resumes it).
TIMER = "agentfsm.timer"
#: The key of the store's `meta` row that names the engine serving the database.
ENGINE_KEY = "engine"

# Jobs of ours `doing` on a worker that stopped writing its heartbeat, locked so that two
# recoverers never both act on one (modelled on Procrastinate's own
# `select_stalled_jobs_by_heartbeat`).
_STALLED = """
SELECT j.id, j.task_name, j.args, j.lock, j.queueing_lock, j.queue_name, j.priority
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
 WHERE j.status = 'doing' AND j.task_name = ANY(%(tasks)s) AND j.queue_name = %(queue)s
   AND (j.worker_id IS NULL
        OR w.id IS NULL
        OR w.last_heartbeat < now() - make_interval(secs => %(seconds)s))
 ORDER BY j.id
 FOR UPDATE OF j SKIP LOCKED
"""


# What the planner believes the jobs table holds (`reltuples`, -1 before any ANALYZE) and
# what it holds (the statistics collector's live rows).
_JOBS_PLANNED = """
SELECT c.reltuples, s.n_live_tup
  FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.oid = 'procrastinate_jobs'::regclass
"""
#: The jobs table is analyzed by a recovery pass once it holds at least this many rows...
_STALE_ROWS = 1_000
#: ... and this many times the rows its statistics were taken at.
_STALE_GROWTH = 2.0


def recovery_lock_key(queue: str) -> str:
    """The advisory lock (by `hashtext`) a worker of `queue` holds for its recovery pass."""
    return f"agentfsm:recover:{queue}"


@attrs.frozen
class EngineSettings:
    """How the engine's workers share runs.

    Attributes:
        queue: the Procrastinate queue of this engine's jobs.
        concurrency: jobs a worker process drives at once (each on a thread, with its own
            store connection: agents and tools must be thread-safe above 1).
        heartbeat: seconds between a worker's heartbeats.
        stalled_after: seconds without a heartbeat after which a worker's jobs are run
            elsewhere (keep it several heartbeats long: a live worker must never look dead).
        recover_every: seconds between a worker's recovery passes.
        fence_every: at most this many seconds between a driving job's checks that it
            still owns its attempt (a stale worker stops within about this long).
        slice_turns: model turns a job drives a run before it puts the run back at the end
            of the queue (a fresh advance job) and ends, so a long run shares the workers
            with the runs queued behind it (None: no limit in turns).
        slice_seconds: the same in seconds of driving, checked between steps (None: no
            limit in time). Whichever comes first ends the slice.
        job_attempts: tries of an advance that raised (a store outage, a bug), with backoff.
        delete_jobs: Procrastinate's `delete_jobs` for finished jobs (`successful` keeps
            the job table small; `never` keeps every job for inspection).
        poll: seconds between polls for jobs, behind LISTEN/NOTIFY.
    """

    queue: str = "agentfsm"
    concurrency: int = 1
    heartbeat: float = 1.0
    stalled_after: float = 4.0
    recover_every: float = 1.0
    fence_every: float = 1.0
    slice_turns: int | None = 20
    slice_seconds: float | None = 10.0
    job_attempts: int = 5
    delete_jobs: str = "successful"
    poll: float = 1.0


#: Procrastinate's `queue_name` is a `varchar(128)`, its `priority` a PostgreSQL `integer`.
_QUEUE_MAX = 128
_PRIORITY_RANGE = (-(2**31), 2**31 - 1)


@attrs.frozen
class Route:
    """Where a run's jobs go: its queue, and its priority in the queue.

    Chosen once, when the run is submitted (`submit_routed`, or the Waker's `router`), kept
    in the engine's `routes` table in the same transaction as `run.started`, and used for
    every job of the run after that: its advances (a person's approval from the UI or the
    command line included), its timers, its time slices, and the recovery pass's copies.
    Procrastinate takes a worker's next job by `priority` (higher first), then by age,
    across all the queues the worker serves.

    Attributes:
        queue: a Procrastinate queue (1 to 128 characters).
        priority: higher is taken first (a PostgreSQL `integer`; default 0).
    """

    queue: str
    priority: int = 0

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.queue, str) or not 0 < len(self.queue) <= _QUEUE_MAX:
            raise ValueError(
                f"Route.queue must be a name of 1 to {_QUEUE_MAX} characters, got {self.queue!r}"
            )
        low, high = _PRIORITY_RANGE
        if type(self.priority) is not int or not low <= self.priority <= high:
            raise ValueError(
                f"Route.priority must be a whole number from {low} to {high}, got {self.priority!r}"
            )


#: A function of a new run (its `run.started` record: id, objective, agent) that picks its
#: route, or None for the engine's queue.
Router = Callable[[RunRecord], "Route | None"]

#: The route `submit_routed` gives the run it submits, read by the hook in that append.
_SUBMITTING: contextvars.ContextVar[tuple[str, Route] | None] = contextvars.ContextVar(
    "agentfsm_submitting", default=None
)

# Routes are never changed once set (a run id is never reused: runs are not deleted), so
# a process may keep what it has read; bounded, and simply emptied when full.
_ROUTES_KEPT = 10_000


def routes_table(table_prefix: str) -> str:
    """The engine's table of routed runs (root run id -> queue, priority)."""
    return f"{table_prefix}routes"


def _create_routes(table_prefix: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {routes_table(table_prefix)} ("
        "run_id TEXT PRIMARY KEY, queue TEXT NOT NULL, priority INTEGER NOT NULL)"
    )


class Waker:
    """Enqueues wake-ups and timers on a connection the caller gives, in its transaction.

    Needs no worker and no open pool: this is what a steering process (the API, the
    command line, the UI) uses, through the store's `after_append` hook.

    Every job goes where its run's `Route` says: a run submitted with one (`submit_routed`,
    or `router`) has it recorded in the engine's `routes` table, read (once per process and
    run) by every later wake-up; a run without one goes to `queue` at priority 0.

    Args:
        queue: the engine's queue, for runs without a route.
        router: picks the route of each run submitted through this Waker's stores (None
            for the engine's queue); `submit_routed` overrides it for one run.
        table_prefix: the store's table prefix (the `routes` table is named with it).
    """

    def __init__(
        self,
        queue: str = "agentfsm",
        *,
        router: Router | None = None,
        table_prefix: str = "agentfsm_",
    ) -> None:
        self.queue = queue
        self.default = Route(queue)
        self.router = router
        self.table_prefix = check_prefix(table_prefix)
        # Used only with connections we are given: never opened.
        self._jobs = JobManager(procrastinate.SyncPsycopgConnector())
        self.log = get_logger()
        self._routes: dict[tuple[str, str], Route] = {}
        self._tables: set[str] = set()  # prefixes whose routes table was seen

    def hook(self, table: TransitionTable, table_prefix: str | None = None) -> AfterAppend:
        """The `after_append` of a PostgreSQL store whose runs are under `table`."""
        return _WakeHook(self, table, table_prefix or self.table_prefix)

    def store(
        self,
        conninfo: str,
        *,
        options: StoreOptions | None = None,
        table_prefix: str | None = None,
        migrate: bool = False,
    ) -> PostgresEventStore:
        """A PostgreSQL store whose appends enqueue the wake-ups they cause."""
        table = (options or StoreOptions()).reducer.table
        prefix = table_prefix or self.table_prefix
        return PostgresEventStore(
            conninfo,
            options=options,
            table_prefix=prefix,
            migrate=migrate,
            after_append=self.hook(table, prefix),
        )

    def install(self, store: PostgresEventStore) -> PostgresEventStore:
        """Give an open store this waker's hook (for its reducer's table); returns it."""
        store.after_append = self.hook(store.reducer.table, store.table_prefix)
        return store

    # -- routes ---------------------------------------------------------------------------

    def route_of(
        self, conn: psycopg.Connection[Any], run_id: str, table_prefix: str | None = None
    ) -> Route:
        """The route of `run_id`'s root run: recorded at its submission, else the engine's
        queue."""
        prefix = table_prefix or self.table_prefix
        key = (prefix, root_of(run_id))
        known = self._routes.get(key)
        if known is not None:
            return known
        route = self.default
        if self._has_routes(conn, prefix):
            row = conn.execute(
                f"SELECT queue, priority FROM {routes_table(prefix)} WHERE run_id = %s",
                (key[1],),
            ).fetchone()
            if row is not None:
                route = Route(row[0], row[1])
        self.remember(key[1], route, prefix)
        return route

    def remember(self, run_id: str, route: Route, table_prefix: str | None = None) -> None:
        """Keep `route` as the route of `run_id`'s root run in this process (a worker does,
        from the job it runs: the job is where the run's route put it)."""
        if len(self._routes) >= _ROUTES_KEPT:
            self._routes.clear()
        self._routes[(table_prefix or self.table_prefix, root_of(run_id))] = route

    def _has_routes(self, conn: psycopg.Connection[Any], prefix: str) -> bool:
        # A database set up before routes existed has no table, hence no routed run: its
        # runs are the engine queue's. Looked at again until it appears (`agentfsm setup`).
        if prefix in self._tables:
            return True
        found = conn.execute("SELECT to_regclass(%s)", (routes_table(prefix),)).fetchone()
        if found is not None and found[0] is not None:
            self._tables.add(prefix)
            return True
        return False

    def _route_new(self, conn: psycopg.Connection[Any], record: RunRecord, prefix: str) -> Route:
        """The route of a root run being submitted (in its `run.started` transaction):
        `submit_routed`'s, else (a fork, `agentfsm.runtime.control.fork`) its source run's
        route if it has one, else the router's, recorded; else the engine's queue."""
        chosen: Route | None = None
        asked = _SUBMITTING.get()
        if asked is not None and asked[0] == record.run_id:
            chosen = asked[1]
        elif (
            record.forked_from is not None
            and (source := self.route_of(conn, record.forked_from, prefix)) != self.default
        ):
            # A fork is its source run driven on another way: the same tenant, the same
            # queue and priority (recorded for it, so a fork of the fork keeps them too).
            chosen = source
        elif self.router is not None:
            chosen = self.router(record)
            if chosen is not None and not isinstance(chosen, Route):
                raise TypeError(
                    f"the Waker's router returned {type(chosen).__name__} for run "
                    f"'{record.run_id}': it must return a Route or None"
                )
        if chosen is None:
            self.remember(record.run_id, self.default, prefix)
            return self.default
        if not self._has_routes(conn, prefix):
            raise SchemaBehindError(
                f"the database has no {routes_table(prefix)} table, so run "
                f"'{record.run_id}' cannot be routed to queue '{chosen.queue}': run "
                f"`agentfsm setup --store URL --queue {self.queue}` once"
            )
        conn.execute(
            f"INSERT INTO {routes_table(prefix)} (run_id, queue, priority) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET queue = EXCLUDED.queue, "
            "priority = EXCLUDED.priority",
            (record.run_id, chosen.queue, chosen.priority),
        )
        self.remember(record.run_id, chosen, prefix)
        return chosen

    # -- jobs -----------------------------------------------------------------------------

    def wake(self, conn: psycopg.Connection[Any], wake: Wake, route: Route | None = None) -> None:
        """Queue the run's advance now, or a timer for `wake.at` (a resume's, with one),
        where `route` says (default: the run's own route, `route_of`)."""
        if route is None:
            route = self.route_of(conn, wake.run_id)
        if wake.at is None:
            self._defer(conn, ADVANCE, {"run_id": wake.run_id}, lock=wake.run_id, route=route)
        elif wake.resume is not None:
            self.timer(conn, wake.run_id, wake.at, kind="resume", version=wake.resume, route=route)
        else:
            self.timer(conn, wake.run_id, wake.at, route=route)

    def timer(
        self,
        conn: psycopg.Connection[Any],
        run_id: str,
        at: datetime,
        *,
        kind: str = "wake",
        version: int = 0,
        route: Route | None = None,
    ) -> None:
        """Schedule a timer job for `at` (the same timer twice is one job), where `route`
        says (default: the run's own route)."""
        if route is None:
            route = self.route_of(conn, run_id)
        args: dict[str, Any] = {"run_id": run_id, "kind": kind}
        key = f"{run_id}@{at.isoformat()}#{kind}"
        if kind == "resume":
            args["version"] = version
            key += f"{version}"
        self._defer(conn, TIMER, args, lock=None, queueing_lock=key, at=at, route=route)

    def _defer(
        self,
        conn: psycopg.Connection[Any],
        task: str,
        args: dict[str, Any],
        *,
        lock: str | None,
        route: Route,
        queueing_lock: str | None = None,
        at: datetime | None = None,
    ) -> None:
        job = Job(
            queue=route.queue,
            priority=route.priority,
            lock=lock,
            queueing_lock=queueing_lock if queueing_lock is not None else lock,
            task_name=task,
            task_kwargs=args,
            scheduled_at=at,
        )
        try:
            # A savepoint: a job already queued under this queueing lock *is* the wake-up
            # (it has not loaded the run yet), and the collision must not undo the append.
            with conn.transaction():
                self._jobs.defer_job(job, connection=conn)
        except pq_exceptions.AlreadyEnqueued:
            return


def submit_routed(
    store: PostgresEventStore,
    run_id: str,
    objective: str | None = None,
    *,
    route: Route,
    agent: str | None = None,
    limits: Limits | None = None,
) -> RunRecord:
    """`submit` a run whose jobs go where `route` says, for its whole life.

    The route is recorded with `run.started`, in the same transaction, so the first advance
    and every later job of the run (wake-ups from any process, timers, time slices,
    recovered jobs) land in `route.queue` with `route.priority`.

    Raises:
        ValueError: `store` does not wake runs (not `engine.store()` / `Waker.store()`).
        SchemaBehindError: the database predates routes (run `agentfsm setup`).
        ConcurrencyConflictError: a run with this id already exists.
    """
    if not isinstance(getattr(store, "after_append", None), _WakeHook):
        raise ValueError(
            "submit_routed needs a store whose appends wake runs: engine.store() or "
            "Waker(...).store(...)/install(store)"
        )
    token = _SUBMITTING.set((run_id, route))
    try:
        return submit(store, run_id, objective, agent=agent, limits=limits)
    finally:
        _SUBMITTING.reset(token)


class _WakeHook:
    """`Waker.hook`: defers the wake-ups and timers an append calls for, and says up front
    (`wants`) which appends call for none, so those stay one autocommit statement."""

    sets_timers = True

    def __init__(self, waker: Waker, table: TransitionTable, table_prefix: str) -> None:
        self.waker = waker
        self.table = table
        self.prefix = table_prefix

    def wants(self, record: RunRecord, types: tuple[str, ...]) -> bool:
        return wants_wakes(record, types, self.table)

    def __call__(
        self, conn: psycopg.Connection[Any], record: RunRecord, types: tuple[str, ...]
    ) -> None:
        wakes = due_wakes(record, types, self.table)
        if not wakes:
            return
        waker = self.waker
        if "run.started" in types and "/" not in record.run_id:
            route = waker._route_new(conn, record, self.prefix)
        else:
            route = waker.route_of(conn, record.run_id, self.prefix)
        for wake in wakes:
            waker.wake(conn, wake, route)


class RunDriver(Protocol):
    """What an engine's job drives a run with: a `Runner`, or anything with its `reducer`
    and `drive` (`agentfsm.adapters.jobs.AdapterJobs` for an SDK adapter's runs). The
    reducer's guards set the timers of their deadlines."""

    @property
    def reducer(self) -> Reducer:
        """The reducer the runs are driven under (the store's table, the driver's guards)."""
        ...

    def drive(
        self,
        run_id: str,
        *,
        lease: Lease | None = ...,
        heartbeat: Callable[[RunRecord], None] | None = ...,
        resume_paused: bool = ...,
        defer_retries: bool = ...,
        confirm: Callable[[RunRecord], None] | None = ...,
    ) -> RunResult:
        """Drive the run from the store under the job's `lease` until it ends or waits."""
        ...


class _MeteredStore(PostgresEventStore):
    """The engine's store, counting what each append stored (`EngineMetrics.runs`)."""

    def __init__(self, *args: Any, runs: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._runs = runs

    @takes_fold
    def append(
        self,
        run_id: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        folded: Folded | None = None,
    ) -> RunRecord:
        record = super().append(run_id, events, expected_version, folded=folded)
        self._runs.feed_all(events, record)  # stored: counted once, never for a refused batch
        return record


class _HandBack(Exception):  # noqa: N818  (a signal between steps, not an error)
    """Raised between steps of a job whose worker is stopping."""


@contextmanager
def _signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT call `stop` while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


class _SliceOver(Exception):  # noqa: N818  (a signal from the heartbeat, caught in the job)
    """The job's time slice is over: the run goes back in the queue."""


class _Slice:
    """A driving job's heartbeat: the fence's check, then the end of its time slice (raised
    between steps, where the fence's own refusal stops a drive too: nothing is half done)."""

    def __init__(
        self,
        fence: Callable[[RunRecord], None],
        turns: int | None,
        seconds: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fence = fence
        self.turns = turns
        self.until = None if seconds is None else clock() + seconds
        self.clock = clock
        self.first: int | None = None  # the run's turn when the slice began

    def beat(self, record: RunRecord) -> None:
        self.fence(record)
        if self.first is None:
            self.first = record.turn
        if (self.turns is not None and record.turn - self.first >= self.turns) or (
            self.until is not None and self.clock() >= self.until
        ):
            raise _SliceOver


class _Fence:
    """A driving job's check, between steps, that it still owns its attempt."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        run_id: str,
        worker: str,
        every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conn = conn
        self.job_id = job_id
        self.run_id = run_id
        self.worker = worker
        self.every = every
        self.clock = clock
        self.checked = clock()

    def beat(self, record: RunRecord) -> None:
        """Between steps: at most every `every` seconds."""
        now = self.clock()
        if now - self.checked < self.every:
            return
        self.confirm(record)
        self.checked = now

    def confirm(self, record: RunRecord | None = None) -> None:
        """Before a side effect, after its durable `tool.started`: always. A partition may
        have held back the reply to that write while the recovery pass closed this attempt
        and another ran the run on (its call recorded unknown): the tool must not run."""
        row = self.conn.execute(
            "SELECT status FROM procrastinate_jobs WHERE id = %s", (self.job_id,)
        ).fetchone()
        if row is None or row[0] != "doing":
            raise LeaseLostError(run_id=self.run_id, worker_id=self.worker)


class ProcrastinateEngine:
    """Drives runs as Procrastinate jobs (see the module docstring).

    Args:
        conninfo: the PostgreSQL database (the store's tables and Procrastinate's).
        runner: makes the Runner for a store (agents, guards, settings); called once per
            worker thread, with that thread's store. Anything with the Runner's `drive`
            will do (`RunDriver`): `agentfsm.adapters.jobs.AdapterJobs` drives the runs of
            an SDK adapter (a `ClaudeRun`'s, say) that way.
        settings: queue, heartbeat, recovery and fencing times.
        options: the store's options (its reducer and table).
        table_prefix: the store's table prefix.
        router: picks the `Route` (queue, priority) of each run submitted through the
            engine's stores (see `Waker`); None: the engine's queue, unless
            `submit_routed` says otherwise.
        metrics: an `agentfsm.adapters.otel_metrics.EngineMetrics` (typed loosely: the
            runtime does not import the adapters) to record, through OpenTelemetry:
            the runs' events as jobs append them, wake-up latency, timer lateness, lease
            takeovers, and the queue's depth and age.
    """

    def __init__(
        self,
        conninfo: str,
        runner: Callable[[EventStore], RunDriver],
        *,
        settings: EngineSettings | None = None,
        options: StoreOptions | None = None,
        table_prefix: str = "agentfsm_",
        router: Router | None = None,
        metrics: Any = None,
    ) -> None:
        self.conninfo = conninfo
        self.metrics = metrics
        self.make_runner = runner
        self.settings = settings if settings is not None else EngineSettings()
        self.options = options if options is not None else StoreOptions()
        self.table_prefix = check_prefix(table_prefix)
        self.waker = Waker(self.settings.queue, router=router, table_prefix=self.table_prefix)
        self.log = get_logger()
        # The queues this process's worker serves (its recovery passes are one per queue).
        self._queues: list[str] = [self.settings.queue]
        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(
                conninfo=conninfo,
                pool_factory=functools.partial(_job_pool, jobs=self.settings.concurrency),
            )
        )
        self._local = threading.local()
        # Every job thread's store, to close when the worker stops.
        self._opened: list[PostgresEventStore] = []
        self._opened_lock = threading.Lock()
        # Set by `stop`: driving jobs hand their runs back at their next step.
        self._stopping = threading.Event()
        self._worker: Any = None
        # The recovery passes' one connection (opened at the first pass), and one pass at a
        # time in this process.
        self._recovery: psycopg.Connection[Any] | None = None
        self._recovery_lock = threading.Lock()
        self._analyzing = True  # False once the database refused this user an ANALYZE
        s = self.settings
        retry = procrastinate.RetryStrategy(max_attempts=s.job_attempts, wait=1)

        # The jobs' own threads, `concurrency` of them (made by `aserve`, or at a first job
        # run otherwise): a job's store, Runner and connections belong to its thread
        # (`_thread_state`), so the fewer threads ever run jobs, the fewer of those a worker
        # opens and warms up.
        self._job_threads: ThreadPoolExecutor | None = None
        self._job_threads_lock = threading.Lock()

        # Async tasks that hand their work to those threads. Procrastinate would run a sync
        # task on the event loop's default executor (through asgiref), whose threads also
        # serve `asyncio.to_thread` and name lookups: jobs would wander between more
        # threads than `concurrency`, each with its own connections to open and warm.
        @self.app.task(name=ADVANCE, queue=s.queue, pass_context=True, retry=retry)
        async def advance(context: procrastinate.JobContext, run_id: str) -> str:
            return await self._on_job_thread(self._advance, context, run_id)

        @self.app.task(name=TIMER, queue=s.queue, pass_context=True, retry=retry)
        async def timer(
            context: procrastinate.JobContext, run_id: str, kind: str = "wake", version: int = 0
        ) -> str:
            return await self._on_job_thread(self._timed, context, run_id, kind, version)

    # -- setting up -----------------------------------------------------------------------

    def migrate(self, *, post: bool = False) -> list[str]:
        """Create or upgrade the store's tables and Procrastinate's (idempotent, safe to
        race), and record in the store's `meta` table that this engine serves the database
        (so the command line enqueues wake-ups too). `agentfsm setup` runs it.

        Procrastinate's pending migrations are applied in order (see
        `agentfsm.runtime._pq_schema`): its `pre` ones always, its `post` ones only with
        `post=True`, once no worker of the older Procrastinate runs. The engine's own
        `routes` table (`Route`) is created if missing. Returns the migrations applied."""
        PostgresEventStore(
            self.conninfo, options=self.options, table_prefix=self.table_prefix, migrate=True
        ).close()
        meta = f"{self.table_prefix}meta"
        with psycopg.connect(self.conninfo, autocommit=True) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentfsm:procrastinate'))")
            applied = _pq_schema.upgrade(conn, meta, post=post)
            for name in applied:
                self.log.info("engine.migration_applied", migration=name)
            conn.execute(_create_routes(self.table_prefix))
            conn.execute(
                f"INSERT INTO {meta} (key, value) VALUES (%s, %s) ON CONFLICT (key) "
                "DO UPDATE SET value = EXCLUDED.value",
                (ENGINE_KEY, f"procrastinate:{self.settings.queue}"),
            )
        return applied

    def schema(self) -> _pq_schema.Migrations:
        """Where the database's Procrastinate schema stands (created, pending migrations)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            meta = f"{self.table_prefix}meta"
            found = conn.execute("SELECT to_regclass(%s)", (meta,)).fetchone()
            if found is None or found[0] is None:
                return _pq_schema.Migrations(created=False, at=None, pending=())
            return _pq_schema.state(conn, meta)

    def check_schema(self) -> None:
        """Refuse to serve a database whose schema this version cannot run on.

        Raises:
            SchemaBehindError: the tables are missing (Procrastinate's, or the engine's
                `routes`), or a migration this Procrastinate needs is pending; the message
                names the command that fixes it.
        """
        now = self.schema()
        command = f"agentfsm setup --store URL --queue {self.settings.queue}"
        if not now.created:
            raise SchemaBehindError(
                f"the database has no Procrastinate schema yet: run `{command}` once"
            )
        needed = now.needed
        if needed:
            how = f"run `{command}`"
            if any(_pq_schema.is_post(name) for name in needed):
                # Releases skipped: their `post` migrations must not run under older workers.
                how = f"stop every older worker, then run `{command} --post`"
            raise SchemaBehindError(
                f"Procrastinate's schema is behind the installed Procrastinate "
                f"({len(needed)} migration(s) pending, from {needed[0]}): {how}"
            )
        if not self._has_routes_table():
            # Made by an agentfsm before runs had routes (queues, priorities per run).
            raise SchemaBehindError(
                f"the database has no {routes_table(self.table_prefix)} table (the runs' "
                f"queues and priorities): run `{command}`"
            )

    def _has_routes_table(self) -> bool:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            name = routes_table(self.table_prefix)
            found = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
            return found is not None and found[0] is not None

    def store(self) -> PostgresEventStore:
        """A store on the engine's database whose appends enqueue their wake-ups (and, with
        `metrics`, count the events they store)."""
        if self.metrics is not None:
            return self._metered_store()
        return self.waker.store(self.conninfo, options=self.options, table_prefix=self.table_prefix)

    # -- serving --------------------------------------------------------------------------

    async def aserve(
        self,
        *,
        name: str | None = None,
        wait: bool = True,
        install_signal_handlers: bool = True,
        queues: Sequence[str] | None = None,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        """Run a worker in this event loop: jobs, heartbeats, and the recovery pass.

        With `wait=False` it returns once the queue is empty (tests, draining). SIGTERM
        and SIGINT (with `install_signal_handlers`, in the main thread) `stop` it: no job
        is taken any more, and a job driving a run hands it back at its next step (a tool
        call under way finishes first), so the worker exits without waiting for a run's
        end, nor leaving another worker to wait out its heartbeat.

        Args:
            queues: the queues to take jobs from (default: the engine's), by priority then
                age across all of them; the worker's recovery pass covers each.
            on_ready: called once the worker is registered and takes jobs.
        """
        s = self.settings
        self._stopping.clear()
        self._queues = list(dict.fromkeys(queues)) if queues else [s.queue]
        async with self.app.open_async():
            worker: Any = self.app._worker(
                queues=self._queues,
                name=name or "agentfsm-worker",
                concurrency=s.concurrency,
                wait=wait,
                update_heartbeat_interval=s.heartbeat,
                stalled_worker_timeout=s.stalled_after,
                fetch_job_polling_interval=s.poll,
                abort_job_polling_interval=max(s.poll, 5.0),
                delete_jobs=s.delete_jobs,
                install_signal_handlers=False,
            )
            self._worker = worker
            loop = asyncio.get_running_loop()
            signals = _signals(loop, self.stop) if install_signal_handlers else nullcontext()
            recovering = asyncio.create_task(self._recovering())
            ready = asyncio.create_task(self._when_ready(worker, on_ready))
            try:
                with signals:
                    await worker.run()
            finally:
                for task in (ready, recovering):
                    task.cancel()
                    with suppress(asyncio.CancelledError):
                        await task
                self._worker = None
                with self._job_threads_lock:
                    threads, self._job_threads = self._job_threads, None
                if threads is not None:
                    # No job runs any more (the worker waited them out): let the threads go.
                    threads.shutdown(wait=False)
                self._close_threads()
                with self._recovery_lock:
                    self._close_recovery()

    def stop(self) -> None:
        """Stop serving (what SIGTERM does): take no more jobs, and have every job driving
        a run hand the run back at its next step (requeued, its lease released)."""
        self._stopping.set()
        worker = self._worker
        if worker is not None:
            worker.stop()

    @staticmethod
    async def _when_ready(worker: Any, on_ready: Callable[[], None] | None) -> None:
        # Registered in `procrastinate_workers`, its loop started: it takes jobs now.
        while worker.worker_id is None:
            await asyncio.sleep(0.02)
        if on_ready is not None:
            on_ready()

    def serve(self, *, name: str | None = None, wait: bool = True) -> None:
        """`aserve` in a new event loop (SIGINT/SIGTERM stop it gracefully)."""
        asyncio.run(self.aserve(name=name, wait=wait))

    async def _recovering(self) -> None:
        while True:
            await asyncio.sleep(self.settings.recover_every)
            try:
                await asyncio.to_thread(self._keep_recovery_conn)
                await asyncio.to_thread(self.recover)
            except Exception as exc:  # noqa: BLE001  (a failed pass is retried next time)
                self.log.warning("engine.recover_failed", error=repr(exc))
                with self._recovery_lock:
                    self._close_recovery()  # opened afresh for the next pass

    def recover(self, queues: Sequence[str] | None = None) -> list[str]:
        """One recovery pass: run elsewhere the jobs of workers silent for `stalled_after`
        seconds (see the module docstring); the runs whose jobs were re-queued.

        A pass per queue of `queues` (default: those the worker serves, `aserve(queues=...)`,
        else the engine's), and
        one worker of a queue at a time does it: it takes a transaction-scoped advisory
        lock (`recovery_lock_key(queue)`) without waiting, and a worker that finds it taken
        skips that queue's turn (the holder is scanning the same jobs). A serving worker
        runs its passes on one connection it keeps; called alone, a pass opens its own.
        """
        served = list(queues) if queues is not None else self._queues
        with self._recovery_lock:
            if self._recovery is not None:
                return self._passes_on(self._recovery, served)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return self._passes_on(conn, served)

    def _passes_on(self, conn: psycopg.Connection[Any], queues: list[str]) -> list[str]:
        moved: list[str] = []
        passed = False
        for queue in queues:
            recovered = self._pass_on(conn, queue)
            if recovered is not None:
                passed = True
                moved += recovered
        if passed:  # the worker whose turn it was, not every worker every second
            self._keep_jobs_planned(conn)
        return moved

    def _keep_jobs_planned(self, conn: psycopg.Connection[Any]) -> bool:
        """ANALYZE Procrastinate's jobs table once it holds far more rows than the planner
        believes (`_STALE_ROWS`, `_STALE_GROWTH`); whether it did.

        Procrastinate's fetch picks the next job with a plan chosen from those statistics.
        Planned for the few rows a drained table holds, a burst of jobs is fetched by
        sorting every queued job, each time: 30 ms a job at a backlog of 2,000 here, against
        0.4 ms once analyzed, until autovacuum gets to it (a minute or more). One worker at
        a time does it (a try-lock: the others do not wait); where the database user may not
        analyze the table (it is not its owner), the log says so once and the passes stop
        trying."""
        if not self._analyzing:
            return False
        row = conn.execute(_JOBS_PLANNED).fetchone()
        if row is None:
            return False
        planned, live = float(row[0]), int(row[1])
        if live < _STALE_ROWS or live < _STALE_GROWTH * max(planned, 0.0):
            return False
        with conn.transaction():
            taken = conn.execute(
                "SELECT pg_try_advisory_xact_lock(hashtext('agentfsm:analyze-jobs'))"
            ).fetchone()
            if taken is None or not taken[0]:
                return False
            # A user who does not own the table is not refused: PostgreSQL skips it with a
            # warning. Hence the look at what the planner believes afterwards.
            conn.execute("ANALYZE procrastinate_jobs")
            after = conn.execute(_JOBS_PLANNED).fetchone()
        if after is None or float(after[0]) == planned:
            self._analyzing = False
            self.log.warning(
                "engine.jobs_not_analyzed",
                reason="ANALYZE procrastinate_jobs changed nothing: only the table's owner "
                "may analyze it; autovacuum will, later",
            )
            return False
        self.log.info("engine.jobs_analyzed", rows=live, planned_for=max(int(planned), 0))
        return True

    def _pass_on(self, conn: psycopg.Connection[Any], queue: str) -> list[str] | None:
        """The queue's pass: the runs re-queued, or None if another worker's is under way."""
        with conn.transaction():
            taken = conn.execute(
                "SELECT pg_try_advisory_xact_lock(hashtext(%s))", (recovery_lock_key(queue),)
            ).fetchone()
            if taken is None or not taken[0]:
                return None
            return self._recover_on(conn, queue)

    def _keep_recovery_conn(self) -> None:
        """Open the serving worker's recovery connection (again, if it broke).

        A pass holds its queue's lock for its transaction, and every other worker skips
        its pass meanwhile. A worker cut off by the network inside that transaction is, to
        the server, an idle session holding the lock until TCP gives up (hours): no pass
        would run anywhere. So the server ends this connection once it has sat idle in a
        transaction for `stalled_after` seconds (a worker silent that long counts as dead);
        a pass runs its statements back to back, so only a cut-off one waits that long."""
        with self._recovery_lock:
            if self._recovery is None or self._recovery.broken or self._recovery.closed:
                self._close_recovery()
                conn = psycopg.connect(self.conninfo, autocommit=True)
                idle = f"{max(1, round(self.settings.stalled_after * 1000))}ms"
                conn.execute(
                    "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                    (idle,),
                )
                self._recovery = conn

    def _close_recovery(self) -> None:
        conn, self._recovery = self._recovery, None
        if conn is not None:
            with suppress(Exception):  # a broken handle is dropped anyway
                conn.close()

    def _recover_on(self, conn: psycopg.Connection[Any], queue: str) -> list[str]:
        s = self.settings
        moved: list[str] = []
        rows = conn.execute(
            _STALLED, {"tasks": [ADVANCE, TIMER], "queue": queue, "seconds": s.stalled_after}
        ).fetchall()
        for job_id, task, args, lock, queueing_lock, job_queue, priority in rows:
            conn.execute("SELECT procrastinate_finish_job_v1(%s, 'failed', false)", (job_id,))
            # The copy keeps the job's queue and priority: the run's route.
            route = Route(job_queue, priority)
            self.waker._defer(conn, task, args, lock=lock, queueing_lock=queueing_lock, route=route)
            moved.append(args.get("run_id", ""))
            self.log.warning(
                "engine.job_recovered", job_id=job_id, task=task, run_id=args.get("run_id")
            )
        if moved and self.metrics is not None:
            self.metrics.takeovers.add(len(moved), {"reason": "stalled_worker"})
        return moved

    # -- the tasks ------------------------------------------------------------------------

    async def _on_job_thread(self, work: Callable[..., str], *args: Any) -> str:
        """Run a job's work on one of the job threads, and end the job only once it is done.

        A sync task cannot be stopped once started, and so it is here: Procrastinate cancels
        an async job it is asked to abort (or at its shutdown timeout), but a drive stopped
        from outside could leave a call started and not made, and a job that ended while
        its thread still drove would let another job of the run start beside it. So the
        cancellation is waited out, as Procrastinate waits out a sync job (a stopping
        worker's drive hands its run back at its next step: `stop`).
        """
        loop = asyncio.get_running_loop()
        running = loop.run_in_executor(
            self._threads(), functools.partial(self._dropping, work, *args)
        )
        while True:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                if running.done():
                    return running.result()
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()

    def _threads(self) -> ThreadPoolExecutor:
        with self._job_threads_lock:
            if self._job_threads is None:
                self._job_threads = ThreadPoolExecutor(
                    max_workers=self.settings.concurrency, thread_name_prefix="agentfsm-job"
                )
            return self._job_threads

    def _dropping(self, work: Callable[..., str], *args: Any) -> str:
        with self._dropped_on_error():
            return work(*args)

    def _timed(
        self, context: procrastinate.JobContext, run_id: str, kind: str, version: int
    ) -> str:
        self._measure_timer(context, kind)
        return self._timer(run_id, kind, version, _route(context))

    def _thread_state(self) -> tuple[PostgresEventStore, RunDriver, psycopg.Connection[Any]]:
        """This job thread's store, its Runner, and the store's connection (the job's checks
        and wake-ups go on it, between the store's own statements: one thread uses it),
        made at its first job, and made again when the server has ended them (`_ended`)."""
        local = self._local
        if getattr(local, "store", None) is not None and _store_ended(local.store):
            # The server ended one of this thread's connections while it sat between jobs
            # (a restart, `pg_terminate_backend`, `idle_session_timeout`). Replaced before
            # the job meets them, rather than spending one of the job's attempts to find out.
            self._drop_thread_state()
        if getattr(local, "store", None) is None:
            local.store = self.store()
            local.runner = self.make_runner(local.store)
            with self._opened_lock:
                self._opened.append(local.store)
        return local.store, local.runner, _connection(local.store)

    @contextmanager
    def _dropped_on_error(self) -> Iterator[None]:
        """Around a job: if it raises, its thread's store and its connections are dropped, as
        one of them may be what failed (a connection the server ended, with no goodbye
        this thread could read first), and the job's retry, or the next job on this
        thread, must not meet it again."""
        try:
            yield
        except BaseException:
            self._drop_thread_state()
            raise

    def _drop_thread_state(self) -> None:
        local = self._local
        store = getattr(local, "store", None)
        if store is not None:
            with suppress(Exception):  # a broken handle is dropped anyway
                store.close()
            with self._opened_lock:
                self._opened = [h for h in self._opened if h is not store]
        local.store = local.runner = None

    def _close_threads(self) -> None:
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for handle in opened:
            with suppress(Exception):  # a broken handle is dropped anyway
                handle.close()
        self._local = threading.local()

    def _advance(self, context: procrastinate.JobContext, run_id: str) -> str:
        store, runner, conn = self._thread_state()
        job_id = context.job.id
        assert job_id is not None
        worker = context.worker_name or "worker"
        # The job is where the run's route put it: every job this one queues goes there
        # too, and the hook's wake-ups of this run need not look the route up.
        route = _route(context)
        self.waker.remember(run_id, route)
        fence = _Fence(conn, job_id, run_id, worker, self.settings.fence_every)
        lease = self._hold(store, conn, run_id, f"{worker} job {job_id}", route)
        if lease is None:
            return "held"
        self._measure_wakeup(conn, job_id, lease, route)
        stopping = self._stopping
        s = self.settings
        timeslice = _Slice(fence.beat, s.slice_turns, s.slice_seconds)

        def beat(record: RunRecord) -> None:
            if stopping.is_set():
                raise _HandBack
            timeslice.beat(record)

        try:
            try:
                result = runner.drive(
                    run_id,
                    lease=lease,
                    heartbeat=beat,
                    confirm=fence.confirm,
                    resume_paused=False,
                    defer_retries=True,
                )
            finally:
                self._release(lease)
        except _SliceOver:
            # Behind every job queued meanwhile; `lock` keeps it from starting before this
            # one has ended.
            self.waker.wake(conn, Wake(run_id), route)
            self.log.info("engine.sliced", run_id=run_id, job_id=job_id)
            return "sliced"
        except RunNotFoundError:
            self.log.warning("engine.run_missing", run_id=run_id, job_id=job_id)
            return "missing"
        except _HandBack:
            # The worker is stopping: the run goes back to the queue, its lease released
            # (above), for another worker to take at once.
            self.waker.wake(conn, Wake(run_id), route)
            self.log.info("engine.handed_back", run_id=run_id, job_id=job_id, worker=worker)
            return "handed back"
        except LeaseLostError:
            self.log.warning("engine.superseded", run_id=run_id, job_id=job_id, worker=worker)
            return "superseded"
        if result.superseded:  # another attempt appended first: its run now
            self.log.warning("engine.superseded", run_id=run_id, job_id=job_id, worker=worker)
            if lease.lost:
                # The lease lapsed under a job nobody closed: the run may have no job left.
                self._later(conn, run_id, route)
            return "superseded"
        self._rearm(conn, result, runner, route)
        self.log.info("engine.advanced", run_id=run_id, job_id=job_id, status=result.status)
        return result.status

    def _hold(
        self,
        store: PostgresEventStore,
        conn: psycopg.Connection[Any],
        run_id: str,
        holder: str,
        route: Route,
    ) -> Lease | None:
        """The run's lease for this job, lasting `stalled_after` (a job whose worker dies
        is run elsewhere about then, and its lease has lapsed by then too): waited for that
        long, else the run is left to its driver and looked at again later (None)."""
        settings = self.settings
        try:
            return store.hold(
                run_id, ttl=settings.stalled_after, wait=settings.stalled_after, holder=holder
            )
        except RunHeldError as exc:
            self.log.warning("engine.held", run_id=run_id, holder=exc.holder.id)
            self._later(conn, run_id, route)
            return None

    def _release(self, lease: Lease) -> None:
        try:
            lease.release()
        except Exception as exc:  # noqa: BLE001  (a lease not released lapses by its ttl)
            self.log.warning("engine.release_failed", run_id=lease.run_id, error=repr(exc))

    def _later(self, conn: psycopg.Connection[Any], run_id: str, route: Route) -> None:
        """A timer to advance the run once its other driver is done with it."""
        at = datetime.now(UTC) + timedelta(seconds=self.settings.stalled_after)
        self.waker.timer(conn, root_of(run_id), at, route=route)

    def _rearm(
        self, conn: psycopg.Connection[Any], result: RunResult, runner: RunDriver, route: Route
    ) -> None:
        """Set the timer for the next time the run needs driving by itself: its clock (it
        may have fired early), a deadline of the Runner's guards, or a retry's end of
        backoff."""
        due = next_wake(result, self.options.reducer.table, runner.reducer.guards)
        if due is not None:
            self.waker.timer(conn, root_of(result.run_id), due, route=route)

    def _metered_store(self) -> PostgresEventStore:
        assert self.metrics is not None
        return _MeteredStore(
            self.conninfo,
            options=self.options,
            table_prefix=self.table_prefix,
            after_append=self.waker.hook(self.options.reducer.table, self.table_prefix),
            runs=self.metrics.runs,
        )

    def _measure_wakeup(
        self, conn: psycopg.Connection[Any], job_id: int, lease: Lease, route: Route
    ) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        if lease.takeover is not None:
            metrics.takeovers.add(1, {"reason": "lease"})
        # The database's clock on both ends: workers' clocks may disagree with it.
        row = conn.execute(
            "SELECT EXTRACT(EPOCH FROM now() - at) FROM procrastinate_events "
            "WHERE job_id = %s AND type = 'deferred'",
            (job_id,),
        ).fetchone()
        if row is not None and row[0] is not None:
            metrics.wakeup_latency.record(max(float(row[0]), 0.0), {"queue": route.queue})

    def _measure_timer(self, context: procrastinate.JobContext, kind: str) -> None:
        metrics = self.metrics
        if metrics is None or context.job.id is None:
            return
        _store, _runner, conn = self._thread_state()
        row = conn.execute(
            "SELECT EXTRACT(EPOCH FROM now() - scheduled_at) FROM procrastinate_jobs WHERE id = %s",
            (context.job.id,),
        ).fetchone()
        if row is not None and row[0] is not None:
            attributes = {"queue": context.job.queue, "kind": kind}
            metrics.timer_lateness.record(max(float(row[0]), 0.0), attributes)

    def _timer(self, run_id: str, kind: str, version: int, route: Route) -> str:
        store, _runner, conn = self._thread_state()
        self.waker.remember(run_id, route)
        if kind != "resume":
            self.waker.wake(conn, Wake(run_id), route)
            return "woken"
        # Resumed only if still in that pause; the store's hook queues the advance.
        if resume_paused(store, run_id, version, self.options.reducer.table):
            return "resumed"
        return "moved on"  # resumed already, or paused again since: not ours to undo


#: A connection of the worker's pool that sat unused this long (seconds) is checked with a
#: round trip before it is given out; one used more recently is only looked at (`_Checkout`).
CHECK_IDLE = 5.0


class _Checkout:
    """The worker's pool's `check`: a liveness round trip only where one can find something.

    Procrastinate's own pool checks every connection it gives out (`check_connection`, one
    round trip), and a job takes two (its fetch, its finish): a round trip each, per job,
    on connections used a moment before. Here a connection is checked with a round trip
    only when it sat unused longer than `idle` seconds (a pool idle across a database
    restart or a network outage replaces its dead connections before a job meets them),
    or when its socket has something to read while it sits idle: a server that closes a
    backend (`pg_terminate_backend`, a restart, a crash) says so, or hangs up, on the
    socket, so a dead connection of a busy pool is replaced too, at no cost to a live one.
    """

    def __init__(self, idle: float = CHECK_IDLE, clock: Callable[[], float] = time.monotonic):
        self.idle = idle
        self.clock = clock
        # When each connection was last given out (a conservative stand-in for when it was
        # returned: it was idle at most this long); forgotten with the connection.
        self._given: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        now = self.clock()
        given = self._given.get(conn)
        if given is None or now - given > self.idle or _readable(conn):
            await psycopg_pool.AsyncConnectionPool.check_connection(conn)
        self._given[conn] = now


def _connection(store: PostgresEventStore) -> psycopg.Connection[Any]:
    """The store's own autocommit connection."""
    return store._conn


def _store_ended(store: PostgresEventStore) -> bool:
    """Whether the server has ended the store's connection or its leases' (`_ended`)."""
    leases = store._leases
    return _ended(store._conn) or (leases is not None and _ended(leases._conn))


def _ended(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server has ended an idle connection, as far as can be told without a
    round trip: closed or broken already, or its socket has news (`_readable`)."""
    return conn.closed or conn.broken or _readable(conn)


def _readable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has data (or a hang-up) waiting: an idle backend
    sends nothing unasked, so anything there is news, most likely of its end."""
    try:
        fd = conn.fileno()
    except psycopg.Error:  # closed already
        return True
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


def _job_pool(*, jobs: int = 1, **kwargs: Any) -> psycopg_pool.AsyncConnectionPool:
    """The pool of a worker's Procrastinate connector (its `pool_factory`): Procrastinate's
    own, with `_Checkout` for its check, and autocommit. Every statement Procrastinate
    issues on the pool is one statement (a call of one of its functions), so autocommit
    changes nothing in what commits together, and saves the `BEGIN` and `COMMIT` round
    trips around each fetch and finish of a job.

    Sized to what a worker of `jobs` concurrent jobs asks of it at once: a fetch or a
    finish per job, its heartbeat, its polls for aborts. psycopg's default keeps 4
    connections open from the start whatever the concurrency; here one is opened at first
    and more only when a statement would otherwise wait (each new backend costs the server
    a process and its warm-up of plans and catalogues)."""
    kwargs.setdefault("min_size", 1)
    kwargs.setdefault("max_size", jobs + 2)
    kwargs["check"] = _Checkout()
    # Set on each new connection, not as a connection argument: Procrastinate opens its
    # LISTEN connection with the pool's arguments and `autocommit=True` of its own.
    kwargs["configure"] = _autocommit
    return psycopg_pool.AsyncConnectionPool(**kwargs)


async def _autocommit(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.set_autocommit(True)


def _route(context: procrastinate.JobContext) -> Route:
    """The route of the run a job is for: the job's own queue and priority."""
    return Route(context.job.queue, context.job.priority)
