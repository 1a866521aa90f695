"""Real processes against real storage: racing writers, and writers killed mid-append.

Counts, chosen to keep this file near 30 s on two cores: 4 writers x 25 appends racing on
one run per backend; 250 SIGKILLed writers in all (SQLite: 100 at synchronous=FULL, 50 at
NORMAL; PostgreSQL: 100), each at a seeded random moment within its first 30 ms.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from agentfsm.stores import SQLiteEventStore
from agentfsm.testing import crash_trials, race_appends


class TestRacingWriters:
    """Writers racing on one run with optimistic retries lose nothing and duplicate nothing."""

    def test_sqlite(self, tmp_path: Path) -> None:
        """Four processes on one SQLite file: every acknowledged turn is stored exactly once."""
        factory = functools.partial(SQLiteEventStore, tmp_path / "runs.db")
        report = race_appends(factory, tmp_path, run_id="race", writers=4, appends=25)
        print(f"sqlite race: conflicts per writer {report.conflicts}")
        assert report.problems == ()
        assert (report.final_version, len(report.conflicts)) == (501, 4)

    def test_postgres(self, tmp_path: Path, postgres_dsn: str, pg_prefix: str) -> None:
        """Four processes on one PostgreSQL run: every acknowledged turn is stored exactly once."""
        from agentfsm.stores.postgres import PostgresEventStore

        PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True).close()
        factory = functools.partial(PostgresEventStore, postgres_dsn, table_prefix=pg_prefix)
        report = race_appends(factory, tmp_path, run_id="race", writers=4, appends=25)
        print(f"postgres race: conflicts per writer {report.conflicts}")
        assert report.problems == ()
        assert (report.final_version, len(report.conflicts)) == (501, 4)


class TestKilledWriters:
    """A writer killed at any moment leaves every acknowledged batch and no partial one."""

    @pytest.mark.parametrize(("synchronous", "trials"), [("FULL", 100), ("NORMAL", 50)])
    def test_sqlite(self, tmp_path: Path, synchronous: str, trials: int) -> None:
        """SIGKILL during SQLite appends: acknowledged batches stay, partial ones never appear."""
        factory = functools.partial(SQLiteEventStore, tmp_path / "runs.db", synchronous=synchronous)
        report = crash_trials(factory, tmp_path, trials=trials, seed=7)
        print(f"sqlite {synchronous} crashes: {report}")
        assert report.problems == ()
        assert report.acknowledged > 0

    def test_postgres(self, tmp_path: Path, postgres_dsn: str, pg_prefix: str) -> None:
        """SIGKILL during PostgreSQL appends: acknowledged batches stay, no partial one appears."""
        from agentfsm.stores.postgres import PostgresEventStore

        PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True).close()
        factory = functools.partial(PostgresEventStore, postgres_dsn, table_prefix=pg_prefix)
        report = crash_trials(factory, tmp_path, trials=100, seed=11)
        print(f"postgres crashes: {report}")
        assert report.problems == ()
        assert report.acknowledged > 0
