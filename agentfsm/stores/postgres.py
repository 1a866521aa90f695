"""The PostgreSQL store: many workers on many machines sharing one database (psycopg 3).

Needs the `postgres` extra: `pip install 'agentfsm[postgres]'`.

An append is *one* SQL statement, so one round trip and one transaction in autocommit
mode: a data-modifying CTE moves the runs row from `expected_version` (or inserts it for
a new run), and the events and the snapshot are inserted only from the row it returned.
If another writer got there first, the `UPDATE ... WHERE version = expected` waits for its
commit, then matches nothing, and nothing is written: the caller gets
`ConcurrencyConflictError`. The primary key `(run_id, sequence)` refuses a fork even from a
writer that bypasses this class.

Indexes: the events primary key serves `load` and `events` (one range scan per run); the
`(status, run_id)` index on the runs table serves `runs(status=...)` with keyset paging, so
neither reads other runs' events, however many millions there are.

Call `migrate()` once (it is idempotent and takes an advisory lock, so several workers may
call it at start-up). The key record (`_keys.py`) is checked as a handle opens (in
`migrate()`, or in the constructor once the tables exist; `AsyncPostgresEventStore` in
`connect()`), and every append's statement moves the runs row only while the store's record
is the handle's, so even a handle built directly on a connection never writes under
another key.

`after_append`: a callable the store calls inside the append's transaction, on the same
connection, once the rows are written (the record after the batch and the batch's event
types); what it writes commits or rolls back with the events. A job queue in the same
database uses it to enqueue the wake-up an append causes, so no append that makes a run
runnable is ever left without one (`agentfsm.runtime.procrastinate`). The store knows
nothing of what the hook does. A hook may say up front whether a batch needs it: if it has
a `wants(record, types)` method that returns False, the append is the one autocommit
statement and the hook is not called (most appends: a driver's own events wake nothing);
otherwise the append is a short transaction of a few round trips.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import make_conninfo
except ImportError as exc:
    raise missing_extra("PostgresEventStore", "postgres", exc) from exc


from agentfsm.record import RunRecord
from agentfsm.stores._append import PreparedAppend
from agentfsm.stores._async_store import AsyncStoreShell
from agentfsm.stores._checks import (
    conflict,
)
from agentfsm.stores._postgres_sql import (
    PAGE,
    Sql,
    missing_tables,
    newer_schema,
    planned_rows,
    stored_event,
)
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.stores.lease import AsyncLeaseRows, LeaseRows
from agentfsm.stores.postgres_leases import AsyncPostgresLeases, PostgresLeases
from agentfsm.stores.rows import Attachment, StoredEvent, StoredSnapshot
from agentfsm.stores.runs import RunCount, RunInfo, RunOrder
from agentfsm.stores.sqlite import SCHEMA_VERSION

__all__ = ["AfterAppend", "AsyncAfterAppend", "AsyncPostgresEventStore", "PostgresEventStore"]

#: Called in an append's transaction: (connection, record after the batch, event types).
AfterAppend = Callable[["psycopg.Connection[Any]", RunRecord, tuple[str, ...]], None]
#: `AfterAppend` for `AsyncPostgresEventStore`.
AsyncAfterAppend = Callable[
    ["psycopg.AsyncConnection[Any]", RunRecord, tuple[str, ...]], Awaitable[None]
]


def _hook_for(hook: Any, prepared: PreparedAppend) -> tuple[str, ...] | None:
    """The batch's event types if `hook` is to be called for it (in a transaction), else
    None: no hook, or one whose `wants(record, types)` says this batch needs nothing."""
    if hook is None:
        return None
    types = tuple(r.type for r in prepared.rows)
    wants = getattr(hook, "wants", None)
    if wants is not None and not wants(prepared.record, types):
        return None
    return types


class PostgresEventStore(EventStore):
    """An `EventStore` in PostgreSQL, over one autocommit psycopg connection.

    Args:
        conninfo: a libpq connection string or URL.
        options: reducer, snapshot interval and cache size.
        table_prefix: prefix of the table names.
        migrate: create the schema now (idempotent).
        after_append: called in each append's transaction (see the module docstring).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        options: StoreOptions | None = None,
        table_prefix: str = "agentfsm_",
        migrate: bool = False,
        after_append: AfterAppend | None = None,
    ) -> None:
        super().__init__(options)
        self._sql = Sql(table_prefix)
        self._prefix = table_prefix
        self.after_append = after_append
        self._conninfo = conninfo
        self._leases: PostgresLeases | None = None
        self._conn = psycopg.connect(conninfo, autocommit=True)
        try:
            if migrate:
                self.migrate()
            elif self._has_meta():
                self._open_key_check()  # else migrate() records the key when it makes the tables
        except BaseException:
            self._conn.close()  # the caller never gets the handle to close it
            raise

    def migrate(self) -> None:
        """Create the tables and indexes if missing, or upgrade an older schema in place
        (idempotent, safe to race)."""
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._sql.lock_key,))
            self._conn.execute(self._sql.create_meta)
            found = self._conn.execute(self._sql.schema_version).fetchone()
            if found is not None and int(found[0]) > SCHEMA_VERSION:
                raise newer_schema(found[0])
            lacks = self._conn.execute(self._sql.lacks_status_at, self._sql.runs_table)
            fill = bool(lacks.fetchone()[0])  # type: ignore[index]
            lacks = self._conn.execute(self._sql.lacks_created, self._sql.runs_table)
            number = bool(lacks.fetchone()[0])  # type: ignore[index]
            for statement in self._sql.schema:
                self._conn.execute(statement)
            if fill:
                self._conn.execute(self._sql.fill_status_at)
            for statement in self._sql.number_runs if number else ():
                self._conn.execute(statement)
        self._open_key_check()

    @property
    def table_prefix(self) -> str:
        """The prefix of this store's table names."""
        return self._prefix

    def _has_meta(self) -> bool:
        found = self._conn.execute("SELECT to_regclass(%s)", (self._sql.meta,)).fetchone()
        return found is not None and found[0] is not None

    def close(self) -> None:
        """Close the connection (and the leases' own)."""
        if self._leases is not None:
            self._leases.close()
        self._conn.close()

    def _lease_rows(self) -> LeaseRows:
        # The `leases` table the `Worker`s' `PostgresLeases` claim from, on its own connection.
        if self._leases is None:
            self._leases = PostgresLeases(
                self._conninfo,
                table_prefix=self._prefix,
                runnable=sorted(self.reducer.table.runnable_states),
                ended=sorted(self.reducer.table.terminal_states),
            )
        return self._leases

    def meta(self, key: str) -> str | None:
        """A value of the store's `meta` table (e.g. `engine`: what serves the database's
        runs, recorded by that engine's `migrate()`), or None."""
        row = self._query(self._sql.read_meta, (key,)).fetchone()
        return None if row is None else str(row[0])

    def _query(self, sql: str, args: Sequence[Any] | dict[str, Any]) -> psycopg.Cursor[Any]:
        try:
            return self._conn.execute(sql, args)
        except pg_errors.UndefinedTable as exc:
            raise missing_tables(exc) from None

    def _read_run(self, run_id: str) -> RunInfo | None:
        row = self._query(self._sql.read_run, (run_id,)).fetchone()
        return None if row is None else RunInfo(run_id, row[0], row[1], row[2])

    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        while True:
            page = self._query(self._sql.read_rows, (run_id, after, PAGE)).fetchall()
            for r in page:
                yield stored_event(r)
            if len(page) < PAGE:
                return
            after = page[-1][0]

    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        row = self._query(self._sql.read_snapshot, (run_id,)).fetchone()
        return None if row is None else StoredSnapshot(row[0], row[1], row[2], row[3])

    def _write(self, prepared: PreparedAppend) -> None:
        sql, params = self._sql.write(prepared, self.options.integrity.record)
        hook = self.after_append
        types = _hook_for(hook, prepared)
        try:
            if types is None:
                written = self._query(sql, params).rowcount
            else:
                assert hook is not None
                with self._conn.transaction():
                    written = self._query(sql, params).rowcount
                    if written == len(prepared.rows):
                        hook(self._conn, prepared.record, types)
        except pg_errors.UniqueViolation:
            written = 0
        if written != len(prepared.rows):
            refused = self._key_refusal()
            if refused is not None:
                raise refused
            run_id = prepared.run_id
            found = self._query(self._sql.stored_version, (run_id, run_id)).fetchone()
            actual = int(found[0]) if found is not None and found[0] is not None else 0
            raise conflict(run_id, prepared.expected_version, actual)

    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        sql, args = self._sql.runs_query(statuses, limit, after)
        return [RunInfo(*r) for r in self._query(sql, args).fetchall()]

    def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        sql, args = self._sql.ordered_query(order, statuses, limit, after)
        return [RunInfo(*r) for r in self._query(sql, args).fetchall()]

    def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        count, args, estimate, estimate_args = self._sql.count_query(statuses, up_to)
        counted = int(self._query(count, args).fetchone()[0])  # type: ignore[index]
        if counted <= up_to:
            return RunCount.bounded(counted, up_to)
        plan = self._query(estimate, estimate_args).fetchone()
        return RunCount.bounded(counted, up_to, planned_rows(plan[0] if plan else None))

    def _read_meta(self, key: str) -> str | None:
        return self.meta(key)

    def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        with self._conn.transaction():
            if expected is None:
                done = self._query(self._sql.insert_meta, (key, value)).rowcount == 1
            else:
                done = self._query(self._sql.swap_meta, (value, key, expected)).rowcount == 1
            if done:
                self._conn.execute(self._sql.drain_writes)
        return done

    def _rewrite_run(
        self,
        run_id: str,
        version: int,
        hashes: Sequence[tuple[int, str]],
        snapshot: StoredSnapshot | None,
        record: str,
    ) -> bool:
        lock = {"run_id": run_id, "version": version, "key": record}
        with self._conn.transaction():
            if self._query(self._sql.rewrite_lock, lock).fetchone() is None:
                return False
            self._query(
                self._sql.rewrite_hashes,
                {
                    "run_id": run_id,
                    "sequences": [sequence for sequence, _ in hashes],
                    "hashes": [link for _, link in hashes],
                },
            )
            if snapshot is None:
                self._query(self._sql.delete_snapshot, (run_id,))
            else:
                s = snapshot
                self._query(
                    self._sql.put_snapshot, (run_id, s.sequence, s.event_hash, s.data, s.digest)
                )
        return True

    def _write_attachment(self, attachment: Attachment) -> None:
        a = attachment
        self._query(self._sql.put_attachment, (a.run_id, a.name, a.version, a.data))

    def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        row = self._query(self._sql.read_attachment, (run_id, name)).fetchone()
        return None if row is None else Attachment(run_id, name, row[1], row[0])

    def _delete_attachment(self, run_id: str, name: str) -> bool:
        return self._query(self._sql.delete_attachment, (run_id, name)).rowcount == 1


