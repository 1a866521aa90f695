"""Leases: how several workers share the runs of one store, each run driven by one at a time.

A worker `claim`s a runnable run (one whose status is in `RUNNABLE_STATUSES` and whose lease
is free or expired), drives it while its heartbeat `renew`s the lease, and `release`s it when
the run ends or waits. A worker that dies stops renewing; its lease expires after `ttl`
seconds and another worker claims the run and drives it on from the store. If a stale worker
still writes after its lease was taken, it finds its lease lost and stops, and the store's
`expected_version` would refuse its append anyway (a run never forks).

These are the very rows every other driver holds (`EventStore.hold`, see
`agentfsm.stores.lease`): a claim is a driver's lease, so a `Runner.drive` elsewhere is
refused while a worker drives the run, a worker never claims a run a `Runner` drives, and a
worker hands its claim to the Runner it drives with (`Runner.drive(run_id, lease=...)`).
Each class is both: a `LeaseStore` for workers (`claim`, `renew`, `release`) and the store's
`LeaseRows` for drivers (`take`, `renew`, `free`, `read`). A claim records the claiming
process (host, pid) like a `take`, so a `Runner.drive` on its host takes a dead worker's run
at once (another worker's claim waits for the lease to lapse).

Subagent runs (`parent/action`) are never claimed: their parent's call drives them.

Timers (`SQLiteLeases`, `PostgresLeases` and `MemoryLeases`): `release(..., wake_at=t)`
leaves a time on the run's lease row at which `claim` takes the run again whatever its
status (a deadline, an approval's expiry, a retry's end of backoff), and the store's
`after_append` hook
(`agentfsm.runtime.timers.install_timers`) sets such times, and wake-ups for now, in the
append's own transaction (`wake`, `schedule_resume`). See `agentfsm.runtime.timers`.

Backends:

- `MemoryLeases` (in `agentfsm.stores.memory`): the `MemoryStorage`'s lease table, shared
  by the threads of one process.
- `SQLiteLeases`: a lease row per run in the store's file; a claim is one `BEGIN IMMEDIATE`
  transaction (SQLite's write lock serialises claims; times from the given clock), and so
  is a `take`.
- `PostgresLeases` (in `agentfsm.stores.postgres_leases`): one statement that picks
  a candidate with `FOR UPDATE SKIP LOCKED` and takes its lease row if it expired, on the
  database's clock, so workers on many machines agree.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.stores._checks import check_prefix
from agentfsm.stores._process import Process, this_process
from agentfsm.stores.lease import Holder, from_epoch, holder_of, takeable
from agentfsm.stores.memory import MemoryLeases

__all__ = ["LeaseStore", "MemoryLeases", "SQLiteLeases"]

#: The default table's states in which a run has work a worker can do without a person
#: (its `runnable_states`, read from the kinds the table declares).
RUNNABLE_STATUSES: tuple[str, ...] = tuple(sorted(DEFAULT_TABLE.runnable_states))
#: The default table's terminal states: a run in one gives its lease row up when released.
ENDED_STATUSES: tuple[str, ...] = tuple(sorted(DEFAULT_TABLE.terminal_states))


class LeaseStore(Protocol):
    """What a `Worker` needs from a store to share runs with other workers."""

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run for `ttl` seconds; its id, or None."""
        ...

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the worker's lease by `ttl` seconds from now; False if it no longer has it."""
        ...

    def release(
        self, run_id: str, worker_id: str, *, retry_after: float = 0.0, wake_at: float | None = None
    ) -> None:
        """Give the lease up; nobody claims the run again for `retry_after` seconds.

        `wake_at` (seconds since the epoch, where the store keeps timers): claim the run
        again at that time whatever its status. A `Worker` passes it only when set.
        """
        ...


def _in(statuses: Iterable[str]) -> str:
    return ", ".join(f"'{s}'" for s in statuses)  # our own constants, never user input


