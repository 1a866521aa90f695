"""Attachments beyond the conformance kit: optional for a backend, and what they look like."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from agentfsm.stores import (
    AsyncEventStore,
    Attachment,
    EventStore,
    MemoryEventStore,
    RunInfo,
    SQLiteEventStore,
    StoredEvent,
    StoredSnapshot,
    ThreadedAsyncEventStore,
)
from agentfsm.stores._append import PreparedAppend
from agentfsm.testing import AsyncStoreConformance, StoreConformance, scripted_run

NO_ATTACHMENTS = (
    "RowsOnly keeps no attachments: its backend does not implement `_write_attachment`, "
    "`_read_attachment` and `_delete_attachment`"
)


class RowsOnly(EventStore):
    """A backend written before attachments existed: the five required methods only."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = MemoryEventStore()

    def _read_run(self, run_id: str) -> RunInfo | None:
        return self.rows._read_run(run_id)

    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        return self.rows._read_rows(run_id, after)

    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        return self.rows._read_snapshot(run_id)

    def _write(self, prepared: PreparedAppend) -> None:
        self.rows._write(prepared)

    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        return self.rows._list_runs(statuses, limit, after)


class OldAsyncStore(ThreadedAsyncEventStore):
    """An async store written before attachments existed: it inherits the defaults."""

    put_attachment = AsyncEventStore.put_attachment
    attachment = AsyncEventStore.attachment
    delete_attachment = AsyncEventStore.delete_attachment


class TestOptionalForBackends:
    """A backend without the attachment hooks keeps working, and says what it lacks."""

    def test_a_backend_without_hooks_refuses_attachments_by_name(self) -> None:
        """Each attachment method raises `NotImplementedError` naming the store class."""
        store = RowsOnly()
        store.append("r1", scripted_run("r1", 0), 0)
        calls = [
            lambda: store.put_attachment("r1", "state", b"x", version=1),
            lambda: store.attachment("r1", "state"),
            lambda: store.delete_attachment("r1", "state"),
        ]
        for call in calls:
            with pytest.raises(NotImplementedError) as info:
                call()
            assert str(info.value) == NO_ATTACHMENTS
        assert store.run_info("r1").version == 1

    def test_an_async_store_without_them_refuses_by_name(self) -> None:
        """The async defaults raise the same way, naming the async store's class."""

        async def scenario() -> None:
            async with OldAsyncStore(MemoryEventStore()) as store:
                with pytest.raises(NotImplementedError) as info:
                    await store.attachment("r1", "state")
                assert str(info.value) == NO_ATTACHMENTS.replace("RowsOnly", "OldAsyncStore")

        asyncio.run(scenario())

    def test_the_threaded_store_passes_the_refusal_on(self) -> None:
        """Wrapping a store without attachments on a thread reports the wrapped store."""

        async def scenario() -> None:
            async with ThreadedAsyncEventStore(RowsOnly()) as store:
                with pytest.raises(NotImplementedError) as info:
                    await store.delete_attachment("r1", "state")
                assert str(info.value) == NO_ATTACHMENTS

        asyncio.run(scenario())

    def test_the_conformance_kit_skips_its_attachment_checks(self) -> None:
        """The kit skips (not fails) the attachment checks of such a backend, saying why."""
        with pytest.raises(pytest.skip.Exception) as info:
            StoreConformance().test_an_absent_attachment_is_none(RowsOnly())
        assert info.value.msg == f"{NO_ATTACHMENTS}: attachment checks not run"

    def test_the_async_kit_skips_them_too(self) -> None:
        """The async kit skips its attachment check for an async store without them."""

        async def make_store(_: object) -> AsyncEventStore:
            return OldAsyncStore(MemoryEventStore())

        with pytest.raises(pytest.skip.Exception) as info:
            AsyncStoreConformance().test_attachments(make_store)
        assert info.value.msg == (
            f"{NO_ATTACHMENTS.replace('RowsOnly', 'OldAsyncStore')}: attachment checks not run"
        )

    def test_every_shipped_store_keeps_attachments(self) -> None:
        """No shipped store relies on the defaults, so none of them skips the kit's checks."""
        pytest.importorskip("psycopg")
        from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore

        hooks = ("_write_attachment", "_read_attachment", "_delete_attachment")
        for sync in (MemoryEventStore, SQLiteEventStore, PostgresEventStore):
            assert [h for h in hooks if getattr(sync, h) is getattr(EventStore, h)] == []
        methods = ("put_attachment", "attachment", "delete_attachment")
        for async_ in (ThreadedAsyncEventStore, AsyncPostgresEventStore):
            assert [m for m in methods if getattr(async_, m) is getattr(AsyncEventStore, m)] == []


def test_an_attachment_shows_its_size_not_its_bytes() -> None:
    """The repr of an attachment (in logs, in test failures) gives the data's length only."""
    assert repr(Attachment("r1", "state", b"\x00" * 5000, 6)) == (
        "Attachment(run_id='r1', name='state', data=<5000 bytes>, version=6)"
    )
