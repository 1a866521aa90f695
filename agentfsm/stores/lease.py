"""A run's lease: one driver at a time, kept alive by a heartbeat, taken over only from the dead.

Whoever drives a run (a `Runner`, an `AsyncRunner`, an SDK adapter's run, a `Worker`, a
Procrastinate job) holds its lease: a row beside the run's log in the store's own lease table
(`leases` in the SQLite file or the PostgreSQL database; a table shared by the handles of one
`MemoryStorage`), saying who holds it (an id, the host and pid of its process), since when,
and its last heartbeat. While a driver holds it, a second driver is refused at once with
`RunHeldError` naming the holder (or waits for it, `wait=` seconds), and so are the steering
verbs that would change the run under it (`pause`, `append_event`, `migrate`).

A lease lasts `ttl` seconds past its last renewal (`LEASE_TTL`, 30 s, by default); while the
driver works a heartbeat renews it every `ttl / 3` seconds on its own clock, never per append:
for the sync drivers one thread per process renews all their leases (`Lease.kept`), for the
async ones a task per drive (`AsyncLease.kept`). So a tool that runs for minutes keeps it. A
lease may be taken over only when its heartbeat stopped:

- its ttl passed without a renewal: the one rule across machines;
- or, on the same host (same boot and pid namespace), its holder's process is gone: the pid
  runs no more, runs another program (its start time differs: a reused pid), or is a zombie.
  So a SIGKILLed driver's runs are driven on at once on its own machine.

A driver knows its lease is `lost` (a renewal was refused: another took the run over; or none
got through for `ttl` seconds: a partition, and another may take it over any moment) before
anyone can take it over, and stops before its next write (`LeaseLostError`); a late append
would be refused by `expected_version` anyway.

Subagent runs (`parent/action`) are driven by their parent's call: their lease is their root's.
A drive started inside another drive, in its context (a subagent's run started from a tool of
its caller), of a run of the same tree holds the caller's lease (`within` it); a second drive
of the very run being driven is refused, however near.

Who holds a lease, as the store reads it (`Holder`; its ages are measured to the store's
clock when it was read, `Holder.read_at`, never across two machines' clocks), and the lease
table a store keeps (`LeaseRows`), are here too; whether a process is gone: `_process`; the
sync heartbeat: `_heartbeat`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import UTC, datetime
from typing import Any, Protocol

import attrs

from agentfsm._log import get_logger
from agentfsm.errors import RunHeldError
from agentfsm.stores._heartbeat import FASTEST, keeper
from agentfsm.stores._process import Process, gone, this_process

# Only what users hold is listed; the rest (taking a lease, the lease table's shape) serves
# the stores and the runtime.
__all__ = ["LEASE_TTL", "AsyncLease", "HeldLease", "Holder", "Lease"]

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


#: Seconds a lease lasts past its last renewal unless told otherwise.
LEASE_TTL = 30.0


def root_of(run_id: str) -> str:
    """The root run of a subagent run id (`root/t1.1/t2.1` -> `root`); a root is its own."""
    return run_id.split("/", 1)[0]


def new_holder(kind: str) -> str:
    """A fresh holder id for one drive: `kind` and 8 random hex digits (`runner-1a2b3c4d`)."""
    return f"{kind}-{secrets.token_hex(4)}"


# -- a held lease --------------------------------------------------------------------------

#: The leases the drives of this context are under, outermost first (`kept` blocks): what
#: a drive started inside another's (a subagent's run, from a tool of its caller) holds.
_DRIVING: contextvars.ContextVar[tuple[HeldLease, ...]] = contextvars.ContextVar(
    "agentfsm_driving", default=()
)


class HeldLease:
    """A held lease, sync (`Lease`) or async (`AsyncLease`): what a writer checks.

    It knows when it was last renewed and so whether it is `lost`. Renewals are timed from
    when they were *sent*, so the holder thinks its lease lost no later than the store lets
    another take it.

    A lease *within* another (`within`) is the one a drive started inside another drive of
    the same run tree holds: no row of its own, no renewals; it is lost when the outer one
    is, and releasing it gives nothing up.
    """

    def __init__(
        self,
        run_id: str,
        holder: str,
        ttl: float,
        *,
        every: float | None,
        clock: Callable[[], float],
        takeover: Holder | None,
        driving: str | None = None,
        within: HeldLease | None = None,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"a lease's ttl must be positive, got {ttl!r}")
        self.run_id = run_id
        self.holder = holder
        self.ttl = ttl
        #: Seconds between renewals (a third of the ttl unless given).
        self.every = every if every is not None else ttl / 3
        #: The holder whose lapsed lease this one replaced (None: the lease was free).
        self.takeover = takeover
        #: The run the drive under this lease drives (the lease's run, or one of its tree).
        self.driving = driving if driving is not None else run_id
        self._within = within
        self._clock = clock
        self._ok_at = clock()
        self._refused = False
        self._released = False

    @property
    def lost(self) -> bool:
        """No longer held: a renewal was refused, none got through for `ttl` seconds, or it
        was released. A driver must not write after this."""
        if self._within is not None:
            return self._released or self._within.lost
        return self._refused or self._released or self._clock() - self._ok_at >= self.ttl

    def _sending(self) -> float | None:
        """When a renewal sent now leaves (None: none is, the lease is refused or released)."""
        return None if self._refused or self._released else self._clock()

    def _giving_up(self) -> bool:
        """Mark it released; whether to tell the store (the first time, and only for a lease
        not lost: a lost one is not this holder's to give up)."""
        if self._released:
            return False
        lost = self.lost
        self._released = True
        return not lost

    def _answered(self, sent: float, ok: bool) -> bool:
        if ok:
            self._ok_at = max(self._ok_at, sent)
        else:
            self._refused = True
        return ok

    @contextmanager
    def _framed(self) -> Iterator[None]:
        token = _DRIVING.set((*_DRIVING.get(), self))
        try:
            yield
        finally:
            _DRIVING.reset(token)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.run_id!r} by {self.holder!r}>"


