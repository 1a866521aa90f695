"""Upgrading Procrastinate under the engine: its pending migrations, from the oldest schema
supported (Procrastinate 3.0.2's, the first 3.x to run on PostgreSQL 15 here:
`tests/fixtures/procrastinate/schema-3.0.2.sql`, from its repository at tag 3.0.2), end with the schema a fresh database gets; a worker
refuses a schema behind, naming the command; runs go on after the upgrade.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentfsm.runtime import _pq_schema as schema
from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import ProcrastinateEngine, SchemaBehindError
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime import _pq_app
from tests.runtime.test_cli_worker import _cli, url_of

OLDEST = Path(__file__).resolve().parents[1] / "fixtures" / "procrastinate" / "schema-3.0.2.sql"
#: The last migration Procrastinate 3.0.2's schema includes.
OLDEST_AT = "03.00.00_50_post_cancel_notification"


@pytest.fixture
def fresh_dsn(postgres_dsn: str) -> Iterator[str]:
    with _pq_app.fresh_database(postgres_dsn) as dsn:
        yield dsn


def _engine(dsn: str, tmp_path: Path) -> ProcrastinateEngine:
    return _pq_app.engine(dsn, "agentfsm", str(tmp_path / "ledger.db"))


def _at_3_0_2(dsn: str) -> None:
    """A database as agentfsm would have left it under Procrastinate 3.0.2."""
    PostgresEventStore(dsn, migrate=True).close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(OLDEST.read_text())
        conn.execute(
            "INSERT INTO agentfsm_meta VALUES (%s, %s), ('engine', 'procrastinate:agentfsm')",
            (schema.KEY, OLDEST_AT),
        )


def _shape(dsn: str) -> dict[str, Any]:
    """Procrastinate's schema as the catalog has it: functions (with their bodies), columns,
    indexes, triggers, enum values."""

    def norm(text: str) -> str:
        return re.sub(r"\s+", " ", text).strip()

    with psycopg.connect(dsn) as conn:
        functions = conn.execute(
            "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', "
            "pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
            "AND p.proname LIKE 'procrastinate%'"
        ).fetchall()
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, udt_name, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_name LIKE 'procrastinate%'"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'procrastinate%'"
        ).fetchall()
        triggers = conn.execute(
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgname LIKE 'procrastinate%'"
        ).fetchall()
        enums = conn.execute(
            "SELECT t.typname, array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e "
            "JOIN pg_type t ON t.oid = e.enumtypid WHERE t.typname LIKE 'procrastinate%' "
            "GROUP BY t.typname"
        ).fetchall()
    return {
        "functions": {name: norm(body) for name, body in functions},
        "columns": sorted(columns, key=repr),
        "indexes": dict(indexes),
        "triggers": dict(triggers),
        "enums": dict(enums),
    }


def test_pending_migrations_bring_the_oldest_schema_to_a_fresh_ones(
    pq_dsn: str, fresh_dsn: str, tmp_path: Path
) -> None:
    _at_3_0_2(pq_dsn)
    engine = _engine(pq_dsn, tmp_path)
    assert engine.schema().at == OLDEST_AT
    with pytest.raises(SchemaBehindError, match=r"stop every older worker, then run `agentfsm "
                       r"setup --store URL --queue agentfsm --post`"):  # fmt: skip
        engine.check_schema()
    upgraded = _cli("setup", "--store", url_of(pq_dsn), "--post")
    assert upgraded.returncode == 0, upgraded.stderr
    applied = [
        line.split()[1] for line in upgraded.stdout.splitlines() if line.startswith("applied")
    ]
    assert applied == [name for name, _ in schema.migrations() if name > OLDEST_AT]
    assert len(applied) == 7  # 3.1 to 3.4, pre and post
    engine.check_schema()
    assert engine.schema().pending == ()
    _engine(fresh_dsn, tmp_path).migrate()
    assert _shape(pq_dsn) == _shape(fresh_dsn)
    # Idempotent, and the upgraded database serves runs.
    assert engine.migrate(post=True) == []
    with engine.store() as store:
        submit(store, "r1", "plain")
    asyncio.run(engine.aserve(wait=False, install_signal_handlers=False))
    with engine.store() as store:
        assert store.load("r1").status == "completed"


def test_post_migrations_wait_for_post(pq_dsn: str, tmp_path: Path) -> None:
    """Without `post`, an upgrade stops before the first `post` migration, and applies
    nothing after it (they apply in order)."""
    _at_3_0_2(pq_dsn)
    engine = _engine(pq_dsn, tmp_path)
    with psycopg.connect(pq_dsn, autocommit=True) as conn:  # 3.0.2's post one is applied
        conn.execute(
            "UPDATE agentfsm_meta SET value = %s WHERE key = %s",
            ("03.01.00_01_pre_add_heartbeat", schema.KEY),
        )
    with pytest.raises(SchemaBehindError):
        engine.check_schema()
    assert engine.migrate() == []  # the next one, 03.01.00_50, is a post migration
    assert engine.schema().at == "03.01.00_01_pre_add_heartbeat"


def test_a_schema_made_before_the_record_is_taken_at_the_baseline(
    pq_dsn: str, tmp_path: Path
) -> None:
    """A database an older agentfsm set up (no record) is at Procrastinate 3.10's schema."""
    engine = _engine(pq_dsn, tmp_path)
    engine.migrate()
    with psycopg.connect(pq_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM agentfsm_meta WHERE key = %s", (schema.KEY,))
    assert engine.schema().at == schema.BASELINE
    engine.check_schema()
    assert engine.migrate() == []
    with PostgresEventStore(pq_dsn) as store:
        assert store.meta(schema.KEY) == schema.BASELINE
