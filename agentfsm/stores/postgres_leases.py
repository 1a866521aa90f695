"""Leases in PostgreSQL, for workers and drivers on many machines (needs the `postgres` extra).

A claim is one statement: pick the free run whose timer fell due first, else the unleased
(or lapsed) run that became runnable first (the head of an index either way, so a claim
costs the same whatever the backlog), locking its row with `FOR UPDATE SKIP LOCKED` (so
concurrent claims pass over each other's candidates instead of queueing on them), and
insert or take over its lease row only if that row is still expired when the insert lands.
Expiry is on the database's clock (`now()`), so the workers' clocks need not agree.

The same rows are every driver's lease (`EventStore.hold`, see `agentfsm.stores.lease`): a
`take` takes a free, absent or lapsed row in one statement, only if it is still the row that
statement read; otherwise it reads the row, decides (a live holder, or one whose process is
gone on this host, which only Python can tell), and writes it only if it is still the row it
read (a compare-and-set, no transaction). A `free` is one statement too (it also deletes the
row of a run that has ended). `AsyncPostgresLeases` is the same for `AsyncPostgresEventStore`.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Sequence
from typing import Any

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    import psycopg
except ImportError as exc:
    raise missing_extra("PostgresLeases", "postgres", exc) from exc

from agentfsm.errors import StoreError
from agentfsm.stores._checks import check_prefix
from agentfsm.stores._process import Process, this_process
from agentfsm.stores.lease import Holder, holder_of, takeable
from agentfsm.stores.leases import ENDED_STATUSES, RUNNABLE_STATUSES

__all__ = ["AsyncPostgresLeases", "PostgresLeases"]

_CLAIM_TRIES = 3  # a claim can lose a candidate to a racing one; try the next candidate
_TAKE_TRIES = 20  # a take that loses its compare-and-set reads the row again


class _LeaseSql:
    """The lease table's statements, with its name spliced in once (sync and async alike)."""

    def __init__(self, prefix: str, runnable: Sequence[str], ended: Sequence[str]) -> None:
        p = check_prefix(prefix)
        runs, leases = f"{p}runs", f"{p}leases"
        self._runs, self._leases = runs, leases
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {leases} (run_id text PRIMARY KEY, worker_id text, "
            "expires_at timestamptz NOT NULL)",
            # Who holds it (since the leases were every driver's): added in place.
            *(
                f"ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS {column} {kind}"
                for column, kind in (
                    ("host", "text"),
                    ("pid", "integer"),
                    ("process", "text"),
                    ("claimed_at", "timestamptz"),
                    ("heartbeat_at", "timestamptz"),
                    # The run's timers (see `agentfsm.runtime.timers`), added in place.
                    ("wake_at", "timestamptz"),
                    ("resume_at", "timestamptz"),
                    ("resume_version", "bigint"),
                )
            ),
            f"CREATE INDEX IF NOT EXISTS {leases}_by_wake ON {leases} (wake_at)",
            f"CREATE INDEX IF NOT EXISTS {leases}_by_resume ON {leases} (resume_at)",
        ]
        # A claim takes first the run whose time came first (a wake-up or a scheduled
        # resume), then the one that became runnable first (runs.status_at), never by id:
        # ids need not grow over time, and a filling queue must not starve high ones. Each
        # part reads the head of an index (leases by wake_at, by resume_at; runs by status,
        # status_at) and steps over held rows only (a few per worker), so a claim costs the
        # same at 50 or 50,000 runnable (issue 32).
        self.statuses = {f"s{i}": status for i, status in enumerate(sorted(runnable))}
        self.free = self._heads(lock=False) + " SELECT run_id FROM heads LIMIT 1"
        claim_heads = self._heads(lock=True)
        held = (
            "host, pid, process, claimed_at, heartbeat_at) "
            "SELECT run_id, %(worker)s, now() + make_interval(secs => %(ttl)s), %(host)s, "
            "%(pid)s, %(process)s, now(), now()"
        )
        taken = (
            "worker_id = EXCLUDED.worker_id, expires_at = EXCLUDED.expires_at, "
            "host = EXCLUDED.host, pid = EXCLUDED.pid, process = EXCLUDED.process, "
            "claimed_at = EXCLUDED.claimed_at, heartbeat_at = EXCLUDED.heartbeat_at"
        )
        # The candidate's row as it was, read in the statement's snapshot: who is taken over.
        was = ", ".join(
            f"(SELECT {c} FROM was)"
            for c in ("worker_id", "expires_at", "host", "pid", "process", "claimed_at")
        )
        self.claim = (
            f"{claim_heads}, candidate AS (SELECT run_id FROM heads "
            "ORDER BY k, t, run_id LIMIT 1), "
            f"was AS (SELECT l.* FROM {leases} l JOIN candidate c ON c.run_id = l.run_id) "
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, {held} FROM candidate "
            f"ON CONFLICT (run_id) DO UPDATE SET {taken} WHERE {leases}.expires_at <= now() "
            f"OR ({leases}.worker_id IS NULL AND ({leases}.wake_at <= now() "
            f"OR {leases}.resume_at <= now())) "
            f"RETURNING run_id, {was}, (SELECT heartbeat_at FROM was), now()"
        )
        self.insert = (
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, {held} "
            "FROM (SELECT %(run)s::text AS run_id) AS r ON CONFLICT (run_id) DO NOTHING"
        )
        self.take_over = (
            f"UPDATE {leases} SET worker_id = %(worker)s, "
            "expires_at = now() + make_interval(secs => %(ttl)s), host = %(host)s, "
            "pid = %(pid)s, process = %(process)s, claimed_at = now(), heartbeat_at = now() "
            "WHERE run_id = %(run)s AND worker_id IS NOT DISTINCT FROM %(old)s "
            "AND expires_at = %(old_expires)s"
        )
        self.read = (
            "SELECT worker_id, expires_at, host, pid, process, claimed_at, heartbeat_at, now() "
            f"FROM {leases} WHERE run_id = %s"
        )
        # A take in one round trip: no row, a free row or a lapsed one is taken, only if it
        # is still the row the statement's snapshot read (the compare-and-set `take_over`
        # makes in a second). Either way the row as it was comes back, first column whether
        # it was taken: the holder taken over, or the live one to refuse or (its process
        # gone on this host, which only Python can tell) to take over with `take_over`.
        old_row = "worker_id, expires_at, host, pid, process, claimed_at, heartbeat_at"
        self.take = (
            f"WITH was AS (SELECT {old_row}, now() FROM {leases} WHERE run_id = %(run)s), "
            f"took AS (INSERT INTO {leases} AS l (run_id, worker_id, expires_at, {held} "
            "FROM (SELECT %(run)s::text AS run_id) AS r "
            f"ON CONFLICT (run_id) DO UPDATE SET {taken} "
            "WHERE (l.worker_id IS NULL OR l.expires_at <= now()) "
            "AND l.worker_id IS NOT DISTINCT FROM (SELECT worker_id FROM was) "
            "AND l.expires_at = (SELECT expires_at FROM was) RETURNING 1) "
            "SELECT EXISTS (SELECT 1 FROM took), was.* FROM (SELECT 1) AS one "
            "LEFT JOIN was ON true"
        )
        self.renew = (
            f"UPDATE {leases} SET expires_at = now() + make_interval(secs => %s), "
            "heartbeat_at = now() WHERE run_id = %s AND worker_id = %s AND expires_at > now()"
        )
        # Every assignment reads the row as it was: a wake-up set during the drive (after
        # the claim) stays, the timers the claim found due are consumed.
        self.release = (
            f"UPDATE {leases} SET worker_id = NULL, "
            "expires_at = now() + make_interval(secs => %(hold)s), "
            "wake_at = CASE WHEN wake_at > claimed_at "
            "THEN LEAST(wake_at, COALESCE(to_timestamp(%(wake)s), wake_at)) "
            "ELSE to_timestamp(%(wake)s) END, "
            "resume_version = CASE WHEN resume_at <= claimed_at THEN NULL "
            "ELSE resume_version END, "
            "resume_at = CASE WHEN resume_at <= claimed_at THEN NULL ELSE resume_at END "
            "WHERE run_id = %(run)s AND worker_id = %(worker)s"
        )
        self.wake = (
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, wake_at) "
            "VALUES (%(run)s, NULL, 'epoch', COALESCE(to_timestamp(%(at)s), now())) "
            "ON CONFLICT (run_id) DO UPDATE SET wake_at = "
            f"LEAST(COALESCE({leases}.wake_at, EXCLUDED.wake_at), EXCLUDED.wake_at)"
        )
        self.schedule_resume = (
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, resume_at, resume_version) "
            "VALUES (%(run)s, NULL, 'epoch', to_timestamp(%(at)s), %(version)s) "
            "ON CONFLICT (run_id) DO UPDATE SET resume_at = EXCLUDED.resume_at, "
            "resume_version = EXCLUDED.resume_version"
        )
        self.resume_due = (
            f"SELECT resume_version FROM {leases} WHERE run_id = %s AND resume_at <= claimed_at"
        )
        self.timers = (
            "SELECT EXTRACT(EPOCH FROM wake_at), EXTRACT(EPOCH FROM resume_at), resume_version "
            f"FROM {leases} WHERE run_id = %s"
        )
        # A run that ends gives its lease row up (after a release or a free): rows are
        # kept for the runs that may be driven again, not for every run ever driven.
        self.ended = list(ended)
        self.drop_ended = (
            f"DELETE FROM {leases} WHERE run_id = %(run)s AND worker_id IS NULL AND "
            f"(SELECT status FROM {runs} WHERE run_id = %(run)s) = ANY(%(ended)s)"
        )
        # A free in one round trip: the holder's row is deleted if its run has ended (so is
        # a row freed before, as `drop_ended` would), else given up. The two parts never
        # touch one row twice: the run has ended or it has not.
        over = (
            f"COALESCE((SELECT status FROM {runs} WHERE run_id = %(run)s) = ANY(%(ended)s), false)"
        )
        self.give_up = (
            f"WITH dropped AS (DELETE FROM {leases} WHERE run_id = %(run)s "
            f"AND (worker_id = %(worker)s OR worker_id IS NULL) AND {over} RETURNING 1) "
            f"UPDATE {leases} SET worker_id = NULL, expires_at = now() "
            f"WHERE run_id = %(run)s AND worker_id = %(worker)s AND NOT {over}"
        )

    def _heads(self, *, lock: bool) -> str:
        """`WITH ..., heads AS (...)`: the head of each queue, `k` 0 for a due timer and 1
        for a runnable run, `t` its time. Locked (`FOR UPDATE SKIP LOCKED`) for a claim, so
        concurrent claims pass over each other's candidates instead of queueing on them."""
        leases, runs = self._leases, self._runs
        parts: list[str] = []
        for column in ("wake_at", "resume_at"):
            # Due, and nobody drives it: released (a hold does not stop a due timer) or
            # lapsed.
            parts.append(
                f"due_{column} AS (SELECT l.run_id, l.{column} AS t FROM {leases} l "
                f"WHERE l.{column} <= now() AND strpos(l.run_id, '/') = 0 "
                "AND (l.worker_id IS NULL OR l.expires_at <= now()) "
                f"ORDER BY l.{column} LIMIT 1{' FOR UPDATE OF l SKIP LOCKED' if lock else ''})"
            )
        for key in self.statuses:
            # A free or lapsed lease row, or none (a run no driver held yet); a row
            # released with a hold (`retry_after`) waits for it to pass.
            parts.append(
                f"ready_{key} AS (SELECT r.run_id, r.status_at AS t FROM {runs} r "
                f"LEFT JOIN {leases} l ON l.run_id = r.run_id WHERE r.status = %({key})s "
                "AND strpos(r.run_id, '/') = 0 AND (l.run_id IS NULL OR l.expires_at <= now()) "
                "ORDER BY r.status_at, r.run_id LIMIT 1"
                f"{' FOR UPDATE OF r SKIP LOCKED' if lock else ''})"
            )
        union = " UNION ALL ".join(
            [f"SELECT 0 AS k, t, run_id FROM due_{c}" for c in ("wake_at", "resume_at")]
            + [f"SELECT 1 AS k, t, run_id FROM ready_{key}" for key in self.statuses]
        )
        return "WITH " + ", ".join(parts) + f", heads AS ({union})"

    def freeing(self, run_id: str, holder: str) -> dict[str, Any]:
        """The parameters of `give_up`."""
        return {"run": run_id, "worker": holder, "ended": self.ended}

    @staticmethod
    def params(run_id: str, holder: str, p: Process, ttl: float) -> dict[str, Any]:
        return {
            "run": run_id,
            "worker": holder,
            "ttl": float(ttl),
            "host": p.host,
            "pid": p.pid,
            "process": p.key,
        }


