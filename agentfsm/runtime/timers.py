"""Durable timers, one design for both drivers: when a run must be driven again by itself.

A run's own clock acts on it at times its log or its driver knows: its deadline, an
approval's expiry (`_wakeups.next_due`), a paused run's scheduled resume (`pause_until`),
and a failed safe call's retry after its backoff (`RunResult.wake_at`). None of these
waits in a process: each is written down in the same transaction as the event that sets
it (by the store's `after_append` hook) or when the driver lets the run go, and the driver
that finds it due drives the run, which settles what is overdue (`Planner.overdue`) or
retries the call. A crash in between loses nothing, and a timer that finds nothing to do
costs one load.

Two kinds of driver keep them:

- `agentfsm.runtime.procrastinate` (PostgreSQL): a timer is a scheduled job
  (`agentfsm.timer`), deferred in the append's transaction or when an advance ends.
- `Worker` with `SQLiteLeases` or `PostgresLeases` (`agentfsm.stores.leases`): a timer is
  a time on the run's lease row (`wake_at`, and `resume_at` for a pause's resume), set by
  the store's `after_append` hook in the append's transaction or by `release`; `claim`
  also takes runs whose time has come, whatever their status.

This module is what both share: the wake-ups a batch causes including a scheduled resume
(`due_wakes`), the next time a driven run needs its driver again (`next_wake`), the verb
that sets a resume (`pause_until`), and the exact resume a due resume makes
(`resume_paused`).
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from agentfsm.errors import ConcurrencyConflictError, LifecycleError, RunNotFoundError
from agentfsm.events import models as m
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.guardset import GuardSet
from agentfsm.names import StateKind
from agentfsm.record import RunRecord
from agentfsm.runtime._wakeups import Wake, next_due, wakeups
from agentfsm.runtime.agent import RunResult
from agentfsm.runtime.control import pause
from agentfsm.stores.base import EventStore
from agentfsm.stores.leases import SQLiteLeases
from agentfsm.stores.sqlite import SQLiteEventStore

__all__ = ["install_timers", "pause_until"]

#: The resume a verb asks the store's hook to set with the append it makes (`pause_until`).
S = TypeVar("S", bound=EventStore)

_RESUME_AT: contextvars.ContextVar[tuple[str, datetime] | None] = contextvars.ContextVar(
    "agentfsm_resume_at", default=None
)


def due_wakes(
    record: RunRecord, types: tuple[str, ...], table: TransitionTable
) -> tuple[Wake, ...]:
    """`wakeups(record, types, table)`, plus the scheduled resume of a `pause_until` (a
    `Wake` with `resume` = the pause's version, for the run itself)."""
    found = wakeups(record, types, table)
    also = _RESUME_AT.get()
    if also is not None and also[0] == record.run_id and "run.paused" in types:
        found = (*found, Wake(record.run_id, also[1], resume=record.version))
    return found


def wants_wakes(record: RunRecord, types: tuple[str, ...], table: TransitionTable) -> bool:
    """Whether an append of `types` leading to `record` causes any wake-up or timer: what
    a hook's `wants` answers, so the other appends need no transaction of the hook's."""
    return bool(due_wakes(record, types, table))


def next_wake(
    result: RunResult,
    table: TransitionTable,
    guards: GuardSet | None = None,
    now: datetime | None = None,
) -> datetime | None:
    """When a driver must drive the run again by itself, after driving it to `result`: the
    earliest of its (and its open subagent runs') deadline and approval expiries, and a
    retry's end of backoff (`result.wake_at`); None if nothing is due by time.

    `guards`: the driving Runner's (`runner.reducer.guards`), whose deadlines (a
    `Deadline` guard given to the Runner, not in the log) are times too, while still ahead
    (one already past was settled by the drive, or has no edge where the run stands).
    """
    open_runs = [
        r.record
        for r in (result, *result.children.values())
        if r.record.status not in table.terminal_states
    ]
    times = [due for record in open_runs if (due := next_due(record)) is not None]
    if guards is not None:
        at = now if now is not None else datetime.now(UTC)
        for record in open_runs:
            left = guards.remaining(record, at)
            if left is not None and left > 0:
                times.append(at + timedelta(seconds=left))
    if result.wake_at is not None:
        times.append(result.wake_at)
    return min(times) if times else None


def sets_timers(store: Any) -> bool:
    """Whether `store`'s appends set the timers they call for (a driver's hook is on it)."""
    return bool(getattr(getattr(store, "after_append", None), "sets_timers", False))


@contextmanager
def _resuming_at(run_id: str, at: datetime) -> Iterator[None]:
    token = _RESUME_AT.set((run_id, at))
    try:
        yield
    finally:
        _RESUME_AT.reset(token)


def pause_until(
    store: EventStore, run_id: str, reason: str, resume_at: datetime, **kwargs: Any
) -> RunRecord:
    """`pause` a run until `resume_at`, when a timer resumes it and has it driven on.

    The timer is set in the pause's transaction, and resumes only this pause (not a later one).
    The store must be one whose appends set timers: `engine.store()` (Procrastinate) or a SQLite
    store given `install_timers(store, leases)`.

    Raises:
        ValueError: the store sets no timers (the pause would never end by itself), or
            `resume_at` is naive.
    """
    if not sets_timers(store):
        raise ValueError(
            "pause_until needs a store whose appends set timers: a Procrastinate engine's "
            "store, or a SQLite store given install_timers(store, SQLiteLeases(...))"
        )
    if resume_at.tzinfo is None:
        raise ValueError("resume_at must be an aware datetime")
    with _resuming_at(run_id, resume_at):
        return pause(store, run_id, reason, **kwargs)


def resume_paused(
    store: EventStore,
    run_id: str,
    version: int,
    table: TransitionTable,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> bool:
    """A due scheduled resume: `run.resumed`, appended only if the run is still in the pause
    made at `version` (never undoing a later pause, nor resuming a run that moved on).

    Returns whether it resumed the run.
    """
    try:
        record = store.load(run_id)
    except RunNotFoundError:
        return False
    if record.version != version or table.kind(record.status) != StateKind.PAUSED:
        return False
    event = m.RunResumed(run_id=run_id, sequence=version + 1, occurred_at=clock().isoformat())
    try:
        store.append(run_id, [event], version)
    except (ConcurrencyConflictError, LifecycleError):
        return False  # moved on meanwhile: not this timer's to undo
    return True


class LeaseTimers:
    """A SQLite store's `after_append` that keeps a `Worker`'s wake-ups and timers on the
    lease rows of `leases`, in the append's transaction (see the module docstring).

    A wake-up for now makes the run claimable at once (even within a released run's
    `retry_after` hold); a timer makes it claimable at its time whatever its status; a
    `pause_until` sets the pause's resume.
    """

    #: `pause_until` accepts a store with this hook.
    sets_timers = True

    def __init__(self, leases: Any, table: TransitionTable) -> None:
        self.leases = leases
        self.table = table

    def wants(self, record: RunRecord, types: tuple[str, ...]) -> bool:
        """Whether the batch sets anything (most of a driver's appends do not)."""
        return wants_wakes(record, types, self.table)

    def __call__(self, conn: Any, record: RunRecord, types: tuple[str, ...]) -> None:
        for wake in due_wakes(record, types, self.table):
            # A wake-up for now is now on the leases' own clock (the database's, on
            # PostgreSQL): None.
            at = None if wake.at is None else wake.at.timestamp()
            if wake.resume is None:
                self.leases.wake(conn, wake.run_id, at)
            else:
                assert at is not None
                self.leases.schedule_resume(conn, wake.run_id, at, wake.resume)


def install_timers(store: S, leases: Any) -> S:
    """Give a store the hook that keeps `leases`' wake-ups and timers; returns it.

    A SQLite store with `SQLiteLeases` on its file, or a `PostgresEventStore` with
    `PostgresLeases` on its database (same table prefix). Steer (and submit) through such
    a store in every process that does: an append through a store without it still makes
    runs claimable by their status, but sets no timer at its own time (the driver's
    `release` re-arms the next one when it lets a run go).
    """
    if isinstance(store, SQLiteEventStore):
        if not isinstance(leases, SQLiteLeases):
            raise ValueError("a SQLite store keeps its timers on SQLiteLeases")
        if os.path.realpath(store.path) != os.path.realpath(leases.path):
            raise ValueError(f"the leases are in '{leases.path}', the store in '{store.path}'")
    elif not hasattr(leases, "schedule_resume"):
        raise ValueError(f"{type(leases).__name__} keeps no timers")
    hooked: Any = store  # both stores take an `after_append`; the base class does not
    hooked.after_append = LeaseTimers(leases, store.reducer.table)
    return store
