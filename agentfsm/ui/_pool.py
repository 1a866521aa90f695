"""What lets the UI answer many people at once: a pool of store handles per table, and caches
bounded by an estimate of their bytes as well as by their count.

A store handle is for one thread at a time, and the server answers on a pool of threads.
One lock around one handle served every read in turn (~60 requests/s whatever the number
of clients, and a 3-5 s first view of a 100,000-event run stalled every other page: issue
32). Here each read takes a handle of its own for as long as it reads: on SQLite each is a
connection of its own, and WAL lets readers run beside each other and beside the writers;
on PostgreSQL each is a connection of the pool.

Handles of their own are not enough under the GIL: two requests folding the same long log at
once each get half the CPU, and a runs list that listed a 20,000-event run read its record
again beside the first view reading it (light 1.0 s vs heavy 2.0 s, issue 32). `Reads` makes
a second reader of a run wait for the first one's read instead, or, if it cannot wait long
(a list's row), go without it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from agentfsm.record import RunRecord
from agentfsm.stores.base import EventStore

__all__ = ["HandlePool", "Reads", "SizedCache", "record_bytes"]

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

# What a record costs in memory, measured with tracemalloc (issue 32): about 0.7-1.2 KiB per
# call in its ledger and 0.2 KiB per event (the run of 50,000 events and 10,000 calls held
# 9.2 MiB). The estimate errs high, so a budget is a bound on what is really held.
_RECORD_BASE = 2048
_PER_ACTION = 1024
_PER_EVENT = 64


def record_bytes(record: RunRecord) -> int:
    """An estimate, on the high side, of the bytes `record` holds (constant time)."""
    return _RECORD_BASE + _PER_ACTION * len(record.actions) + _PER_EVENT * record.version


class SizedCache(Generic[_K, _V]):
    """A least-recently-used map bounded by a count and by a sum of weights (bytes).

    A value weighing more than the whole budget is not kept (the caller still has it): one
    huge run must not empty the cache of every other run's records.

    Args:
        max_items: how many values to keep at most.
        max_bytes: how many bytes (as `weigh` counts them) to keep at most.
        weigh: the bytes of one value.
    """

    def __init__(self, max_items: int, max_bytes: int, weigh: Callable[[_V], int]) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._items: OrderedDict[_K, tuple[_V, int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: _K) -> _V | None:
        """The value kept under `key` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: _K, value: _V) -> None:
        """Keep `value` under `key`, dropping the least recently used beyond the bounds."""
        weight = self._weigh(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if weight > self.max_bytes or self.max_items == 0:
                return
            self._items[key] = (value, weight)
            self.bytes += weight
            while len(self._items) > self.max_items or self.bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self.bytes -= dropped

    def pop(self, key: _K) -> None:
        """Forget what is kept under `key`."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]


class HandlePool:
    """Up to `size` store handles per table, each lent to one thread at a time.

    Handles are opened when a read finds none idle (so an idle server holds one per table),
    kept once opened, and closed by `close`. A read that finds `size` handles lent waits for
    one to come back.

    Args:
        size: the most handles open at once per key (a table's digest).
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"readers must be at least 1, got {size}")
        self.size = size
        self._idle: dict[str, list[EventStore]] = {}
        self._open: dict[str, int] = {}
        self._returned = threading.Condition()
        # Bumped by `close`: a handle lent before it is closed when it comes back, and the
        # pool opens fresh ones for later reads.
        self._generation = 0

    @contextmanager
    def handle(self, key: str, opener: Callable[[], EventStore]) -> Iterator[EventStore]:
        """Lend a handle under `key` (opening one with `opener` while under the limit)."""
        store, generation = self._take(key, opener)
        try:
            yield store
        finally:
            self._give_back(key, store, generation)

    def _take(self, key: str, opener: Callable[[], EventStore]) -> tuple[EventStore, int]:
        with self._returned:
            while True:
                generation = self._generation
                idle = self._idle.setdefault(key, [])
                if idle:
                    return idle.pop(), generation
                if self._open.get(key, 0) < self.size:
                    self._open[key] = self._open.get(key, 0) + 1
                    break
                self._returned.wait()
        try:  # opened outside the lock: opening a PostgreSQL connection takes a while
            return opener(), generation
        except BaseException:
            with self._returned:
                self._open[key] -= 1
                self._returned.notify()
            raise

    def _give_back(self, key: str, store: EventStore, generation: int) -> None:
        with self._returned:
            if generation == self._generation:
                self._idle.setdefault(key, []).append(store)
                self._returned.notify()
                return
            self._open[key] -= 1
            self._returned.notify()
        store.close()  # lent when the pool closed: closed on its way back

    def lent(self) -> int:
        """How many handles are lent now, under every key."""
        with self._returned:
            return sum(n - len(self._idle.get(k, ())) for k, n in self._open.items())

    def opened(self, key: str) -> int:
        """How many handles are open under `key` (idle or lent)."""
        with self._returned:
            return self._open.get(key, 0)

    def close(self) -> None:
        """Close every idle handle; a lent one is closed when it comes back."""
        with self._returned:
            self._generation += 1
            idle = [s for stores in self._idle.values() for s in stores]
            for key, stores in self._idle.items():
                self._open[key] -= len(stores)
            self._idle.clear()
        for store in idle:
            store.close()


class Reads(Generic[_K]):
    """Which keys (runs) a thread is reading now, so that one key is read by one thread at a
    time: a second reader waits for the first and then finds what it read in a cache.

    Waiting costs no CPU, so under the GIL the read itself runs at full speed instead of
    sharing the CPU with a copy of itself. A thread may read a key it is reading already.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reading: dict[_K, tuple[int, threading.Event]] = {}

    @contextmanager
    def alone(self, key: _K, wait: float | None = None) -> Iterator[bool]:
        """Read `key` with no other thread reading it: yield True once none is (look in the
        cache first: the one waited for may have read it), or False if another one still
        is after `wait` seconds (None: wait for as long as it takes)."""
        me = threading.get_ident()
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            with self._lock:
                found = self._reading.get(key)
                if found is None:
                    done = threading.Event()
                    self._reading[key] = (me, done)
                    break
            owner, other = found
            if owner == me:  # a read within its own read: already alone
                yield True
                return
            left = None if deadline is None else deadline - time.monotonic()
            if (left is not None and left <= 0) or not other.wait(left):
                yield False
                return
        try:
            yield True
        finally:
            with self._lock:
                del self._reading[key]
            done.set()

    def wait_for(self, key: _K, wait: float) -> bool:
        """Wait `wait` seconds at most for the thread reading `key` to be done; whether no
        other thread reads it now."""
        with self._lock:
            found = self._reading.get(key)
        return found is None or found[0] == threading.get_ident() or found[1].wait(wait)
