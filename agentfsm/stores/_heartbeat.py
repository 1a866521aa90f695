"""The heartbeat of the sync leases: one thread per process renews them all when due.

A thread per drive would cost its start (about 50 µs of CPU) on every drive; this costs a
heap push. Renewals run one after another on the keeper's thread: a store that hangs holds
back the leases renewed after it (which, on one store, would be lost alike). A forked child
has none of its parent's threads, and none of its leases to renew: it starts its own.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from typing import Protocol

from agentfsm._log import get_logger

__all__ = ["FASTEST", "Keeper", "Renewable", "keeper"]

#: The shortest pace a heartbeat keeps (a `renew_every=0` must not spin).
FASTEST = 0.01


class Renewable(Protocol):
    """What the keeper renews: a sync `Lease`."""

    @property
    def run_id(self) -> str: ...

    @property
    def holder(self) -> str: ...

    @property
    def every(self) -> float: ...

    def renew(self) -> bool:
        """Renew it now; False once lost."""
        ...


class Keeper:
    """Renews every kept lease when it is due, from one thread (started on first use).

    A lease kept twice (nested blocks) is renewed once; one dropped is skipped when its turn
    comes (its heap entry stays until then: a push per drive, never a search).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, int, Renewable]] = []
        self._order = itertools.count()
        #: Each kept lease: how many blocks keep it, and its keeping's generation.
        self._kept: dict[Renewable, tuple[int, int]] = {}
        self._generations = itertools.count(1)
        self._thread: threading.Thread | None = None

    def keep(self, lease: Renewable) -> None:
        """Renew `lease` every `lease.every` seconds until it is dropped as often."""
        with self._cond:
            count, generation = self._kept.get(lease, (0, 0))
            if count == 0:
                generation = next(self._generations)
                self._push(lease, generation)
            self._kept[lease] = (count + 1, generation)

    def drop(self, lease: Renewable) -> None:
        """Stop renewing `lease` (once dropped as often as it was kept)."""
        with self._cond:
            count, generation = self._kept.get(lease, (1, 0))
            if count <= 1:
                self._kept.pop(lease, None)
            else:
                self._kept[lease] = (count - 1, generation)

    def _current(self, lease: Renewable, generation: int) -> bool:
        return self._kept.get(lease, (0, 0))[1] == generation

    def _push(self, lease: Renewable, generation: int) -> None:
        when = time.monotonic() + max(lease.every, FASTEST)
        sooner = not self._due or when < self._due[0][0]
        heapq.heappush(self._due, (when, next(self._order), generation, lease))
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
                if not self._current(lease, generation):
                    continue
            try:
                renewed: bool | None = lease.renew()
            except Exception as exc:  # noqa: BLE001  (a failed renewal is tried again next beat)
                log.warning("lease.renew_failed", run_id=lease.run_id, error=repr(exc))
                renewed = None
            with self._cond:
                if not self._current(lease, generation):
                    continue  # dropped meanwhile (and maybe released): nothing to say
                if renewed is False:
                    log.warning("lease.lost", run_id=lease.run_id, holder=lease.holder)
                else:
                    self._push(lease, generation)


_KEEPER: Keeper | None = None
_KEEPER_LOCK = threading.Lock()


def keeper() -> Keeper:
    """This process's keeper."""
    global _KEEPER
    if _KEEPER is None:
        with _KEEPER_LOCK:
            if _KEEPER is None:
                _KEEPER = Keeper()
    return _KEEPER


def _forget_keeper() -> None:
    global _KEEPER, _KEEPER_LOCK
    _KEEPER = None
    _KEEPER_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_keeper)
