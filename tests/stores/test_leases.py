"""The stores' lease rows, one contract on every backend: who holds a run, and when not.

Memory, SQLite and PostgreSQL (sync), the threaded and the native PostgreSQL async stores:
a lease is taken only when free, lapsed, or its holder's process is gone on this host; a
`Worker`'s claim and a driver's hold are the same rows, so each excludes the other.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentfsm.errors import RunHeldError
from agentfsm.runtime import submit
from agentfsm.stores import (
    EventStore,
    MemoryEventStore,
    MemoryStorage,
    SQLiteEventStore,
    ThreadedAsyncEventStore,
)
from agentfsm.stores._process import Process, gone, this_process
from agentfsm.stores.leases import MemoryLeases, SQLiteLeases


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], EventStore]]:
    """Opens handles on one fresh store (closed after the test)."""
    opened: list[EventStore] = []
    if request.param == "memory":
        storage = MemoryStorage()

        def make() -> EventStore:
            return MemoryEventStore(storage)
    elif request.param == "sqlite":

        def make() -> EventStore:
            return SQLiteEventStore(tmp_path / "runs.db")
    else:
        from agentfsm.stores.postgres import PostgresEventStore

        dsn = request.getfixturevalue("postgres_dsn")
        prefix = request.getfixturevalue("pg_prefix")
        PostgresEventStore(dsn, table_prefix=prefix, migrate=True).close()

        def make() -> EventStore:
            return PostgresEventStore(dsn, table_prefix=prefix)

    def tracked() -> EventStore:
        store = make()
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        store.close()


def _same(one: Any, other: Any) -> bool:
    """Two reads of one lease row (they differ only in when they were read)."""
    return one is not None and attrs.evolve(one, read_at=other.read_at) == other


def _dead_pid() -> int:
    """A pid that ran on this host and is gone (reaped)."""
    proc = multiprocessing.get_context("fork").Process(target=lambda: None)
    proc.start()
    proc.join()
    assert proc.pid is not None
    return proc.pid


class TestTheRows:
    """`take`, `renew`, `free`, `read` (what `hold` and `holder` stand on)."""

    def test_a_lease_is_taken_once_renewed_by_its_holder_and_freed(
        self, opener: Callable[[], EventStore]
    ) -> None:
        """Free: taken; held: refused, naming the holder; freed: nobody holds it."""
        a, b = opener(), opener()
        me = this_process()
        assert a._lease_rows().take("r1", "w1", me, 30) == (True, None)
        taken, found = b._lease_rows().take("r1", "w2", me, 30)
        assert not taken
        assert found is not None
        assert (found.id, found.host, found.pid, found.run_id) == ("w1", me.host, me.pid, "r1")
        assert found.live
        assert found.since is not None
        assert found.heartbeat is not None
        assert (found.expires - found.heartbeat).total_seconds() == pytest.approx(30, abs=1)
        assert a._lease_rows().renew("r1", "w1", 30)
        assert not b._lease_rows().renew("r1", "w2", 30)
        b._lease_rows().free("r1", "w2")  # not its lease: nothing happens
        assert _same(b.holder("r1"), a._lease_rows().read("r1"))
        a._lease_rows().free("r1", "w1")
        assert (a.holder("r1"), b._lease_rows().read("r1")) == (None, None)
        assert b._lease_rows().take("r1", "w2", me, 30) == (True, None)

    def test_a_lapsed_lease_is_taken_over_and_named(self, opener: Callable[[], EventStore]) -> None:
        """Unrenewed past its ttl: nobody holds it, and the next take names who did."""
        a, b = opener(), opener()
        a._lease_rows().take("r1", "w1", this_process(), 0.2)
        time.sleep(0.3)
        assert b.holder("r1") is None
        assert not a._lease_rows().renew("r1", "w1", 30)  # too late: it lapsed
        taken, before = b._lease_rows().take("r1", "w2", this_process(), 30)
        assert taken
        assert before is not None
        assert (before.id, before.live) == ("w1", False)

    def test_a_lease_of_a_process_gone_from_this_host_is_taken_at_once(
        self, opener: Callable[[], EventStore]
    ) -> None:
        """A long lease whose holder's pid is gone (or runs another program) is not live."""
        me = this_process()
        assert me.key is not None
        machine = me.key.rsplit("/", 1)[0]
        dead = Process(me.host, _dead_pid(), f"{machine}/1")
        reused = Process(me.host, me.pid, f"{machine}/1")  # this pid, another start time
        for n, holder in enumerate((dead, reused)):
            a, b = opener(), opener()
            run_id = f"r{n}"
            assert a._lease_rows().take(run_id, "gone", holder, 3600) == (True, None)
            assert b.holder(run_id) is None
            lease = b.hold(run_id, holder="next")
            assert lease.takeover is not None
            assert (lease.takeover.id, lease.takeover.pid) == ("gone", holder.pid)

    def test_a_live_holder_on_another_host_is_never_judged_by_its_pid(
        self, opener: Callable[[], EventStore]
    ) -> None:
        """Only the heartbeat counts across machines: refused while the lease lasts."""
        a, b = opener(), opener()
        elsewhere = Process("another-host", _dead_pid(), "boot/pid:[1]/1")
        a._lease_rows().take("r1", "remote", elsewhere, 3600)
        with pytest.raises(RunHeldError) as info:
            b.hold("r1")
        assert (info.value.holder.id, info.value.holder.host) == ("remote", "another-host")


