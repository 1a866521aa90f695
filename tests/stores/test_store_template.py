"""The one store template: a sans-IO core (`stores/_core.py`) and its two shells.

The core asks for hooks by name; each shell must perform every one it asks for. A minimal
async backend on the async shell (its hooks over a memory store's rows) meets the whole
async contract, as `AsyncPostgresEventStore` does: what makes a store right is the core.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import TypeVar

import pytest

import agentfsm.stores
from agentfsm.errors import ConcurrencyConflictError
from agentfsm.stores import MemoryEventStore, MemoryStorage, StoreOptions
from agentfsm.stores import _core as core
from agentfsm.stores._append import PreparedAppend
from agentfsm.stores._async_store import AsyncStoreShell
from agentfsm.stores.base import EventStore
from agentfsm.stores.rows import Attachment, StoredEvent, StoredSnapshot
from agentfsm.stores.runs import RunCount, RunInfo, RunOrder
from agentfsm.testing import AsyncStoreConformance, Tamper, scripted_run
from tests.stores.conftest import MemoryTamper

T = TypeVar("T")


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


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("RunInfo", "runs"),
        ("RunCount", "runs"),
        ("VerifyReport", "rows"),
        ("Attachment", "rows"),
        ("StoredEvent", "rows"),
        ("StoredSnapshot", "rows"),
        ("Folded", "rows"),
        ("Lease", "lease"),
        ("AsyncLease", "lease"),
        ("HeldLease", "lease"),
        ("Holder", "lease"),
    ],
)
def test_what_a_store_hands_out_lives_in_a_public_module(name: str, home: str) -> None:
    """Each value a store hands back (`run_info`, `verify`, `attachment`, `hold`, ...) is
    exported from `agentfsm.stores` and defined in a public module of it that lists it,
    not in a private one."""
    value = getattr(agentfsm.stores, name)
    assert value.__module__ == f"agentfsm.stores.{home}"
    assert name in vars(agentfsm.stores)[home].__all__


class _CountsDrives(MemoryEventStore):
    """A memory store that counts the core operations it drives as generators."""

    drives = 0

    def _run(self, steps: core.Steps[T]) -> T:
        self.drives += 1
        return super()._run(steps)


def test_an_append_on_the_handles_own_head_performs_only_the_write() -> None:
    """The Runner's case, the handle's own last append as the head and no anchor, is the
    write called straight, no core generator driven (one cost ~10% of the append); an
    append that must read first, or tell an anchor, is driven through the core."""
    store = _CountsDrives(options=StoreOptions(anchor=None))
    store.drives = 0  # opening checked the key record through the core
    events = scripted_run("r", 4)
    store.append("r", events[:1], 0)  # a new run: its head is the reducer's start
    store.append("r", events[1:2], 1)
    assert store.drives == 0
    other = _CountsDrives(store.storage, options=StoreOptions(anchor=None))
    other.drives = 0
    other.append("r", events[2:3], 2)  # not its head: it loads the run through the core
    assert other.drives == 1
    assert other.load("r").version == 3


def test_a_stale_head_is_a_conflict_on_the_direct_path() -> None:
    """The direct path keeps the core's rulings: a lost race and a batch refused against a
    view the store has moved past are both a `ConcurrencyConflictError` (the handle then
    reads the run again)."""
    store = MemoryEventStore(options=StoreOptions(anchor=None))
    events = scripted_run("r", 4)
    store.append("r", events[:2], 0)
    other = MemoryEventStore(store.storage, options=StoreOptions(anchor=None))
    other.load("r")
    other.append("r", events[2:3], 2)
    with pytest.raises(ConcurrencyConflictError):
        store.append("r", events[2:3], 2)  # its cached head is at 2; the store moved on
    store.load("r")
    with pytest.raises(ConcurrencyConflictError):
        store.append("r", events[:1], 2)  # refused (out of sequence) on a stale cached head
    assert store.append("r", events[3:4], 3).version == 4


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