class SQLiteLeases:
    """Leases in the SQLite file of a `SQLiteEventStore` (a `leases` table beside its runs).

    Opens its own connection; every process's workers open their own `SQLiteLeases`. Safe
    to share between threads: one call at a time. A store's own lease rows are given the
    store's connection (`connection=`) for everything its driver does in its own thread
    (taking, giving up, reading): a second connection's commits would make the store's
    connection drop its page cache at every drive. Only the heartbeat, which renews from its
    own thread, opens a connection of its own, the first time it renews.

    A lease row also keeps the run's timers: `wake_at` (drive the run then, whatever its
    status) and `resume_at` / `resume_version` (resume the pause made at that version,
    then drive it). `claim` takes a run that is runnable, or whose time has come, and
    whose lease is free (a released run's `retry_after` hold gives way to a due time: a
    wake-up for now overrides it). A timer is consumed by the `release` of the claim that
    saw it due (`claimed_at`), never by the claim: a worker that dies holding the run
    leaves it due, and the next claim after its lease expires sees it again. A time set
    while the run was held (a steering append's wake-up, by the store's hook) survives the
    release. A driver's `take` and `free` leave the timers alone.

    Args:
        path: the store's database file.
        table_prefix: the store's table prefix.
        clock: seconds since the epoch (the same clock on every process of the machine).
        busy_timeout: seconds a claim waits for another process's write lock.
        runnable: the statuses a worker may claim (the store's table's `runnable_states`;
            the default table's unless given).
        synchronous: `"FULL"` or `"NORMAL"`, as for the store (a store opens its lease rows
            with its own: a lease is as durable as the events it guards).
        connection: the store's connection, to use from the store's thread (see above).
        ended: the statuses in which a run is over (the store's table's terminal states):
            its lease row is deleted when it is released or freed in one.

    The file must have been opened by a `SQLiteEventStore` of this version first (it
    creates and upgrades the schema the claim reads).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table_prefix: str = "agentfsm_",
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 30.0,
        runnable: Sequence[str] = RUNNABLE_STATUSES,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        connection: sqlite3.Connection | None = None,
        ended: Sequence[str] = ENDED_STATUSES,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._beat: sqlite3.Connection | None = None
        p = check_prefix(table_prefix)
        self.path = os.fspath(path)
        self.clock = clock
        self._runs = f"{p}runs"
        self._leases = leases = f"{p}leases"
        self._lock = threading.RLock()
        self._taken: dict[str, Holder | None] = {}
        self._owned = connection is None
        self._conn = self._connect() if connection is None else connection
        self._runnable = tuple(runnable)
        self._migrate()
        # A claim takes first the run whose time came first (a wake-up or a scheduled
        # resume), then the one that became runnable first (runs.status_at), never by id:
        # ids need not grow over time, and a filling queue must not starve high ones. Each
        # part reads the head of an index and steps over held rows only (a few per
        # worker), so a claim costs the same at 50 or 50,000 runnable (issue 32).
        free = "(l.worker_id IS NULL OR l.expires_at <= :now)"
        self._due_sql = (
            " UNION ALL ".join(
                f"SELECT * FROM (SELECT l.run_id, l.{column} AS t FROM {leases} l "
                f"WHERE l.{column} <= :now AND {free} ORDER BY l.{column} LIMIT 1)"
                for column in ("wake_at", "resume_at")
            )
            + " ORDER BY t LIMIT 1"
        )
        # A free or lapsed lease row, or none (a run no driver held yet); a row released
        # with a hold (`retry_after`) waits for it to pass.
        self._ready_sql = (
            " UNION ALL ".join(
                f"SELECT * FROM (SELECT r.run_id, r.status_at AS t FROM {self._runs} r "
                f"LEFT JOIN {leases} l ON l.run_id = r.run_id WHERE r.status = '{status}' "
                "AND instr(r.run_id, '/') = 0 AND (l.run_id IS NULL OR l.expires_at <= :now) "
                "ORDER BY r.status_at, r.run_id LIMIT 1)"
                for status in sorted(runnable)  # our own constants, never user input
            )
            + " ORDER BY t, run_id LIMIT 1"
        )
        # A run that ends gives its lease row up: rows are kept for the runs that may be
        # driven again, not for every run ever driven.
        self._ended_sql = (
            f"DELETE FROM {leases} WHERE run_id = :run AND worker_id IS NULL AND "
            f"(SELECT status FROM {self._runs} WHERE run_id = :run) IN ({_in(ended)})"
        )
        # A claim and a take write the holder alike; a take leaves `claimed_at`'s timers be.
        self._hold_sql = (
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, claimed_at, host, pid, "
            "process, heartbeat_at) VALUES (:run, :worker, :expires, :now, :host, :pid, "
            ":process, :now) ON CONFLICT (run_id) DO UPDATE SET "
            "worker_id = excluded.worker_id, expires_at = excluded.expires_at, "
            "claimed_at = excluded.claimed_at, host = excluded.host, pid = excluded.pid, "
            "process = excluded.process, heartbeat_at = excluded.heartbeat_at"
        )
        self._read_sql = (
            "SELECT worker_id, expires_at, host, pid, process, claimed_at, heartbeat_at "
            f"FROM {leases} WHERE run_id = ?"
        )
        # Every assignment reads the row as it was (SQL's rule, and SQLite's).
        self._release_sql = (
            f"UPDATE {leases} SET worker_id = NULL, expires_at = :hold, "
            "wake_at = CASE WHEN wake_at > claimed_at "
            "THEN min(wake_at, coalesce(:wake, wake_at)) ELSE :wake END, "
            "resume_version = CASE WHEN resume_at <= claimed_at THEN NULL "
            "ELSE resume_version END, "
            "resume_at = CASE WHEN resume_at <= claimed_at THEN NULL ELSE resume_at END "
            "WHERE run_id = :run AND worker_id = :worker"
        )
        self._wake_sql = (
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, wake_at) "
            "VALUES (?, NULL, 0, ?) ON CONFLICT (run_id) DO UPDATE SET "
            "wake_at = min(coalesce(wake_at, excluded.wake_at), excluded.wake_at)"
        )
        self._resume_sql = (
            f"INSERT INTO {leases} (run_id, worker_id, expires_at, resume_at, resume_version) "
            "VALUES (?, NULL, 0, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
            "resume_at = excluded.resume_at, resume_version = excluded.resume_version"
        )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        return conn

    def _migrate(self) -> None:
        c = self._conn
        # Read first: a file whose table is up to date takes no write lock to open.
        if {r[1] for r in c.execute(f"PRAGMA table_info({self._leases})")} >= _COLUMNS:
            return
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {self._leases} (run_id TEXT PRIMARY KEY, "
                "worker_id TEXT, expires_at REAL NOT NULL, claimed_at REAL, wake_at REAL, "
                "resume_at REAL, resume_version INTEGER, host TEXT, pid INTEGER, "
                "process TEXT, heartbeat_at REAL)"
            )
            have = {r[1] for r in c.execute(f"PRAGMA table_info({self._leases})")}
            for column, kind in _ADDED_COLUMNS:
                if column not in have:  # a file from before timers or holders: add them
                    c.execute(f"ALTER TABLE {self._leases} ADD COLUMN {column} {kind}")
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {self._leases}_by_wake ON {self._leases} (wake_at)"
            )
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {self._leases}_by_resume ON {self._leases} (resume_at)"
            )
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def _transaction(self, work: Callable[[sqlite3.Connection, float], Any]) -> Any:
        """`work(conn, now)` in one `BEGIN IMMEDIATE` transaction, one caller at a time."""
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                done = work(c, self.clock())
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
            return done

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run, or one whose time has come (see
        `LeaseStore.claim`)."""

        def work(c: sqlite3.Connection, now: float) -> str | None:
            row = c.execute(self._due_sql, {"now": now}).fetchone()
            if row is None and self._runnable:
                row = c.execute(self._ready_sql, {"now": now}).fetchone()
            if row is None:
                return None
            run_id = str(row[0])
            before = c.execute(self._read_sql, (run_id,)).fetchone()
            self._taken[run_id] = self._holder(run_id, before, now)
            c.execute(self._hold_sql, _held(run_id, worker_id, this_process(), now, ttl))
            return run_id

        run_id: str | None = self._transaction(work)
        return run_id

    def taken_over(self, run_id: str) -> Holder | None:
        """The holder whose lapsed lease this handle's last claim of `run_id` took (None: it
        was free); asked once, by the claiming worker (the reason of a call it left)."""
        with self._lock:
            return self._taken.pop(run_id, None)

    def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        """Take the lease of `run_id` if nobody live holds it (see `LeaseRows.take`)."""

        def work(c: sqlite3.Connection, now: float) -> tuple[bool, Holder | None]:
            found = self._holder(run_id, c.execute(self._read_sql, (run_id,)).fetchone(), now)
            if not takeable(found):
                return False, found
            c.execute(self._hold_sql, _held(run_id, holder, process, now, ttl))
            return True, found

        taken: tuple[bool, Holder | None] = self._transaction(work)
        return taken

    def read(self, run_id: str) -> Holder | None:
        """The lease's holder, live or lapsed (see `LeaseRows.read`)."""
        with self._lock:
            row = self._conn.execute(self._read_sql, (run_id,)).fetchone()
            return self._holder(run_id, row, self.clock())

    @staticmethod
    def _holder(run_id: str, row: Any, now: float) -> Holder | None:
        # The row says when it was read by the store's clock: `now`, asked in the transaction.
        return holder_of(run_id, None if row is None else (*row, now), from_epoch)

    def resume_due(self, run_id: str) -> int | None:
        """The version of the pause whose scheduled resume was due when the run was last
        claimed, or None: the claiming worker resumes exactly that pause."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT resume_version FROM {self._leases} WHERE run_id = ? "
                "AND resume_at <= claimed_at",
                (run_id,),
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`); with a store's connection, on one of
        its own (a private in-memory database has no other driver: nothing to renew)."""
        with self._lock:
            if self._owned:
                conn = self._conn
            elif self.path in ("", ":memory:"):
                return True
            else:
                if self._beat is None:
                    self._beat = self._connect()
                conn = self._beat
            now = self.clock()
            cursor = conn.execute(
                f"UPDATE {self._leases} SET expires_at = ?, heartbeat_at = ? "
                "WHERE run_id = ? AND worker_id = ? AND expires_at > ?",
                (now + ttl, now, run_id, worker_id, now),
            )
            return cursor.rowcount == 1

    def release(
        self, run_id: str, worker_id: str, *, retry_after: float = 0.0, wake_at: float | None = None
    ) -> None:
        """Give the lease up (see `LeaseStore.release`), consuming the timers the claim saw
        due; `wake_at` is the run's next time (the earlier one set meanwhile stays)."""
        with self._lock:
            self._conn.execute(
                self._release_sql,
                {
                    "hold": self.clock() + retry_after,
                    "wake": wake_at,
                    "run": run_id,
                    "worker": worker_id,
                },
            )
            self._conn.execute(self._ended_sql, {"run": run_id})

    def free(self, run_id: str, holder: str) -> None:
        """Give up a lease `take` took, leaving its timers (see `LeaseRows.free`)."""
        with self._lock:
            self._conn.execute(
                f"UPDATE {self._leases} SET worker_id = NULL, expires_at = ? "
                "WHERE run_id = ? AND worker_id = ?",
                (self.clock(), run_id, holder),
            )
            self._conn.execute(self._ended_sql, {"run": run_id})

    def wake(self, conn: sqlite3.Connection, run_id: str, at: float | None) -> None:
        """Have `run_id` claimed at `at` (None: now, for a wake-up) at the latest, on `conn`
        (the store's, inside its append's transaction: the time commits with the events)."""
        conn.execute(self._wake_sql, (run_id, self.clock() if at is None else at))

    def schedule_resume(
        self, conn: sqlite3.Connection, run_id: str, at: float, version: int
    ) -> None:
        """Resume the pause made at `version` at `at` (then drive the run), on `conn`."""
        conn.execute(self._resume_sql, (run_id, at, version))

    def timers(self, run_id: str) -> tuple[float | None, float | None, int | None]:
        """The run's `(wake_at, resume_at, resume_version)` (for tests and inspection)."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT wake_at, resume_at, resume_version FROM {self._leases} WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        return (None, None, None) if row is None else (row[0], row[1], row[2])

    def close(self) -> None:
        """Close the connections it opened (a store's own stays the store's to close)."""
        with self._lock:
            if self._owned:
                self._conn.close()
            if self._beat is not None:
                self._beat.close()


def _held(run_id: str, holder: str, p: Process, now: float, ttl: float) -> dict[str, Any]:
    """`_hold_sql`'s parameters: `holder` in process `p` holds the run for `ttl` from `now`."""
    return {
        "run": run_id,
        "worker": holder,
        "expires": now + ttl,
        "now": now,
        "host": p.host,
        "pid": p.pid,
        "process": p.key,
    }


_ADDED_COLUMNS = (
    ("claimed_at", "REAL"),
    ("wake_at", "REAL"),
    ("resume_at", "REAL"),
    ("resume_version", "INTEGER"),
    ("host", "TEXT"),
    ("pid", "INTEGER"),
    ("process", "TEXT"),
    ("heartbeat_at", "REAL"),
)
_COLUMNS = frozenset({"run_id", "worker_id", "expires_at", *(c for c, _ in _ADDED_COLUMNS)})
