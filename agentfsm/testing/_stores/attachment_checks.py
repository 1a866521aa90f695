"""Attachments, the optional part of the store contract: blobs kept beside a run's log.

Mixed into `StoreConformance` and `AsyncStoreConformance` (and run through them). A backend
that keeps no attachments raises `NotImplementedError` for them, and then every check here
is skipped, saying so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentfsm.errors import RunNotFoundError
from agentfsm.events.codec import dump_event
from agentfsm.reducers.reduce import replay
from agentfsm.stores.base import AsyncEventStore, EventStore, StoreOptions
from agentfsm.stores.rows import Attachment
from agentfsm.testing._stores.scripted import scripted_run

__all__ = ["BINARY", "AsyncAttachmentChecks", "AttachmentChecks"]

MakeAsyncStore = Callable[[StoreOptions], Awaitable[AsyncEventStore]]


def _require_attachments(store: EventStore) -> None:
    try:
        store.attachment("probe", "probe")
    except NotImplementedError as exc:
        pytest.skip(f"{exc}: attachment checks not run")


async def _require_async_attachments(store: AsyncEventStore) -> None:
    try:
        await store.attachment("probe", "probe")
    except NotImplementedError as exc:
        pytest.skip(f"{exc}: attachment checks not run")


#: Every byte value, NUL included, so a backend that keeps text instead of bytes fails.
BINARY = bytes(range(256)) * 4


class AttachmentChecks:
    """The attachment part of `StoreConformance` (its fixtures: `open_store`, `store`)."""

    def test_an_attachment_round_trips_through_a_new_handle(
        self, open_store: Callable[..., EventStore]
    ) -> None:
        """Bytes put under a name come back whole, with their version, from a reopened store."""
        writer = open_store()
        _require_attachments(writer)
        writer.append("r1", scripted_run("r1", 1), 0)
        writer.put_attachment("r1", "sdk.state", BINARY, version=6)
        writer.put_attachment("r1", "empty", b"", version=1)
        writer.close()
        reader = open_store()
        assert reader.attachment("r1", "sdk.state") == Attachment("r1", "sdk.state", BINARY, 6)
        assert reader.attachment("r1", "empty") == Attachment("r1", "empty", b"", 1)

    def test_a_large_attachment_round_trips(self, store: EventStore) -> None:
        """Four MiB of binary data is kept and read back byte for byte."""
        _require_attachments(store)
        store.append("r1", scripted_run("r1", 0), 0)
        data = BINARY * 4096
        store.put_attachment("r1", "big", data, version=1)
        found = store.attachment("r1", "big")
        assert found is not None
        assert found.data == data

    def test_the_last_put_replaces_the_value(self, open_store: Callable[..., EventStore]) -> None:
        """A put replaces the earlier value and version, whichever handle wrote it: the last
        write wins, even when it names an older version."""
        first, second = open_store(), open_store()
        _require_attachments(first)
        first.append("r1", scripted_run("r1", 1), 0)
        first.put_attachment("r1", "state", b"one", version=6)
        second.put_attachment("r1", "state", b"two", version=2)
        assert first.attachment("r1", "state") == Attachment("r1", "state", b"two", 2)
        first.put_attachment("r1", "state", b"three", version=5)
        assert second.attachment("r1", "state") == Attachment("r1", "state", b"three", 5)

    def test_racing_puts_leave_one_whole_value(self, open_store: Callable[..., EventStore]) -> None:
        """Two handles putting the same name at once never fail, and what stays is one
        writer's last value, whole."""
        handles = [open_store(), open_store()]
        _require_attachments(handles[0])
        handles[0].append("r1", scripted_run("r1", 1), 0)

        def value(writer: int, i: int) -> bytes:
            return f"{writer}:{i};".encode() * 200

        def put_many(writer: int) -> None:
            for i in range(30):
                handles[writer].put_attachment("r1", "state", value(writer, i), version=i % 6 + 1)

        with ThreadPoolExecutor(max_workers=2) as pool:
            for done in [pool.submit(put_many, w) for w in (0, 1)]:
                done.result()
        found = open_store().attachment("r1", "state")
        assert found in [Attachment("r1", "state", value(w, 29), 6) for w in (0, 1)]

    def test_an_absent_attachment_is_none(self, store: EventStore) -> None:
        """A name never put, another run's name, and an unknown run's name all read as None."""
        _require_attachments(store)
        store.append("r1", scripted_run("r1", 0), 0)
        store.append("r2", scripted_run("r2", 0), 0)
        store.put_attachment("r1", "state", b"x", version=1)
        assert store.attachment("r1", "other") is None
        assert store.attachment("r2", "state") is None
        assert store.attachment("nope", "state") is None

    def test_delete_drops_only_that_attachment(self, open_store: Callable[..., EventStore]) -> None:
        """`delete_attachment` removes one name of one run and says whether it was there."""
        store = open_store()
        _require_attachments(store)
        store.append("r1", scripted_run("r1", 0), 0)
        store.append("r2", scripted_run("r2", 0), 0)
        for run_id, name in (("r1", "a"), ("r1", "b"), ("r2", "a")):
            store.put_attachment(run_id, name, name.encode(), version=1)
        assert store.delete_attachment("r1", "a") is True
        assert store.delete_attachment("r1", "a") is False
        assert store.delete_attachment("nope", "a") is False
        other = open_store()
        assert other.attachment("r1", "a") is None
        assert other.attachment("r1", "b") == Attachment("r1", "b", b"b", 1)
        assert other.attachment("r2", "a") == Attachment("r2", "a", b"a", 1)

    def test_an_attachment_of_an_unknown_run_is_refused(self, store: EventStore) -> None:
        """Putting an attachment on a run the store does not hold raises `RunNotFoundError`."""
        _require_attachments(store)
        with pytest.raises(RunNotFoundError) as info:
            store.put_attachment("nope", "state", b"x", version=1)
        assert info.value.run_id == "nope"
        assert store.attachment("nope", "state") is None

    def test_a_version_beyond_the_run_is_refused(self, store: EventStore) -> None:
        """An attachment cannot belong to a version the run has not reached; nothing is kept."""
        _require_attachments(store)
        store.append("r1", scripted_run("r1", 1), 0)
        with pytest.raises(ValueError, match=r"^run 'r1' is at version 6") as info:
            store.put_attachment("r1", "state", b"x", version=7)
        assert str(info.value) == (
            "run 'r1' is at version 6: attachment 'state' cannot belong to version 7, "
            "which the run has not reached"
        )
        assert store.attachment("r1", "state") is None

    def test_bad_attachment_arguments_are_refused(self, store: EventStore) -> None:
        """A name that is empty or not a str, data that is not bytes, or a version that is not
        a positive int is refused with a message naming the run; nothing is kept."""
        _require_attachments(store)
        store.append("r1", scripted_run("r1", 1), 0)
        bad: list[tuple[Callable[[], object], type[Exception], str]] = [
            (
                lambda: store.put_attachment("r1", "", b"x", version=1),
                ValueError,
                "run 'r1': an attachment name must not be empty",
            ),
            (
                lambda: store.put_attachment("r1", 3, b"x", version=1),  # type: ignore[arg-type]
                TypeError,
                "run 'r1': an attachment name must be a str, got int",
            ),
            (
                lambda: store.put_attachment("r1", "s", "text", version=1),  # type: ignore[arg-type]
                TypeError,
                "run 'r1': attachment 's' must be bytes, got str",
            ),
            (
                lambda: store.put_attachment("r1", "s", b"x", version="1"),  # type: ignore[arg-type]
                TypeError,
                "run 'r1': attachment 's' version must be an int, got str",
            ),
            (
                lambda: store.put_attachment("r1", "s", b"x", version=0),
                ValueError,
                "run 'r1': attachment 's' version must be at least 1, got 0",
            ),
            (
                lambda: store.attachment("r1", ""),
                ValueError,
                "run 'r1': an attachment name must not be empty",
            ),
            (
                lambda: store.delete_attachment("r1", None),  # type: ignore[arg-type]
                TypeError,
                "run 'r1': an attachment name must be a str, got NoneType",
            ),
        ]
        for call, kind, message in bad:
            with pytest.raises(kind) as info:
                call()
            assert (type(info.value), str(info.value)) == (kind, message)
        assert store.attachment("r1", "s") is None

    def test_attachments_leave_the_run_alone(self, open_store: Callable[..., EventStore]) -> None:
        """Putting, replacing and deleting attachments changes neither what loads, streams,
        lists or verifies, nor the version the next append must expect."""
        store = open_store(snapshot_every=4)
        _require_attachments(store)
        events = scripted_run("r1", 2)
        store.append("r1", events[:6], 0)

        def seen(handle: EventStore) -> tuple[object, ...]:
            return (
                handle.load("r1").dumps(),
                [dump_event(e) for e in handle.events("r1")],
                handle.run_info("r1"),
                handle.runs(),
                handle.verify("r1"),
            )

        before = seen(store)
        store.put_attachment("r1", "state", b"one", version=6)
        store.put_attachment("r1", "state", b"two", version=3)
        store.put_attachment("r1", "other", b"x", version=6)
        assert store.delete_attachment("r1", "other")
        assert seen(store) == before
        assert seen(open_store(snapshot_every=4)) == before
        record = store.append("r1", events[6:], 6)
        assert record.dumps() == replay(events).dumps()
        assert store.attachment("r1", "state") == Attachment("r1", "state", b"two", 3)


