"""Runs advancing as Procrastinate jobs: one worker in this process, a real PostgreSQL.

The engine's promises one at a time: a wake-up commits with the append that causes it (and
not without it), duplicate and late jobs end quietly, steering from another store wakes
the run, timers fire with nothing else happening, and a dead worker's job is fenced and
run again. The many-process and fault tests are in `test_procrastinate_processes.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import structlog
from psycopg.conninfo import make_conninfo

from agentfsm.cli import main
from agentfsm.errors import ConcurrencyConflictError, LeaseLostError
from agentfsm.events.models import Limits
from agentfsm.runtime import approve, cancel, submit
from agentfsm.runtime.procrastinate import (
    ADVANCE,
    ProcrastinateEngine,
    _Fence,
    pause_until,
    recovery_lock_key,
)
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_app


@pytest.fixture
def engine(pq_dsn: str, tmp_path: Path) -> ProcrastinateEngine:
    engine = _pq_app.engine(pq_dsn, "agentfsm", str(tmp_path / "ledger.db"))
    engine.migrate()
    return engine


def _drain(engine: ProcrastinateEngine) -> None:
    """Run one worker in this process until the queue is empty (scheduled jobs not due
    are left)."""
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))


def _jobs(dsn: str, status: str | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task_name, args->>'run_id', status::text, lock, queueing_lock, scheduled_at "
            "FROM procrastinate_jobs WHERE %(s)s::text IS NULL OR status::text = %(s)s "
            "ORDER BY id",
            {"s": status},
        ).fetchall()


def _types(store: PostgresEventStore, run_id: str) -> list[str]:
    return [e.type for e in store.events(run_id)]


class TestWakeUps:
    """Every append that makes a run runnable queues its advance, in the same transaction."""

    def test_submit_queues_one_advance_locked_on_the_run(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """`run.started` through the engine's store queues `advance(r1)`, lock and queueing
        lock the run id."""
        with engine.store() as store:
            submit(store, "r1", "plain")
        assert _jobs(pq_dsn) == [(ADVANCE, "r1", "todo", "r1", "r1", None)]

    def test_a_refused_append_queues_nothing(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The wake-up rolls back with the append: a run submitted twice has one job."""
        with engine.store() as store:
            submit(store, "r1", "plain")
            with pytest.raises(ConcurrencyConflictError):
                submit(store, "r1", "plain")
        assert len(_jobs(pq_dsn)) == 1

    def test_wake_ups_of_a_queued_run_collapse(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A cancel while the advance waits to start is that advance (queueing lock), and
        the append still commits."""
        with engine.store() as store:
            submit(store, "r1", "plain")
            cancel(store, "r1", reason="changed my mind")
            assert store.load("r1").status == "cancel_requested"
        assert len(_jobs(pq_dsn)) == 1
        _drain(engine)
        with engine.store() as store:
            assert store.load("r1").status == "cancelled"

    def test_a_store_without_the_hook_queues_nothing(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The store itself knows nothing of Procrastinate: the hook is what enqueues."""
        with PostgresEventStore(pq_dsn) as store:
            submit(store, "r1", "plain")
        assert _jobs(pq_dsn) == []

    def test_the_database_names_its_engine(self, engine: ProcrastinateEngine, pq_dsn: str) -> None:
        """`migrate()` records the engine, so the command line can find it."""
        with PostgresEventStore(pq_dsn) as store:
            assert store.meta("engine") == "procrastinate:agentfsm"

    def test_the_command_line_queues_the_wake_up(
        self, engine: ProcrastinateEngine, pq_dsn: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`agentfsm approve` on a database the engine serves queues the run's advance."""
        with engine.store() as store:
            submit(store, "r1", "approve")
            _drain(engine)
            action = store.load("r1").pending_approvals[0]
        info = psycopg.conninfo.conninfo_to_dict(pq_dsn)
        url = f"postgresql://postgres@{info['host']}:{info['port']}/{info['dbname']}"
        assert main(["approve", "r1", action, "--approver", "ann", "--store", url]) == 0
        capsys.readouterr()
        assert [j[1:3] for j in _jobs(pq_dsn, "todo")] == [("r1", "todo")]
        _drain(engine)
        with engine.store() as store:
            assert store.load("r1").status == "completed"


class TestAdvance:
    """A job drives its run until it ends or waits; at-least-once is safe."""

    def test_a_run_completes_as_jobs(self, engine: ProcrastinateEngine, pq_dsn: str) -> None:
        """A plain run is driven to `completed` by one advance."""
        with engine.store() as store:
            submit(store, "r1", "plain")
            _drain(engine)
            assert store.load("r1").status == "completed"
            assert store.verify("r1").ok
        assert [j[2] for j in _jobs(pq_dsn)] == ["succeeded"]

    def test_an_approval_from_another_store_wakes_the_run(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The run waits; an approval made through another handle queues the advance."""
        with engine.store() as store:
            submit(store, "r1", "approve")
            _drain(engine)
            record = store.load("r1")
            assert record.status == "waiting_approval"
        with engine.store() as other:
            approve(other, "r1", record.pending_approvals[0], approver="ann")
        _drain(engine)
        with engine.store() as store:
            assert store.load("r1").final_output == "opened T-r1"

    def test_a_duplicate_job_ends_quietly(self, engine: ProcrastinateEngine, pq_dsn: str) -> None:
        """A late advance of a finished run loads it, appends nothing, and succeeds."""
        with engine.store() as store:
            submit(store, "r1", "plain")
            _drain(engine)
            before = _types(store, "r1")
            with engine.app.open():
                task = engine.app.configure_task(ADVANCE, lock="r1", queueing_lock="r1")
                task.defer(run_id="r1")
            _drain(engine)
            assert _types(store, "r1") == before
        assert [j[2] for j in _jobs(pq_dsn)] == ["succeeded", "succeeded"]

    def test_a_subagents_decision_wakes_the_root(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A child run that waits for a person leaves its parent waiting on the call; the
        decision in the child's run queues the root's advance, which finishes both."""
        with engine.store() as store:
            submit(store, "r1", "subask")
            _drain(engine)
            assert store.load("r1").status == "waiting_tool"
            child = store.load("r1/t1.1")
            assert child.status == "waiting_approval"
        with engine.store() as other:
            approve(other, "r1/t1.1", child.pending_approvals[0], approver="ann")
        assert [j[1] for j in _jobs(pq_dsn, "todo")] == ["r1"]
        _drain(engine)
        with engine.store() as store:
            assert store.load("r1/t1.1").status == "completed"
            assert store.load("r1").status == "completed"


class TestTimers:
    """Things that must happen at a time are scheduled jobs."""

    def test_an_expired_approval_is_settled_when_a_worker_comes_back(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The expiry's timer was queued with `approval.requested`; with no worker running
        past it, the next worker rejects the call by `expiry` and the run goes on."""
        with engine.store() as store:
            submit(store, "r1", "expire")
            _drain(engine)
            record = store.load("r1")
            assert record.status == "waiting_approval"
            timers = [j for j in _jobs(pq_dsn, "todo") if j[0] == "agentfsm.timer"]
            assert len(timers) == 1
            time.sleep(_pq_app.EXPIRES + 0.3)  # no worker runs meanwhile
            _drain(engine)
            _drain(engine)  # the timer's advance
            record = store.load("r1")
            assert record.status == "completed"
            action = next(a for a in record.actions.values() if a.tool == "create_ticket")
            assert (action.status, action.approver) == ("rejected", "expiry")
            assert record.final_output.startswith("not opened: its approval expired at ")

    def test_a_deadline_ends_a_waiting_run_with_no_other_event(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A run waiting for a person past its deadline is `run.terminated` (`deadline`)."""
        deadline = datetime.now(UTC) + timedelta(seconds=1.0)
        with engine.store() as store:
            submit(store, "r1", "approve", limits=Limits(deadline=deadline.isoformat()))
            _drain(engine)
            assert store.load("r1").status == "waiting_approval"
            time.sleep(1.3)
            _drain(engine)
            _drain(engine)
            record = store.load("r1")
            assert (record.status, record.stop_reason) == ("terminated", "deadline")
            assert _types(store, "r1")[-1] == "run.terminated"

    def test_a_paused_run_resumes_at_its_time(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """`pause_until` sets a timer in the pause's transaction; when due it resumes the
        run, and the advance finishes it. A job meanwhile does not undo the pause."""
        with engine.store() as store:
            submit(store, "r1", "plain")
            resume_at = datetime.now(UTC) + timedelta(seconds=1.0)
            pause_until(store, "r1", "wait for the callback", resume_at)
            _drain(engine)  # the submit's advance: the run stays paused
            assert store.load("r1").status == "paused"
            time.sleep(1.2)
            _drain(engine)
            _drain(engine)
            assert store.load("r1").status == "completed"
            assert _types(store, "r1")[:3] == ["run.started", "run.paused", "run.resumed"]

    def test_a_retry_waits_out_its_backoff_as_a_timer_not_in_the_job(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A safe call that failed retryably: the advance ends (the run still runnable) with
        a timer at the backoff's end; no worker runs meanwhile, and after it the retry is
        made. A worker lost during the backoff loses nothing: nothing was in a process."""
        with engine.store() as store:
            submit(store, "r1", "flaky")
            _drain(engine)
            record = store.load("r1")
            assert (record.status, record.actions["t1.1"].attempts) == ("running", 1)
            assert [j[:3] for j in _jobs(pq_dsn)] == [
                (ADVANCE, "r1", "succeeded"),
                ("agentfsm.timer", "r1", "todo"),
            ]
            failed_at = datetime.fromisoformat(record.updated_at or "")
            scheduled = _jobs(pq_dsn, "todo")[0][5]
            assert scheduled == failed_at + timedelta(seconds=_pq_app.BACKOFF)
            _drain(engine)  # not due: nothing runs
            assert store.load("r1").version == record.version
            time.sleep(_pq_app.BACKOFF + 0.2)
            _drain(engine)
            _drain(engine)
            record = store.load("r1")
            assert (record.status, record.final_output) == ("completed", "quoted 7")
            assert record.actions["t1.1"].attempts == 2

    def test_pause_until_needs_the_engines_store(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A store without the engine's hook would never end the pause: refused."""
        with PostgresEventStore(pq_dsn) as store:
            submit(store, "r1", "plain")
            with pytest.raises(ValueError, match="set timers"):
                pause_until(store, "r1", "later", datetime.now(UTC) + timedelta(seconds=1))


class TestFailover:
    """A dead worker's job is run elsewhere, and the dead attempt is fenced."""

    def test_a_silent_workers_job_is_closed_and_queued_afresh(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """`recover()` fails the stalled attempt and queues a fresh advance of the run."""
        with engine.store() as store:
            submit(store, "r1", "plain")
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            worker = conn.execute(
                "INSERT INTO procrastinate_workers (last_heartbeat) "
                "VALUES (now() - interval '1 hour') RETURNING id"
            ).fetchone()
            assert worker is not None
            conn.execute(
                "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s", (worker[0],)
            )
            job = conn.execute("SELECT id FROM procrastinate_jobs").fetchone()
            assert job is not None
            assert engine.recover() == ["r1"]
            assert engine.recover() == []
            fence = _Fence(conn, job[0], "r1", "w-dead", every=0.0)
            with pytest.raises(LeaseLostError):
                fence.beat(None)  # type: ignore[arg-type]
        assert [j[2] for j in _jobs(pq_dsn)] == ["failed", "todo"]
        _drain(engine)
        with engine.store() as store:
            assert store.load("r1").status == "completed"


class TestRecoveryPass:
    """One worker of a queue at a time scans for stalled jobs, on a connection it keeps."""

    @staticmethod
    def _stalled(engine: ProcrastinateEngine, dsn: str) -> None:
        with engine.store() as store:
            submit(store, "r1", "plain")
        with psycopg.connect(dsn, autocommit=True) as conn:
            worker = conn.execute(
                "INSERT INTO procrastinate_workers (last_heartbeat) "
                "VALUES (now() - interval '1 hour') RETURNING id"
            ).fetchone()
            assert worker is not None
            conn.execute(
                "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s", (worker[0],)
            )

    def test_a_pass_under_way_elsewhere_is_not_repeated(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """While another worker holds the queue's recovery lock, a pass does nothing; once
        it is free, the next pass recovers."""
        self._stalled(engine, pq_dsn)
        with psycopg.connect(pq_dsn, autocommit=True) as other:
            key = recovery_lock_key(engine.settings.queue)
            other.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
            assert engine.recover() == []
            assert [j[2] for j in _jobs(pq_dsn)] == ["doing"]
            other.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
        assert engine.recover() == ["r1"]
        assert [j[2] for j in _jobs(pq_dsn)] == ["failed", "todo"]

    def test_a_serving_workers_passes_share_one_connection(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """A worker serving for 3 s with a pass every 0.1 s opens a handful of sessions on
        the server (its pool, its pass connection; PostgreSQL counts them), not one a pass."""
        fast = ProcrastinateEngine(
            pq_dsn,
            engine.make_runner,
            settings=attrs.evolve(engine.settings, recover_every=0.1),
        )

        def sessions() -> int:
            with psycopg.connect(pq_dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
                ).fetchone()
                assert row is not None
                return int(row[0])

        async def serve_for(seconds: float) -> None:
            task = asyncio.create_task(fast.aserve(wait=True, install_signal_handlers=False))
            await asyncio.sleep(seconds)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        before = sessions()
        asyncio.run(serve_for(3.0))
        time.sleep(1.0)  # a backend adds itself to the count as it ends
        opened = sessions() - before - 1  # less the first probe's own
        assert opened <= 8, opened


def _burst(dsn: str, jobs: int) -> None:
    """`jobs` queued jobs in a queue nobody serves, once the statistics collector counts
    them (it is told at most once a second)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args) "
            "SELECT 'nobody', 'agentfsm.advance', 'b' || n, 'b' || n, '{}' "
            "FROM generate_series(1, %s) AS n",
            (jobs,),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            if _planned(conn)[1] >= jobs:
                return
            time.sleep(0.1)
        raise AssertionError("the statistics collector never counted the jobs")


def _planned(conn: psycopg.Connection[Any]) -> tuple[float, int]:
    row = conn.execute(
        "SELECT c.reltuples, s.n_live_tup FROM pg_class c "
        "JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = 'procrastinate_jobs'"
    ).fetchone()
    assert row is not None
    return float(row[0]), int(row[1])


class TestJobsPlanned:
    """A burst of jobs is fetched by an index's head, not by sorting the whole backlog."""

    def test_a_pass_analyzes_the_jobs_table_once_a_burst_outgrows_its_statistics(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        _burst(pq_dsn, 1_500)
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            assert _planned(conn)[0] < 1_000  # planned for an empty table
            engine.recover()
            assert _planned(conn)[0] == 1_500
            # Fresh now: the next passes leave it be.
            assert not engine._keep_jobs_planned(conn)

    def test_only_the_worker_whose_pass_it_is_looks(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """While another worker holds the queue's recovery lock, this one's pass neither
        recovers nor analyzes; the pass after the lock is freed does."""
        _burst(pq_dsn, 1_500)
        with psycopg.connect(pq_dsn, autocommit=True) as other:
            key = recovery_lock_key(engine.settings.queue)
            other.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
            engine.recover()
            assert _planned(other)[0] < 1_000
            other.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
            engine.recover()
            assert _planned(other)[0] == 1_500

    def test_a_few_jobs_are_not_worth_an_analyze(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        _burst(pq_dsn, 200)
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            assert not engine._keep_jobs_planned(conn)

    def test_a_user_who_may_not_analyze_is_told_once_and_left_to_autovacuum(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """PostgreSQL skips a table its user does not own with a warning, not an error: the
        pass sees that nothing changed, logs it once, and does not try again."""
        role = f"engine_user_{os.getpid()}"
        with psycopg.connect(pq_dsn, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {role} LOGIN")
            admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        try:
            _burst(pq_dsn, 1_500)
            user = ProcrastinateEngine(make_conninfo(pq_dsn, user=role), engine.make_runner)
            with (
                psycopg.connect(make_conninfo(pq_dsn, user=role), autocommit=True) as conn,
                structlog.testing.capture_logs() as logs,
            ):
                assert not user._keep_jobs_planned(conn)
                assert not user._keep_jobs_planned(conn)
            assert [e["event"] for e in logs] == ["engine.jobs_not_analyzed"]
        finally:
            with psycopg.connect(pq_dsn, autocommit=True) as admin:
                admin.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
                admin.execute(f"DROP ROLE {role}")


class TestTimeSlices:
    """A job drives a run for a slice of turns (or seconds), then puts it back in the queue."""

    def test_a_long_run_goes_back_in_the_queue_every_slice(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """Nine turns in slices of three: three advance jobs or so drive the run (a slice
        may end just before the answer), each queued behind what was queued meanwhile: the
        short run submitted after it is driven before the long run's second slice."""
        sliced = ProcrastinateEngine(
            pq_dsn,
            engine.make_runner,
            settings=attrs.evolve(engine.settings, slice_turns=3, slice_seconds=None),
        )
        with sliced.store() as store:
            submit(store, "long", "long 9")
            submit(store, "short", "plain")
        _drain(sliced)
        with sliced.store() as store:
            assert store.load("long").status == "completed"
            assert store.load("long").turn == 9
            assert store.load("short").status == "completed"
        advances = [j[1] for j in _jobs(pq_dsn) if j[0] == ADVANCE]
        assert 3 <= advances.count("long") <= 4
        # The long run's second job was queued after the short run's: FIFO shares workers.
        assert advances.index("short") < [i for i, r in enumerate(advances) if r == "long"][1]

    def test_no_slice_drives_a_run_in_one_job(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        whole = ProcrastinateEngine(
            pq_dsn,
            engine.make_runner,
            settings=attrs.evolve(engine.settings, slice_turns=None, slice_seconds=None),
        )
        with whole.store() as store:
            submit(store, "long", "long 9")
        _drain(whole)
        assert [j[1] for j in _jobs(pq_dsn) if j[0] == ADVANCE] == ["long"]
