"""Leases in PostgreSQL, for workers on many machines (needs the `postgres` extra).

A claim is one statement: pick the first runnable run whose lease row is missing or expired,
locking its runs row with `FOR UPDATE SKIP LOCKED` (so concurrent claims pass over each
other's candidates instead of queueing on them), and insert or take over its lease row only
if that row is still expired when the insert lands. Expiry is on the database's clock
(`now()`), so the workers' clocks need not agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    import psycopg
except ImportError as exc:
    raise missing_extra("PostgresLeases", "postgres", exc) from exc

from agentfsm.stores.leases import RUNNABLE_STATUSES
from agentfsm.stores.sqlite import check_prefix

__all__ = ["PostgresLeases"]

_CLAIM_TRIES = 3  # a claim can lose a candidate to a racing one; try the next candidate


class PostgresLeases:
    """Leases beside a `PostgresEventStore`'s tables (a `leases` table with its prefix).

    Args:
        conninfo: a libpq connection string (its own autocommit connection).
        table_prefix: the store's table prefix.
        migrate: create the leases table now (idempotent).
        runnable: the statuses a worker may claim (the store's table's `runnable_states`;
            the default table's unless given).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        table_prefix: str = "agentfsm_",
        migrate: bool = True,
        runnable: Sequence[str] = RUNNABLE_STATUSES,
    ):
        p = check_prefix(table_prefix)
        runs, leases = f"{p}runs", f"{p}leases"
        self._runnable = list(runnable)
        self._conn: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
        self._create = (
            f"CREATE TABLE IF NOT EXISTS {leases} (run_id text PRIMARY KEY, worker_id text, "
            "expires_at timestamptz NOT NULL)"
        )
        free = (
            f"SELECT r.run_id FROM {runs} r LEFT JOIN {leases} l "
            "ON l.run_id = r.run_id WHERE r.status = ANY(%(statuses)s) "
            "AND strpos(r.run_id, '/') = 0 AND (l.run_id IS NULL OR l.expires_at <= now()) "
            "ORDER BY r.run_id LIMIT 1"
        )
        self._free = free
        self._claim = (
            f"WITH candidate AS ({free} FOR UPDATE OF r SKIP LOCKED) "
            f"INSERT INTO {leases} (run_id, worker_id, expires_at) "
            "SELECT run_id, %(worker)s, now() + make_interval(secs => %(ttl)s) FROM candidate "
            "ON CONFLICT (run_id) DO UPDATE SET worker_id = EXCLUDED.worker_id, "
            f"expires_at = EXCLUDED.expires_at WHERE {leases}.expires_at <= now() "
            "RETURNING run_id"
        )
        self._renew = (
            f"UPDATE {leases} SET expires_at = now() + make_interval(secs => %s) "
            "WHERE run_id = %s AND worker_id = %s AND expires_at > now()"
        )
        self._release = (
            f"UPDATE {leases} SET worker_id = NULL, "
            "expires_at = now() + make_interval(secs => %s) WHERE run_id = %s AND worker_id = %s"
        )
        if migrate:
            self.migrate()

    def migrate(self) -> None:
        """Create the leases table if missing."""
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentfsm:leases'))")
            self._conn.execute(self._create)

    def claim(self, worker_id: str, ttl: float) -> str | None:
        """Take the lease of one runnable, unleased run (see `LeaseStore.claim`)."""
        params = {"statuses": self._runnable, "worker": worker_id, "ttl": float(ttl)}
        for _ in range(_CLAIM_TRIES):
            row = self._conn.execute(self._claim, params).fetchone()
            if row is not None:
                run_id: str = row[0]
                return run_id
            # Nothing taken: either nothing is runnable, or a racing claim took our candidate
            # between our snapshot and our insert. Only the second is worth another try.
            if not self._claimable():
                return None
        return None

    def _claimable(self) -> bool:
        params = {"statuses": self._runnable}
        return self._conn.execute(self._free, params).fetchone() is not None

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the lease (see `LeaseStore.renew`)."""
        return self._conn.execute(self._renew, (float(ttl), run_id, worker_id)).rowcount == 1

    def release(
        self, run_id: str, worker_id: str, *, retry_after: float = 0.0, wake_at: float | None = None
    ) -> None:
        """Give the lease up (see `LeaseStore.release`).

        `wake_at` is accepted and not kept: these leases hold no timers (on PostgreSQL the
        Procrastinate engine keeps them). A retry's backoff still holds, as `retry_after`
        (the run stays runnable); a waiting run's deadline or expiry is settled when it is
        next driven.
        """
        self._conn.execute(self._release, (float(retry_after), run_id, worker_id))

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
