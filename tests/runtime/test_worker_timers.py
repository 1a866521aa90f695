"""Durable timers for the lease `Worker` on SQLite and PostgreSQL: the same due times as the
Procrastinate engine's (`test_procrastinate.py::TestTimers`), kept on the lease rows.

The store's `after_append` hook (`install_timers`) writes wake-ups and timers in the
append's transaction; `release` leaves the run's next due time; `claim` takes a run whose
time has come whatever its status. So no process waits: a worker that comes back after a
deadline, an expiry or a scheduled resume settles it, and one that dies holding a due run
leaves it due.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentfsm.events.models import Limits
from agentfsm.runtime import (
    ALLOW,
    Agent,
    Decision,
    ProposedCall,
    Runner,
    Tool,
    ToolContext,
    ToolError,
    Worker,
    approve,
    needs_approval,
    pause,
    resume,
    subagent,
    submit,
)
from agentfsm.runtime.agent import RunnerConfig
from agentfsm.runtime.timers import install_timers, pause_until
from agentfsm.stores import MemoryEventStore, SQLiteEventStore
from agentfsm.stores.leases import SQLiteLeases

EXPIRES = 0.5


class Flaky:
    """A safe tool that fails (retryably) its first `fails` calls, counting every call."""

    def __init__(self, fails: int = 1) -> None:
        self.fails = fails
        self.calls = 0

    def __call__(self, ctx: ToolContext) -> Any:
        self.calls += 1
        if self.calls <= self.fails:
            raise ToolError("the service is busy", retryable=True)
        return {"ok": True}


def _model(ctx: Any) -> Decision:
    kind = (ctx.objective or "plain").split()[0]
    if kind == "subask":
        if ctx.turn == 1:
            return Decision.call_tools(ProposedCall("research", {"task": "approve a ticket"}))
        return Decision.answer(f"research says: {ctx.results[0].result}")
    if kind == "flaky":
        if ctx.turn == 1:
            return Decision.call_tools(ProposedCall("lookup", {"key": ctx.run_id}))
        return Decision.answer("looked up")
    if ctx.turn == 1:
        return Decision.call_tools(ProposedCall("create_ticket", {"order_id": ctx.run_id}))
    last = ctx.results[0]
    if last.status == "rejected":
        return Decision.answer(f"not opened: {last.reason}")
    return Decision.answer(f"opened {last.result['ticket_id']}")


def _research(ctx: Any) -> Decision:
    if ctx.turn == 1:
        return Decision.call_tools(ProposedCall("create_ticket", {"order_id": ctx.run_id}))
    return Decision.answer(f"ticket: {ctx.results[0].status}")


def _policy(action: Any, record: Any) -> Any:
    objective = (record.objective or "plain").split()[0]
    if action.tool == "create_ticket" and objective == "approve":
        return needs_approval("a ticket needs a person")
    if action.tool == "create_ticket" and objective == "expire":
        return needs_approval("a ticket needs a person", expires_in=timedelta(seconds=EXPIRES))
    return ALLOW


class Env:
    """A SQLite store with the timers' hook, its leases, and Runners over it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = SQLiteEventStore(path, synchronous="NORMAL")
        self.leases = SQLiteLeases(path)
        install_timers(self.store, self.leases)
        self.flaky = Flaky()
        self.sleeps: list[float] = []
        self.workers = 0

    def runner(self, store: Any = None) -> Runner:
        def ticket(ctx: ToolContext) -> Any:
            return {"ticket_id": f"T-{ctx.args['order_id']}"}

        tools = [
            Tool("create_ticket", ticket, idempotent=True),
            Tool("lookup", self.flaky, side_effects=False, max_attempts=3),
        ]
        research = subagent("research", Agent("researcher", _research, tools, _policy))
        agent = Agent("support", _model, [*tools, research], _policy)
        config = RunnerConfig(backoff=lambda n: 0.6)
        guards = getattr(self, "guards", ())
        return Runner(
            store or self.store, agent, sleep=self.sleeps.append, config=config, guards=guards
        )

    def worker(self) -> Worker:
        """A new worker process, as it were: its own store handle and leases."""
        self.workers += 1
        leases = SQLiteLeases(self.path)
        store = install_timers(SQLiteEventStore(self.path, synchronous="NORMAL"), leases)
        return Worker(self.runner(store), leases, worker_id=f"w{self.workers}", ttl=1.0)

    def new_leases(self) -> Any:
        """Another process's lease handle."""
        return SQLiteLeases(self.path)

    def drain(self) -> list[str]:
        return [r.status for r in self.worker().drain()]

    def types(self, run_id: str) -> list[str]:
        return [e.type for e in self.store.events(run_id)]


