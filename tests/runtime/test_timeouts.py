"""States that time out, driven (issue 26, item 3): the Runner appends a timeout's event once
its time has come, and the embedded Worker's timers fire it with no process up meanwhile.

The loan waits 7 days for its documents (`tests/fixtures/loan.py`). Time is injected: the
Runner's clock, the store's (for `submit`) and the leases' are one `Clock` the test moves on,
so a week passes in no time and nothing runs while it does. The Procrastinate engine's side,
on a real PostgreSQL with real workers, is `test_timeouts_procrastinate.py`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentfsm import IllegalTransitionError, Transition
from agentfsm.events.models import Limits
from agentfsm.reducers import Reducer
from agentfsm.runtime import AsyncRunner, Runner, Worker, append_event, migrate, pause, submit
from agentfsm.runtime.timers import install_timers
from agentfsm.stores import (
    MemoryEventStore,
    SQLiteEventStore,
    StoreOptions,
    ThreadedAsyncEventStore,
)
from agentfsm.stores.leases import SQLiteLeases
from tests.fixtures.loan import DOCUMENTS_WAIT, LOAN_TABLE, loan_table, review_agent
from tests.runtime.helpers import types

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
DUE = T0 + DOCUMENTS_WAIT
#: The loan lifecycle before its documents expired.
UNTIMED = loan_table(documents_wait=None)


class Clock:
    """One time for the Runner, the steering verbs and the leases, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def epoch(self) -> float:
        """The leases' clock: seconds since the epoch."""
        return self.now.timestamp()

    def to(self, moment: datetime) -> None:
        self.now = moment


def _memory(table: object = LOAN_TABLE) -> MemoryEventStore:
    return MemoryEventStore(options=StoreOptions(reducer=Reducer(table)))  # type: ignore[arg-type]


