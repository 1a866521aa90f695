"""Who holds a run's lease (`Holder`), and the lease table a store keeps (`LeaseRows`).

Times are the store's: a row's ages are measured to the store's clock when it was read
(`Holder.read_at`), never across two machines' clocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import attrs

from agentfsm.stores._process import Process, gone

__all__ = [
    "AsyncLeaseRows",
    "Holder",
    "LeaseRows",
    "from_epoch",
    "holder_of",
    "live_holder",
    "takeable",
]

#: How much of a holder's id or host a message shows (both are free text).
_SHOWN = 80


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def from_epoch(seconds: float) -> datetime:
    """A lease row's time (seconds since the epoch) as an aware datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def holder_of(
    run_id: str, row: Sequence[Any] | None, time: Callable[[Any], datetime] | None = None
) -> Holder | None:
    """The holder a lease row names, or None (no row, or a lease given up).

    Args:
        run_id: the run the lease is on.
        row: `(holder, expires, host, pid, process, since, heartbeat, read_at)`.
        time: reads the row's times (`from_epoch` for SQLite's seconds; PostgreSQL's are
            datetimes already).
    """
    if row is None or row[0] is None:
        return None
    worker, expires, host, pid, process, since, beat, read_at = row
    at = time if time is not None else _same
    return Holder(
        run_id=run_id,
        id=worker,
        host=host,
        pid=pid,
        process=process,
        since=None if since is None else at(since),
        heartbeat=None if beat is None else at(beat),
        expires=at(expires),
        read_at=at(read_at),
    )


def _same(value: datetime) -> datetime:
    return value


@attrs.frozen
class Holder:
    """Who holds a run's lease, as the store last saw it (`EventStore.holder`).

    Attributes:
        run_id: the run the lease is on (a root: a subagent run is held with it).
        id: the holder's id: a `Worker`'s `worker_id`, or a drive's (`runner-1a2b3c4d`).
        host: the host of the holder's process (None if unknown).
        pid: its process id (None if unknown).
        process: the key that tells, on that host, whether the process is gone (`Process`).
        since: when it took the lease (None for a row written before this was kept).
        heartbeat: its last renewal (None likewise).
        expires: when the lease lapses unless it is renewed.
        read_at: the store's clock when this was read: ages are measured to it, so no other
            machine's clock enters.
    """

    run_id: str
    id: str
    host: str | None
    pid: int | None
    process: str | None
    since: datetime | None
    heartbeat: datetime | None
    expires: datetime
    read_at: datetime

    @property
    def heartbeat_age(self) -> float | None:
        """Seconds since the last heartbeat, when the store read the row."""
        if self.heartbeat is None:
            return None
        return max(0.0, (self.read_at - self.heartbeat).total_seconds())

    @property
    def live(self) -> bool:
        """Whether its heartbeat goes on: the lease has not lapsed, and its process is not
        known to be gone (`gone`)."""
        return self.expires > self.read_at and not gone(self.host, self.pid, self.process)

    def _where(self) -> list[str]:
        return [f"pid {self.pid} on {_shown(self.host)}"] if self.pid and self.host else []

    def describe(self) -> str:
        """`'w1' (pid 4242 on box, heartbeat 2 s ago)`: who, where, and how alive."""
        age = self.heartbeat_age
        beat = (
            f"heartbeat {age:.0f} s ago"
            if age is not None
            else f"lease until {self.expires.isoformat(timespec='seconds')}"
        )
        return f"'{_shown(self.id)}' ({', '.join([*self._where(), beat])})"

    def stopped(self) -> str:
        """Who held the lease and when its heartbeat stopped (why its calls are unknown)."""
        where = "".join(f" ({w})" for w in self._where())
        if self.heartbeat is None:
            return f"'{_shown(self.id)}'{where}, whose lease lapsed at {self.expires.isoformat()}"
        return (
            f"'{_shown(self.id)}'{where}, whose last heartbeat was at {self.heartbeat.isoformat()}"
        )


def takeable(found: Holder | None) -> bool:
    """Whether a lease row may be taken: free (None), lapsed, or its process gone."""
    return found is None or not found.live


class LeaseRows(Protocol):
    """A store's lease table, on a connection of its own (a heartbeat renews from its thread).

    The `Worker`'s lease stores (`MemoryLeases`, `SQLiteLeases`, `PostgresLeases`) are this,
    over the same rows their claims write: a `Worker`'s claim *is* a driver's lease.
    """

    def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        """Take the lease of `run_id` for `ttl` seconds if `takeable` (in one transaction):
        `(True, the lapsed holder it replaced or None)`, or `(False, the live holder)`."""
        ...

    def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """Extend the holder's lease by `ttl` seconds from now; False if it no longer has it."""
        ...

    def free(self, run_id: str, holder: str) -> None:
        """Give a lease `take` took up (the run's timers, a `Worker`'s, stay as they are)."""
        ...

    def read(self, run_id: str) -> Holder | None:
        """The lease's holder, live or lapsed; None when nobody holds it."""
        ...


class AsyncLeaseRows(Protocol):
    """`LeaseRows` for asyncio code (the same table)."""

    async def take(
        self, run_id: str, holder: str, process: Process, ttl: float
    ) -> tuple[bool, Holder | None]:
        """See `LeaseRows.take`."""
        ...

    async def renew(self, run_id: str, worker_id: str, ttl: float) -> bool:
        """See `LeaseRows.renew`."""
        ...

    async def free(self, run_id: str, holder: str) -> None:
        """See `LeaseRows.free`."""
        ...

    async def read(self, run_id: str) -> Holder | None:
        """See `LeaseRows.read`."""
        ...


def live_holder(found: Holder | None) -> Holder | None:
    """`found` if its heartbeat goes on, else None (what `EventStore.holder` answers)."""
    return found if found is not None and found.live else None