class TestClaimsAreLeases:
    """A worker's claim and a driver's hold are one row: each excludes the other."""

    def test_a_claimed_run_is_refused_to_a_driver_and_a_held_one_never_claimed(
        self, tmp_path: Path
    ) -> None:
        """On SQLite: `claim` records the claiming process like `take`."""
        path = tmp_path / "runs.db"
        store = SQLiteEventStore(path)
        submit(store, "r1")
        submit(store, "r2")
        leases = SQLiteLeases(path)
        assert leases.claim("w1", 30) == "r1"
        with pytest.raises(RunHeldError) as info:
            store.hold("r1")
        held = info.value.holder
        assert (held.id, held.pid, held.host) == ("w1", os.getpid(), socket.gethostname())
        store.hold("r2", holder="runner")
        assert leases.claim("w2", 30) is None
        leases.close()
        store.close()

    def test_on_memory_a_workers_leases_are_the_stores_own(self) -> None:
        """`MemoryLeases(store)` claims from the store's own table."""
        store = MemoryEventStore()
        submit(store, "r1")
        assert MemoryLeases(store).claim("w1", 30) == "r1"
        holder = MemoryEventStore(store.storage).holder("r1")
        assert holder is not None
        assert holder.id == "w1"


class TestHold:
    """What `hold` adds to the rows: waiting, and what a store without leases does."""

    def test_a_store_without_leases_says_so_and_names_no_holder(self) -> None:
        """A backend that implements no `_lease_rows` (a third party's) keeps none."""

        class Bare(MemoryEventStore):
            def _lease_rows(self) -> Any:
                return None

        store = Bare()
        assert store.holder("r1") is None
        with pytest.raises(NotImplementedError, match=r"^Bare keeps no leases: its backend "):
            store.hold("r1")

    def test_the_ttl_and_the_wait_are_checked(self) -> None:
        """A lease of no time, or a negative wait, is refused by name."""
        store = MemoryEventStore()
        with pytest.raises(ValueError, match=r"^a lease's ttl must be positive, got 0$"):
            store.hold("r1", ttl=0)
        with pytest.raises(ValueError, match=r"^wait must not be negative, got -1$"):
            store.hold("r1", wait=-1)