def enclosing(run_id: str) -> HeldLease | None:
    """The lease a drive of this context holds on `run_id`'s tree (None if none does)."""
    root = root_of(run_id)
    for held in reversed(_DRIVING.get()):
        if held.run_id == root and not held.lost:
            return held
    return None


def _within(run_id: str) -> HeldLease | None:
    """The enclosing lease a new drive of `run_id` holds within; refused if a drive of this
    context drives `run_id` itself (a second driver of it, however near)."""
    outer = enclosing(run_id)
    if outer is not None and any(h.driving == run_id and not h.lost for h in _DRIVING.get()):
        raise _Reentered(outer)
    return outer


class _Reentered(Exception):  # noqa: N818  (a signal inside `take_lease`)
    def __init__(self, outer: HeldLease) -> None:
        super().__init__(outer.run_id)
        self.outer = outer


class Lease(HeldLease):
    """A run's lease held by a driver of this process (see the module docstring).

    Made by `EventStore.hold` (or by a `Worker` over its claim); keep it alive with `kept()`
    while driving, and `release()` it when done.

    Args:
        run_id: the run the lease is on (a root).
        holder: the holder's id.
        ttl: seconds the lease lasts past a renewal.
        renew: extends the lease in the store; False when it is no longer this holder's.
        release: gives it up in the store (None: the lease's owner releases it elsewhere).
        every: seconds between renewals (`ttl / 3` unless given).
        clock: monotonic seconds (injected in tests).
        takeover: the lapsed holder this lease replaced, if any.
        driving: the run its drive drives (`run_id` unless given: a run of its tree).
    """

    def __init__(
        self,
        run_id: str,
        holder: str,
        ttl: float,
        *,
        renew: Callable[[], bool],
        release: Callable[[], None] | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        takeover: Holder | None = None,
        driving: str | None = None,
        within: HeldLease | None = None,
    ) -> None:
        super().__init__(
            run_id,
            holder,
            ttl,
            every=every,
            clock=clock,
            takeover=takeover,
            driving=driving,
            within=within,
        )
        self._renew = renew
        self._release = release

    def renew(self) -> bool:
        """Renew it now (the heartbeat does, every `every` seconds); False once lost."""
        sent = self._sending()
        return sent is not None and self._answered(sent, self._renew())

    def release(self) -> None:
        """Give it up (once; a lost lease is not this holder's to give up: nothing is sent)."""
        if self._giving_up() and self._release is not None:
            self._release()

    @contextmanager
    def kept(self) -> Iterator[Lease]:
        """Renewed by this process's heartbeat thread for the block (nested blocks are one);
        drives started inside the block, in its context, of runs of the same tree hold it."""
        if self._within is not None:  # the outer lease is renewed already
            with self._framed():
                yield self
            return
        keeper().keep(self)
        try:
            with self._framed():
                yield self
        finally:
            keeper().drop(self)


