"""What only the PostgreSQL store does: migrations, indexes, its own guard rails."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="needs the postgres extra: pip install 'agentfsm[postgres]'")

import psycopg

from agentfsm.errors import StoreError, StoreInconsistentError
from agentfsm.reducers import replay
from agentfsm.stores import Attachment
from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore
from agentfsm.stores.sqlite import SCHEMA_VERSION
from agentfsm.testing import scripted_run
from agentfsm.testing._stores.scripted import tool_turn


def test_migrate_is_idempotent(postgres_dsn: str, pg_prefix: str) -> None:
    """Migrating twice, from two handles, keeps the data and the schema."""
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        store.append("r1", scripted_run("r1", 1), 0)
        store.migrate()
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        assert store.run_info("r1").version == 6


def test_migrate_upgrades_a_version_1_schema(postgres_dsn: str, pg_prefix: str) -> None:
    """A database migrated by the first agentfsm (no attachments table, no snapshot digests,
    no key record, schema version 1) keeps its runs and gains all three, and the current version."""
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        store.append("r1", scripted_run("r1", 1), 0)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # What version 1 left behind: the same tables without attachments.
        conn.execute(f"DROP TABLE {pg_prefix}attachments")  # type: ignore[arg-type]
        conn.execute(f"ALTER TABLE {pg_prefix}snapshots DROP COLUMN digest")  # type: ignore[arg-type]
        conn.execute(f"DELETE FROM {pg_prefix}meta WHERE key = 'integrity'")  # type: ignore[arg-type]
        conn.execute(f"UPDATE {pg_prefix}meta SET value = '1'")  # type: ignore[arg-type]
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        assert store.load("r1").dumps() == replay(scripted_run("r1", 1)).dumps()
        assert store.verify("r1").ok
        store.put_attachment("r1", "state", b"\x00saved", version=6)
        assert store.attachment("r1", "state") == Attachment("r1", "state", b"\x00saved", 6)
    with psycopg.connect(postgres_dsn) as conn:
        found = conn.execute(
            f"SELECT key, value FROM {pg_prefix}meta ORDER BY key"  # type: ignore[arg-type]
        ).fetchall()
    assert found == [("integrity", "unkeyed"), ("schema_version", str(SCHEMA_VERSION))]


def test_a_newer_schema_is_refused_and_left_alone(postgres_dsn: str, pg_prefix: str) -> None:
    """A database migrated by a newer agentfsm is refused, and its version is not rewritten."""
    PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {pg_prefix}meta SET value = %s WHERE key = 'schema_version'",  # type: ignore[arg-type]
            (str(SCHEMA_VERSION + 1),),
        )
    with pytest.raises(StoreError) as info:
        PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True)
    assert str(info.value) == (
        f"the database has agentfsm schema version {SCHEMA_VERSION + 1}; this agentfsm reads "
        f"version {SCHEMA_VERSION}: upgrade agentfsm"
    )
    with psycopg.connect(postgres_dsn) as conn:
        found = conn.execute(
            f"SELECT value FROM {pg_prefix}meta WHERE key = 'schema_version'"  # type: ignore[arg-type]
        ).fetchall()
    assert found == [(str(SCHEMA_VERSION + 1),)]


def test_without_migrate_the_error_says_what_to_do(postgres_dsn: str, pg_prefix: str) -> None:
    """Using a database that was never migrated asks for `migrate()`."""
    with (
        PostgresEventStore(postgres_dsn, table_prefix=pg_prefix) as store,
        pytest.raises(StoreError) as info,
    ):
        store.runs()
    assert str(info.value).startswith(
        f'the agentfsm tables are missing; call migrate() first (relation "{pg_prefix}runs" '
        "does not exist"
    )


def test_load_and_listing_are_served_by_indexes(postgres_dsn: str, pg_prefix: str) -> None:
    """The events key orders a run's log; the runs table has a (status, run_id) index, and
    (created) and (status, created) for the runs list by creation; an attachment is found by
    its (run_id, name) key."""
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        store.append("r1", scripted_run("r1", 0), 0)
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE %s ORDER BY 1",
            (pg_prefix + "%",),
        ).fetchall()
    defs = {name: definition.split(" USING ")[1] for name, definition in rows}
    assert defs == {
        f"{pg_prefix}attachments_pkey": "btree (run_id, name)",
        f"{pg_prefix}events_pkey": "btree (run_id, sequence)",
        f"{pg_prefix}meta_pkey": "btree (key)",
        f"{pg_prefix}runs_by_ready": (
            "btree (status, status_at, run_id) WHERE (strpos(run_id, '/'::text) = 0)"
        ),
        f"{pg_prefix}runs_by_created": "btree (created)",
        f"{pg_prefix}runs_by_status": "btree (status, run_id)",
        f"{pg_prefix}runs_by_status_created": "btree (status, created)",
        f"{pg_prefix}runs_pkey": "btree (run_id)",
        f"{pg_prefix}snapshots_pkey": "btree (run_id)",
    }


def test_a_row_written_behind_the_store_cannot_fork_the_run(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """An event inserted without moving the runs row: the next append says the store is
    inconsistent (never a race to retry), and writes nothing."""
    with PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True) as store:
        store.append("r1", scripted_run("r1", 0), 0)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {pg_prefix}events VALUES ('r1', 2, 'model.started', '{{}}', '')"  # type: ignore[arg-type]
            )
        with pytest.raises(StoreInconsistentError) as info:
            store.append("r1", tool_turn("r1", 2, "a"), 1)
        assert str(info.value) == (
            "run 'r1': store inconsistent: the runs table says version 1, but the log goes "
            "on to sequence 2; it was changed outside agentfsm (see `verify`)"
        )
        assert store.run_info("r1").version == 1


def test_the_async_store_needs_autocommit(postgres_dsn: str) -> None:
    """A connection in a transaction mode would leave appends uncommitted, so it is refused."""

    async def scenario() -> None:
        conn = await psycopg.AsyncConnection.connect(postgres_dsn)
        try:
            with pytest.raises(ValueError, match=r"^the connection must be in autocommit mode"):
                AsyncPostgresEventStore(conn)
        finally:
            await conn.close()

    asyncio.run(scenario())


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def test_a_page_of_runs_reads_a_page_of_rows_whatever_the_runs(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """A page by creation (of every run or of some statuses, a rare one too, deep in the
    list or not) and a page by status read at most a page of runs rows per status listed
    over 20,000 runs (EXPLAIN ANALYZE of the store's own statements), by index: never
    every row of a status, sorted, nor an index walked past other statuses' rows."""
    store = PostgresEventStore(postgres_dsn, table_prefix=pg_prefix, migrate=True)
    runs = f"{pg_prefix}runs"
    store._conn.execute(
        f"INSERT INTO {runs} (run_id, status, version, updated_at, created) "  # type: ignore[arg-type]
        "SELECT 'r' || lpad(i::text, 6, '0'), CASE WHEN i % 1000 = 7 THEN 'paused' "
        "WHEN i % 3 = 0 THEN 'running' WHEN i % 3 = 1 THEN 'completed' ELSE 'failed' END, "
        "1, '', i FROM generate_series(1, 20000) AS i"
    )
    store._conn.execute(f"ANALYZE {runs}")  # type: ignore[arg-type]
    some = ("completed", "running")
    pages = {
        "newest": ("newest", None, "r010900"),
        "newest of some": ("newest", some, None),
        "oldest of some": ("oldest", some, "r010500"),
        "newest paused": ("newest", ("paused",), "r019007"),
        "oldest paused and failed": ("oldest", ("failed", "paused"), "r000007"),
        "by status": ("status", some, "r010501"),
        "by status, paused": ("status", ("paused", "running"), "r003007"),
        "by status, all": ("status", None, "r010501"),
    }
    try:
        read = {}
        for name, (order, statuses, after) in pages.items():
            sql, args = store._sql.ordered_query(order, statuses, 50, after)
            plan = store._conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", args).fetchone()  # type: ignore[arg-type]
            assert plan is not None
            nodes = [n for n in _plan_nodes(plan[0][0]["Plan"]) if n.get("Relation Name") == runs]
            rows = sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in nodes)
            read[name] = (rows, sorted({n["Node Type"] for n in nodes}))
            assert len(store.runs(statuses, order=order, limit=50, after=after)) > 0, name  # type: ignore[arg-type]
    finally:
        store.close()
    bound = {name: 50 * len(statuses or "a") + 1 for name, (_, statuses, _) in pages.items()}
    assert {n: read[n][0] <= bound[n] for n in pages} == dict.fromkeys(pages, True), read
    assert {kind for _, kinds in read.values() for kind in kinds} <= {
        "Index Scan",
        "Index Only Scan",
    }, read
