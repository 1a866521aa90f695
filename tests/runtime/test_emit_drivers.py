"""The loan run's own events under the embedded `Worker` and the Procrastinate engine.

A worker drives the run until the event a tool caused makes it wait for a person, and lets
it go; the person's answer (`append_event`) makes it claimable (the store's hook wakes it),
and a worker takes it on, until the model's decision makes it wait for the underwriter.
The events the driver causes itself wake nothing (they are its own), so no job is queued
for a run that waits.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer
from agentfsm.runtime import Agent, Runner, Worker, append_event, submit
from agentfsm.runtime._wakeups import Wake, wakeups
from agentfsm.runtime.procrastinate import EngineSettings, ProcrastinateEngine
from agentfsm.runtime.timers import install_timers
from agentfsm.stores import SQLiteEventStore, StoreOptions
from agentfsm.stores.base import EventStore
from agentfsm.stores.leases import SQLiteLeases
from tests.fixtures.emit_loan import LOAN_TABLE, loan_script, loan_tools

OPTIONS = StoreOptions(reducer=Reducer(LOAN_TABLE))


def loan_runner(store: EventStore) -> Runner:
    return Runner(store, Agent("loans", loan_script(), loan_tools()))


class TestWakeUps:
    """Which appends of a loan run wake it."""

    def test_the_drivers_own_events_wake_nothing(self) -> None:
        """An event riding with a call's outcome (or a decision) is the driver's; the same
        type appended by a person wakes the run (when it has work to do)."""
        running = RunRecord(run_id="L-1", status="running")
        assert wakeups(running, ("tool.completed", "loan.noted"), LOAN_TABLE) == ()
        assert wakeups(running, ("model.completed", "loan.noted"), LOAN_TABLE) == ()
        assert wakeups(running, ("emit.refused",), LOAN_TABLE) == ()
        assert wakeups(running, ("loan.noted",), LOAN_TABLE) == (Wake("L-1"),)


class TestWorker:
    """The embedded `Worker`, on SQLite with its lease timers."""

    def test_a_worker_drives_the_loan_between_the_people(self, tmp_path: Path) -> None:
        """Claimed, driven to `documents_requested` and released; claimable again only once
        the documents are in; driven to `underwriting`; the underwriter ends it."""
        path = tmp_path / "runs.db"
        leases = SQLiteLeases(path, runnable=sorted(LOAN_TABLE.runnable_states))
        with install_timers(SQLiteEventStore(path, options=OPTIONS), leases) as store:
            worker = Worker(loan_runner(store), leases, worker_id="w1", retry_after=0)
            submit(store, "L-1", "Loan for A-7")
            (first,) = worker.drain()
            assert (first.status, first.waiting) == ("documents_requested", True)
            assert worker.drain() == []  # waiting for a person: nobody claims it
            append_event(store, "L-1", "loan.documents_received", document_ids=["D-1"])
            (second,) = worker.drain()
            assert second.status == "underwriting"
            assert worker.drain() == []
            append_event(store, "L-1", "loan.underwriter_decision", decision="decline")
            assert worker.drain() == []
            record = store.load("L-1")
            assert (record.status, record.custom["decision"]) == ("declined", "decline")
            assert store.verify("L-1").ok


def _jobs(dsn: str, status: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status::text = %s", (status,)
        ).fetchone()
    assert row is not None
    return int(row[0])


class TestProcrastinate:
    """Runs advancing as Procrastinate jobs, on the real PostgreSQL of the fixture."""

    def test_jobs_drive_the_loan_between_the_people(self, pq_dsn: str) -> None:
        """`submit` queues the advance, which stops at `documents_requested` with nothing
        queued; the person's event through the engine's store queues the next, which stops
        at `underwriting`; the underwriter's event ends it, queueing nothing to do."""
        settings = EngineSettings(queue="loans", poll=0.2, delete_jobs="never")
        engine = ProcrastinateEngine(pq_dsn, loan_runner, settings=settings, options=OPTIONS)
        engine.migrate()

        def drain() -> None:
            asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))

        with engine.store() as store:
            submit(store, "L-1", "Loan for A-7")
            drain()
            assert store.load("L-1").status == "documents_requested"
            assert (_jobs(pq_dsn, "succeeded"), _jobs(pq_dsn, "todo")) == (1, 0)
            append_event(store, "L-1", "loan.documents_received", document_ids=["D-1"])
            assert _jobs(pq_dsn, "todo") == 1
            drain()
            assert store.load("L-1").status == "underwriting"
            assert (_jobs(pq_dsn, "succeeded"), _jobs(pq_dsn, "todo")) == (2, 0)
            append_event(store, "L-1", "loan.underwriter_decision", decision="approve")
            assert _jobs(pq_dsn, "todo") == 0  # it ended: nothing to drive
            record = store.load("L-1")
            assert (record.status, record.custom["decision"]) == ("approved", "approve")
            caused = [e.type for e in store.events("L-1") if getattr(e, "emitted_by", None)]
            assert caused == ["loan.documents_requested", "loan.sent_to_underwriting"]
            assert store.verify("L-1").ok