class PostgresEnv(Env):
    """The same on PostgreSQL: a `PostgresEventStore` with the timers' hook on its
    `PostgresLeases` (the lease `Worker`'s timers, without the Procrastinate engine)."""

    def __init__(self, dsn: str, prefix: str) -> None:
        from agentfsm.stores.postgres import PostgresEventStore
        from agentfsm.stores.postgres_leases import PostgresLeases

        self.dsn, self.prefix = dsn, prefix
        self._store, self._leases = PostgresEventStore, PostgresLeases
        self.store = PostgresEventStore(dsn, table_prefix=prefix, migrate=True)
        self.leases = PostgresLeases(dsn, table_prefix=prefix)
        install_timers(self.store, self.leases)
        self.flaky = Flaky()
        self.sleeps = []
        self.workers = 0
        self._opened: list[Any] = []

    def new_leases(self) -> Any:
        leases = self._leases(self.dsn, table_prefix=self.prefix)
        self._opened.append(leases)
        return leases

    def worker(self) -> Worker:
        self.workers += 1
        leases = self.new_leases()
        store = install_timers(self._store(self.dsn, table_prefix=self.prefix), leases)
        self._opened.append(store)
        return Worker(self.runner(store), leases, worker_id=f"w{self.workers}", ttl=1.0)

    def close(self) -> None:
        for handle in self._opened:
            handle.close()


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    if request.param == "sqlite":
        e = Env(tmp_path / "runs.db")
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        e = PostgresEnv(dsn, request.getfixturevalue("pg_prefix"))
    try:
        yield e
    finally:
        if isinstance(e, PostgresEnv):
            e.close()
        e.leases.close()
        e.store.close()


