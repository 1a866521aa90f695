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
  So a SIGKILLed driver's runs are resumed at once on its own machine.

A driver knows its lease is `lost` (a renewal was refused: another took the run over; or none
got through for `ttl` seconds: a partition, and another may take it over any moment) before
anyone can take it over, and stops before its next write (`LeaseLostError`); a late append
would be refused by `expected_version` anyway.

Subagent runs (`parent/action`) are driven by their parent's call: their lease is their root's.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import itertools
import os
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import UTC, datetime
from typing import Protocol

import attrs

from agentfsm._log import get_logger
from agentfsm.errors import RunHeldError

__all__ = [
    "LEASE_TTL",
    "AsyncLease",
    "AsyncLeaseRows",
    "HeldLease",
    "Holder",
    "Lease",
    "LeaseRows",
    "Patience",
    "Process",
    "atake_lease",
    "enclosing",
    "gone",
    "live_holder",
    "new_holder",
    "root_of",
    "stamp",
    "take_lease",
    "takeable",
    "this_process",
]

#: Seconds a lease lasts past its last renewal unless told otherwise.
LEASE_TTL = 30.0
#: The shortest pace a heartbeat keeps (a `renew_every=0` must not spin).
_FASTEST = 0.01
#: How much of a holder's id or host a message shows (both are free text).
_SHOWN = 80


def root_of(run_id: str) -> str:
    """The root run of a subagent run id (`root/t1.1/t2.1` -> `root`); a root is its own."""
    return run_id.split("/", 1)[0]


def new_holder(kind: str) -> str:
    """A fresh holder id for one drive: `kind` and 8 random hex digits (`runner-1a2b3c4d`)."""
    return f"{kind}-{secrets.token_hex(4)}"


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


# -- processes ----------------------------------------------------------------------------


@attrs.frozen
class Process:
    """A process as a lease row names it: enough to tell, on its own host, that it is gone.

    Attributes:
        host: the host's name.
        pid: the process id.
        key: `boot id/pid namespace/start time` where `/proc` tells them (Linux), else None:
            then only the heartbeat says whether the holder is alive.
    """

    host: str
    pid: int
    key: str | None


_THIS: Process | None = None


def this_process() -> Process:
    """This process (read once per process: a forked child reads its own)."""
    global _THIS
    found = _THIS
    if found is None or found.pid != os.getpid():
        pid = os.getpid()
        machine, stat = _machine(), _stat(pid)
        key = None if machine is None or stat is None else f"{machine}/{stat[1]}"
        found = _THIS = Process(socket.gethostname(), pid, key)
    return found


def _machine() -> str | None:
    """This boot and pid namespace: where a pid means the same process as here."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        space = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{space}"


def _stat(pid: int) -> tuple[str, str] | None:
    """A process's state letter and start time (clock ticks since boot), or None if none runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after the command, which may hold spaces
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def gone(host: str | None, pid: int | None, key: str | None) -> bool:
    """Whether the process a lease row names is known to be gone (see the module docstring).

    Only a process of this host, boot and pid namespace can be known gone; of any other,
    nothing is known, and only its heartbeat counts.
    """
    if key is None or pid is None or host is None:
        return False
    me = this_process()
    machine, _, started = key.rpartition("/")
    if host != me.host or me.key is None or not me.key.startswith(machine + "/"):
        return False
    stat = _stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state in ("Z", "X") or start != started


# -- who holds a lease ---------------------------------------------------------------------


def stamp(seconds: float) -> datetime:
    """A lease row's time (seconds since the epoch) as an aware datetime."""
    return datetime.fromtimestamp(seconds, UTC)


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
        self._kept = 0
        self._generation = 0

    def renew(self) -> bool:
        """Renew it now (the heartbeat does, every `every` seconds); False once lost."""
        if self._refused or self._released:
            return False
        sent = self._clock()
        return self._answered(sent, self._renew())

    def release(self) -> None:
        """Give it up (once; a lost lease is not this holder's to give up: nothing is sent)."""
        if self._released:
            return
        lost = self.lost
        self._released = True
        if self._release is not None and not lost:
            self._release()

    @contextmanager
    def kept(self) -> Iterator[Lease]:
        """Renewed by this process's heartbeat thread for the block (nested blocks are one);
        drives started inside the block, in its context, of runs of the same tree hold it."""
        if self._within is not None:  # the outer lease is renewed already
            with self._framed():
                yield self
            return
        _keeper().keep(self)
        try:
            with self._framed():
                yield self
        finally:
            _keeper().drop(self)


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
        if self._refused or self._released:
            return False
        sent = self._clock()
        return self._answered(sent, await self._renew())

    async def release(self) -> None:
        """Give it up (once; nothing is sent for a lost lease)."""
        if self._released:
            return
        lost = self.lost
        self._released = True
        if self._release is not None and not lost:
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
            await asyncio.sleep(max(self.every, _FASTEST))
            try:
                if not await self.renew():
                    log.warning("lease.lost", run_id=self.run_id, holder=self.holder)
                    return
            except Exception as exc:  # noqa: BLE001  (a failed renewal is tried again next beat)
                log.warning("lease.renew_failed", run_id=self.run_id, error=repr(exc))


