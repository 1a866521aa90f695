"""What the PostgreSQL stores say to the database: every statement, and how rows read back.

Plain text and tuples, no driver: the sync and the async store send the same statements,
so they keep the same tables, the same one-statement append and the same errors.
"""

from __future__ import annotations

from typing import Any

from agentfsm.errors import StoreError
from agentfsm.stores._append import PreparedAppend
from agentfsm.stores._checks import check_prefix
from agentfsm.stores._keys import META_KEY
from agentfsm.stores._moment import moment
from agentfsm.stores.rows import StoredEvent
from agentfsm.stores.sqlite import SCHEMA_VERSION

__all__ = ["PAGE", "Sql", "missing_tables", "newer_schema", "planned_rows", "stored_event"]

#: Rows per query when streaming a log.
PAGE = 2000


#: runs.status_at: the event's time (see `moment`), or the database's now for a time that
#: cannot be read (a run is queued when it arrives, not before every other).
_MOMENT = "COALESCE(%(status_at)s::timestamptz, now())"


class Sql:
    """Every statement, with the table names spliced in once."""

    def __init__(self, prefix: str) -> None:
        p = check_prefix(prefix)
        runs, events, snaps, meta = f"{p}runs", f"{p}events", f"{p}snapshots", f"{p}meta"
        attachments = f"{p}attachments"
        self.lock_key = f"agentfsm:{p}"
        self.meta = meta
        # migrate(): create meta, refuse a newer schema, then create what is missing (an
        # older database gains the newer tables) and record the version.
        self.create_meta = (
            f"CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)"
        )
        self.schema = [
            f"CREATE TABLE IF NOT EXISTS {runs} (run_id text PRIMARY KEY, "
            "status text NOT NULL, version bigint NOT NULL, updated_at text)",
            f"CREATE INDEX IF NOT EXISTS {runs}_by_status ON {runs} (status, run_id)",
            # Version 5: when the run's status last changed (when it became runnable, for
            # a runnable run), and the claim's order on it: by status, then by that time,
            # top-level runs only (a subagent is driven by its parent's call, never
            # claimed), so the next run to claim is the head of each runnable status.
            f"ALTER TABLE {runs} ADD COLUMN IF NOT EXISTS status_at timestamptz",
            f"CREATE INDEX IF NOT EXISTS {runs}_by_ready ON {runs} (status, status_at, run_id) "
            "WHERE strpos(run_id, '/') = 0",
            # Version 6: the order runs were created in (a sequence's numbers, given by the
            # column's default, so even a writer that names no number gets one), indexed
            # alone and after the status: the runs list pages newest first by index ranges.
            f"CREATE SEQUENCE IF NOT EXISTS {runs}_created",
            f"ALTER TABLE {runs} ADD COLUMN IF NOT EXISTS created bigint",
            f"ALTER SEQUENCE {runs}_created OWNED BY {runs}.created",
            f"CREATE INDEX IF NOT EXISTS {runs}_by_created ON {runs} (created)",
            f"CREATE INDEX IF NOT EXISTS {runs}_by_status_created ON {runs} (status, created)",
            f"CREATE TABLE IF NOT EXISTS {events} (run_id text NOT NULL, "
            "sequence bigint NOT NULL, type text NOT NULL, data text NOT NULL, "
            "hash text NOT NULL, PRIMARY KEY (run_id, sequence))",
            f"CREATE TABLE IF NOT EXISTS {snaps} (run_id text PRIMARY KEY, "
            "sequence bigint NOT NULL, event_hash text NOT NULL, data text NOT NULL, "
            "digest text NOT NULL DEFAULT '')",
            # Version 3: a snapshot's digest (an older database's snapshots have none and
            # are ignored until rewritten).
            f"ALTER TABLE {snaps} ADD COLUMN IF NOT EXISTS digest text NOT NULL DEFAULT ''",
            f"CREATE TABLE IF NOT EXISTS {attachments} (run_id text NOT NULL, "
            "name text NOT NULL, version bigint NOT NULL, data bytea NOT NULL, "
            "PRIMARY KEY (run_id, name))",
            f"INSERT INTO {meta} VALUES ('schema_version', '{SCHEMA_VERSION}') "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value "
            f"WHERE {meta}.value <> EXCLUDED.value",
        ]
        self.schema_version = f"SELECT value FROM {meta} WHERE key = 'schema_version'"
        # Read before the schema statements: a runs table without status_at (version 4 or
        # older) has its runs queued by their last event's time once the column is added.
        # Run only then, so opening an up-to-date database never scans its runs.
        self.lacks_status_at = (
            "SELECT to_regclass(%(runs)s) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
            "pg_attribute WHERE attrelid = to_regclass(%(runs)s) AND attname = 'status_at' "
            "AND NOT attisdropped)"
        )
        self.runs_table = {"runs": runs}
        # Read before the schema statements too: a runs table without `created` (version 5
        # or older, or none yet) has its runs numbered by their first event's time (what it
        # kept of when each began), then the column's default is set and the sequence
        # moved past the numbers given. Run only then, as above.
        self.lacks_created = (
            "SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
            "to_regclass(%(runs)s) AND attname = 'created' AND NOT attisdropped)"
        )
        began = (
            "CASE WHEN e.data::jsonb ->> 'occurred_at' ~ "
            r"'^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|z|[+-]\d\d:?\d\d)?$' "
            "THEN (e.data::jsonb ->> 'occurred_at')::timestamptz END"
        )
        self.number_runs = [
            f"UPDATE {runs} AS r SET created = o.n FROM (SELECT r2.run_id, row_number() OVER "
            f"(ORDER BY COALESCE({began}, r2.status_at, now()), r2.run_id) AS n "
            f"FROM {runs} AS r2 LEFT JOIN {events} AS e ON e.run_id = r2.run_id "
            "AND e.sequence = 1) AS o WHERE r.run_id = o.run_id",
            f"ALTER TABLE {runs} ALTER COLUMN created SET DEFAULT nextval('{runs}_created')",
            f"SELECT setval('{runs}_created', COALESCE(max(created), 0) + 1, false) FROM {runs}",
        ]
        self._runs = runs
        self.fill_status_at = (
            f"UPDATE {runs} SET status_at = CASE WHEN updated_at ~ "
            r"'^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|z|[+-]\d\d:?\d\d)?$' "
            "THEN updated_at::timestamptz ELSE now() END WHERE status_at IS NULL"
        )
        self.read_meta = f"SELECT value FROM {meta} WHERE key = %s"
        self.insert_meta = f"INSERT INTO {meta} VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"
        self.swap_meta = f"UPDATE {meta} SET value = %s WHERE key = %s AND value = %s"
        # Taken after a meta change, in its transaction: it waits for every write in flight
        # (each holds ROW EXCLUSIVE on the runs table until it commits), and a write queued
        # behind it takes its snapshot once it is granted, so it reads the new key record.
        self.drain_writes = f"LOCK TABLE {runs} IN SHARE MODE"
        # Every write moves the runs row only while the store's key record is the handle's.
        key = f"(SELECT value FROM {meta} WHERE key = '{META_KEY}') = %(key)s"
        self.rewrite_lock = (
            f"SELECT 1 FROM {runs} WHERE run_id = %(run_id)s AND version = %(version)s "
            f"AND {key} FOR UPDATE"
        )
        self.rewrite_hashes = (
            f"UPDATE {events} AS e SET hash = n.hash FROM unnest(%(sequences)s::bigint[], "
            "%(hashes)s::text[]) AS n(sequence, hash) "
            "WHERE e.run_id = %(run_id)s AND e.sequence = n.sequence"
        )
        self.delete_snapshot = f"DELETE FROM {snaps} WHERE run_id = %s"
        self.put_snapshot = (
            f"INSERT INTO {snaps} (run_id, sequence, event_hash, data, digest) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET "
            "sequence = EXCLUDED.sequence, event_hash = EXCLUDED.event_hash, "
            "data = EXCLUDED.data, digest = EXCLUDED.digest"
        )
        tail = (
            f"snap AS (INSERT INTO {snaps} (run_id, sequence, event_hash, data, digest) "
            "SELECT run_id, %(snap_sequence)s::bigint, %(snap_hash)s::text, "
            "%(snap_data)s::text, %(snap_digest)s::text FROM run "
            "WHERE %(snap_sequence)s::bigint IS NOT NULL "
            "ON CONFLICT (run_id) DO UPDATE SET sequence = EXCLUDED.sequence, "
            "event_hash = EXCLUDED.event_hash, data = EXCLUDED.data, "
            "digest = EXCLUDED.digest) "
            f"INSERT INTO {events} (run_id, sequence, type, data, hash) "
            "SELECT run.run_id, e.sequence, e.type, e.data, e.hash FROM run, "
            "unnest(%(sequences)s::bigint[], %(types)s::text[], %(datas)s::text[], "
            "%(hashes)s::text[]) AS e(sequence, type, data, hash)"
        )
        self.new_run = (
            f"WITH run AS (INSERT INTO {runs} (run_id, status, version, updated_at, status_at) "
            "SELECT %(run_id)s::text, %(status)s::text, %(version)s::bigint, "
            f"%(updated_at)s::text, {_MOMENT} WHERE {key} "
            "ON CONFLICT (run_id) DO NOTHING RETURNING run_id), " + tail
        )
        self.move_run = (
            # status_at moves with the status only (the right side reads the row as it
            # was): a runnable run keeps its place in the claim's queue while it is
            # appended to without changing state.
            f"WITH run AS (UPDATE {runs} SET status = %(status)s, version = %(version)s, "
            "updated_at = %(updated_at)s, status_at = CASE WHEN status = %(status)s "
            f"AND status_at IS NOT NULL THEN status_at ELSE {_MOMENT} END "
            "WHERE run_id = %(run_id)s "
            f"AND version = %(expected)s AND {key} RETURNING run_id), " + tail
        )
        self.stored_version = (
            f"SELECT GREATEST((SELECT version FROM {runs} WHERE run_id = %s), "
            f"(SELECT MAX(sequence) FROM {events} WHERE run_id = %s))"
        )
        self.read_run = f"SELECT status, version, updated_at FROM {runs} WHERE run_id = %s"
        self.read_rows = (
            f"SELECT sequence, type, data, hash FROM {events} "
            "WHERE run_id = %s AND sequence > %s ORDER BY sequence LIMIT %s"
        )
        self.read_snapshot = (
            f"SELECT sequence, event_hash, data, digest FROM {snaps} WHERE run_id = %s"
        )
        self.list_runs = f"SELECT run_id, status, version, updated_at FROM {runs}"
        self.put_attachment = (
            f"INSERT INTO {attachments} (run_id, name, version, data) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (run_id, name) DO UPDATE SET "
            "version = EXCLUDED.version, data = EXCLUDED.data"
        )
        self.read_attachment = (
            f"SELECT version, data FROM {attachments} WHERE run_id = %s AND name = %s"
        )
        self.delete_attachment = f"DELETE FROM {attachments} WHERE run_id = %s AND name = %s"

    def write(self, prepared: PreparedAppend, key: str) -> tuple[str, dict[str, Any]]:
        """The one statement of an append, and its parameters (`key`: the handle's key
        record, which the store's must be)."""
        info = prepared.info
        rows = prepared.rows
        snap = prepared.snapshot
        params = {
            "run_id": prepared.run_id,
            "status": info.status,
            "version": info.version,
            "updated_at": info.updated_at,
            "status_at": moment(info.updated_at),
            "expected": prepared.expected_version,
            "snap_sequence": snap.sequence if snap else None,
            "snap_hash": snap.event_hash if snap else None,
            "snap_data": snap.data if snap else None,
            "snap_digest": snap.digest if snap else None,
            "sequences": [r.sequence for r in rows],
            "types": [r.type for r in rows],
            "datas": [r.data for r in rows],
            "hashes": [r.hash for r in rows],
            "key": key,
        }
        return (self.new_run if prepared.expected_version == 0 else self.move_run), params

    def ordered_query(
        self, order: str, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> tuple[str, dict[str, Any]]:
        """`runs(order=...)` for the orders other than run id: one statement, each part an
        index range after the cursor's row (read once, as an InitPlan or a one-row join).

        By creation: `(created)`; for some statuses, one `(status, created)` range per
        status in a LATERAL join, since `status = ANY(...) ORDER BY created` would read every
        row of those statuses to sort them. By status: `(status, run_id)`, the same way.
        Within a status the bound is a row comparison, which only the status's own index
        can serve, so the planner never walks another index filtering by status (a rare
        status would cost every row then).
        """
        runs = self._runs
        args: dict[str, Any] = {"statuses": list(statuses or ()), "after": after, "n": limit}
        columns = "r.run_id, r.status, r.version, r.updated_at"
        page = "" if limit is None else " LIMIT %(n)s"
        of = f"FROM {runs} WHERE run_id = %(after)s"
        each = "unnest(%(statuses)s::text[]) AS s(status) CROSS JOIN LATERAL"
        if order == "status":
            if statuses is None:
                bound = (
                    ""
                    if after is None
                    else f" WHERE (status, run_id) > (SELECT status, run_id {of})"
                )
                sql = f"SELECT {columns} FROM {runs} AS r{bound} ORDER BY r.status, r.run_id{page}"
                return sql, args
            if after is None:
                cursor, since, keep = "", "''", ""
            else:
                cursor = f"(SELECT status, run_id {of}) AS c CROSS JOIN "
                since = "CASE WHEN s.status = c.status THEN c.run_id ELSE '' END"
                keep = " WHERE s.status >= c.status"
            sql = (
                f"SELECT {columns} FROM {cursor}{each} (SELECT * FROM {runs} AS x "
                f"WHERE x.status = s.status AND (x.status, x.run_id) > (s.status, {since}) "
                f"ORDER BY x.run_id{page}) AS r{keep} ORDER BY r.status, r.run_id{page}"
            )
            return sql, args
        newest = order == "newest"
        direction, op = ("DESC", "<") if newest else ("ASC", ">")
        if statuses is None:
            bound = (
                "created IS NOT NULL" if after is None else f"created {op} (SELECT created {of})"
            )
            by = f"ORDER BY r.created {direction}{page}"
            return f"SELECT {columns} FROM {runs} AS r WHERE {bound} {by}", args
        # No cursor: a bound past every number, so the row comparison is still there.
        since = (
            f"(SELECT created {of})" if after is not None else f"{'' if newest else '-'}{2**63 - 1}"
        )
        sql = (
            f"SELECT {columns} FROM {each} (SELECT * FROM {runs} AS x WHERE x.status = s.status "
            f"AND (x.status, x.created) {op} (s.status, {since}) ORDER BY x.created "
            f"{direction}{page}) AS r ORDER BY r.created {direction}{page}"
        )
        return sql, args

    def count_query(
        self, statuses: tuple[str, ...] | None, up_to: int
    ) -> tuple[str, list[Any], str, list[Any]]:
        """How many runs are in `statuses`, counted up to `up_to` + 1; and the planner's
        estimate of them (`EXPLAIN`: from the table's statistics, in constant time)."""
        where, args = "", []
        if statuses is not None:
            where, args = " WHERE status = ANY(%s::text[])", [list(statuses)]
        count = f"SELECT count(*) FROM (SELECT 1 FROM {self._runs}{where} LIMIT %s) AS t"
        estimate = f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {self._runs}{where}"
        return count, [*args, up_to + 1], estimate, args

    def runs_query(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> tuple[str, list[Any]]:
        where: list[str] = []
        args: list[Any] = []
        if statuses is not None:
            where.append("status = ANY(%s)")
            args.append(list(statuses))
        if after is not None:
            where.append("run_id > %s")
            args.append(after)
        sql = self.list_runs
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY run_id"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        return sql, args


def missing_tables(exc: Exception) -> StoreError:
    """The error for a database whose tables `migrate()` has not created."""
    return StoreError(f"the agentfsm tables are missing; call migrate() first ({exc})")


def newer_schema(found: str) -> StoreError:
    """The error for a database written by a newer agentfsm."""
    return StoreError(
        f"the database has agentfsm schema version {found}; this agentfsm reads version "
        f"{SCHEMA_VERSION}: upgrade agentfsm"
    )


def planned_rows(plan: Any) -> int | None:
    """The rows an `EXPLAIN (FORMAT JSON)` answer says its statement will return."""
    try:
        return int(plan[0]["Plan"]["Plan Rows"])
    except (LookupError, TypeError, ValueError):
        return None


def stored_event(r: tuple[Any, ...]) -> StoredEvent:
    """A log row as the driver returns it (sequence, type, data, hash)."""
    return StoredEvent(r[0], r[1], r[2], r[3])
