"""Taking a lease is one decision (`_taking`) that the sync and the async shell perform.

The decision is driven here by hand, with no store, and then both shells are held to the
same outcome on real stores (SQLite under the sync one and under the threaded async one):
a free run, a run a live driver holds (at once, and after a wait), a subagent's run inside
its root's drive, and a second drive of the very run being driven.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentfsm.errors import RunHeldError
from agentfsm.stores import Holder, SQLiteEventStore, ThreadedAsyncEventStore
from agentfsm.stores.lease import _Read, _Sleep, _Take, _Taken, _taking


def _holder(holder_id: str) -> Holder:
    """A row of run r1 as a store would answer it (the decision only passes it on)."""
    now = datetime.now(UTC)
    return Holder(
        run_id="r1", id=holder_id, host=None, pid=None, process=None, since=now,
        heartbeat=now, expires=now, read_at=now,
    )  # fmt: skip


class TestTheDecisionAlone:
    """`_taking` says what it needs of the store and decides from the answers: no I/O."""

    def test_a_free_row_is_taken_by_the_holder_named(self) -> None:
        steps = _taking("r1/t1.1", ttl=5.0, wait=None, holder="me")
        op = next(steps)
        assert isinstance(op, _Take)
        assert (op.root, op.holder, op.ttl) == ("r1", "me", 5.0)
        with pytest.raises(StopIteration) as done:
            steps.send((True, None))
        assert done.value.value == _Taken("r1", "me")

    def test_a_lapsed_row_is_taken_over_and_its_holder_kept(self) -> None:
        steps = _taking("r1", ttl=5.0, wait=None, holder="me")
        next(steps)
        lapsed = _holder("gone-1")
        with pytest.raises(StopIteration) as done:
            steps.send((True, lapsed))
        assert done.value.value == _Taken("r1", "me", takeover=lapsed)

    def test_a_live_holder_refuses_at_once_without_a_wait(self) -> None:
        steps = _taking("r1", ttl=5.0, wait=None, holder="me")
        next(steps)
        with pytest.raises(RunHeldError) as info:
            steps.send((False, _holder("other")))
        assert (info.value.holder.id, info.value.waited) == ("other", None)

    def test_with_a_wait_it_sleeps_ever_longer_between_tries(self) -> None:
        steps = _taking("r1", ttl=5.0, wait=60.0, holder="me")
        ops: list[Any] = [next(steps)]
        for _ in range(3):
            ops.append(steps.send((False, _holder("other"))))
            ops.append(steps.send(None))
        kinds = [type(op) for op in ops]
        assert kinds == [_Take, _Sleep, _Take, _Sleep, _Take, _Sleep, _Take]
        sleeps = [op.seconds for op in ops if isinstance(op, _Sleep)]
        assert sleeps == sorted(sleeps)
        assert sleeps[0] < sleeps[-1]

    def test_a_holder_is_made_up_when_none_is_given(self) -> None:
        op = next(_taking("r1", ttl=5.0, wait=None, holder=None))
        assert isinstance(op, _Take)
        assert op.holder.startswith("driver-")

    def test_inside_a_drive_of_the_run_itself_it_reads_the_row_to_name_it(
        self, tmp_path: Path
    ) -> None:
        with SQLiteEventStore(tmp_path / "runs.db") as store:
            lease = store.hold("r1", holder="outer")
            with lease.kept():
                steps = _taking("r1", ttl=5.0, wait=None, holder="me")
                assert next(steps) == _Read("r1")
                with pytest.raises(RunHeldError) as info:
                    steps.send(_holder("outer"))
                assert info.value.holder.id == "outer"
            lease.release()


def _outcomes_sync(path: Path) -> list[Any]:
    out: list[Any] = []
    with SQLiteEventStore(path) as store, SQLiteEventStore(path) as other:
        lease = store.hold("r1", holder="me")
        out.append((lease.run_id, lease.holder, lease.takeover, lease.driving))
        for wait in (None, 0.05):
            started = time.monotonic()
            try:
                other.hold("r1", holder="second", wait=wait)
            except RunHeldError as exc:
                out.append((exc.holder.id, exc.waited, time.monotonic() - started >= (wait or 0)))
        with lease.kept():
            inner = store.hold("r1/t1.1", holder="ignored")
            out.append((inner.run_id, inner.holder, inner.driving, inner.lost))
            inner.release()
            out.append(lease.lost)
            try:
                store.hold("r1")
            except RunHeldError as exc:
                out.append(("again", exc.holder.id))
        lease.release()
        out.append(store.holder("r1"))
    return out


async def _outcomes_async(path: Path) -> list[Any]:
    out: list[Any] = []
    store = ThreadedAsyncEventStore(SQLiteEventStore(path))
    other = ThreadedAsyncEventStore(SQLiteEventStore(path))
    lease = await store.hold("r1", holder="me")
    out.append((lease.run_id, lease.holder, lease.takeover, lease.driving))
    for wait in (None, 0.05):
        started = time.monotonic()
        try:
            await other.hold("r1", holder="second", wait=wait)
        except RunHeldError as exc:
            out.append((exc.holder.id, exc.waited, time.monotonic() - started >= (wait or 0)))
    async with lease.kept():
        inner = await store.hold("r1/t1.1", holder="ignored")
        out.append((inner.run_id, inner.holder, inner.driving, inner.lost))
        await inner.release()
        out.append(lease.lost)
        try:
            await store.hold("r1")
        except RunHeldError as exc:
            out.append(("again", exc.holder.id))
    await lease.release()
    out.append(await store.holder("r1"))
    await store.close()
    await other.close()
    return out


def test_the_sync_and_the_async_shell_take_refuse_and_nest_alike(tmp_path: Path) -> None:
    """The same scenario through `hold` and `await hold`: the same leases, refusals, nesting."""
    sync = _outcomes_sync(tmp_path / "sync.db")
    assert sync == asyncio.run(_outcomes_async(tmp_path / "async.db"))
    assert sync == [
        ("r1", "me", None, "r1"),
        ("me", None, True),
        ("me", 0.05, True),
        ("r1", "me", "r1/t1.1", False),
        False,
        ("again", "me"),
        None,
    ]