class AsyncLease(HeldLease):
    """A run's lease held by an asyncio driver: `Lease` with awaited renewals.

    Args:
        run_id: the run the lease is on (a root).
        holder: the holder's id.
        ttl: seconds the lease lasts past a renewal.
        renew: extends the lease in the store; False when it is no longer this holder's.
        release: gives it up (None: the lease's owner releases it elsewhere).
        every: seconds between renewals (`ttl / 3` unless given).
        clock: monotonic seconds.
        takeover: the lapsed holder this lease replaced, if any.
        driving: the run its drive drives (`run_id` unless given: a run of its tree).
    """

    def __init__(
        self,
        run_id: str,
        holder: str,
        ttl: float,
        *,
        renew: Callable[[], Awaitable[bool]],
        release: Callable[[], Awaitable[None]] | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        takeover: Holder | None = None,
        driving: str | None = None,
        within: HeldLease | None = None,
    ) -> None:
        super().__init__(
            run_id,
            holder,
            ttl,
            every=every,
            clock=clock,
            takeover=takeover,
            driving=driving,
            within=within,
        )
        self._renew = renew
        self._release = release
        self._beating: asyncio.Task[None] | None = None

    async def renew(self) -> bool:
        """Renew it now; False once lost."""
        sent = self._sending()
        return sent is not None and self._answered(sent, await self._renew())

    async def release(self) -> None:
        """Give it up (once; nothing is sent for a lost lease)."""
        if self._giving_up() and self._release is not None:
            await self._release()

    @asynccontextmanager
    async def kept(self) -> AsyncIterator[AsyncLease]:
        """Renewed by a task of this event loop for the block (nested blocks are one)."""
        if self._beating is not None or self._within is not None:
            with self._framed():
                yield self
            return
        self._beating = asyncio.create_task(self._beat())
        try:
            with self._framed():
                yield self
        finally:
            beating, self._beating = self._beating, None
            beating.cancel()
            with suppress(asyncio.CancelledError):
                await beating

    async def _beat(self) -> None:
        log = get_logger()
        while True:
            await asyncio.sleep(max(self.every, FASTEST))
            try:
                if not await self.renew():
                    log.warning("lease.lost", run_id=self.run_id, holder=self.holder)
                    return
            except Exception as exc:  # noqa: BLE001  (a failed renewal is tried again next beat)
                log.warning("lease.renew_failed", run_id=self.run_id, error=repr(exc))


async def _still(outer: HeldLease) -> bool:
    return not outer.lost


# -- taking a lease ------------------------------------------------------------------------


