"""Leases: how several workers share the runs of one store, each run driven by one at a time.

A worker `claim`s a runnable run (one whose status is in `RUNNABLE_STATUSES` and whose lease
is free or expired), drives it while it `renew`s the lease, and `release`s it when the run
ends or waits. A worker that dies stops renewing; its lease expires after `ttl` seconds and
another worker claims the run and resumes it from the store. A lease is an optimisation of
who works on what, not the safety net: if a stale worker still writes after its lease was
taken, the store's `expected_version` refuses its append and the Runner stops (it never
forks a run).

Subagent runs (`parent/action`) are never claimed: their parent's call drives them.

Backends:

- `MemoryLeases`: a table in memory, shared by the threads of one process.
- `SQLiteLeases`: a lease row per run in the store's file; a claim is one `BEGIN IMMEDIATE`
  transaction (SQLite's write lock serialises claims; times from the given clock).
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
from typing import Protocol

import attrs

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.stores.base import EventStore
from agentfsm.stores.sqlite import check_prefix

__all__ = [
    "RUNNABLE_STATUSES",
    "LeaseStore",
    "MemoryLeaseTable",
    "MemoryLeases",
    "SQLiteLeases",
]

#: The default table's states in which a run has work a worker can do without a person
#: (its `runnable_states`, read from the kinds the table declares).
RUNNABLE_STATUSES: tuple[str, ...] = tuple(sorted(DEFAULT_TABLE.runnable_states))


class LeaseStore(Protocol):
    """What a `Worker` needs from a store to share runs with other workers."""

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run for `ttl` seconds; its id, or None."""
        ...

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the worker's lease by `ttl` seconds from now; False if it no longer has it."""
        ...

    def release(self, run_id: str, worker_id: str, *, retry_after: float = 0.0) -> None:
        """Give the lease up; nobody claims the run again for `retry_after` seconds."""
        ...


@attrs.frozen
class _Lease:
    worker_id: str | None
    expires_at: float


@attrs.define
class MemoryLeaseTable:
    """The leases of a memory store; share one between the `MemoryLeases` of all workers."""

    leases: dict[str, _Lease] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)


class MemoryLeases:
    """Leases over a `MemoryEventStore`'s runs (for threads of one process and tests).

    Args:
        store: the store whose runs are claimed.
        table: the lease table the workers share (a fresh one unless given).
        clock: seconds, monotonic (injected in tests to expire leases).
    """

    def __init__(
        self,
        store: EventStore,
        table: MemoryLeaseTable | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.table = table if table is not None else MemoryLeaseTable()
        self.clock = clock

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run (see `LeaseStore.claim`)."""
        with self.table.lock:
            now = self.clock()
            for info in self.store.runs(self.store.reducer.table.runnable_states):
                if "/" in info.run_id:
                    continue
                lease = self.table.leases.get(info.run_id)
                if lease is None or lease.expires_at <= now:
                    self.table.leases[info.run_id] = _Lease(worker_id, now + ttl)
                    return info.run_id
        return None

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`)."""
        with self.table.lock:
            now = self.clock()
            lease = self.table.leases.get(run_id)
            if lease is None or lease.worker_id != worker_id or lease.expires_at <= now:
                return False
            self.table.leases[run_id] = _Lease(worker_id, now + ttl)
            return True

    def release(self, run_id: str, worker_id: str, *, retry_after: float = 0.0) -> None:
        """Give the lease up (see `LeaseStore.release`)."""
        with self.table.lock:
            lease = self.table.leases.get(run_id)
            if lease is not None and lease.worker_id == worker_id:
                self.table.leases[run_id] = _Lease(None, self.clock() + retry_after)


def _in(statuses: Iterable[str]) -> str:
    return ", ".join(f"'{s}'" for s in statuses)  # our own constants, never user input


class SQLiteLeases:
    """Leases in the SQLite file of a `SQLiteEventStore` (a `leases` table beside its runs).

    Opens its own connection; every process's workers open their own `SQLiteLeases`.

    Args:
        path: the store's database file.
        table_prefix: the store's table prefix.
        clock: seconds since the epoch (the same clock on every process of the machine).
        busy_timeout: seconds a claim waits for another process's write lock.
        runnable: the statuses a worker may claim (the store's table's `runnable_states`;
            the default table's unless given).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table_prefix: str = "agentfsm_",
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 30.0,
        runnable: Sequence[str] = RUNNABLE_STATUSES,
    ) -> None:
        p = check_prefix(table_prefix)
        self.clock = clock
        self._runs = f"{p}runs"
        self._leases = f"{p}leases"
        self._conn = sqlite3.connect(
            os.fspath(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._leases} (run_id TEXT PRIMARY KEY, "
            "worker_id TEXT, expires_at REAL NOT NULL)"
        )
        self._claim_sql = (
            f"SELECT r.run_id FROM {self._runs} r LEFT JOIN {self._leases} l "
            f"ON l.run_id = r.run_id WHERE r.status IN ({_in(runnable)}) "
            "AND instr(r.run_id, '/') = 0 AND (l.run_id IS NULL OR l.expires_at <= ?) "
            "ORDER BY r.run_id LIMIT 1"
        )

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run (see `LeaseStore.claim`)."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            now = self.clock()
            row = c.execute(self._claim_sql, (now,)).fetchone()
            if row is None:
                c.execute("COMMIT")
                return None
            c.execute(
                f"INSERT INTO {self._leases} (run_id, worker_id, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET worker_id = excluded.worker_id, "
                "expires_at = excluded.expires_at",
                (row[0], worker_id, now + ttl),
            )
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        run_id: str = row[0]
        return run_id

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`)."""
        now = self.clock()
        cursor = self._conn.execute(
            f"UPDATE {self._leases} SET expires_at = ? "
            "WHERE run_id = ? AND worker_id = ? AND expires_at > ?",
            (now + ttl, run_id, worker_id, now),
        )
        return cursor.rowcount == 1

    def release(self, run_id: str, worker_id: str, *, retry_after: float = 0.0) -> None:
        """Give the lease up (see `LeaseStore.release`)."""
        self._conn.execute(
            f"UPDATE {self._leases} SET worker_id = NULL, expires_at = ? "
            "WHERE run_id = ? AND worker_id = ?",
            (self.clock() + retry_after, run_id, worker_id),
        )

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
