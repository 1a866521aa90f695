"""A timeout as a Procrastinate timer job, on a real PostgreSQL with real workers (issue 26,
item 3): set in the transaction of the append that entered the state, fired exactly once
when due whoever is up then, also with two worker processes and one killed meanwhile, and
harmless when the run left the state first.

The loan waits `_pq_loans.WAIT` (2 s) for its documents: these tests wait for real.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from agentfsm.runtime import append_event, submit
from agentfsm.runtime.procrastinate import ADVANCE, TIMER, ProcrastinateEngine
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_loans

EXPIRED = "loan.documents_expired"


@pytest.fixture
def engine(pq_dsn: str) -> ProcrastinateEngine:
    engine = _pq_loans.engine(pq_dsn)
    engine.migrate()
    return engine


def _drain(engine: ProcrastinateEngine) -> None:
    """One worker in this process until the queue is empty (jobs not yet due are left)."""
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))


def _jobs(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task_name, args->>'run_id', status::text, scheduled_at "
            "FROM procrastinate_jobs ORDER BY id"
        ).fetchall()


def _types(store: PostgresEventStore, run_id: str) -> list[str]:
    return [e.type for e in store.events(run_id)]


def _entered(store: PostgresEventStore, run_id: str) -> datetime:
    entered = store.load(run_id).entered_at
    assert entered is not None
    return datetime.fromisoformat(entered)


class TestOneWorker:
    """The timer is a job from the append on; nothing needs to be up until it is due."""

    def test_submit_schedules_the_timer_in_its_transaction(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The run waits (nothing to advance now); one timer job, due when it times out."""
        with engine.store() as store:
            submit(store, "loan-1", "review")
            due = _entered(store, "loan-1") + timedelta(seconds=_pq_loans.WAIT)
        assert _jobs(pq_dsn) == [(TIMER, "loan-1", "todo", due)]

    def test_it_fires_once_with_no_worker_up_when_it_falls_due(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """Three runs wait past their time with no worker running; the next worker declines
        each once, and another pass changes nothing."""
        runs = ["loan-1", "loan-2", "loan-3"]
        with engine.store() as store:
            for run_id in runs:
                submit(store, run_id, "review")
            _drain(engine)  # not due yet: nothing runs
            assert [store.load(r).version for r in runs] == [1, 1, 1]
            time.sleep(_pq_loans.WAIT + 0.3)
            _drain(engine)  # the timers, then the advances they queue
            _drain(engine)
            assert [store.load(r).status for r in runs] == ["declined"] * 3
            assert [_types(store, r).count(EXPIRED) for r in runs] == [1, 1, 1]
            assert all(store.verify(r).ok for r in runs)
            _drain(engine)
            assert [store.load(r).version for r in runs] == [2, 2, 2]
        assert {j[2] for j in _jobs(pq_dsn)} == {"succeeded"}

    def test_leaving_first_the_timer_finds_nothing_to_do(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The documents came at once: the run goes on to the underwriter; when the timer
        fires its advance loads the run and appends nothing."""
        with engine.store() as store:
            submit(store, "loan-1", "review")
            append_event(store, "loan-1", "loan.documents_received", document_ids=["p-1"])
            _drain(engine)
            assert store.load("loan-1").status == "underwriting"
            version = store.load("loan-1").version
            time.sleep(_pq_loans.WAIT + 0.3)
            _drain(engine)
            _drain(engine)
            assert store.load("loan-1").version == version
            assert EXPIRED not in _types(store, "loan-1")
        jobs = _jobs(pq_dsn)
        assert [j[0] for j in jobs if j[2] != "succeeded"] == []
        assert [j[0] for j in jobs].count(TIMER) == 1
        assert [j[0] for j in jobs].count(ADVANCE) >= 2  # the documents', and the timer's


    def test_a_worker_dead_holding_the_due_timer_is_replaced(
        self, engine: ProcrastinateEngine, pq_dsn: str
    ) -> None:
        """The timer fell due and a worker took it, then went silent: the recovery pass
        closes its attempt and queues the timer afresh, and the run is declined once."""
        with engine.store() as store:
            submit(store, "loan-1", "review")
        time.sleep(_pq_loans.WAIT + 0.3)
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            dead = conn.execute(
                "INSERT INTO procrastinate_workers (last_heartbeat) "
                "VALUES (now() - interval '1 hour') RETURNING id"
            ).fetchone()
            assert dead is not None
            conn.execute(
                "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s", (dead[0],)
            )
        assert engine.recover() == ["loan-1"]
        _drain(engine)
        _drain(engine)
        with engine.store() as store:
            assert store.load("loan-1").status == "declined"
            assert _types(store, "loan-1") == ["run.started", EXPIRED]
        assert [j[:3] for j in _jobs(pq_dsn)][:2] == [
            (TIMER, "loan-1", "failed"),
            (TIMER, "loan-1", "succeeded"),
        ]


def _worker(dsn: str, name: str) -> None:
    os.environ.setdefault("PQ_TOOL_DELAY", "0.01")
    _pq_loans.main([dsn, name])


class Workers:
    """Worker processes forked from this one (cheap to start again after a kill)."""

    def __init__(self, dsn: str, size: int) -> None:
        self.dsn = dsn
        self.ctx = multiprocessing.get_context("fork")
        self.procs: list[Any] = [None] * size
        for i in range(size):
            self.start(i)

    def start(self, i: int) -> None:
        self.procs[i] = self.ctx.Process(target=_worker, args=(self.dsn, f"w{i}"))
        self.procs[i].start()

    def kill(self, i: int) -> None:
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].join()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _all_declined(store: PostgresEventStore, runs: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if {store.run_info(r).status for r in runs} == {"declined"}:
            return
        time.sleep(0.2)
    left = {r: store.run_info(r).status for r in runs if store.run_info(r).status != "declined"}
    raise AssertionError(f"runs not declined after {timeout} s: {left}")


def test_two_workers_and_a_kill_fire_each_timeout_once(engine: ProcrastinateEngine) -> None:
    """Thirty runs time out while two worker processes serve them; one is killed with
    SIGKILL as the timers fall due, and started again. Every run is declined, each by
    exactly one expiry, and every log verifies."""
    runs = [f"loan-{i}" for i in range(30)]
    with engine.store() as store:
        for run_id in runs:
            submit(store, run_id, "review")
        workers = Workers(engine.conninfo, 2)
        try:
            time.sleep(_pq_loans.WAIT + 0.1)  # the timers are falling due now
            workers.kill(0)
            time.sleep(0.3)
            workers.start(0)
            _all_declined(store, runs, timeout=60)
        finally:
            workers.stop()
        assert [_types(store, r) for r in runs] == [["run.started", EXPIRED]] * 30
        assert all(store.verify(r).ok for r in runs)
