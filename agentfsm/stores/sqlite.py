"""The SQLite store: the embedded default. One file, WAL mode, safe for several processes.

Durability, chosen deliberately:

- `journal_mode=WAL`: readers never block the writer and the writer never blocks readers;
  a commit is one append to the WAL file.
- `synchronous=FULL` (the default here): the WAL is fsynced at every commit, so an
  acknowledged append survives power loss, not only a crash of the process. `NORMAL` is
  offered as an explicit choice: still atomic and still safe against a killed process
  (the OS has the pages), but the last commits before a power cut may be rolled back.
  On this machine NORMAL is about 7x faster at one event per commit.
- Appends run in `BEGIN IMMEDIATE`, which takes the write lock up front: two processes
  appending at once queue on the lock (for up to `busy_timeout` seconds) instead of both
  reading the same version and one failing late with `SQLITE_BUSY`.

`after_append`: a callable the store calls inside the append's `BEGIN IMMEDIATE`
transaction, on the same connection, once the rows are written (the record after the
batch and the batch's event types), as the PostgreSQL store does; what it writes commits
or rolls back with the events (a hook with `wants(record, types)` returning False is not
called). `agentfsm.runtime.timers.install_timers` uses it to keep a `Worker`'s wake-ups
and timers on the lease rows.

The key record (`_keys.py`) lives in the meta table, beside the schema version; every append
checks it inside its `BEGIN IMMEDIATE` transaction, in the statement that moves the runs
row, so a store re-keyed since the handle opened refuses the write.

SQLite locks the whole file for a write, so writers on one file are serialised; for many
writers on many machines use the PostgreSQL store. Do not put the file on a network
filesystem: WAL needs shared memory between the processes of one machine.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from agentfsm.errors import CorruptLogError, IntegrityKeyError, StoreError
from agentfsm.record import RunRecord
from agentfsm.stores._append import PreparedAppend
from agentfsm.stores._checks import check_prefix, conflict
from agentfsm.stores._keys import META_KEY
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.stores.lease import LeaseRows
from agentfsm.stores.leases import SQLiteLeases
from agentfsm.stores.rows import Attachment, StoredEvent, StoredSnapshot
from agentfsm.stores.runs import RunCount, RunInfo, RunOrder

# `SCHEMA_VERSION` is not listed: the PostgreSQL schema shares it, users do not need it.
__all__ = ["SQLiteAfterAppend", "SQLiteEventStore"]

#: Called in an append's transaction: (connection, record after the batch, event types).
SQLiteAfterAppend = Callable[[sqlite3.Connection, RunRecord, tuple[str, ...]], None]

#: The schema this code writes; a file with a newer one is refused rather than misread.
#: 1: runs, events, snapshots. 2: + attachments. 3: + snapshots.digest (an older file is
#: upgraded on open; its snapshots, which have no digest, are ignored until rewritten).
#: 4: the key record in meta, checked by every write (so an older agentfsm, which does not
#: check it, refuses the file rather than write links under another key).
#: 5: + runs.status_at (when the run's status last changed, as a Julian day: when it became
#: runnable, for a runnable run), indexed with the status, so a `Worker` claims the run
#: that has waited longest in constant time whatever the backlog (an older file's runs get
#: their updated_at, the best time it kept).
#: 6: + runs.created (the order runs were created in: 1, 2, 3... in the order their first
#: appends committed), indexed alone and after the status, so the runs are listed newest
#: first a page at a time from an index range whatever their number (an older file's runs
#: are numbered by their first event's time, the best it kept).
SCHEMA_VERSION = 6

#: runs.status_at from an event's `occurred_at` (RFC 3339): a Julian day number, so times
#: written with different offsets compare as moments; the database's now for a time it
#: cannot read (a run is queued when it arrives, not before every other).
_MOMENT = "coalesce(julianday({0}), julianday('now'))"

_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _CORRUPT_CODES


class SQLiteEventStore(EventStore):
    """An `EventStore` in one SQLite file (created with its schema if missing).

    Args:
        path: the database file (`":memory:"` works for a private, throwaway store).
        options: reducer, snapshot interval and cache size.
        synchronous: `"FULL"` (fsync every commit; the default) or `"NORMAL"` (see the
            module's notes on durability).
        busy_timeout: seconds an append waits for another process's write lock.
        table_prefix: prefix of the table names, so the store can share a file.
        after_append: called in each append's transaction (see the module docstring).

    Raises:
        StoreError: the file cannot be opened as a database, or has a newer schema.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        options: StoreOptions | None = None,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 30.0,
        table_prefix: str = "agentfsm_",
        after_append: SQLiteAfterAppend | None = None,
    ) -> None:
        super().__init__(options)
        self.after_append = after_append
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = os.fspath(path)
        self.synchronous = synchronous
        p = check_prefix(table_prefix)
        self._prefix = p
        self._busy_timeout = busy_timeout
        self._leases: SQLiteLeases | None = None
        self._runs, self._events, self._snapshots, self._meta, self._attachments = (
            f"{p}runs",
            f"{p}events",
            f"{p}snapshots",
            f"{p}meta",
            f"{p}attachments",
        )
        # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread=False:
        # the handle may be used from one thread at a time, not only the one that opened it
        # (ThreadedAsyncEventStore uses a worker thread).
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite file '{self.path}' cannot be opened: {exc}") from None
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            self.migrate()
            self._open_key_check()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"SQLite file '{self.path}' cannot be used: {exc}") from None
        except IntegrityKeyError as exc:
            self._conn.close()
            raise self._here(exc) from None
        except BaseException:
            self._conn.close()
            raise
        self._sql_key = f"(SELECT value FROM {self._meta} WHERE key = '{META_KEY}') = ?"
        self._sql_insert_event = (
            f"INSERT INTO {self._events} (run_id, sequence, type, data, hash) "
            "VALUES (?, ?, ?, ?, ?)"
        )
        # Each moves the runs row only while the store's key record is the handle's.
        # A new run's creation number is the largest yet + 1 (one step down the index), read
        # and written under the file's write lock: numbers never repeat, and run in the
        # order the runs' first appends committed.
        self._sql_new_run = (
            f"INSERT INTO {self._runs} (run_id, status, version, updated_at, status_at, "
            f"created) SELECT ?1, ?2, ?3, ?4, {_MOMENT.format('?4')}, "
            f"(SELECT coalesce(max(created), 0) + 1 FROM {self._runs}) "
            f"WHERE {self._sql_key.replace('?', '?5')} ON CONFLICT (run_id) DO NOTHING"
        )
        # status_at moves with the status only: a runnable run keeps its place in the
        # claim's queue while it is appended to without changing state.
        self._sql_move_run = (
            f"UPDATE {self._runs} SET status = ?1, version = ?2, updated_at = ?3, "
            f"status_at = {_MOMENT.format('?3')} WHERE run_id = ?4 AND version = ?5 "
            f"AND {self._sql_key.replace('?', '?6')}"
        )
        # The same without the status, when the batch leaves it: the by-status index is
        # then not rewritten, which is half the cost of moving the row.
        self._sql_advance_run = (
            f"UPDATE {self._runs} SET version = ?, updated_at = ? "
            f"WHERE run_id = ? AND version = ? AND {self._sql_key}"
        )
        self._sql_snapshot = (
            f"INSERT INTO {self._snapshots} (run_id, sequence, event_hash, data, digest) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
            "sequence = excluded.sequence, event_hash = excluded.event_hash, "
            "data = excluded.data, digest = excluded.digest"
        )
        self._sql_put_attachment = (
            f"INSERT INTO {self._attachments} (run_id, name, version, data) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (run_id, name) DO UPDATE SET "
            "version = excluded.version, data = excluded.data"
        )

    def migrate(self) -> None:
        """Create the tables and indexes if missing, or upgrade an older file's schema in
        place, keeping its data (idempotent; run on open)."""
        c = self._conn
        # Read first, write only if needed: opening an up-to-date file takes no write lock
        # (so many processes open at once without queueing), and a damaged file can still
        # be opened to read the runs that are intact.
        if self._schema_version() == SCHEMA_VERSION:
            return
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(f"CREATE TABLE IF NOT EXISTS {self._meta} (key TEXT PRIMARY KEY, value TEXT)")
            found = self._schema_version()
            if found is not None and found > SCHEMA_VERSION:
                raise StoreError(
                    f"SQLite file '{self.path}' has schema version {found}; this agentfsm "
                    f"reads version {SCHEMA_VERSION}: upgrade agentfsm"
                )
            # runs: one row per run, updated in the append's transaction, so listing by
            # status is an index range scan. events: clustered by (run_id, sequence), so a
            # load is one range scan, and the key makes a forked run impossible.
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {self._runs} (run_id TEXT PRIMARY KEY, "
                "status TEXT NOT NULL, version INTEGER NOT NULL, updated_at TEXT, "
                "status_at REAL, created INTEGER) WITHOUT ROWID"
            )
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {self._runs}_by_status "
                f"ON {self._runs} (status, run_id)"
            )
            if "status_at" not in {r[1] for r in c.execute(f"PRAGMA table_info({self._runs})")}:
                c.execute(f"ALTER TABLE {self._runs} ADD COLUMN status_at REAL")
                c.execute(f"UPDATE {self._runs} SET status_at = {_MOMENT.format('updated_at')}")
            if "created" not in {r[1] for r in c.execute(f"PRAGMA table_info({self._runs})")}:
                c.execute(f"ALTER TABLE {self._runs} ADD COLUMN created INTEGER")
                self._number_runs()
            # The runs list's orders: by creation, of every run or of a status's.
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {self._runs}_by_created ON {self._runs} (created)"
            )
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {self._runs}_by_status_created "
                f"ON {self._runs} (status, created)"
            )
            # The claim's order: by status, then by when the run took it, top-level runs
            # only (a subagent is driven by its parent's call, never claimed), so the next
            # run to claim is the first entry of each runnable status.
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {self._runs}_by_ready ON {self._runs} "
                "(status, status_at, run_id) WHERE instr(run_id, '/') = 0"
            )
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {self._events} (run_id TEXT NOT NULL, "
                "sequence INTEGER NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL, "
                "hash TEXT NOT NULL, PRIMARY KEY (run_id, sequence)) WITHOUT ROWID"
            )
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {self._snapshots} (run_id TEXT PRIMARY KEY, "
                "sequence INTEGER NOT NULL, event_hash TEXT NOT NULL, data TEXT NOT NULL, "
                "digest TEXT NOT NULL DEFAULT '')"
            )
            columns = {r[1] for r in c.execute(f"PRAGMA table_info({self._snapshots})")}
            if "digest" not in columns:  # a version 1 or 2 file
                c.execute(
                    f"ALTER TABLE {self._snapshots} ADD COLUMN digest TEXT NOT NULL DEFAULT ''"
                )
            # attachments (since version 2): a rowid table, unlike the others, because
            # its rows are blobs of any size and WITHOUT ROWID suits small rows only.
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {self._attachments} (run_id TEXT NOT NULL, "
                "name TEXT NOT NULL, version INTEGER NOT NULL, data BLOB NOT NULL, "
                "PRIMARY KEY (run_id, name))"
            )
            c.execute(
                f"INSERT INTO {self._meta} VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _number_runs(self) -> None:
        """Give an older file's runs their creation numbers, in the order of their first
        event's time (then run id): what it kept of when each run began. One pass, in the
        upgrade's transaction, through a numbered temporary table."""
        c = self._conn
        c.execute(
            "CREATE TEMP TABLE agentfsm_numbered (run_id TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID"
        )
        try:
            c.execute(
                "INSERT INTO agentfsm_numbered SELECT run_id, row_number() OVER (ORDER BY "
                "began, run_id) FROM (SELECT r.run_id AS run_id, coalesce(julianday("
                "json_extract(e.data, '$.occurred_at')), r.status_at) AS began "
                f"FROM {self._runs} AS r LEFT JOIN {self._events} AS e "
                "ON e.run_id = r.run_id AND e.sequence = 1)"
            )
            c.execute(
                f"UPDATE {self._runs} SET created = (SELECT n FROM agentfsm_numbered AS t "
                f"WHERE t.run_id = {self._runs}.run_id)"
            )
        finally:
            c.execute("DROP TABLE temp.agentfsm_numbered")

    def _schema_version(self) -> int | None:
        exists = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self._meta,)
        ).fetchone()
        if exists is None:
            return None
        row = self._conn.execute(
            f"SELECT value FROM {self._meta} WHERE key = 'schema_version'"
        ).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        """Close the connection (the last one to close checkpoints the WAL into the file)."""
        if self._leases is not None:
            self._leases.close()
        self._conn.close()

    def _lease_rows(self) -> LeaseRows:
        # The `leases` table the `Worker`s' `SQLiteLeases` claim from, on this store's
        # connection (the heartbeat renews on one of its own).
        if self._leases is None:
            self._leases = SQLiteLeases(
                self.path,
                table_prefix=self._prefix,
                busy_timeout=self._busy_timeout,
                runnable=sorted(self.reducer.table.runnable_states),
                synchronous=self.synchronous,
                connection=self._conn,
                ended=sorted(self.reducer.table.terminal_states),
            )
        return self._leases

    # -- the backend primitives ------------------------------------------------------------

    def _read_run(self, run_id: str) -> RunInfo | None:
        try:
            row = self._conn.execute(
                f"SELECT status, version, updated_at FROM {self._runs} WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id) from None
        return None if row is None else RunInfo(run_id, row[0], row[1], row[2])

    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        try:
            cursor = self._conn.execute(
                f"SELECT sequence, type, data, hash FROM {self._events} "
                "WHERE run_id = ? AND sequence > ? ORDER BY sequence",
                (run_id, after),
            )
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id) from None
        return self._rows(cursor, run_id, after)

    def _rows(self, cursor: sqlite3.Cursor, run_id: str, after: int) -> Iterator[StoredEvent]:
        last = after
        try:
            for sequence, type_, data, hash_ in cursor:
                last = sequence
                yield StoredEvent(sequence, type_, data, hash_)
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id, last + 1) from None
        finally:
            cursor.close()

    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        try:
            row = self._conn.execute(
                f"SELECT sequence, event_hash, data, digest FROM {self._snapshots} "
                "WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id) from None
        return None if row is None else StoredSnapshot(row[0], row[1], row[2], row[3])

    def _write(self, prepared: PreparedAppend) -> None:
        c = self._conn
        run_id = prepared.run_id
        info = prepared.info
        key = self.options.integrity.record
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                if prepared.expected_version == 0:
                    cursor = c.execute(
                        self._sql_new_run,
                        (run_id, info.status, info.version, info.updated_at, key),
                    )
                elif prepared.moved:
                    cursor = c.execute(
                        self._sql_move_run,
                        (
                            info.status,
                            info.version,
                            info.updated_at,
                            run_id,
                            prepared.expected_version,
                            key,
                        ),
                    )
                else:
                    cursor = c.execute(
                        self._sql_advance_run,
                        (info.version, info.updated_at, run_id, prepared.expected_version, key),
                    )
                if cursor.rowcount != 1:
                    refused = self._key_refusal()
                    if refused is not None:
                        raise self._here(refused)
                    raise conflict(run_id, prepared.expected_version, self._stored_version(run_id))
                c.executemany(
                    self._sql_insert_event,
                    [(run_id, r.sequence, r.type, r.data, r.hash) for r in prepared.rows],
                )
                if prepared.snapshot is not None:
                    s = prepared.snapshot
                    c.execute(
                        self._sql_snapshot, (run_id, s.sequence, s.event_hash, s.data, s.digest)
                    )
                hook = self.after_append
                if hook is not None:
                    self._call_hook(hook, prepared)
                c.execute("COMMIT")
            except sqlite3.IntegrityError:
                # A row of the batch is already taken: someone wrote events without
                # moving the runs row. The key refuses the fork; report it as a conflict.
                c.execute("ROLLBACK")
                raise conflict(
                    run_id, prepared.expected_version, self._stored_version(run_id)
                ) from None
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id) from None

    def _read_meta(self, key: str) -> str | None:
        row = self._conn.execute(f"SELECT value FROM {self._meta} WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        if expected is None:
            sql = f"INSERT INTO {self._meta} VALUES (?, ?) ON CONFLICT (key) DO NOTHING"
            args: tuple[str, ...] = (key, value)
        else:
            sql = f"UPDATE {self._meta} SET value = ? WHERE key = ? AND value = ?"
            args = (value, key, expected)
        # One statement in autocommit mode: it waits for the write lock, so every append in
        # flight commits first and every later one reads the new value.
        return self._conn.execute(sql, args).rowcount == 1

    def _rewrite_run(
        self,
        run_id: str,
        version: int,
        hashes: Sequence[tuple[int, str]],
        snapshot: StoredSnapshot | None,
        record: str,
    ) -> bool:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            found = c.execute(
                f"SELECT 1 FROM {self._runs} WHERE run_id = ? AND version = ? AND {self._sql_key}",
                (run_id, version, record),
            ).fetchone()
            if found is None:
                c.execute("ROLLBACK")
                return False
            c.executemany(
                f"UPDATE {self._events} SET hash = ? WHERE run_id = ? AND sequence = ?",
                [(link, run_id, sequence) for sequence, link in hashes],
            )
            if snapshot is None:
                c.execute(f"DELETE FROM {self._snapshots} WHERE run_id = ?", (run_id,))
            else:
                s = snapshot
                c.execute(self._sql_snapshot, (run_id, s.sequence, s.event_hash, s.data, s.digest))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return True

    def _write_attachment(self, attachment: Attachment) -> None:
        a = attachment
        # One statement in autocommit mode: atomic, and it queues on the write lock for
        # up to busy_timeout like an append.
        try:
            self._conn.execute(self._sql_put_attachment, (a.run_id, a.name, a.version, a.data))
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, a.run_id) from None

    def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        try:
            row = self._conn.execute(
                f"SELECT version, data FROM {self._attachments} WHERE run_id = ? AND name = ?",
                (run_id, name),
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id) from None
        return None if row is None else Attachment(run_id, name, bytes(row[1]), row[0])

    def _delete_attachment(self, run_id: str, name: str) -> bool:
        try:
            cursor = self._conn.execute(
                f"DELETE FROM {self._attachments} WHERE run_id = ? AND name = ?", (run_id, name)
            )
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, run_id) from None
        return cursor.rowcount == 1

    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        where: list[str] = []
        args: list[object] = []
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            args.extend(statuses)
        if after is not None:
            where.append("run_id > ?")
            args.append(after)
        sql = f"SELECT run_id, status, version, updated_at FROM {self._runs}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY run_id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        try:
            rows = self._conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            if _damaged(exc):
                raise StoreError(f"SQLite file '{self.path}' is damaged: {exc}") from None
            raise
        return [RunInfo(*row) for row in rows]

    def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        # One index range each: (created) for every run, (status, created) for some
        # statuses, where SQLite reads each status's range in order and stops once `limit`
        # rows are found (so several statuses cost a page each); (status, run_id) by status.
        if order == "status":
            return self._by_status(statuses, limit, after)
        where: list[str] = []
        args: list[object] = []
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            args.extend(statuses)
        newest = order == "newest"
        if after is not None:
            where.append(
                f"created {'<' if newest else '>'} "
                f"(SELECT created FROM {self._runs} WHERE run_id = ?)"
            )
            args.append(after)
        sql = f"SELECT run_id, status, version, updated_at FROM {self._runs}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY created {'DESC' if newest else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [RunInfo(*row) for row in self._select(sql, args)]

    def _by_status(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        """Runs by (status, run id) after run `after`'s: one range of the (status, run_id)
        index, or, for some statuses, one per status from the cursor's on, until the page
        is full (a row value `(status, run_id) > (?, ?)` beside `status IN` would be read
        from the start of the cursor's status instead)."""
        start = ("", "")
        if after is not None:
            cursor = self._read_run(after)
            if cursor is None:
                return []
            start = (cursor.status, cursor.run_id)
        columns = f"SELECT run_id, status, version, updated_at FROM {self._runs}"
        page = "" if limit is None else f" LIMIT {int(limit)}"
        if statuses is None:
            sql = f"{columns} WHERE (status, run_id) > (?, ?) ORDER BY status, run_id{page}"
            return [RunInfo(*row) for row in self._select(sql, start)]
        found: list[RunInfo] = []
        for status in statuses:  # sorted
            if status < start[0] or (limit is not None and len(found) >= limit):
                continue
            sql = f"{columns} WHERE status = ? AND run_id > ? ORDER BY run_id"
            left = "" if limit is None else f" LIMIT {limit - len(found)}"
            since = start[1] if status == start[0] else ""
            found += [RunInfo(*row) for row in self._select(sql + left, (status, since))]
        return found

    def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        where, args = "", list(statuses or ())
        if statuses is not None:
            where = f" WHERE status IN ({', '.join('?' for _ in statuses)})"
        (counted,) = self._select(
            f"SELECT count(*) FROM (SELECT 1 FROM {self._runs}{where} LIMIT ?)", [*args, up_to + 1]
        )[0]
        if counted <= up_to:
            return RunCount.bounded(counted, up_to)
        # Past the bound, from where it fell among the runs by creation: the newest
        # `up_to + 1` of these runs span numbers `last`..`high`, and the same share of all
        # the numbers `low`..`high` is the estimate (two more index reads, one a page long).
        # Two statements: SQLite reads min() or max() alone from the end of the index, but
        # both in one statement from all of it.
        ((low,),) = self._select(f"SELECT min(created) FROM {self._runs}", [])
        ((high,),) = self._select(f"SELECT max(created) FROM {self._runs}", [])
        found = self._select(
            f"SELECT created FROM {self._runs}{where} ORDER BY created DESC LIMIT 1 OFFSET ?",
            [*args, up_to],
        )
        if low is None or high is None or not found or found[0][0] is None:
            return RunCount.bounded(counted, up_to)
        span = max(high - found[0][0] + 1, 1)
        return RunCount.bounded(counted, up_to, round((up_to + 1) * (high - low + 1) / span))

    def _select(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            if _damaged(exc):
                raise StoreError(f"SQLite file '{self.path}' is damaged: {exc}") from None
            raise

    # -- helpers -------------------------------------------------------------------------

    def _call_hook(self, hook: SQLiteAfterAppend, prepared: PreparedAppend) -> None:
        types = tuple(r.type for r in prepared.rows)
        wants = getattr(hook, "wants", None)
        if wants is None or wants(prepared.record, types):
            hook(self._conn, prepared.record, types)

    def _here(self, exc: IntegrityKeyError) -> IntegrityKeyError:
        """The refusal, saying which file refused."""
        return IntegrityKeyError(
            f"SQLite file '{self.path}': {exc}", store_key=exc.store_key, handle_key=exc.handle_key
        )

    def _stored_version(self, run_id: str) -> int:
        row = self._conn.execute(
            f"SELECT MAX(v) FROM (SELECT version AS v FROM {self._runs} WHERE run_id = ? "
            f"UNION ALL SELECT MAX(sequence) FROM {self._events} WHERE run_id = ?)",
            (run_id, run_id),
        ).fetchone()
        return int(row[0]) if row is not None and row[0] is not None else 0

    def _error(
        self, exc: sqlite3.DatabaseError, run_id: str, sequence: int | None = None
    ) -> Exception:
        if _damaged(exc):
            return CorruptLogError(
                f"the SQLite file '{self.path}' is damaged where this run is stored ({exc})",
                run_id=run_id,
                sequence=sequence,
            )
        return exc
