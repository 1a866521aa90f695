"""A worker's claim on SQLite (issue 32): in constant time whatever the backlog, and the
schema step that brought its queue order. The order and end-of-run tests run on every
lease store, SQLite included, in test_claims_backends.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentfsm import SQLiteEventStore
from agentfsm.runtime import submit
from agentfsm.stores.leases import SQLiteLeases
from agentfsm.stores.sqlite import SCHEMA_VERSION


class _Clock:
    """Event times a second apart, so the order runs became runnable is known."""

    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.at += timedelta(seconds=1)
        return self.at


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteEventStore]:
    """A SQLite store at `runs.db` (synchronous NORMAL: these tests are about order)."""
    with SQLiteEventStore(tmp_path / "runs.db", synchronous="NORMAL") as s:
        yield s


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


class TestSchemaFour:
    """A file of schema version 4 (before `status_at`) is upgraded in place on open."""

    def test_an_old_file_gains_the_queue_order_from_its_updated_at(self, tmp_path: Path) -> None:
        """Runs of a version-4 file are queued by their last event's time, and the file is
        at the current version with the ready index."""
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
        assert version == (str(SCHEMA_VERSION),)
        assert "agentfsm_runs_by_ready" in indexes
        leases = SQLiteLeases(path)
        try:
            assert [leases.claim("w", 30), leases.claim("w", 30)] == ["zeta", "alpha"]
        finally:
            leases.close()