class TestTimers:
    """What must happen at a time happens when a worker is next there, whatever the status."""

    def test_an_expired_approval_is_settled_when_a_worker_comes_back(self, env: Env) -> None:
        """The expiry is on the lease row when the run is let go; with no worker running past
        it, the next worker rejects the call by `expiry` and the run goes on."""
        submit(env.store, "r1", "expire")
        assert env.drain() == ["waiting_approval"]
        wake_at, _, _ = env.leases.timers("r1")
        expires_at = env.store.load("r1").actions["t1.1"].expires_at
        assert expires_at is not None
        assert wake_at == pytest.approx(datetime.fromisoformat(expires_at).timestamp(), abs=1e-3)
        assert env.drain() == []  # not due yet: nothing to claim
        time.sleep(EXPIRES + 0.2)  # no worker runs meanwhile
        assert env.drain() == ["completed"]
        record = env.store.load("r1")
        action = record.actions["t1.1"]
        assert (action.status, action.approver) == ("rejected", "expiry")
        assert record.final_output.startswith("not opened: its approval expired at ")
        assert env.leases.timers("r1") == (None, None, None)

    def test_a_deadline_ends_a_waiting_run_with_no_other_event(self, env: Env) -> None:
        """A run waiting for a person past its deadline is `run.terminated` (`deadline`)."""
        deadline = datetime.now(UTC) + timedelta(seconds=0.6)
        submit(env.store, "r1", "approve", limits=Limits(deadline=deadline.isoformat()))
        assert env.drain() == ["waiting_approval"]
        time.sleep(0.8)
        assert env.drain() == ["terminated"]
        record = env.store.load("r1")
        assert (record.status, record.stop_reason) == ("terminated", "deadline")
        assert env.types("r1")[-1] == "run.terminated"

    def test_a_deadline_of_the_runners_guards_fires_with_no_other_event(self, env: Env) -> None:
        """A `Deadline` given to the Runner (not in the log): the worker's release leaves it
        on the lease row, and a worker past it terminates the waiting run."""
        from agentfsm.guards.limits import Deadline

        at = datetime.now(UTC) + timedelta(seconds=0.6)
        env.guards = (Deadline(at),)  # type: ignore[attr-defined]
        submit(env.store, "r1", "approve")
        assert env.drain() == ["waiting_approval"]
        assert env.leases.timers("r1")[0] == pytest.approx(at.timestamp(), abs=0.05)
        time.sleep(0.8)
        assert env.drain() == ["terminated"]
        assert env.store.load("r1").stop_reason == "deadline"

    def test_a_deadline_set_at_submit_holds_for_a_run_no_worker_ever_drove(self, env: Env) -> None:
        """The timer commits with `run.started`: a run paused before any worker saw it is
        still terminated at its deadline (the hook set it, not a release)."""
        deadline = datetime.now(UTC) + timedelta(seconds=0.5)
        submit(env.store, "r1", "plain", limits=Limits(deadline=deadline.isoformat()))
        pause(env.store, "r1", "hold on")
        # The submit's wake-up (for now) and the deadline share the row's one time: the
        # earlier. Its worker finds the run paused, and leaves the deadline on the row.
        assert env.drain() == ["paused"]
        assert env.leases.timers("r1")[0] == pytest.approx(deadline.timestamp(), abs=1e-3)
        assert env.drain() == []
        time.sleep(0.7)
        assert env.drain() == ["terminated"]
        assert env.types("r1") == ["run.started", "run.paused", "run.terminated"]

    def test_a_paused_run_resumes_at_its_time(self, env: Env) -> None:
        """`pause_until` sets the resume in the pause's transaction; due, the worker resumes
        exactly that pause and finishes the run. Before then no worker undoes the pause."""
        submit(env.store, "r1", "plain")
        resume_at = datetime.now(UTC) + timedelta(seconds=0.5)
        pause_until(env.store, "r1", "wait for the callback", resume_at)
        assert env.leases.timers("r1")[1:] == (pytest.approx(resume_at.timestamp(), abs=1e-3), 2)
        assert env.drain() == ["paused"]  # the submit's wake-up: the pause stands
        assert env.drain() == []
        assert env.store.load("r1").status == "paused"
        time.sleep(0.7)
        assert env.drain()[0] == "completed"
        assert env.types("r1")[:3] == ["run.started", "run.paused", "run.resumed"]

    def test_a_due_resume_does_not_undo_a_later_pause(self, env: Env) -> None:
        """Resumed and paused again by a person: the old timer fires and finds another
        pause, which stands."""
        submit(env.store, "r1", "plain")
        pause_until(env.store, "r1", "callback", datetime.now(UTC) + timedelta(seconds=0.4))
        resume(env.store, "r1")
        pause(env.store, "r1", "a person's pause")
        time.sleep(0.6)
        # The old resume is due: its worker finds another pause (version 4, not 2), which
        # stands; the timer is consumed.
        assert env.drain() == ["paused"]
        assert env.store.load("r1").status == "paused"
        assert env.types("r1")[-1] == "run.paused"
        assert env.leases.timers("r1") == (None, None, None)

    def test_a_worker_that_dies_holding_a_due_run_leaves_it_due(self, env: Env) -> None:
        """The claim does not consume the timer; the release does. A claim whose worker
        never releases leaves the expiry due, and the next worker settles it."""
        submit(env.store, "r1", "expire")
        assert env.drain() == ["waiting_approval"]
        time.sleep(EXPIRES + 0.2)
        dead = env.new_leases()
        assert dead.claim("w-dead", 0.3) == "r1"  # ... and never releases
        assert env.drain() == []  # its lease still holds
        time.sleep(0.4)
        assert env.drain() == ["completed"]
        dead.close()

    def test_a_subagent_decision_wakes_the_root_at_once(self, env: Env) -> None:
        """The root waits on its child's call (`waiting_tool`, held by `retry_after`); the
        decision in the child's run wakes it in the approval's transaction."""
        submit(env.store, "r1", "subask")
        assert env.drain() == ["waiting_tool"]
        child = env.store.load("r1/t1.1")
        approve(env.store, "r1/t1.1", child.pending_approvals[0], approver="ann")
        assert env.drain() == ["completed"]  # within the 5 s hold: the wake-up overrides it

    def test_pause_until_needs_a_store_that_sets_timers(self) -> None:
        """Without a driver's hook the pause would never end by itself: refused up front."""
        store = MemoryEventStore()
        submit(store, "r1")
        with pytest.raises(ValueError, match="set timers"):
            pause_until(store, "r1", "later", datetime.now(UTC) + timedelta(seconds=1))
        assert store.load("r1").version == 1


