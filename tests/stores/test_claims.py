"""A worker's claim on SQLite (issue 32): first come, first served, in constant time whatever
the backlog, and no lease row kept for a run that ended."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, Decision, Runner, SQLiteEventStore
from agentfsm.runtime import Worker, submit
from agentfsm.stores.leases import SQLiteLeases


class _Clock:
    """Event times a second apart, so the order runs became runnable is known."""

    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.at += timedelta(seconds=1)
        return self.at


def _answer() -> Agent:
    return Agent("a", lambda ctx: Decision.answer("done"), [])


def _lease_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM agentfsm_leases").fetchone()
    conn.close()
    return int(count)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteEventStore]:
    """A SQLite store at `runs.db` (synchronous NORMAL: these tests are about order)."""
    with SQLiteEventStore(tmp_path / "runs.db", synchronous="NORMAL") as s:
        yield s


class TestFirstComeFirstServed:
    """Runs are claimed in the order they became runnable, not in the order of their ids."""

    def test_ids_that_do_not_grow_are_claimed_in_arrival_order(
        self, store: SQLiteEventStore
    ) -> None:
        """Submitted as `zeta`, `mid`, `alpha`: claimed as `zeta`, `mid`, `alpha`."""
        clock = _Clock()
        for run_id in ("zeta", "mid", "alpha"):
            submit(store, run_id, "work", clock=clock)
        leases = SQLiteLeases(store.path)
        try:
            assert [leases.claim(f"w{i}", 30) for i in range(4)] == ["zeta", "mid", "alpha", None]
        finally:
            leases.close()

    def test_times_with_other_offsets_compare_as_moments(self, store: SQLiteEventStore) -> None:
        """A run submitted at 10:00+02:00 (08:00 UTC) is served before one at 09:00 UTC,
        though its text sorts after."""
        plus_two = timezone_clock(datetime(2026, 1, 1, 10, tzinfo=_offset(2)))
        utc = timezone_clock(datetime(2026, 1, 1, 9, tzinfo=UTC))
        submit(store, "later", "work", clock=utc)
        submit(store, "earlier", "work", clock=plus_two)
        leases = SQLiteLeases(store.path)
        try:
            assert leases.claim("w", 30) == "earlier"
        finally:
            leases.close()

    def test_a_due_wake_up_comes_before_the_queue(self, store: SQLiteEventStore) -> None:
        """A run whose wake-up is due is claimed before runs that waited in the queue."""
        clock = _Clock()
        for run_id in ("first", "second"):
            submit(store, run_id, "work", clock=clock)
        leases = SQLiteLeases(store.path)
        try:
            leases.wake(leases._conn, "second", 0.0)
            assert leases.claim("w", 30) == "second"
        finally:
            leases.close()


def timezone_clock(at: datetime) -> _Clock:
    clock = _Clock()
    clock.at = at - timedelta(seconds=1)
    return clock


def _offset(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


class TestConstantTime:
    """The claim reads the head of an index, never the whole backlog."""

    def test_a_claim_does_the_same_work_at_100_and_at_2000_runnable(
        self, store: SQLiteEventStore
    ) -> None:
        """SQLite's virtual-machine steps for one claim (counted by a progress handler, so
        deterministic): the same with 2,000 runs waiting as with 100 (it was one step per
        candidate: ORDER BY run_id over every runnable run)."""

        def steps(leases: SQLiteLeases) -> int:
            counted = [0]

            def count() -> int:
                counted[0] += 1
                return 0

            leases._conn.set_progress_handler(count, 1)
            try:
                assert leases.claim("w", 30) is not None
            finally:
                leases._conn.set_progress_handler(None, 1)
            return counted[0]

        for i in range(100):
            submit(store, f"r{i:05d}", "work")
        leases = SQLiteLeases(store.path)
        try:
            few = steps(leases)
            for i in range(100, 2000):
                submit(store, f"r{i:05d}", "work")
            many = steps(leases)
        finally:
            leases.close()
        assert many <= few * 1.1, (few, many)


class TestEndedRunsLeaveNoLeaseRow:
    """A run that ends gives its lease row up; the rows are those of runs still to drive."""

    def test_a_worker_leaves_no_row_for_the_runs_it_finished(self, store: SQLiteEventStore) -> None:
        """Three runs drained to their end by a Worker: the leases table is empty."""
        for run_id in ("a", "b", "c"):
            submit(store, run_id, "work")
        leases = SQLiteLeases(store.path)
        try:
            results = Worker(Runner(store, _answer()), leases, worker_id="w").drain()
        finally:
            leases.close()
        assert [r.status for r in results] == ["completed"] * 3
        assert _lease_rows(Path(store.path)) == 0

    def test_a_runner_leaves_no_row_for_a_run_it_finished(self, store: SQLiteEventStore) -> None:
        """A Runner's own lease (take, then free) of a run it drove to the end is gone."""
        Runner(store, _answer()).run("r1", "work")
        assert _lease_rows(Path(store.path)) == 0

    def test_a_waiting_run_keeps_its_row(self, store: SQLiteEventStore) -> None:
        """A run released still runnable (its hold) keeps the row that holds it back."""
        submit(store, "r1", "work")
        leases = SQLiteLeases(store.path)
        try:
            assert leases.claim("w", 30) == "r1"
            leases.release("r1", "w", retry_after=60)
            assert leases.claim("w", 30) is None
        finally:
            leases.close()
        assert _lease_rows(Path(store.path)) == 1


class TestSchemaFour:
    """A file of schema version 4 (before `status_at`) is upgraded in place on open."""

    def test_an_old_file_gains_the_queue_order_from_its_updated_at(self, tmp_path: Path) -> None:
        """Runs of a version-4 file are queued by their last event's time, and the file is
        at version 5 with the ready index."""
        path = tmp_path / "runs.db"
        clock = _Clock()
        with SQLiteEventStore(path) as store:
            for run_id in ("zeta", "alpha"):
                submit(store, run_id, "work", clock=clock)
        with sqlite3.connect(path) as conn:  # what agentfsm wrote before version 5
            conn.execute("DROP INDEX agentfsm_runs_by_ready")
            conn.execute("ALTER TABLE agentfsm_runs DROP COLUMN status_at")
            conn.execute("UPDATE agentfsm_meta SET value = '4' WHERE key = 'schema_version'")
        conn.close()
        SQLiteEventStore(path).close()
        with sqlite3.connect(path) as conn:
            version = conn.execute(
                "SELECT value FROM agentfsm_meta WHERE key = 'schema_version'"
            ).fetchone()
            indexes = {r[1] for r in conn.execute("PRAGMA index_list(agentfsm_runs)")}
        conn.close()
        assert version == ("5",)
        assert "agentfsm_runs_by_ready" in indexes
        leases = SQLiteLeases(path)
        try:
            assert [leases.claim("w", 30), leases.claim("w", 30)] == ["zeta", "alpha"]
        finally:
            leases.close()