class TestGone:
    """`gone`: what can be known of a process from its lease row."""

    def test_only_a_process_of_this_host_boot_and_pid_namespace_is_judged(self) -> None:
        """This process lives; a reaped child is gone; an unknown key tells nothing."""
        me = this_process()
        assert me.key is not None
        machine = me.key.rsplit("/", 1)[0]
        assert not gone(me.host, me.pid, me.key)
        assert gone(me.host, _dead_pid(), f"{machine}/1")
        assert not gone("another-host", _dead_pid(), f"{machine}/1")
        assert not gone(me.host, _dead_pid(), "another-boot/pid:[1]/1")
        assert not gone(me.host, _dead_pid(), None)

    def test_a_zombie_is_gone(self) -> None:
        """Killed and not yet reaped: it can never renew its lease again."""
        pid = os.fork()
        if pid == 0:  # pragma: no cover  (the child)
            os._exit(0)
        try:
            deadline = time.monotonic() + 10
            me = this_process()
            assert me.key is not None
            key = f"{me.key.rsplit('/', 1)[0]}/0"
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                key = f"{key.rsplit('/', 1)[0]}/{f.read().rsplit(')', 1)[1].split()[19]}"
            while not gone(me.host, pid, key):
                assert time.monotonic() < deadline, "the child never became a zombie"
                time.sleep(0.01)
        finally:
            os.waitpid(pid, 0)


class TestAsyncStores:
    """The async stores take, refuse and free the same rows."""

    @pytest.mark.parametrize("kind", ["threaded-sqlite", "postgres"])
    def test_an_async_hold_excludes_a_sync_one(
        self, kind: str, request: pytest.FixtureRequest, tmp_path: Path
    ) -> None:
        """Held from asyncio, refused to a sync handle; released, taken there."""

        async def scenario() -> None:
            if kind == "threaded-sqlite":
                sync: EventStore = SQLiteEventStore(tmp_path / "runs.db")
                astore: Any = ThreadedAsyncEventStore(SQLiteEventStore(tmp_path / "runs.db"))
            else:
                from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore

                dsn = request.getfixturevalue("postgres_dsn")
                prefix = request.getfixturevalue("pg_prefix")
                sync = PostgresEventStore(dsn, table_prefix=prefix, migrate=True)
                astore = await AsyncPostgresEventStore.connect(dsn, table_prefix=prefix)
            lease = await astore.hold("r1", holder="async-driver")
            with pytest.raises(RunHeldError) as info:
                sync.hold("r1")
            assert info.value.holder.id == "async-driver"
            assert _same(await astore.holder("r1"), sync.holder("r1"))
            await lease.release()
            assert await astore.holder("r1") is None
            sync.hold("r1").release()
            sync.close()
            await astore.close()

        asyncio.run(scenario())


class TestTheHeartbeat:
    """The process's one heartbeat thread renews each kept lease at its pace."""

    def test_a_lease_kept_twice_is_renewed_once_a_beat_until_dropped_as_often(self) -> None:
        """Nested keeps are one; renewals stop once both blocks are done."""
        from agentfsm.stores._heartbeat import Keeper

        class Counted:
            run_id, holder, every = "r1", "me", 0.05

            def __init__(self) -> None:
                self.renewals = 0

            def renew(self) -> bool:
                self.renewals += 1
                return True

        lease, keeper = Counted(), Keeper()
        keeper.keep(lease)
        keeper.keep(lease)
        time.sleep(0.5)
        twice = lease.renewals
        assert 3 <= twice <= 11  # ten beats in 0.5 s at most: one renewal a beat, not two
        keeper.drop(lease)
        time.sleep(0.2)
        assert lease.renewals > twice  # still kept by the outer block
        keeper.drop(lease)
        time.sleep(0.1)
        stopped = lease.renewals
        time.sleep(0.3)
        assert lease.renewals == stopped

    def test_a_refused_renewal_stops_the_beat(self) -> None:
        """A lease whose renewal is refused is not renewed again."""
        from agentfsm.stores._heartbeat import Keeper

        class Refused:
            run_id, holder, every = "r1", "me", 0.02

            def __init__(self) -> None:
                self.renewals = 0

            def renew(self) -> bool:
                self.renewals += 1
                return False

        lease = Refused()
        Keeper().keep(lease)
        time.sleep(0.3)
        assert lease.renewals == 1