class TestLeaseRows:
    """The lease row's timer rules, one at a time."""

    def test_a_wake_up_during_a_drive_survives_the_release(self, tmp_path: Path) -> None:
        """A steering append while a worker holds the run (its wake-up for now) is not
        overwritten by the release: the run is claimable again at once."""
        path = tmp_path / "runs.db"
        store = SQLiteEventStore(path)
        leases = SQLiteLeases(path)
        submit(store, "r1")
        assert leases.claim("w1", 30) == "r1"
        time.sleep(0.01)
        with store._conn:
            leases.wake(store._conn, "r1", time.time())
        leases.release("r1", "w1", retry_after=60)
        assert leases.claim("w2", 30) == "r1"
        leases.release("r1", "w2", retry_after=60)  # consumed now: held for 60 s
        assert leases.claim("w3", 30) is None
        leases.close()
        store.close()

    def test_an_older_lease_table_gains_the_timer_columns(self, tmp_path: Path) -> None:
        """A file from before timers is upgraded in place, its leases kept."""
        import sqlite3

        path = tmp_path / "runs.db"
        SQLiteEventStore(path).close()
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TABLE agentfsm_leases (run_id TEXT PRIMARY KEY, worker_id TEXT, "
                "expires_at REAL NOT NULL)"
            )
            conn.execute("INSERT INTO agentfsm_leases VALUES ('r1', 'w1', 1e12)")
        leases = SQLiteLeases(path)
        assert leases.timers("r1") == (None, None, None)
        assert not leases.renew("r1", "w2", 1)
        assert leases.renew("r1", "w1", 1)
        leases.close()


class TestRetryTimers:
    """A failed safe call's backoff is a durable timer, not a sleep in the worker."""

    def test_the_runner_returns_at_a_backoff_with_when_the_retry_is_due(self, env: Env) -> None:
        """`defer_retries=True`: `wake_at` is the backoff's end from the failure; resumed
        earlier it returns again at the same time; then the retry is made. Nothing sleeps."""
        runner = env.runner()
        submit(env.store, "r1", "flaky")
        first = runner.drive("r1", defer_retries=True)
        assert (first.status, env.flaky.calls) == ("running", 1)
        assert first.wake_at is not None
        failed_at = datetime.fromisoformat(env.store.load("r1").updated_at or "")
        assert first.wake_at == failed_at + timedelta(seconds=0.6)
        again = runner.drive("r1", defer_retries=True)
        assert (again.wake_at, again.record.version) == (first.wake_at, first.record.version)
        time.sleep(0.7)
        done = runner.drive("r1", defer_retries=True)
        assert (done.status, done.wake_at, env.flaky.calls) == ("completed", None, 2)
        assert env.sleeps == []
        assert env.store.load("r1").actions["t1.1"].attempts == 2

    def test_a_worker_lets_the_run_go_for_its_backoff_and_a_crash_loses_nothing(
        self, env: Env
    ) -> None:
        """The worker releases the run held until the retry is due; another worker (the
        first is gone) finds nothing before then and makes the retry after."""
        submit(env.store, "r1", "flaky")
        assert env.drain() == ["running"]
        wake_at, _, _ = env.leases.timers("r1")
        assert wake_at is not None
        assert wake_at > time.time()
        assert env.drain() == []  # the backoff holds: no worker sleeps through it
        time.sleep(0.7)
        assert env.drain() == ["completed"]
        assert (env.flaky.calls, env.sleeps) == (2, [])
        assert env.types("r1").count("tool.failed") == 1

    def test_without_defer_the_runner_still_sleeps_in_place(self, env: Env) -> None:
        """`Runner.run` and a plain `drive` wait out the backoff as before."""
        result = env.runner().run("r1", "flaky")
        assert (result.status, env.sleeps, result.wake_at) == ("completed", [0.6], None)


def test_a_worker_on_postgres_leases_holds_a_retry_even_without_the_hook(
    postgres_dsn: str, pg_prefix: str, tmp_path: Path
) -> None:
    """A store without `install_timers`: the retry's backoff still holds, as the release's
    `retry_after` and its `wake_at` (the run stays runnable)."""
    from agentfsm.stores.postgres import PostgresEventStore
    from agentfsm.stores.postgres_leases import PostgresLeases

    env = Env(tmp_path / "unused.db")
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        leases = PostgresLeases(postgres_dsn, table_prefix=pg_prefix)
        worker = Worker(env.runner(store), leases, worker_id="w1", ttl=5.0)
        submit(store, "r1", "flaky")
        assert [r.status for r in worker.drain()] == ["running"]
        assert worker.drain() == []  # held for the backoff
        time.sleep(0.7)
        assert [r.status for r in worker.drain()] == ["completed"]
        assert (env.flaky.calls, env.sleeps) == (2, [])
        leases.close()
    env.leases.close()
    env.store.close()
