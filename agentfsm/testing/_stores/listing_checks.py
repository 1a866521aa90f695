"""Listing runs in their orders and counting them: part of the store contract.

Mixed into `StoreConformance` and `AsyncStoreConformance` (and run through them). Every
order pages by key: a page starts after the last run of the one before, so the run ids are
chosen here to sort otherwise than they were made, and a run that moves on between two pages
keeps its place. The orders other than run id are optional for a backend: when its store
raises `NotImplementedError` for them, those checks are skipped, saying so (counting has a
default every backend gets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agentfsm.events.models import Event
from agentfsm.stores.base import AsyncEventStore, EventStore, StoreOptions
from agentfsm.stores.runs import RunCount, RunInfo
from agentfsm.testing._stores.scripted import finish_events, scripted_run

__all__ = ["AsyncListingChecks", "ListingChecks"]

MakeAsyncStore = Callable[[StoreOptions], Awaitable[AsyncEventStore]]

#: Runs made in this order (ids that sort otherwise), and the status each is left in.
MADE = [
    ("m-4", "running"),
    ("m-2", "completed"),
    ("m-5", "waiting_tool"),
    ("m-1", "running"),
    ("m-3", "completed"),
]


def _events(run_id: str, status: str) -> list[Event]:
    if status == "completed":
        return scripted_run(run_id, 1, finished=True)
    if status == "waiting_tool":
        return scripted_run(run_id, 1)[:4]
    return scripted_run(run_id, 0)


def _ids(infos: list[RunInfo]) -> list[str]:
    return [i.run_id for i in infos]


def _check_count(found: RunCount, real: int, bound: int) -> None:
    """A count is exact up to its bound; past it, exact, or an estimate saying so."""
    if real <= bound or found.exact:
        assert found == RunCount(real, True, real)
    else:
        assert (found.at_least, found.count >= found.at_least) == (bound + 1, True)
        assert str(found).startswith(("about ", "more than "))


def _require_orders(store: EventStore) -> None:
    try:
        store.runs(order="newest", limit=1)
    except NotImplementedError as exc:
        pytest.skip(f"{exc}: checks of the other orders not run")


class ListingChecks:
    """The listing part of `StoreConformance` (its fixture: `store`)."""

    def _make(self, store: EventStore, *, orders: bool = True) -> None:
        if orders:
            _require_orders(store)
        for run_id, status in MADE:
            store.append(run_id, _events(run_id, status), 0)

    def test_runs_list_newest_or_oldest_first_by_creation(self, store: EventStore) -> None:
        """`order="newest"`/`"oldest"` list runs in the order they were made, not by id,
        and page by key: each page starts after the run `after` names."""
        self._make(store)
        made = [run_id for run_id, _ in MADE]
        assert _ids(store.runs(order="newest")) == made[::-1]
        assert _ids(store.runs(order="oldest")) == made
        assert _ids(store.runs(order="newest", limit=2)) == ["m-3", "m-1"]
        assert _ids(store.runs(order="newest", limit=2, after="m-1")) == ["m-5", "m-2"]
        assert _ids(store.runs(order="newest", limit=2, after="m-2")) == ["m-4"]
        assert _ids(store.runs(order="oldest", limit=3, after="m-2")) == ["m-5", "m-1", "m-3"]
        assert store.runs(order="oldest", after="m-3") == []
        assert store.runs(order="newest", limit=0) == []

    def test_runs_by_creation_filter_by_status_and_keep_their_place(
        self, store: EventStore
    ) -> None:
        """A status filter (one or several) keeps creation order; a run that changes status
        keeps its place in it."""
        self._make(store)
        assert _ids(store.runs("running", order="newest")) == ["m-1", "m-4"]
        both = ["completed", "waiting_tool"]
        assert _ids(store.runs(both, order="newest")) == ["m-3", "m-5", "m-2"]
        assert _ids(store.runs(both, order="newest", limit=2, after="m-3")) == ["m-5", "m-2"]
        assert _ids(store.runs(both, order="oldest", limit=2)) == ["m-2", "m-5"]
        store.append("m-4", finish_events("m-4", 2), 1)
        assert _ids(store.runs("completed", order="newest")) == ["m-3", "m-2", "m-4"]
        assert _ids(store.runs("running", order="newest")) == ["m-1"]
        assert store.runs("completed", order="newest")[2].status == "completed"

    def test_runs_list_by_status_then_run_id(self, store: EventStore) -> None:
        """`order="status"` lists by status A-Z, then run id, paged by key."""
        self._make(store)
        every = ["m-2", "m-3", "m-1", "m-4", "m-5"]
        assert _ids(store.runs(order="status")) == every
        assert _ids(store.runs(order="status", limit=2, after="m-3")) == ["m-1", "m-4"]
        some = ["running", "waiting_tool"]
        assert _ids(store.runs(some, order="status", limit=2)) == ["m-1", "m-4"]
        assert _ids(store.runs(some, order="status", after="m-4")) == ["m-5"]
        assert _ids(store.runs(some, order="status", after="m-2")) == ["m-1", "m-4", "m-5"]

    def test_a_cursor_naming_no_run_and_an_unknown_order_are_refused(
        self, store: EventStore
    ) -> None:
        """Past the run-id order a cursor must name a run; an order must be one listed."""
        self._make(store)
        for order in ("newest", "oldest", "status"):
            with pytest.raises(ValueError, match="after='nope' names no run in the store"):
                store.runs(order=order, after="nope")
        with pytest.raises(ValueError, match="order must be one of") as info:
            store.runs(order="sideways")  # type: ignore[arg-type]
        assert str(info.value) == (
            "order must be one of 'run_id', 'newest', 'oldest', 'status', got 'sideways'"
        )

    def test_runs_are_counted_exactly_up_to_the_bound(self, store: EventStore) -> None:
        """`count_runs` counts every run or those of some statuses: exactly up to
        `exact_up_to`, and past it exactly or an estimate that says so."""
        self._make(store, orders=False)
        assert store.count_runs() == RunCount(5, True, 5)
        assert store.count_runs("completed") == RunCount(2, True, 2)
        assert store.count_runs(["running", "waiting_tool"]) == RunCount(3, True, 3)
        assert store.count_runs("failed") == RunCount(0, True, 0)
        assert str(store.count_runs()) == "5"
        _check_count(store.count_runs(exact_up_to=2), 5, 2)
        _check_count(store.count_runs("running", exact_up_to=1), 2, 1)
        _check_count(store.count_runs(["completed", "running"], exact_up_to=3), 4, 3)


class AsyncListingChecks:
    """The listing part of `AsyncStoreConformance` (its fixture: `make_store`)."""

    def test_runs_by_creation_and_status_and_their_count(self, make_store: MakeAsyncStore) -> None:
        """Awaited, the same orders, paged by key, and the same counts."""

        async def scenario() -> None:
            async with await make_store(StoreOptions()) as store:
                for run_id, status in MADE:
                    await store.append(run_id, _events(run_id, status), 0)
                assert _ids(await store.runs(order="newest", limit=2, after="m-1")) == [
                    "m-5",
                    "m-2",
                ]
                assert _ids(await store.runs("running", order="oldest")) == ["m-4", "m-1"]
                assert _ids(await store.runs(order="status", limit=2)) == ["m-2", "m-3"]
                with pytest.raises(ValueError, match="names no run"):
                    await store.runs(order="newest", after="nope")
                assert await store.count_runs("completed") == RunCount(2, True, 2)
                _check_count(await store.count_runs(exact_up_to=2), 5, 2)

        asyncio.run(scenario())
