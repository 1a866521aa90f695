"""`apause` and `aresume` do over an `AsyncEventStore` what `pause` and `resume` do."""

from __future__ import annotations

import asyncio

import pytest

from agentfsm.errors import RunHeldError
from agentfsm.runtime import apause, aresume, submit
from agentfsm.stores import MemoryEventStore, ThreadedAsyncEventStore

from .helpers import types


def _started() -> MemoryEventStore:
    """A store holding run `r1`, started and waiting for its first step."""
    store = MemoryEventStore()
    submit(store, "r1")
    return store


class TestAsyncPause:
    """The async pair appends the same events and refuses the same way."""

    def test_apause_then_aresume_appends_the_pause_and_the_resume(self) -> None:
        """A paused run is `paused`; `aresume` makes it runnable, and again appends nothing."""
        store = _started()

        async def steer() -> tuple[str, str | None, str, int]:
            async with ThreadedAsyncEventStore(store) as handle:
                paused = await apause(handle, "r1", "waiting for the customer")
                resumed = await aresume(handle, "r1")
                again = await aresume(handle, "r1")
                assert types(store, "r1") == ["run.started", "run.paused", "run.resumed"]
            return paused.status, paused.pause_reason, resumed.status, again.version

        assert asyncio.run(steer()) == ("paused", "waiting for the customer", "running", 3)

    def test_apause_refuses_while_a_driver_holds_the_run(self) -> None:
        """As `pause`: refused naming the holder, nothing written; `wait=` goes through once
        the driver lets go."""
        store = _started()
        lease = store.hold("r1", holder="w1")

        async def steer() -> str:
            async with ThreadedAsyncEventStore(store) as handle:
                with pytest.raises(RunHeldError) as info:
                    await apause(handle, "r1", "lunch")
                assert info.value.holder.id == "w1"
                assert types(store, "r1") == ["run.started"]
                asyncio.get_running_loop().call_later(0.2, lease.release)
                return (await apause(handle, "r1", "lunch", wait=5)).status

        assert asyncio.run(steer()) == "paused"

    def test_aresume_goes_in_while_a_driver_holds_the_run(self) -> None:
        """Only a paused run takes `run.resumed`, and no driver drives it: not refused."""
        store = _started()

        async def steer() -> str:
            async with ThreadedAsyncEventStore(store) as handle:
                await apause(handle, "r1", "lunch")
                store.hold("r1", holder="w1")
                return (await aresume(handle, "r1")).status

        assert asyncio.run(steer()) == "running"