class AsyncAttachmentChecks:
    """The attachment part of `AsyncStoreConformance` (its fixture: `make_store`)."""

    def test_attachments(self, make_store: MakeAsyncStore) -> None:
        """Attachments round trip, replace, delete and refuse as in the sync contract, and
        leave the run's log and version alone."""
        events = scripted_run("r1", 1)

        async def scenario() -> None:
            async with await make_store(StoreOptions()) as store:
                await _require_async_attachments(store)
                await store.append("r1", events, 0)
                await store.put_attachment("r1", "state", BINARY, version=6)
                await store.put_attachment("r1", "state", b"two", version=2)
                await store.put_attachment("r1", "other", b"x", version=6)
                with pytest.raises(RunNotFoundError):
                    await store.put_attachment("nope", "state", b"x", version=1)
                with pytest.raises(ValueError, match=r"^run 'r1' is at version 6") as ahead:
                    await store.put_attachment("r1", "state", b"x", version=7)
                assert str(ahead.value) == (
                    "run 'r1' is at version 6: attachment 'state' cannot belong to version 7, "
                    "which the run has not reached"
                )
                with pytest.raises(ValueError, match=r"^run 'r1': an attachment name must not"):
                    await store.attachment("r1", "")
                assert await store.delete_attachment("r1", "other") is True
                assert await store.delete_attachment("r1", "other") is False
            async with await make_store(StoreOptions()) as store:
                assert await store.attachment("r1", "state") == Attachment("r1", "state", b"two", 2)
                assert await store.attachment("r1", "other") is None
                assert await store.attachment("nope", "state") is None
                assert (await store.run_info("r1")).version == 6
                assert (await store.load("r1")).dumps() == replay(events).dumps()
                assert [dump_event(e) async for e in store.events("r1")] == [
                    dump_event(e) for e in events
                ]

        asyncio.run(scenario())