class TestRunner:
    """A Runner on a run whose state's timeout passed appends its event and goes on."""

    def test_before_its_time_the_run_waits(self) -> None:
        """Six days in, a resume appends nothing: the run still waits for its documents."""
        clock = Clock()
        store = _memory()
        runner = Runner(store, review_agent(), clock=clock)
        assert runner.run("loan-1", "review").status == "documents_requested"
        clock.to(DUE - timedelta(days=1))
        assert runner.drive("loan-1").status == "documents_requested"
        assert types(store, "loan-1") == ["run.started"]

    def test_past_its_time_the_run_is_declined(self) -> None:
        """Eight days in, the resume appends `loan.documents_expired` (now, with no fields)
        and the run ends declined."""
        clock = Clock()
        store = _memory()
        runner = Runner(store, review_agent(), clock=clock)
        runner.run("loan-1", "review")
        clock.to(DUE + timedelta(days=1))
        result = runner.drive("loan-1")
        assert (result.status, dict(result.record.custom)) == (
            "declined",
            {"declined_because": "no documents in time"},
        )
        assert types(store, "loan-1") == ["run.started", "loan.documents_expired"]
        expired = list(store.events("loan-1"))[-1]
        assert expired.occurred_at == clock.now.isoformat()

    def test_the_async_runner_does_the_same(self) -> None:
        """The drive core is one: the `AsyncRunner` declines the run past its time too."""
        clock = Clock()
        store = _memory()
        runner = AsyncRunner(ThreadedAsyncEventStore(store), review_agent(), clock=clock)
        asyncio.run(runner.run("loan-1", "review"))
        clock.to(DUE)
        assert asyncio.run(runner.drive("loan-1")).status == "declined"
        assert types(store, "loan-1") == ["run.started", "loan.documents_expired"]

    def test_a_timeout_into_a_state_the_runner_drives_goes_on(self) -> None:
        """Where the timeout leads the agent back to work, the same drive takes the turn:
        the agent recommends and the run waits for the underwriter."""
        nudged = UNTIMED.derive(
            add_events=["loan.documents_overdue"],
            add=[
                Transition(
                    "documents_requested", "loan.documents_overdue", "running", after=DOCUMENTS_WAIT
                )
            ],
        )
        clock = Clock()
        store = _memory(nudged)
        runner = Runner(store, review_agent(), clock=clock)
        runner.run("loan-1", "review")
        clock.to(DUE)
        result = runner.drive("loan-1")
        assert result.status == "underwriting"
        assert types(store, "loan-1") == [
            "run.started", "loan.documents_overdue", "model.started", "model.completed",
            "run.completed",
        ]  # fmt: skip

    def test_leaving_first_means_no_timeout(self) -> None:
        """The documents came on day 2: on day 8 there is nothing to expire."""
        clock = Clock()
        store = _memory()
        runner = Runner(store, review_agent(), clock=clock)
        runner.run("loan-1", "review")
        clock.to(T0 + timedelta(days=2))
        append_event(store, "loan-1", "loan.documents_received", {"document_ids": ["p-1"]},
                     clock=clock)  # fmt: skip
        assert runner.drive("loan-1").status == "underwriting"
        clock.to(DUE + timedelta(days=1))
        before = store.load("loan-1").version
        assert runner.drive("loan-1").status == "underwriting"
        assert store.load("loan-1").version == before

    def test_a_person_cannot_expire_it_early(self) -> None:
        """The same event appended by a person before its time is refused, saying when."""
        clock = Clock()
        store = _memory()
        Runner(store, review_agent(), clock=clock).run("loan-1", "review")
        clock.to(T0 + timedelta(days=3))
        with pytest.raises(IllegalTransitionError) as info:
            append_event(store, "loan-1", "loan.documents_expired", clock=clock)
        assert info.value.due_at == DUE.isoformat()
        assert str(info.value) == (
            "run 'loan-1' is 'documents_requested': event 'loan.documents_expired' (sequence "
            "2) is not allowed: condition 'after 7 d' does not hold (it comes before its time: "
            "the timeout falls due at 2026-09-08T10:00:00+00:00); allowed: "
            "'loan.documents_expired', 'loan.documents_received', 'run.cancel_requested', "
            "'run.failed', 'run.terminated'"
        )
        assert types(store, "loan-1") == ["run.started"]

    def test_a_paused_run_whose_timeout_passed_is_not_resumed_first(self) -> None:
        """A pause that is cancelled after a day: a `Runner.drive` two days in settles the
        timeout instead of resuming (as a timer in time would have)."""
        from agentfsm import DEFAULT_TABLE
        from agentfsm.runtime import Agent, Decision, ScriptedModel

        table = DEFAULT_TABLE.derive(
            name="pause_expires",
            remove=[("paused", "run.cancel_requested", "cancel_requested")],
            add=[
                Transition("paused", "run.cancel_requested", "cancel_requested",
                           after=timedelta(days=1)),
            ],
        )  # fmt: skip
        clock = Clock()
        store = _memory(table)
        runner = Runner(store, Agent("a", ScriptedModel([Decision.answer("done")])), clock=clock)
        submit(store, "r1", clock=clock)
        pause(store, "r1", "waiting for a callback", clock=clock)
        clock.to(T0 + timedelta(days=2))
        assert runner.drive("r1").status == "cancelled"
        assert types(store, "r1") == [
            "run.started", "run.paused", "run.cancel_requested", "run.cancelled",
        ]  # fmt: skip