class Patience:
    """How long a caller still waits for a held run, polled ever more slowly (to 0.5 s)."""

    def __init__(self, wait: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        if wait is not None and wait < 0:
            raise ValueError(f"wait must not be negative, got {wait!r}")
        self._clock = clock
        self._deadline = None if not wait else clock() + wait
        self._step = 0.01

    def next(self) -> float | None:
        """Seconds to sleep before looking again; None once the wait is over."""
        if self._deadline is None:
            return None
        left = self._deadline - self._clock()
        if left <= 0:
            return None
        self._step = min(self._step * 2, 0.5)
        return min(self._step, left)


@attrs.frozen
class _Read:
    """Who holds `root`'s lease, as its row says (a `Holder`, or None)."""

    root: str


@attrs.frozen
class _Take:
    """`LeaseRows.take`: sent back (taken, the holder replaced or the one holding it)."""

    root: str
    holder: str
    process: Process
    ttl: float


@attrs.frozen
class _Sleep:
    seconds: float


@attrs.frozen
class _Taken:
    """What a take ended in: the row taken by `holder` (from `takeover`, if it had lapsed),
    or, inside a drive of the same tree, that drive's lease to hold `within`."""

    root: str
    holder: str
    takeover: Holder | None = None
    within: HeldLease | None = None


_Op = _Read | _Take | _Sleep


def _taking(
    run_id: str, *, ttl: float, wait: float | None, holder: str | None
) -> Generator[_Op, Any, _Taken]:
    """Taking `run_id`'s lease, as the store ops it needs: the one decision `take_lease` and
    `atake_lease` perform, each with its own I/O (as `_steering` serves the steering verbs).

    Raises:
        RunHeldError: a live driver holds it (still, after `wait` seconds), or a drive of
            this context drives `run_id` itself.
    """
    root = root_of(run_id)
    me = holder if holder is not None else new_holder("driver")
    try:
        outer = _within(run_id)
    except _Reentered:
        raise _held_here((yield _Read(root)), run_id) from None
    if outer is not None:
        return _Taken(root, outer.holder, within=outer)
    process = this_process()
    patience = Patience(wait)
    while True:
        taken, other = yield _Take(root, me, process, ttl)
        if taken:
            return _Taken(root, me, takeover=other)
        assert other is not None
        delay = patience.next()
        if delay is None:
            raise RunHeldError(run_id, other, waited=wait)
        yield _Sleep(delay)


def take_lease(
    rows: LeaseRows,
    run_id: str,
    *,
    ttl: float,
    wait: float | None,
    holder: str | None,
    every: float | None = None,
) -> Lease:
    """Take `run_id`'s lease (its root's) through `rows`, waiting up to `wait` seconds.

    Inside a drive of the same run tree (in its context: a subagent's run started from a
    tool of its caller), the lease is that drive's (`within` it); a second drive of the very
    run it drives is refused.

    Raises:
        RunHeldError: a live driver holds it (still, after `wait` seconds).
    """
    steps = _taking(run_id, ttl=ttl, wait=wait, holder=holder)
    got: Any = None
    while True:
        try:
            op = steps.send(got)
        except StopIteration as done:
            taken: _Taken = done.value
            break
        if isinstance(op, _Take):
            got = rows.take(op.root, op.holder, op.process, op.ttl)
        elif isinstance(op, _Read):
            got = rows.read(op.root)
        else:
            time.sleep(op.seconds)
            got = None
    outer, root, me = taken.within, taken.root, taken.holder
    if outer is not None:
        return Lease(
            root, me, outer.ttl, renew=lambda: not outer.lost, driving=run_id, within=outer
        )
    return Lease(
        root, me, ttl, renew=functools.partial(rows.renew, root, me, ttl),
        release=functools.partial(rows.free, root, me), every=every,
        takeover=taken.takeover, driving=run_id,
    )  # fmt: skip


async def atake_lease(
    rows: AsyncLeaseRows,
    run_id: str,
    *,
    ttl: float,
    wait: float | None,
    holder: str | None,
    every: float | None = None,
) -> AsyncLease:
    """`take_lease` over `AsyncLeaseRows`.

    Raises:
        RunHeldError: a live driver holds it (still, after `wait` seconds).
    """
    steps = _taking(run_id, ttl=ttl, wait=wait, holder=holder)
    got: Any = None
    while True:
        try:
            op = steps.send(got)
        except StopIteration as done:
            taken: _Taken = done.value
            break
        if isinstance(op, _Take):
            got = await rows.take(op.root, op.holder, op.process, op.ttl)
        elif isinstance(op, _Read):
            got = await rows.read(op.root)
        else:
            await asyncio.sleep(op.seconds)
            got = None
    outer, root, me = taken.within, taken.root, taken.holder
    if outer is not None:
        return AsyncLease(
            root, me, outer.ttl, renew=functools.partial(_still, outer), driving=run_id,
            within=outer,
        )  # fmt: skip
    return AsyncLease(
        root, me, ttl, renew=functools.partial(rows.renew, root, me, ttl),
        release=functools.partial(rows.free, root, me), every=every,
        takeover=taken.takeover, driving=run_id,
    )  # fmt: skip


def _held_here(found: Holder | None, run_id: str) -> RunHeldError | RuntimeError:
    """A drive of `run_id` inside a drive of `run_id`: refused, naming the lease's row."""
    if found is None:  # the row is gone from under a live lease: the store was changed
        return RuntimeError(f"run '{run_id}' is being driven here, but its lease row is gone")
    return RunHeldError(run_id, found)