class AsyncPostgresEventStore(AsyncStoreShell):
    """The PostgreSQL store over psycopg's `AsyncConnection`: natively async.

    Open it with `await AsyncPostgresEventStore.connect(conninfo)`. The same rows, the same
    one-statement append and the same validation as `PostgresEventStore`: both are shells of
    the one store template (`_core.StoreCore`), this one awaiting its hooks.

    Args:
        conn: an autocommit `psycopg.AsyncConnection`; the store owns it from now on.
        options: reducer, snapshot interval and cache size.
        table_prefix: prefix of the table names.
        after_append: awaited in each append's transaction (see the module docstring).
    """

    _page = PAGE
    options: StoreOptions

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        options: StoreOptions | None = None,
        table_prefix: str = "agentfsm_",
        after_append: AsyncAfterAppend | None = None,
    ) -> None:
        if not conn.autocommit:
            raise ValueError("the connection must be in autocommit mode (autocommit=True)")
        super().__init__(options if options is not None else StoreOptions())
        self.after_append = after_append
        self._conn = conn
        self._sql = Sql(table_prefix)
        self._prefix = table_prefix
        self._leases: AsyncPostgresLeases | None = None
        self._leasing = asyncio.Lock()  # drives that start together connect once

    @classmethod
    async def connect(
        cls,
        conninfo: str,
        *,
        options: StoreOptions | None = None,
        table_prefix: str = "agentfsm_",
        migrate: bool = False,
        after_append: AsyncAfterAppend | None = None,
    ) -> AsyncPostgresEventStore:
        """Open a connection and a store on it (and create the schema if `migrate`).

        The store's key record is checked here (see the module docstring); a store built
        directly on a connection is checked by its first append, before it writes.

        Raises:
            IntegrityKeyError: the store is under another key than `options`' one.
        """
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        store = cls(conn, options=options, table_prefix=table_prefix, after_append=after_append)
        try:
            if migrate:
                await store.migrate()
            elif await store._has_meta():
                await store._open_key_check()  # else migrate() records the key
        except BaseException:
            await store.close()  # the caller never gets the handle to close it
            raise
        return store

    async def migrate(self) -> None:
        """Create the tables and indexes if missing, or upgrade an older schema in place
        (idempotent, safe to race)."""
        async with self._conn.transaction():
            await self._conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (self._sql.lock_key,)
            )
            await self._conn.execute(self._sql.create_meta)
            cur = await self._conn.execute(self._sql.schema_version)
            found = await cur.fetchone()
            if found is not None and int(found[0]) > SCHEMA_VERSION:
                raise newer_schema(found[0])
            lacks = await self._conn.execute(self._sql.lacks_status_at, self._sql.runs_table)
            fill = bool((await lacks.fetchone())[0])  # type: ignore[index]
            lacks = await self._conn.execute(self._sql.lacks_created, self._sql.runs_table)
            number = bool((await lacks.fetchone())[0])  # type: ignore[index]
            for statement in self._sql.schema:
                await self._conn.execute(statement)
            if fill:
                await self._conn.execute(self._sql.fill_status_at)
            for statement in self._sql.number_runs if number else ():
                await self._conn.execute(statement)
        await self._open_key_check()

    async def _has_meta(self) -> bool:
        found = await self._fetch("SELECT to_regclass(%s)", (self._sql.meta,))
        return bool(found) and found[0][0] is not None

    async def close(self) -> None:
        """Close the connection (and the leases' own)."""
        if self._leases is not None:
            await self._leases.close()
        await self._conn.close()

    async def _lease_rows(self) -> AsyncLeaseRows:
        # On a connection of its own, to the same database: a heartbeat's renewal must not
        # land inside an append's transaction on the store's.
        async with self._leasing:
            if self._leases is None:
                info = self._conn.info
                conninfo = make_conninfo(info.dsn, password=info.password or None)
                self._leases = await AsyncPostgresLeases.connect(
                    conninfo,
                    table_prefix=self._prefix,
                    runnable=sorted(self.options.reducer.table.runnable_states),
                    ended=sorted(self.options.reducer.table.terminal_states),
                )
            return self._leases

    async def _fetch(self, sql: str, args: Sequence[Any] | dict[str, Any]) -> list[Any]:
        try:
            cur = await self._conn.execute(sql, args)
        except pg_errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        return await cur.fetchall()

    async def _execute(self, sql: str, args: Sequence[Any] | dict[str, Any]) -> int:
        """Run a statement that returns no rows; how many rows it touched."""
        try:
            cur = await self._conn.execute(sql, args)
        except pg_errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        return cur.rowcount

    # -- the template's hooks, awaited (see `EventStore`) -------------------------------------

    async def _read_run(self, run_id: str) -> RunInfo | None:
        found = await self._fetch(self._sql.read_run, (run_id,))
        return RunInfo(run_id, *found[0]) if found else None

    async def _read_rows(self, run_id: str, after: int) -> list[StoredEvent]:
        rows: list[StoredEvent] = []
        while True:
            page = await self._fetch(self._sql.read_rows, (run_id, after, PAGE))
            rows.extend(stored_event(r) for r in page)
            if len(page) < PAGE:
                return rows
            after = page[-1][0]

    async def _first_rows(self, run_id: str, after: int, n: int) -> list[StoredEvent]:
        return [stored_event(r) for r in await self._fetch(self._sql.read_rows, (run_id, after, n))]

    async def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        found = await self._fetch(self._sql.read_snapshot, (run_id,))
        return StoredSnapshot(*found[0]) if found else None

    async def _write(self, prepared: PreparedAppend) -> None:
        sql, params = self._sql.write(prepared, self.options.integrity.record)
        hook = self.after_append
        types = _hook_for(hook, prepared)
        try:
            if types is None:
                written = (await self._conn.execute(sql, params)).rowcount
            else:
                assert hook is not None
                async with self._conn.transaction():
                    written = (await self._conn.execute(sql, params)).rowcount
                    if written == len(prepared.rows):
                        await hook(self._conn, prepared.record, types)
        except pg_errors.UniqueViolation:
            written = 0
        except pg_errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        if written != len(prepared.rows):
            refused = await self._key_refusal()
            if refused is not None:
                raise refused
            run_id = prepared.run_id
            found = await self._fetch(self._sql.stored_version, (run_id, run_id))
            actual = int(found[0][0]) if found and found[0][0] is not None else 0
            raise conflict(run_id, prepared.expected_version, actual)

    async def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        sql, args = self._sql.runs_query(statuses, limit, after)
        return [RunInfo(*r) for r in await self._fetch(sql, args)]

    async def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        sql, args = self._sql.ordered_query(order, statuses, limit, after)
        return [RunInfo(*r) for r in await self._fetch(sql, args)]

    async def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        count, args, estimate, estimate_args = self._sql.count_query(statuses, up_to)
        counted = int((await self._fetch(count, args))[0][0])
        if counted <= up_to:
            return RunCount.bounded(counted, up_to)
        plan = await self._fetch(estimate, estimate_args)
        return RunCount.bounded(counted, up_to, planned_rows(plan[0][0] if plan else None))

    async def _read_meta(self, key: str) -> str | None:
        found = await self._fetch(self._sql.read_meta, (key,))
        return str(found[0][0]) if found else None

    async def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        async with self._conn.transaction():
            if expected is None:
                done = await self._execute(self._sql.insert_meta, (key, value)) == 1
            else:
                done = await self._execute(self._sql.swap_meta, (value, key, expected)) == 1
            if done:
                await self._conn.execute(self._sql.drain_writes)
        return done

    async def _write_attachment(self, attachment: Attachment) -> None:
        a = attachment
        await self._execute(self._sql.put_attachment, (a.run_id, a.name, a.version, a.data))

    async def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        found = await self._fetch(self._sql.read_attachment, (run_id, name))
        return Attachment(run_id, name, found[0][1], found[0][0]) if found else None

    async def _delete_attachment(self, run_id: str, name: str) -> bool:
        return await self._execute(self._sql.delete_attachment, (run_id, name)) == 1
