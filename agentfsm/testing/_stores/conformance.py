"""The event-store conformance suite: every backend must pass it, yours too.

Subclass `StoreConformance` in a test module and give it a `make_store` fixture: a
callable that takes `StoreOptions` and opens a *new handle on the same storage* each time
it is called (the suite opens several to check what one handle writes, another reads).
Optionally give it a `tamper` fixture (a `Tamper`) to run the bad-data checks too; without
one they are skipped, saying so::

    import pytest
    from agentfsm.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda options: MyStore(tmp_path / "db", options=options)

`AsyncStoreConformance` does the same for an `AsyncEventStore` (its `make_store` returns
an awaitable of the store). For the multi-process checks see `race_appends` and `crash_trials`.

Attachments are optional for a backend: when its store raises `NotImplementedError` for
them, the attachment checks are skipped, saying so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from agentfsm.errors import (
    ConcurrencyConflictError,
    IllegalTransitionError,
    RunMismatchError,
    RunNotFoundError,
    SequenceError,
)
from agentfsm.events._canonical import canonical_json
from agentfsm.events.codec import dump_event, event_to_dict, make_event
from agentfsm.events.models import Event
from agentfsm.reducers.reduce import replay
from agentfsm.stores._integrity import chain_hash
from agentfsm.stores.base import AsyncEventStore, EventStore, StoreOptions
from agentfsm.stores.rows import GENESIS_HASH
from agentfsm.stores.runs import RunInfo
from agentfsm.testing._stores.anchor_checks import AnchorChecks, AsyncAnchorChecks
from agentfsm.testing._stores.attachment_checks import AsyncAttachmentChecks, AttachmentChecks
from agentfsm.testing._stores.integrity_checks import AsyncIntegrityChecks, IntegrityChecks
from agentfsm.testing._stores.key_checks import AsyncKeyChecks, KeyChecks
from agentfsm.testing._stores.listing_checks import AsyncListingChecks, ListingChecks
from agentfsm.testing._stores.migration_checks import AsyncMigrationChecks, MigrationChecks
from agentfsm.testing._stores.scripted import finish_events, scripted_run, tool_turn
from agentfsm.testing._stores.tamper import Tamper

__all__ = ["AsyncStoreConformance", "StoreConformance"]

MakeStore = Callable[[StoreOptions], EventStore]
MakeAsyncStore = Callable[[StoreOptions], Awaitable[AsyncEventStore]]


def expected_chain(events: list[Event]) -> str:
    """The head hash of a log, computed independently of any store."""
    previous = GENESIS_HASH
    for event in events:
        previous = chain_hash(previous, canonical_json(event_to_dict(event)))
    return previous


class StoreConformance(
    AttachmentChecks, ListingChecks, MigrationChecks, IntegrityChecks, KeyChecks, AnchorChecks
):
    """The contract every `EventStore` must meet, for a test class of yours to inherit.

    Give the subclass a `make_store` fixture: a callable that takes `StoreOptions` and opens
    a new handle on the same storage each time it is called. With a `tamper` fixture (a
    `Tamper`: direct access to the backend's rows) the bad-data checks run too; without one
    they are skipped, saying so.
    """

    @pytest.fixture
    def make_store(self) -> MakeStore:
        """Override: open a new handle on this test's storage with the given options."""
        pytest.fail("define a `make_store` fixture in your StoreConformance subclass")

    @pytest.fixture
    def tamper(self) -> Tamper:
        """Override to run the bad-data checks."""
        pytest.skip("this backend has no `tamper` fixture: bad-data checks not run")

    @pytest.fixture
    def open_store(self, make_store: MakeStore) -> Iterator[Callable[..., EventStore]]:
        """Opens handles with `StoreOptions(**kwargs)` and closes them after the test."""
        opened: list[EventStore] = []

        def open_(**options: Any) -> EventStore:
            store = make_store(StoreOptions(**options))
            opened.append(store)
            return store

        yield open_
        for store in opened:
            store.close()

    @pytest.fixture
    def store(self, open_store: Callable[..., EventStore]) -> EventStore:
        """A handle that snapshots every 4 events, so snapshots are always in play."""
        return open_store(snapshot_every=4)

    # -- append and load -------------------------------------------------------------------

    def test_load_returns_the_full_replay(self, store: EventStore) -> None:
        """A run appended in batches loads as the replay of all its events."""
        events = scripted_run("r1", 3, finished=True)
        store.append("r1", events[:6], 0)
        store.append("r1", events[6:], 6)
        assert store.load("r1").dumps() == replay(events).dumps()

    def test_append_returns_the_record_after_the_batch(self, store: EventStore) -> None:
        """`append` returns the record as of the batch's last event."""
        events = scripted_run("r1", 2)
        assert store.append("r1", events, 0).dumps() == replay(events).dumps()

    def test_another_handle_reads_what_one_wrote(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """Appends through one handle are loaded, listed and streamed by a new handle."""
        events = scripted_run("r1", 2)
        open_store(snapshot_every=4).append("r1", events, 0)
        other = open_store(snapshot_every=4)
        assert other.load("r1").dumps() == replay(events).dumps()
        assert [dump_event(e) for e in other.events("r1")] == [dump_event(e) for e in events]
        assert other.runs() == [RunInfo("r1", "running", 11, events[-1].occurred_at)]

    def test_events_stream_after_a_sequence(self, store: EventStore) -> None:
        """`events(after=n)` yields the events after `n`, in order, as they were appended."""
        events = scripted_run("r1", 2)
        store.append("r1", events, 0)
        assert [dump_event(e) for e in store.events("r1", after=7)] == [
            dump_event(e) for e in events[7:]
        ]
        assert list(store.events("r1", after=11)) == []

    def test_unknown_run_is_not_found(self, store: EventStore) -> None:
        """Reading a run that was never appended to raises `RunNotFoundError` naming it."""
        for read in (store.load, store.events, store.run_info, store.verify):
            with pytest.raises(RunNotFoundError) as info:
                read("nope")
            assert info.value.run_id == "nope"
            assert str(info.value) == (
                "run 'nope' is not in the store; start it by appending 'run.started' "
                "with expected_version 0"
            )

    def test_empty_batch_is_refused(self, store: EventStore) -> None:
        """An empty batch is a caller's mistake, not a no-op."""
        with pytest.raises(ValueError, match=r"^append needs at least one event$"):
            store.append("r1", [], 0)

    # -- conflicts ---------------------------------------------------------------------------

    def test_stale_version_conflicts_and_names_both(self, store: EventStore) -> None:
        """Appending on an old version raises a conflict naming the expected and stored one."""
        events = scripted_run("r1", 2)
        store.append("r1", events, 0)
        with pytest.raises(ConcurrencyConflictError) as info:
            store.append("r1", tool_turn("r1", 7, "late"), 6)
        assert (info.value.run_id, info.value.expected_version, info.value.actual_version) == (
            "r1",
            6,
            11,
        )
        assert str(info.value) == (
            "run 'r1': expected version 6, but the store is at version 11; "
            "reload the run and try again"
        )
        assert store.load("r1").version == 11

    def test_starting_an_existing_run_conflicts(self, store: EventStore) -> None:
        """`expected_version=0` on a run that exists is a conflict, not an overwrite."""
        store.append("r1", scripted_run("r1", 1), 0)
        with pytest.raises(ConcurrencyConflictError) as info:
            store.append("r1", scripted_run("r1", 0), 0)
        assert (info.value.expected_version, info.value.actual_version) == (0, 6)
        assert len(list(store.events("r1"))) == 6

    def test_version_ahead_of_the_store_conflicts(self, store: EventStore) -> None:
        """Expecting a version the run has not reached (or a run that does not exist) conflicts."""
        store.append("r1", scripted_run("r1", 0), 0)
        with pytest.raises(ConcurrencyConflictError) as ahead:
            store.append("r1", tool_turn("r1", 7, "x"), 6)
        assert (ahead.value.expected_version, ahead.value.actual_version) == (6, 1)
        with pytest.raises(ConcurrencyConflictError) as missing:
            store.append("r2", tool_turn("r2", 2, "x"), 1)
        assert (missing.value.expected_version, missing.value.actual_version) == (1, 0)

    def test_the_loser_of_a_race_writes_nothing(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """Two handles append on the same version: one wins, the other conflicts, nothing mixes."""
        first, second = open_store(snapshot_every=4), open_store(snapshot_every=4)
        start = scripted_run("r1", 0)
        first.append("r1", start, 0)
        assert second.load("r1").version == 1
        first.append("r1", tool_turn("r1", 2, "from-first"), 1)
        with pytest.raises(ConcurrencyConflictError) as info:
            second.append("r1", tool_turn("r1", 2, "from-second"), 1)
        assert (info.value.expected_version, info.value.actual_version) == (1, 6)
        expected = start + tool_turn("r1", 2, "from-first")
        assert [dump_event(e) for e in second.events("r1")] == [dump_event(e) for e in expected]
        assert second.verify("r1").ok

    def test_a_stale_view_conflicts_even_when_its_batch_is_refused(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """A batch illegal only against a stale view is a conflict: reloading is the fix."""
        first, second = open_store(snapshot_every=4), open_store(snapshot_every=4)
        first.append("r1", scripted_run("r1", 0), 0)
        assert second.load("r1").version == 1
        first.append("r1", tool_turn("r1", 2, "a"), 1)
        stale = tool_turn("r1", 2, "a")[3:]  # tool.started of an action `second` never saw
        with pytest.raises(ConcurrencyConflictError) as info:
            second.append("r1", stale, 1)
        assert (info.value.expected_version, info.value.actual_version) == (1, 6)
        with pytest.raises(ConcurrencyConflictError):
            second.append("r1", tool_turn("r1", 3, "b"), 0)  # a stale "new run" too

    # -- batch atomicity -------------------------------------------------------------------

    def test_an_illegal_event_refuses_the_whole_batch(self, store: EventStore) -> None:
        """A batch whose third event is illegal is refused and none of it is written."""
        store.append("r1", scripted_run("r1", 0), 0)
        resumed = make_event(
            "run.resumed", run_id="r1", sequence=4, occurred_at="2026-09-01T10:00:04Z"
        )
        batch = [*tool_turn("r1", 2, "a")[:2], resumed]
        with pytest.raises(IllegalTransitionError) as info:
            store.append("r1", batch, 1)
        assert (info.value.sequence, info.value.state, info.value.event) == (
            4,
            "running",
            "run.resumed",
        )
        assert store.run_info("r1").version == 1
        assert [e.sequence for e in store.events("r1")] == [1]
        store.append("r1", tool_turn("r1", 2, "a"), 1)  # the run is still usable

    def test_a_gap_in_sequence_is_refused(self, store: EventStore) -> None:
        """A batch that skips a sequence is refused with `SequenceError`."""
        store.append("r1", scripted_run("r1", 0), 0)
        with pytest.raises(SequenceError) as info:
            store.append("r1", tool_turn("r1", 3, "a"), 1)
        assert (info.value.sequence, info.value.expected) == (3, 2)
        assert store.run_info("r1").version == 1

    def test_an_event_of_another_run_is_refused(self, store: EventStore) -> None:
        """Events must name the run they are appended to."""
        with pytest.raises(RunMismatchError) as info:
            store.append("r1", scripted_run("r2", 0), 0)
        assert info.value.event_run_id == "r2"
        with pytest.raises(RunNotFoundError):
            store.load("r1")

    # -- snapshots -------------------------------------------------------------------------

    def test_snapshots_load_like_a_full_replay_at_every_version(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """With a snapshot every 3 events, loading at each version equals the full replay."""
        writer = open_store(snapshot_every=3)
        events = scripted_run("r1", 3, finished=True)
        for i, event in enumerate(events):
            writer.append("r1", [event], i)
            fresh = open_store(snapshot_every=3)
            assert fresh.load("r1").dumps() == replay(events[: i + 1]).dumps()

    def test_snapshot_settings_do_not_change_what_loads(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """A log written without snapshots and one written with them load the same."""
        events = scripted_run("a", 4, finished=True)
        with_snapshots = open_store(snapshot_every=2)
        without = open_store(snapshot_every=None)
        with_snapshots.append("a", events[:9], 0)
        without.append("a", events[9:], 9)
        assert open_store(snapshot_every=None).load("a").dumps() == replay(events).dumps()
        assert open_store(snapshot_every=2).load("a").dumps() == replay(events).dumps()

    # -- listing ---------------------------------------------------------------------------

    def test_runs_lists_by_status(self, store: EventStore) -> None:
        """`runs(status=...)` filters by one or several statuses, ordered by run id."""
        store.append("b-done", scripted_run("b-done", 1, finished=True), 0)
        store.append("a-going", scripted_run("a-going", 1), 0)
        store.append("c-going", scripted_run("c-going", 0), 0)
        store.append("d-tool", scripted_run("d-tool", 1)[:4], 0)
        assert [r.run_id for r in store.runs()] == ["a-going", "b-done", "c-going", "d-tool"]
        assert [r.run_id for r in store.runs("running")] == ["a-going", "c-going"]
        assert [r.run_id for r in store.runs(["completed", "waiting_tool"])] == [
            "b-done",
            "d-tool",
        ]
        assert store.runs("failed") == []
        assert store.runs("completed")[0].version == 9

    def test_runs_pages_by_run_id(self, store: EventStore) -> None:
        """`limit` and `after` page through the runs in run-id order."""
        for name in ("r3", "r1", "r4", "r2"):
            store.append(name, scripted_run(name, 0), 0)
        assert [r.run_id for r in store.runs(limit=2)] == ["r1", "r2"]
        assert [r.run_id for r in store.runs(limit=2, after="r2")] == ["r3", "r4"]
        assert store.runs(after="r4") == []

    def test_runs_follow_the_latest_append(self, store: EventStore) -> None:
        """The runs row moves with every append: status, version, last event time."""
        events = scripted_run("r1", 1, finished=True)
        store.append("r1", events[:4], 0)
        assert store.run_info("r1") == RunInfo("r1", "waiting_tool", 4, events[3].occurred_at)
        store.append("r1", events[4:], 4)
        assert store.run_info("r1") == RunInfo("r1", "completed", 9, events[-1].occurred_at)

    # -- the hash chain ----------------------------------------------------------------------

    def test_verify_accepts_an_intact_log(self, store: EventStore) -> None:
        """`verify` reads every event and its head hash is the chain computed independently."""
        events = scripted_run("r1", 2, finished=True)
        store.append("r1", events[:3], 0)
        store.append("r1", events[3:], 3)
        report = store.verify("r1")
        assert (report.ok, report.checked, report.sequence, report.problem) == (
            True,
            14,
            None,
            None,
        )
        assert report.head_hash == expected_chain(events)
        assert str(report) == "run 'r1': 14 events, hash chain intact"

    # -- large runs ------------------------------------------------------------------------

    def test_a_large_run_round_trips(self, open_store: Callable[..., EventStore]) -> None:
        """2,001 events appended 100 at a time load, stream and verify like a replay."""
        events = scripted_run("big", 400)
        writer = open_store(snapshot_every=250)
        for start in range(0, len(events), 100):
            writer.append("big", events[start : start + 100], start)
        reader = open_store(snapshot_every=250)
        assert reader.load("big").dumps() == replay(events).dumps()
        assert sum(1 for _ in reader.events("big")) == 2001
        assert reader.verify("big").ok


class AsyncStoreConformance(
    AsyncAttachmentChecks,
    AsyncListingChecks,
    AsyncMigrationChecks,
    AsyncIntegrityChecks,
    AsyncKeyChecks,
    AsyncAnchorChecks,
):
    """The contract for an `AsyncEventStore`: the same promises, awaited (with a `tamper`
    fixture, the bad-data checks too).

    Give it a `make_store` fixture returning a callable `StoreOptions -> Awaitable[store]`.
    Each test runs its own event loop (`asyncio.run`), so no asyncio plugin is needed.
    """

    @pytest.fixture
    def make_store(self) -> MakeAsyncStore:
        """Override: open a new async handle on this test's storage."""
        pytest.fail("define a `make_store` fixture in your AsyncStoreConformance subclass")

    def test_append_load_and_stream(self, make_store: MakeAsyncStore) -> None:
        """Appends load as the replay and stream back in order from any sequence."""
        events = scripted_run("r1", 2, finished=True)

        async def scenario() -> None:
            async with await make_store(StoreOptions(snapshot_every=4)) as store:
                await store.append("r1", events[:5], 0)
                record = await store.append("r1", events[5:], 5)
                assert record.dumps() == replay(events).dumps()
            async with await make_store(StoreOptions(snapshot_every=4)) as store:
                assert (await store.load("r1")).dumps() == replay(events).dumps()
                streamed = [dump_event(e) async for e in store.events("r1", after=9)]
                assert streamed == [dump_event(e) for e in events[9:]]
                assert (await store.run_info("r1")).status == "completed"
                assert [r.run_id for r in await store.runs("completed")] == ["r1"]
                report = await store.verify("r1")
                assert (report.ok, report.head_hash) == (True, expected_chain(events))

        asyncio.run(scenario())

    def test_conflicts_and_refusals(self, make_store: MakeAsyncStore) -> None:
        """A stale version conflicts; an illegal batch writes nothing; unknown runs are named."""
        events = scripted_run("r1", 1)

        async def scenario() -> None:
            async with await make_store(StoreOptions()) as store:
                await store.append("r1", events, 0)
                with pytest.raises(ConcurrencyConflictError) as info:
                    await store.append("r1", tool_turn("r1", 2, "x"), 1)
                assert (info.value.expected_version, info.value.actual_version) == (1, 6)
                illegal = [
                    *finish_events("r1", 7)[:2],
                    make_event(
                        "run.resumed", run_id="r1", sequence=9, occurred_at=events[-1].occurred_at
                    ),
                ]
                with pytest.raises(IllegalTransitionError):
                    await store.append("r1", illegal, 6)
                assert (await store.run_info("r1")).version == 6
                with pytest.raises(RunNotFoundError):
                    await store.load("nope")
                with pytest.raises(RunNotFoundError):
                    [e async for e in store.events("nope")]

        asyncio.run(scenario())