async def _still(outer: HeldLease) -> bool:
    return not outer.lost


# -- the heartbeat of the sync leases ------------------------------------------------------


class _Keeper:
    """One thread renews every kept sync `Lease` of the process when it is due.

    A thread per drive would cost its start (~50 µs of CPU) on every drive; this costs a heap
    push. Renewals run one after another on the keeper's thread: a store that hangs holds
    back the leases renewed after it (which, on one store, would be lost alike).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, int, Lease]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def keep(self, lease: Lease) -> None:
        with self._cond:
            lease._kept += 1
            if lease._kept == 1:
                lease._generation += 1
                self._push(lease)

    def drop(self, lease: Lease) -> None:
        with self._cond:
            lease._kept -= 1  # its heap entry is skipped when it comes up

    def _push(self, lease: Lease) -> None:
        when = time.monotonic() + max(lease.every, _FASTEST)
        sooner = not self._due or when < self._due[0][0]
        heapq.heappush(self._due, (when, next(self._order), lease._generation, lease))
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="agentfsm-lease-heartbeat", daemon=True
            )
            self._thread.start()
        elif sooner:
            self._cond.notify()

    def _run(self) -> None:
        log = get_logger()
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._due and self._due[0][0] <= now:
                        break
                    self._cond.wait(self._due[0][0] - now if self._due else None)
                _, _, generation, lease = heapq.heappop(self._due)
                if lease._kept <= 0 or generation != lease._generation:
                    continue
            again = True
            try:
                if not lease.renew():
                    log.warning("lease.lost", run_id=lease.run_id, holder=lease.holder)
                    again = False
            except Exception as exc:  # noqa: BLE001  (a failed renewal is tried again next beat)
                log.warning("lease.renew_failed", run_id=lease.run_id, error=repr(exc))
            with self._cond:
                if again and lease._kept > 0 and generation == lease._generation:
                    self._push(lease)


_KEEPER: _Keeper | None = None
_KEEPER_LOCK = threading.Lock()


def _keeper() -> _Keeper:
    global _KEEPER
    if _KEEPER is None:
        with _KEEPER_LOCK:
            if _KEEPER is None:
                _KEEPER = _Keeper()
    return _KEEPER


def _forget_keeper() -> None:
    # A forked child has none of the parent's threads, and none of its leases to renew.
    global _KEEPER, _KEEPER_LOCK
    _KEEPER = None
    _KEEPER_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_keeper)


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
    root = root_of(run_id)
    me = holder if holder is not None else new_holder("driver")
    try:
        outer = _within(run_id)
    except _Reentered:
        raise _held_here(rows.read(root), run_id) from None
    if outer is not None:
        return Lease(
            root, outer.holder, outer.ttl, renew=lambda: not outer.lost, driving=run_id,
            within=outer,
        )  # fmt: skip
    process = this_process()
    patience = Patience(wait)
    while True:
        taken, other = rows.take(root, me, process, ttl)
        if taken:
            return Lease(
                root,
                me,
                ttl,
                renew=functools.partial(rows.renew, root, me, ttl),
                release=functools.partial(rows.free, root, me),
                every=every,
                takeover=other,
                driving=run_id,
            )
        assert other is not None
        delay = patience.next()
        if delay is None:
            raise RunHeldError(run_id, other, waited=wait)
        time.sleep(delay)


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
    root = root_of(run_id)
    me = holder if holder is not None else new_holder("driver")
    try:
        outer = _within(run_id)
    except _Reentered:
        raise _held_here(await rows.read(root), run_id) from None
    if outer is not None:
        return AsyncLease(
            root, outer.holder, outer.ttl, renew=functools.partial(_still, outer),
            driving=run_id, within=outer,
        )  # fmt: skip
    process = this_process()
    patience = Patience(wait)
    while True:
        taken, other = await rows.take(root, me, process, ttl)
        if taken:
            return AsyncLease(
                root,
                me,
                ttl,
                renew=functools.partial(rows.renew, root, me, ttl),
                release=functools.partial(rows.free, root, me),
                every=every,
                takeover=other,
                driving=run_id,
            )
        assert other is not None
        delay = patience.next()
        if delay is None:
            raise RunHeldError(run_id, other, waited=wait)
        await asyncio.sleep(delay)


def _held_here(found: Holder | None, run_id: str) -> RunHeldError | RuntimeError:
    """A drive of `run_id` inside a drive of `run_id`: refused, naming the lease's row."""
    if found is None:  # the row is gone from under a live lease: the store was changed
        return RuntimeError(f"run '{run_id}' is being driven here, but its lease row is gone")
    return RunHeldError(run_id, found)


def live_holder(found: Holder | None) -> Holder | None:
    """`found` if its heartbeat goes on, else None (what `EventStore.holder` answers)."""
    return found if found is not None and found.live else None