def _taken(run_id: str, row: Any) -> tuple[bool, Holder | None] | None:
    """What the one-statement take (`_LeaseSql.take`) settled: taken, with the holder it
    replaced (None: the row was free, or absent), or refused to a live holder; None when
    it is for the compare-and-set to settle (a holder whose process may be gone, a race)."""
    found = holder_of(run_id, row[1:])  # None: no row, or a free one
    if row[0]:
        return True, found
    if found is not None and found.live:
        return False, found
    return None


def _decide(row: Any, params: dict[str, Any]) -> tuple[str, Holder | None]:
    """What a take does after reading `row`: `insert` (no row), `update` (a takeable row,
    compare-and-set on what was read), or `refuse` (a live holder)."""
    if row is None:
        return "insert", None
    found = holder_of(params["run"], row)
    if not takeable(found):
        return "refuse", found
    params["old"], params["old_expires"] = row[0], row[1]
    return "update", found


# One statement of a take: its text, its parameters, and whether its row is wanted (else
# the number of rows it changed is).
_Statement = tuple[str, Any, bool]


def _taking(
    sql: _LeaseSql, run_id: str, params: dict[str, Any]
) -> Generator[_Statement, Any, tuple[bool, Holder | None]]:
    """A take as the statements it sends, each answered with its row or its row count: the
    one decision `PostgresLeases.take` and `AsyncPostgresLeases.take` perform, each with
    its own I/O (as `agentfsm.stores.lease._taking` serves `take_lease` and `atake_lease`).

    The one-statement take settles most takes. A holder whose process may be gone (which
    only Python can judge) is decided on the row that statement read, then compared and
    set; a lost compare-and-set reads the row again.
    """
    row = yield sql.take, params, True
    done = _taken(run_id, row)
    if done is not None:
        return done
    # The row after the take's first column, or None when there was none (a row's
    # `expires_at` is never null): the first decision is on the row the take read.
    lease = row[1:] if row[2] is not None else None
    for attempt in range(_TAKE_TRIES):
        if attempt:
            lease = yield sql.read, (run_id,), True
        action, found = _decide(lease, params)
        if action == "refuse":
            return False, found
        statement = sql.insert if action == "insert" else sql.take_over
        if (yield statement, params, False) == 1:
            return True, found
    raise _raced(run_id)