class Env:
    """A SQLite store with the timers' hook and its leases, on the test's clock."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self.clock = clock
        self.workers = 0
        self.leases = SQLiteLeases(path, clock=clock.epoch)
        self.store = self.open(LOAN_TABLE, self.leases)

    def open(
        self, table: object, leases: SQLiteLeases, *, older: tuple[object, ...] = ()
    ) -> SQLiteEventStore:
        """A store of `table` (that can fold runs of `older` versions) with the hook."""
        reducer = Reducer(table, tables=older)  # type: ignore[arg-type]
        store = SQLiteEventStore(
            self.path, synchronous="NORMAL", options=StoreOptions(reducer=reducer)
        )
        return install_timers(store, leases)

    def worker(self, table: object = LOAN_TABLE, older: tuple[object, ...] = ()) -> Worker:
        """A new worker process, as it were: its own store handle and leases."""
        self.workers += 1
        leases = SQLiteLeases(self.path, clock=self.clock.epoch)
        store = self.open(table, leases, older=older)
        runner = Runner(store, review_agent(), clock=self.clock)
        return Worker(runner, leases, worker_id=f"w{self.workers}", ttl=30.0)

    def drain(self, table: object = LOAN_TABLE, older: tuple[object, ...] = ()) -> list[str]:
        return [r.status for r in self.worker(table, older).drain()]

    def expiries(self, run_id: str) -> int:
        return types(self.store, run_id).count("loan.documents_expired")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "loans.db", Clock())
    try:
        yield e
    finally:
        e.leases.close()
        e.store.close()


class TestWorker:
    """The timer is on the run's lease row from the append that entered the state: it fires
    exactly once when due, whoever is up then."""

    def test_submit_sets_the_timer_in_its_own_transaction(self, env: Env) -> None:
        """No worker ever ran: the lease row already says when the run is due."""
        submit(env.store, "loan-1", "review", clock=env.clock)
        assert env.leases.timers("loan-1") == (DUE.timestamp(), None, None)
        assert env.drain() == []  # not runnable, not due: nothing to claim

    def test_it_fires_once_with_no_process_up_when_it_falls_due(self, env: Env) -> None:
        """A week passes with nothing running; the first worker after it declines the run,
        the next finds nothing to do, and the timer is gone."""
        submit(env.store, "loan-1", "review", clock=env.clock)
        env.clock.to(DUE - timedelta(seconds=1))
        assert env.drain() == []
        env.clock.to(DUE + timedelta(days=2))
        assert env.drain() == ["declined"]
        assert env.drain() == []
        assert env.expiries("loan-1") == 1
        assert env.leases.timers("loan-1") == (None, None, None)

    def test_two_workers_at_once_fire_it_once(self, env: Env) -> None:
        """Twenty due runs, two workers draining them side by side: one expiry each."""
        runs = [f"loan-{i}" for i in range(20)]
        for run_id in runs:
            submit(env.store, run_id, "review", clock=env.clock)
        env.clock.to(DUE)
        workers = [env.worker(), env.worker()]
        done: list[list[str]] = [[], []]

        def drain(i: int) -> None:
            done[i] = [r.status for r in workers[i].drain()]

        threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(done[0] + done[1]) == ["declined"] * 20
        assert [env.expiries(r) for r in runs] == [1] * 20

    def test_a_worker_killed_holding_the_due_run_leaves_it_due(self, env: Env) -> None:
        """A claim whose worker dies before it appends: once its lease lapses the next
        worker fires the timeout, once."""
        submit(env.store, "loan-1", "review", clock=env.clock)
        env.clock.to(DUE)
        dead = SQLiteLeases(env.path, clock=env.clock.epoch)
        assert dead.claim("w-dead", 10.0) == "loan-1"  # ... and never releases
        assert env.drain() == []  # its lease still holds
        env.clock.to(DUE + timedelta(seconds=11))
        assert env.drain() == ["declined"]
        assert env.expiries("loan-1") == 1
        dead.close()

    def test_leaving_first_cancels_it(self, env: Env) -> None:
        """The documents came on day 2: the worker that drove the run on to the underwriter
        left no timer behind (the run's next time is its own, and it has none)."""
        submit(env.store, "loan-1", "review", clock=env.clock)
        env.clock.to(T0 + timedelta(days=2))
        append_event(env.store, "loan-1", "loan.documents_received", {"document_ids": ["p-1"]},
                     clock=env.clock)  # fmt: skip
        assert env.drain() == ["underwriting"]
        assert env.leases.timers("loan-1") == (None, None, None)
        env.clock.to(DUE)
        assert env.drain() == []
        assert env.expiries("loan-1") == 0

    def test_a_timer_left_behind_finds_nothing_to_do(self, env: Env) -> None:
        """The documents were recorded through a store without the hook (an older process),
        so the day-7 timer stays on the row; when it fires the worker loads the run, finds
        no timeout due, appends nothing, and the timer is consumed."""
        submit(env.store, "loan-1", "review", clock=env.clock)
        env.clock.to(T0 + timedelta(days=2))
        bare = SQLiteEventStore(env.path, options=StoreOptions(reducer=Reducer(LOAN_TABLE)))
        append_event(bare, "loan-1", "loan.documents_received", {"document_ids": ["p-1"]},
                     clock=env.clock)  # fmt: skip
        bare.close()
        assert env.drain() == ["underwriting"]  # runnable by its status
        assert env.leases.timers("loan-1")[0] == DUE.timestamp()
        version = env.store.load("loan-1").version
        env.clock.to(DUE)
        assert env.drain() == ["underwriting"]
        assert env.store.load("loan-1").version == version
        assert env.leases.timers("loan-1") == (None, None, None)
        assert env.expiries("loan-1") == 0

    def test_a_run_migrated_to_a_table_that_times_out_gets_its_timer(self, env: Env) -> None:
        """Started before its documents could expire; migrated on day 3 to the version that
        expires them: the migration's append sets the timer for day 7 (counted from when
        the run came to the state), and it fires."""
        old = env.open(UNTIMED, env.leases, older=(LOAN_TABLE,))
        submit(old, "loan-1", "review", clock=env.clock)
        assert env.leases.timers("loan-1") == (None, None, None)
        env.clock.to(T0 + timedelta(days=3))
        migrate(old, "loan-1", to=LOAN_TABLE, by="ops", reason="documents expire now",
                clock=env.clock)  # fmt: skip
        assert env.leases.timers("loan-1")[0] == DUE.timestamp()
        env.clock.to(DUE)
        assert env.drain(LOAN_TABLE, older=(UNTIMED,)) == ["declined"]
        assert env.expiries("loan-1") == 1
        old.close()

    def test_a_run_migrated_to_a_table_without_it_keeps_waiting(self, env: Env) -> None:
        """Migrated away from the timeout: when the old timer fires it finds nothing due,
        and the run still waits for its documents."""
        submit(env.store, "loan-1", "review", clock=env.clock)
        old = env.open(LOAN_TABLE, env.leases, older=(UNTIMED,))
        migrate(old, "loan-1", to=UNTIMED, by="ops", reason="documents never expire",
                clock=env.clock)  # fmt: skip
        new = env.open(UNTIMED, env.leases, older=(LOAN_TABLE,))
        version = new.load("loan-1").version
        assert new.load("loan-1").timeout is None
        env.clock.to(DUE + timedelta(days=1))
        assert env.drain(UNTIMED, older=(LOAN_TABLE,)) == ["documents_requested"]
        assert new.load("loan-1").version == version
        assert env.leases.timers("loan-1") == (None, None, None)
        old.close()
        new.close()

    def test_the_earlier_of_a_deadline_and_the_timeout_wakes_the_run(self, env: Env) -> None:
        """A deadline before the week is up: the run is woken then, and terminated."""
        deadline = T0 + timedelta(days=2)
        submit(env.store, "loan-1", "review", limits=Limits(deadline=deadline.isoformat()),
               clock=env.clock)  # fmt: skip
        assert env.leases.timers("loan-1")[0] == deadline.timestamp()
        env.clock.to(deadline)
        assert env.drain() == ["terminated"]
        assert env.expiries("loan-1") == 0
