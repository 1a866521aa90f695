"""Procrastinate's schema in the engine's database: created once, upgraded by its migrations.

Procrastinate ships its schema (`schema.sql`, the current one) and the SQL migrations from
every release to the next (`sql/migrations/*.sql`, named `MM.mm.pp_NN_[pre|post]_what`,
applied in name order) but keeps no record of which were applied. The engine keeps that
record in the store's `meta` table (key `procrastinate_migration`: the last migration the
schema includes), so that after `pip install -U procrastinate` the pending ones are known:

- a database without Procrastinate's tables gets `schema.sql` and the newest migration's
  name;
- a database whose tables predate the record (made by an agentfsm whose `migrate()` did not
  keep one) is taken to be at `BASELINE`, the schema of Procrastinate 3.9 and 3.10 (agentfsm
  pinned `procrastinate>=3.10`);
- `upgrade` applies the pending migrations in order, in one transaction. A `pre` migration
  is safe while workers of the old version run; a `post` one only once none does, so it is
  applied only when asked (`post=True`), and no later migration is applied before it.

A worker refuses to start while a migration it needs (any but a trailing run of `post`
ones) is pending, naming the command that applies them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import psycopg
from procrastinate.schema import SchemaManager

__all__ = ["BASELINE", "KEY", "Migrations", "migrations", "state"]

#: The `meta` key naming the last Procrastinate migration the schema includes.
KEY = "procrastinate_migration"
#: The schema of Procrastinate 3.9-3.10 (its `schema.sql` includes every migration up to
#: this one): where a database made before the record was kept is taken to be.
BASELINE = "03.04.00_50_post_add_retry_failed_job_procedure"


@attrs.frozen
class Migrations:
    """Where a database's Procrastinate schema stands.

    Attributes:
        created: Procrastinate's tables exist.
        at: the last migration the schema includes (None: no tables).
        pending: the migrations after `at`, in order.
    """

    created: bool
    at: str | None
    pending: tuple[str, ...]

    @property
    def needed(self) -> tuple[str, ...]:
        """The pending migrations a worker of this version needs: all but the trailing
        `post` ones (those wait until no older worker runs)."""
        pending = list(self.pending)
        while pending and is_post(pending[-1]):
            pending.pop()
        return tuple(pending)


def migrations() -> list[tuple[str, Path]]:
    """The installed Procrastinate's migrations, in the order they apply."""
    folder = Path(SchemaManager.get_migrations_path())
    return sorted((p.stem, p) for p in folder.glob("*.sql"))


def newest() -> str:
    """The last migration the installed `schema.sql` includes."""
    return migrations()[-1][0]


def state(conn: psycopg.Connection[Any], meta: str) -> Migrations:
    """Where the database on `conn` stands (its `meta` table given by name)."""
    found = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
    if found is None or found[0] is None:
        return Migrations(created=False, at=None, pending=())
    row = conn.execute(f"SELECT value FROM {meta} WHERE key = %s", (KEY,)).fetchone()
    at = row[0] if row is not None else BASELINE
    pending = tuple(name for name, _ in migrations() if name > at)
    return Migrations(created=True, at=at, pending=pending)


def upgrade(conn: psycopg.Connection[Any], meta: str, *, post: bool) -> list[str]:
    """Create or upgrade the schema on `conn` (in the caller's transaction, which holds the
    engine's advisory lock); the migrations applied."""
    now = state(conn, meta)
    if not now.created:
        conn.execute(SchemaManager.get_schema())
        _record(conn, meta, newest())
        return []
    applied: list[str] = []
    paths = dict(migrations())
    for name in now.pending:
        if is_post(name) and not post:
            break  # and nothing after it: migrations apply in order
        conn.execute(paths[name].read_text(encoding="utf-8"))
        applied.append(name)
    if applied or now.at == BASELINE:
        _record(conn, meta, applied[-1] if applied else now.at or BASELINE)
    return applied


def _record(conn: psycopg.Connection[Any], meta: str, name: str) -> None:
    conn.execute(
        f"INSERT INTO {meta} (key, value) VALUES (%s, %s) ON CONFLICT (key) "
        "DO UPDATE SET value = EXCLUDED.value",
        (KEY, name),
    )


def is_post(name: str) -> bool:
    """A `post` migration: applied only once no worker of the older version runs."""
    return "_post_" in name
