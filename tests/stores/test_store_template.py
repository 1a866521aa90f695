"""The one store template: a sans-IO core (`stores/_core.py`) and its two shells.

The core asks for hooks by name; each shell must perform every one it asks for. A minimal
async backend on the async shell (its hooks over a memory store's rows) meets the whole
async contract, as `AsyncPostgresEventStore` does: what makes a store right is the core.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable

import pytest

import agentfsm.stores
from agentfsm.stores import MemoryEventStore, MemoryStorage, StoreOptions
from agentfsm.stores import _core as core
from agentfsm.stores._async_store import AsyncStoreShell
from agentfsm.stores._rows import Attachment, PreparedAppend, StoredEvent, StoredSnapshot
from agentfsm.stores.base import EventStore
from agentfsm.stores.runs import RunCount, RunInfo, RunOrder
from agentfsm.testing import AsyncStoreConformance, Tamper
from tests.stores.conftest import MemoryTamper


def _hooks_asked_for() -> set[str]:
    """Every hook name the core yields: the first item of each tuple it yields."""
    asked = set()
    for node in ast.walk(ast.parse(inspect.getsource(core))):
        if isinstance(node, ast.Yield) and isinstance(node.value, ast.Tuple):
            first = node.value.elts[0]
            if isinstance(first, ast.Name) and first.id == "hook":
                continue  # `_attachment_steps`: its callers name the hook (below)
            asked.add(first.value if isinstance(first, ast.Constant) else "?")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "_attachment_steps":
            hook = node.args[0]
            assert isinstance(hook, ast.Constant)
            asked.add(hook.value)
    return asked


def test_every_hook_the_core_asks_for_is_performed_by_both_shells() -> None:
    asked = _hooks_asked_for()
    assert "?" not in asked  # a hook named by a variable could not be checked here
    assert {"_read_run", "_read_rows", "_first_rows", "_write", "_anchor_read"} <= asked
    for shell in (EventStore, AsyncStoreShell):
        missing = sorted(name for name in asked if not callable(getattr(shell, name, None)))
        assert missing == [], f"{shell.__name__} does not perform {missing}"
    # The async shell awaits each: none of its hooks is a plain function.
    assert all(inspect.iscoroutinefunction(getattr(AsyncStoreShell, name)) for name in asked)


def test_what_a_store_says_of_its_runs_lives_in_a_public_module() -> None:
    """`RunInfo` and `RunCount` are exported from `agentfsm.stores` and defined in its
    public `runs` module, not in a private one."""
    for value in (agentfsm.stores.RunInfo, agentfsm.stores.RunCount):
        assert value.__module__ == "agentfsm.stores.runs"
        assert value.__name__ in agentfsm.stores.runs.__all__


class AsyncRows(AsyncStoreShell):
    """An async backend whose hooks read and write a memory store's rows: nothing but I/O."""

    def __init__(self, storage: MemoryStorage, options: StoreOptions) -> None:
        super().__init__(options)
        self.rows = MemoryEventStore(storage, options=options)

    async def _read_run(self, run_id: str) -> RunInfo | None:
        return self.rows._read_run(run_id)

    async def _read_rows(self, run_id: str, after: int) -> list[StoredEvent]:
        return list(self.rows._read_rows(run_id, after))

    async def _first_rows(self, run_id: str, after: int, n: int) -> list[StoredEvent]:
        return self.rows._first_rows(run_id, after, n)

    async def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        return self.rows._read_snapshot(run_id)

    async def _write(self, prepared: PreparedAppend) -> None:
        self.rows._write(prepared)

    async def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        return self.rows._list_runs(statuses, limit, after)

    async def _list_runs_in(
        self,
        order: RunOrder,
        statuses: tuple[str, ...] | None,
        limit: int | None,
        after: str | None,
    ) -> list[RunInfo]:
        return self.rows._list_runs_in(order, statuses, limit, after)

    async def _count_runs(self, statuses: tuple[str, ...] | None, up_to: int) -> RunCount:
        return self.rows._count_runs(statuses, up_to)

    async def _read_meta(self, key: str) -> str | None:
        return self.rows._read_meta(key)

    async def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        return self.rows._put_meta(key, value, expected=expected)

    async def _write_attachment(self, attachment: Attachment) -> None:
        self.rows._write_attachment(attachment)

    async def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        return self.rows._read_attachment(run_id, name)

    async def _delete_attachment(self, run_id: str, name: str) -> bool:
        return self.rows._delete_attachment(run_id, name)


class TestAsyncShellOverMemoryRows(AsyncStoreConformance):
    """The async shell over the minimal async backend meets the async contract."""

    @pytest.fixture
    def storage(self) -> MemoryStorage:
        return MemoryStorage()

    @pytest.fixture
    def make_store(self, storage: MemoryStorage) -> Callable[[StoreOptions], object]:
        async def open_(options: StoreOptions) -> AsyncRows:
            store = AsyncRows(storage, options)
            await store._open_key_check()
            return store

        return open_

    @pytest.fixture
    def tamper(self, storage: MemoryStorage) -> Tamper:
        return MemoryTamper(storage)
