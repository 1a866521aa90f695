"""External anchors: what every store must do with one, and refuse because of one.

Mixed into `StoreConformance` (and `AsyncStoreConformance`). The attack these come from:
the rows after an executed approval deleted and the runs row moved to match; `verify` said
ok and the next drive made the paid call again. The checks that cut a log need a `tamper`
fixture that is a `RecordTamper` (it moves the whole runs row); without one they are
skipped, saying so.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence

import attrs
import pytest

from agentfsm.errors import AnchorError, CorruptLogError, TruncatedLogError
from agentfsm.events.models import Event
from agentfsm.reducers.reduce import replay
from agentfsm.stores._integrity import Integrity
from agentfsm.stores.anchor import AnchoredHead
from agentfsm.stores.base import AsyncEventStore, StoreOptions
from agentfsm.stores.runs import RunInfo
from agentfsm.testing._stores.key_checks import record_tamper
from agentfsm.testing._stores.scripted import scripted_run, tool_turn
from agentfsm.testing._stores.tamper import KEY, OpenStore, Tamper, chain

__all__ = ["AnchorChecks", "AsyncAnchorChecks", "MemoryAnchor", "cut"]


class MemoryAnchor:
    """An `Anchor` in a dict, shared by the handles given it: for tests (a real anchor is
    kept where the store's attacker cannot write). It keeps every head it was told."""

    def __init__(self) -> None:
        self.heads: dict[str, AnchoredHead] = {}
        self.told: list[AnchoredHead] = []
        self._lock = threading.Lock()

    def put(self, heads: Sequence[AnchoredHead]) -> None:
        """Keep each head unless the run's is further on."""
        with self._lock:
            for head in heads:
                self.told.append(head)
                kept = self.heads.get(head.run_id)
                if kept is None or head.version >= kept.version:
                    self.heads[head.run_id] = head

    def get(self, run_id: str) -> AnchoredHead | None:
        """The head kept for `run_id`."""
        with self._lock:
            return self.heads.get(run_id)


@attrs.define
class _Broken:
    """An anchor whose service is down for writes, and for reads too when `reads` is off."""

    reads: bool = True

    def put(self, heads: Sequence[AnchoredHead]) -> None:
        raise OSError("the anchor service is down")

    def get(self, run_id: str) -> AnchoredHead | None:
        if not self.reads:
            raise OSError("the anchor service is down")
        return None


def cut(tamper: Tamper, run_id: str, events: list[Event], keep: int) -> None:
    """What the attacker does: delete the rows after `keep` and set the runs row to what
    the rows left fold to."""
    tampered = record_tamper(tamper)
    for sequence in range(len(events), keep, -1):
        tamper.delete_event(run_id, sequence)
    record = replay(events[:keep])
    tampered.set_run(RunInfo(run_id, record.status, keep, record.updated_at))


_TRUNCATED = (
    "the log ends at version 6, but the anchor records version 11: events were removed "
    "from the store"
)


class AnchorChecks:
    """The anchor part of `StoreConformance` (its fixtures: `open_store`, `tamper`)."""

    def test_each_commit_gives_its_head_to_the_anchor(self, open_store: OpenStore) -> None:
        """After every append the anchor holds the run's version and chain hash, and the
        store's key record."""
        anchor = MemoryAnchor()
        events = scripted_run("r1", 2)
        store = open_store(anchor=anchor, integrity_key=KEY)
        store.append("r1", events[:6], 0)
        store.append("r1", events[6:], 6)
        record, hashes = Integrity(KEY).record, chain(events, Integrity(KEY))
        assert anchor.told == [
            AnchoredHead("r1", 6, hashes[5], record),
            AnchoredHead("r1", 11, hashes[10], record),
        ]
        assert open_store(anchor=anchor, integrity_key=KEY).verify("r1").ok

    def test_a_log_cut_behind_the_store_is_refused_and_reported(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """The reported attack: a load (what a drive does first) raises `TruncatedLogError`
        naming where the log ends and the anchored version; `verify` reports it."""
        anchor = MemoryAnchor()
        events = scripted_run("r1", 2)
        open_store(anchor=anchor, snapshot_every=None).append("r1", events, 0)
        cut(tamper, "r1", events, 6)
        assert open_store(snapshot_every=None).verify("r1").ok  # what a chain alone can tell
        store = open_store(anchor=anchor, snapshot_every=None)
        with pytest.raises(TruncatedLogError) as info:
            store.load("r1")
        assert (info.value.sequence, info.value.log_version, info.value.anchored_version) == (
            7,
            6,
            11,
        )
        assert str(info.value) == f"run 'r1', sequence 7: {_TRUNCATED}"
        with pytest.raises(TruncatedLogError):
            store.append("r1", tool_turn("r1", 7, "again"), 6)
        report = store.verify("r1")
        assert (report.ok, report.sequence, report.problem) == (False, 7, _TRUNCATED)

    def test_an_anchor_behind_the_log_checks_the_event_it_holds(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """An anchor that lags (a commit it missed) is no finding while the log still holds
        its event; once that event's hash is another, the run is refused."""
        anchor = MemoryAnchor()
        events = scripted_run("r1", 2)
        open_store(snapshot_every=None).append("r1", events, 0)
        anchor.put([AnchoredHead("r1", 6, chain(events)[5], "unkeyed")])
        store = open_store(anchor=anchor, snapshot_every=None)
        assert store.load("r1").version == 11
        tamper.set_event_hash("r1", 6, "f" * 64)
        with pytest.raises(CorruptLogError) as info:
            open_store(anchor=anchor, snapshot_every=None).load("r1")
        assert str(info.value) == (
            "run 'r1', sequence 6: the event at sequence 6 is not the one the anchor records: "
            "the log was rewritten"
        )

    def test_a_run_the_anchor_knows_is_not_started_again(self, open_store: OpenStore) -> None:
        """A run id the anchor has a head of, absent from the store, was removed from it:
        starting it again could repeat its calls, so it is refused, and a load says why."""
        anchor = MemoryAnchor()
        anchor.put([AnchoredHead("gone", 6, "ab" * 32, "unkeyed")])
        store = open_store(anchor=anchor)
        expected = (
            "run 'gone', sequence 1: the store has no such run, but the anchor records "
            "version 6: it was removed from the store"
        )
        calls: tuple[Callable[[], object], ...] = (
            lambda: store.append("gone", scripted_run("gone", 0), 0),
            lambda: store.load("gone"),
        )
        for call in calls:
            with pytest.raises(TruncatedLogError) as info:
                call()
            assert (str(info.value), info.value.log_version) == (expected, 0)
        assert store.runs() == []

    def test_an_anchor_that_fails_stops_the_writer_after_the_commit(
        self, open_store: OpenStore
    ) -> None:
        """The batch is stored, but the append raises `AnchorError`: a call must not be made
        whose request the anchor does not hold. One that cannot be read refuses a load and
        a new run (it might know the run)."""
        store = open_store(anchor=_Broken())
        with pytest.raises(AnchorError) as info:
            store.append("r1", scripted_run("r1", 1), 0)
        assert str(info.value) == (
            "run 'r1': version 6 is stored, but the anchor did not take its head (OSError: "
            "the anchor service is down); drive the run on only once it does"
        )
        assert open_store().run_info("r1").version == 6
        unread = open_store(anchor=_Broken(reads=False))
        reads: tuple[tuple[str, Callable[[], object]], ...] = (
            ("r1", lambda: unread.load("r1")),
            ("r2", lambda: unread.append("r2", scripted_run("r2", 0), 0)),
        )
        for run_id, call in reads:
            with pytest.raises(AnchorError) as read:
                call()
            assert str(read.value) == (
                f"run '{run_id}': the anchor cannot be read (OSError: the anchor service is down)"
            )
        assert [info.run_id for info in open_store().runs()] == ["r1"]


MakeAsync = Callable[[StoreOptions], Awaitable[AsyncEventStore]]


class AsyncAnchorChecks:
    """The anchor part of `AsyncStoreConformance` (its fixtures: `make_store`, `tamper`)."""

    def test_each_commit_gives_its_head_to_the_anchor(self, make_store: MakeAsync) -> None:
        """An async append tells the anchor the head it wrote."""
        anchor = MemoryAnchor()
        events = scripted_run("r1", 1)

        async def scenario() -> None:
            async with await make_store(StoreOptions(anchor=anchor)) as store:
                await store.append("r1", events, 0)
                report = await store.verify("r1")
            assert anchor.told == [AnchoredHead("r1", 6, report.head_hash, "unkeyed")]

        asyncio.run(scenario())

    def test_a_log_cut_behind_the_store_is_refused(
        self, make_store: MakeAsync, tamper: Tamper
    ) -> None:
        """An async load of a cut log raises `TruncatedLogError`; `verify` reports it."""
        anchor = MemoryAnchor()
        events = scripted_run("r1", 2)
        options = StoreOptions(anchor=anchor, snapshot_every=None)

        async def write() -> None:
            async with await make_store(options) as store:
                await store.append("r1", events, 0)

        async def read() -> None:
            async with await make_store(options) as store:
                with pytest.raises(TruncatedLogError) as info:
                    await store.load("r1")
                assert str(info.value) == f"run 'r1', sequence 7: {_TRUNCATED}"
                report = await store.verify("r1")
                assert (report.ok, report.problem) == (False, _TRUNCATED)
            async with await make_store(attrs.evolve(options, anchor=None)) as store:
                assert (await store.verify("r1")).ok

        asyncio.run(write())
        cut(tamper, "r1", events, 6)
        asyncio.run(read())
