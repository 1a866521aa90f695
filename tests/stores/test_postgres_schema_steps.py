"""agentfsm's own PostgreSQL schema, upgraded from each version it had, one test per step.

1: runs, events, snapshots. 2: + attachments. 3: + snapshots.digest. 4: + the key record in
`meta`. 5: + runs.status_at and the claim's index. 6: + runs.created, its sequence and the runs
list's indexes. The lease table gained its holder's columns, then the timers' (wake_at, resume_at,
resume_version). A database left at any of these is upgraded in place by `migrate()`, its
runs intact and verifiable, and ends at the current schema.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("psycopg", reason="needs the postgres extra: pip install 'agentfsm[postgres]'")

import psycopg

from agentfsm.reducers import replay
from agentfsm.runtime import submit
from agentfsm.runtime.timers import install_timers
from agentfsm.stores import Attachment
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.stores.postgres_leases import PostgresLeases
from agentfsm.stores.sqlite import SCHEMA_VERSION
from agentfsm.testing import scripted_run

#: What each older version lacks, as statements that take a current schema back to it.
BACK_TO = {
    1: ["DROP TABLE {p}attachments", "ALTER TABLE {p}snapshots DROP COLUMN digest"],
    2: ["ALTER TABLE {p}snapshots DROP COLUMN digest"],
    3: [],
}


def _columns(conn: psycopg.Connection, table: str) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (table,)
    ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.parametrize("version", sorted(BACK_TO))
def test_a_schema_at_each_older_version_is_upgraded(
    postgres_dsn: str, pg_prefix: str, version: int
) -> None:
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        store.append("r1", scripted_run("r1", 1), 0)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for statement in BACK_TO[version]:
            conn.execute(statement.format(p=pg_prefix))  # type: ignore[arg-type]
        conn.execute(f"DELETE FROM {pg_prefix}meta WHERE key = 'integrity'")  # type: ignore[arg-type]
        conn.execute(
            f"UPDATE {pg_prefix}meta SET value = %s WHERE key = 'schema_version'",  # type: ignore[arg-type]
            (str(version),),
        )
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        assert store.load("r1").dumps() == replay(scripted_run("r1", 1)).dumps()
        assert store.verify("r1").ok
        store.put_attachment("r1", "state", b"saved", version=6)
        assert store.attachment("r1", "state") == Attachment("r1", "state", b"saved", 6)
    with psycopg.connect(postgres_dsn) as conn:
        meta = conn.execute(
            f"SELECT key, value FROM {pg_prefix}meta ORDER BY key"  # type: ignore[arg-type]
        ).fetchall()
        assert "digest" in _columns(conn, f"{pg_prefix}snapshots")
    assert meta == [("integrity", "unkeyed"), ("schema_version", str(SCHEMA_VERSION))]


@pytest.mark.parametrize("had", ["first", "holders"])
def test_an_older_lease_table_gains_the_holders_and_timers_columns(
    postgres_dsn: str, pg_prefix: str, had: str
) -> None:
    """The first lease table (run, worker, expiry), or one with holders and no timers: its
    rows stay, and the timers work on it once migrated."""
    store = PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True)
    leases_table = f"{pg_prefix}leases"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {leases_table}")  # type: ignore[arg-type]
        columns = "run_id text PRIMARY KEY, worker_id text, expires_at timestamptz NOT NULL"
        if had == "holders":
            columns += (
                ", host text, pid integer, process text, claimed_at timestamptz, "
                "heartbeat_at timestamptz"
            )
        conn.execute(f"CREATE TABLE {leases_table} ({columns})")  # type: ignore[arg-type]
        conn.execute(
            f"INSERT INTO {leases_table} (run_id, worker_id, expires_at) "  # type: ignore[arg-type]
            "VALUES ('old', NULL, now())"
        )
    leases = PostgresLeases(postgres_dsn, table_prefix=pg_prefix)
    try:
        with psycopg.connect(postgres_dsn) as conn:
            found = _columns(conn, leases_table)
            kept = conn.execute(f"SELECT run_id FROM {leases_table}").fetchall()  # type: ignore[arg-type]
        assert {"host", "pid", "claimed_at", "wake_at", "resume_at", "resume_version"} <= found
        assert kept == [("old",)]
        install_timers(store, leases)
        submit(store, "r1")  # its wake-up for now, on the upgraded row
        wake_at, _, _ = leases.timers("r1")
        assert wake_at is not None
        assert abs(wake_at - time.time()) < 30
        assert leases.claim("w1", 5.0) == "r1"
    finally:
        leases.close()
        store.close()


def test_a_version_4_database_gains_the_claim_queue_from_its_updated_at(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """Version 5 adds runs.status_at and the claim's index: a version-4 database (neither)
    has its runs queued by their last event's time, so they are claimed in arrival order
    (`zeta` before `alpha`), not by id, and is at the current version with the index."""
    from datetime import UTC, datetime, timedelta

    times = iter(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i) for i in range(100))
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        for run_id in ("zeta", "alpha"):
            submit(store, run_id, "work", clock=lambda: next(times))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # what version 4 wrote
        conn.execute(f"DROP INDEX {pg_prefix}runs_by_ready")  # type: ignore[arg-type]
        conn.execute(f"ALTER TABLE {pg_prefix}runs DROP COLUMN status_at")  # type: ignore[arg-type]
        conn.execute(
            f"UPDATE {pg_prefix}meta SET value = '4' WHERE key = 'schema_version'"  # type: ignore[arg-type]
        )
    PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True).close()
    with psycopg.connect(postgres_dsn) as conn:
        version = conn.execute(
            f"SELECT value FROM {pg_prefix}meta WHERE key = 'schema_version'"  # type: ignore[arg-type]
        ).fetchone()
        queued = conn.execute(
            f"SELECT run_id, status_at FROM {pg_prefix}runs ORDER BY run_id"  # type: ignore[arg-type]
        ).fetchall()
        index = conn.execute("SELECT to_regclass(%s)", (f"{pg_prefix}runs_by_ready",)).fetchone()
    assert version == (str(SCHEMA_VERSION),)
    assert index == (f"{pg_prefix}runs_by_ready",)
    assert [(r, at.isoformat()) for r, at in queued] == [
        ("alpha", "2026-01-01T00:00:01+00:00"),
        ("zeta", "2026-01-01T00:00:00+00:00"),
    ]
    leases = PostgresLeases(postgres_dsn, table_prefix=pg_prefix)
    try:
        assert [leases.claim("w", 30), leases.claim("w", 30)] == ["zeta", "alpha"]
    finally:
        leases.close()


def test_a_version_5_database_numbers_its_runs_by_their_first_event(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """Version 6 adds runs.created, its sequence and indexes: a version-5 database (none of
    them) has its runs numbered by their first event's time (`zeta`, written first but
    begun later, is the newer), and a run made after the upgrade takes the next number."""
    from agentfsm.events.codec import make_event

    times = {"zeta": "2026-01-01T00:00:10+00:00", "alpha": "2026-01-01T00:00:00+00:00"}
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        for run_id, at in times.items():
            started = make_event("run.started", run_id=run_id, sequence=1, occurred_at=at)
            store.append(run_id, [started], 0)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # what version 5 wrote
        for statement in (
            "DROP INDEX {p}runs_by_created",
            "DROP INDEX {p}runs_by_status_created",
            "ALTER TABLE {p}runs DROP COLUMN created",  # its sequence goes with it
            "UPDATE {p}meta SET value = '5' WHERE key = 'schema_version'",
        ):
            conn.execute(statement.format(p=pg_prefix))  # type: ignore[arg-type]
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        assert [r.run_id for r in store.runs(order="newest")] == ["zeta", "alpha"]
        store.append("beta", scripted_run("beta", 0), 0)
        assert [r.run_id for r in store.runs(order="newest")] == ["beta", "zeta", "alpha"]
    with psycopg.connect(postgres_dsn) as conn:
        numbers = conn.execute(
            f"SELECT run_id, created FROM {pg_prefix}runs ORDER BY created"  # type: ignore[arg-type]
        ).fetchall()
        version = conn.execute(
            f"SELECT value FROM {pg_prefix}meta WHERE key = 'schema_version'"  # type: ignore[arg-type]
        ).fetchone()
    assert (numbers, version) == ([("alpha", 1), ("zeta", 2), ("beta", 3)], ("6",))