def _raced(run_id: str) -> StoreError:
    return StoreError(
        f"run '{run_id}': {_TAKE_TRIES} tries in a row to take its lease lost a race; "
        "is something taking it in a loop?"
    )


class PostgresLeases:
    """Leases beside a `PostgresEventStore`'s tables (a `leases` table with its prefix).

    A `Worker`'s lease store and the store's own lease table for its drivers (see
    `agentfsm.stores.leases`). Safe to share between threads: one call at a time.

    Args:
        conninfo: a libpq connection string (its own autocommit connection).
        table_prefix: the store's table prefix.
        migrate: create the leases table now, or add what an older one lacks (idempotent).
        runnable: the statuses a worker may claim (the store's table's `runnable_states`;
            the default table's unless given).
        ended: the statuses in which a run is over (the store's table's terminal states):
            its lease row is deleted when it is released or freed in one.

    The database must have been migrated by a `PostgresEventStore` of this version (it
    creates and upgrades the runs table and the index the claim reads).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        table_prefix: str = "agentfsm_",
        migrate: bool = True,
        runnable: Sequence[str] = RUNNABLE_STATUSES,
        ended: Sequence[str] = ENDED_STATUSES,
    ):
        self._sql = _LeaseSql(table_prefix, runnable, ended)
        self._lock = threading.RLock()
        self._taken: dict[str, Holder | None] = {}
        self._conn: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
        if migrate:
            try:
                self.migrate()
            except BaseException:
                self._conn.close()
                raise

    def migrate(self) -> None:
        """Create the leases table if missing, or add the columns an older one lacks."""
        with self._lock, self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentfsm:leases'))")
            for statement in self._sql.create:
                self._conn.execute(statement)

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run (see `LeaseStore.claim`)."""
        params = {**self._sql.statuses, **self._sql.params("", worker_id, this_process(), ttl)}
        with self._lock:
            for _ in range(_CLAIM_TRIES):
                row = self._conn.execute(self._sql.claim, params).fetchone()
                if row is not None:
                    run_id: str = row[0]
                    self._taken[run_id] = holder_of(run_id, row[1:])
                    return run_id
                # Nothing taken: either nothing is runnable, or a racing claim took our
                # candidate between our snapshot and our insert. Only the second is worth
                # another try.
                if not self._claimable():
                    return None
        return None

    def taken_over(self, run_id: str) -> Holder | None:
        """The holder whose lapsed lease this handle's last claim of `run_id` took (see
        `SQLiteLeases.taken_over`)."""
        with self._lock:
            return self._taken.pop(run_id, None)

    def _claimable(self) -> bool:
        return self._conn.execute(self._sql.free, self._sql.statuses).fetchone() is not None

    def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        """Take the lease of `run_id` if nobody live holds it (see `LeaseRows.take`)."""
        steps = _taking(self._sql, run_id, self._sql.params(run_id, holder, process, ttl))
        answer: Any = None
        with self._lock:
            while True:
                try:
                    statement, args, fetch = steps.send(answer)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                cursor = self._conn.execute(statement, args)
                answer = cursor.fetchone() if fetch else cursor.rowcount

    def read(self, run_id: str) -> Holder | None:
        """The lease's holder, live or lapsed (see `LeaseRows.read`)."""
        with self._lock:
            return holder_of(run_id, self._conn.execute(self._sql.read, (run_id,)).fetchone())

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`)."""
        with self._lock:
            cursor = self._conn.execute(self._sql.renew, (float(ttl), run_id, worker_id))
            return cursor.rowcount == 1

    def release(
        self, run_id: str, worker_id: str, *, retry_after: float = 0.0, wake_at: float | None = None
    ) -> None:
        """Give the lease up (see `LeaseStore.release`), consuming the timers the claim saw
        due; `wake_at` (seconds since the epoch) is the run's next time (an earlier one set
        meanwhile stays), kept on its lease row as `SQLiteLeases` keeps it."""
        params = {"hold": float(retry_after), "wake": wake_at, "run": run_id, "worker": worker_id}
        with self._lock:
            self._conn.execute(self._sql.release, params)
            self._conn.execute(self._sql.drop_ended, {"run": run_id, "ended": self._sql.ended})

    def wake(self, conn: psycopg.Connection[Any], run_id: str, at: float | None) -> None:
        """Have `run_id` claimed at `at` (None: now, on the database's clock) at the latest,
        on `conn` (the store's, inside its append's transaction: the time commits with the
        events)."""
        conn.execute(self._sql.wake, {"run": run_id, "at": at})

    def schedule_resume(
        self, conn: psycopg.Connection[Any], run_id: str, at: float, version: int
    ) -> None:
        """Resume the pause made at `version` at `at` (then drive the run), on `conn`."""
        conn.execute(self._sql.schedule_resume, {"run": run_id, "at": at, "version": version})

    def resume_due(self, run_id: str) -> int | None:
        """The version of the pause whose scheduled resume was due when the run was last
        claimed, or None (see `SQLiteLeases.resume_due`)."""
        with self._lock:
            row = self._conn.execute(self._sql.resume_due, (run_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def timers(self, run_id: str) -> tuple[float | None, float | None, int | None]:
        """The run's `(wake_at, resume_at, resume_version)` (for tests and inspection)."""
        with self._lock:
            row = self._conn.execute(self._sql.timers, (run_id,)).fetchone()
        if row is None:
            return (None, None, None)
        wake, resume, version = row
        return (
            None if wake is None else float(wake),
            None if resume is None else float(resume),
            None if version is None else int(version),
        )

    def free(self, run_id: str, holder: str) -> None:
        """Give up a lease `take` took (see `LeaseRows.free`)."""
        with self._lock:
            self._conn.execute(self._sql.give_up, self._sql.freeing(run_id, holder))

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


class AsyncPostgresLeases:
    """The lease table of an `AsyncPostgresEventStore`, on an async connection of its own.

    Open it with `await AsyncPostgresLeases.connect(conninfo)`.

    Args:
        conn: an autocommit `psycopg.AsyncConnection`; the leases own it from now on.
        table_prefix: the store's table prefix.
        runnable: the statuses a worker may claim (kept for symmetry with `PostgresLeases`).
        ended: the statuses in which a run is over: its lease row is deleted when freed.
    """

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        table_prefix: str = "agentfsm_",
        runnable: Sequence[str] = RUNNABLE_STATUSES,
        ended: Sequence[str] = ENDED_STATUSES,
    ) -> None:
        self._sql = _LeaseSql(table_prefix, runnable, ended)
        self._conn = conn

    @classmethod
    async def connect(
        cls,
        conninfo: str,
        *,
        table_prefix: str = "agentfsm_",
        runnable: Sequence[str] = RUNNABLE_STATUSES,
        ended: Sequence[str] = ENDED_STATUSES,
    ) -> AsyncPostgresLeases:
        """Open a connection, and create (or upgrade) the leases table on it."""
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        leases = cls(conn, table_prefix=table_prefix, runnable=runnable, ended=ended)
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentfsm:leases'))")
                for statement in leases._sql.create:
                    await conn.execute(statement)
        except BaseException:
            await conn.close()
            raise
        return leases

    async def _row(self, run_id: str) -> Any:
        return await (await self._conn.execute(self._sql.read, (run_id,))).fetchone()

    async def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        """Take the lease of `run_id` if nobody live holds it (see `LeaseRows.take`)."""
        steps = _taking(self._sql, run_id, self._sql.params(run_id, holder, process, ttl))
        answer: Any = None
        while True:
            try:
                statement, args, fetch = steps.send(answer)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            cursor = await self._conn.execute(statement, args)
            answer = await cursor.fetchone() if fetch else cursor.rowcount

    async def read(self, run_id: str) -> Holder | None:
        """The lease's holder, live or lapsed (see `LeaseRows.read`)."""
        return holder_of(run_id, await self._row(run_id))

    async def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`)."""
        cursor = await self._conn.execute(self._sql.renew, (float(ttl), run_id, worker_id))
        return cursor.rowcount == 1

    async def free(self, run_id: str, holder: str) -> None:
        """Give up a lease `take` took (see `LeaseRows.free`)."""
        await self._conn.execute(self._sql.give_up, self._sql.freeing(run_id, holder))

    async def close(self) -> None:
        """Close the connection."""
        await self._conn.close()
