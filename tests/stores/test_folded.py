"""A store handed its writer's fold (`append(folded=)`) takes it only when it can trust it,
and judges every event of the batch all the same."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.errors import GuardRejectedError, IllegalTransitionError
from agentfsm.events import make_event
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.runtime import Agent, AsyncRunner, Decision, ProposedCall, Runner, Tool
from agentfsm.stores import (
    AsyncEventStore,
    Folded,
    MemoryEventStore,
    StoreOptions,
    ThreadedAsyncEventStore,
)
from agentfsm.stores._append import hands_fold
from agentfsm.testing import legal_runs
from agentfsm.testing._stores.scripted import run_started, tool_turn


def counting(reducer: Reducer) -> Counter[str]:
    """Count the event handlers `reducer` runs, by event type (the work a fold does)."""
    calls: Counter[str] = Counter()
    handlers = reducer._handlers
    for name, handler in list(handlers.items()):

        def counted(*args: object, _name: str = name, _handler: object = handler) -> object:
            calls[_name] += 1
            return _handler(*args)  # type: ignore[operator]

        handlers[name] = counted  # type: ignore[assignment]
    return calls


def folded(by: Reducer, before: RunRecord, events: Sequence[Event]) -> Folded:
    after = []
    record = before
    for event in events:
        record = by.reduce(record, event)
        after.append(record)
    return Folded(by, before, tuple(events), tuple(after))


def one_tool_agent() -> Agent:
    """An agent whose model asks for one lookup, then answers."""
    decisions = iter(
        [Decision.call_tools(ProposedCall("lookup", {"n": 1})), Decision.answer("done")]
    )
    return Agent("a", lambda ctx: next(decisions), [Tool("lookup", lambda ctx: "ok")])


Started = tuple[MemoryEventStore, Counter[str], RunRecord]


@pytest.fixture
def started() -> Started:
    """A store whose reducer counts its handlers, a run started in it, and its head: the
    record `append` returned, which the store keeps as the run's head."""
    reducer = Reducer(DEFAULT_TABLE)
    calls = counting(reducer)
    store = MemoryEventStore(options=StoreOptions(reducer=reducer))
    head = store.append("r1", [run_started("r1")], 0)
    calls.clear()
    return store, calls, head


def test_a_trusted_fold_is_taken_and_the_rows_are_the_same(
    started: Started,
) -> None:
    """The writer's fold, onto the very head the store holds: the store runs no handler,
    returns that record, and writes the rows a plain append writes."""
    store, calls, head = started
    batch = tool_turn("r1", 2, "a1")
    fold = folded(Reducer(DEFAULT_TABLE), head, batch)
    got = store.append("r1", batch, 1, folded=fold)
    assert got is fold.after[-1]
    assert sum(calls.values()) == 0
    plain = MemoryEventStore()
    plain.append("r1", [run_started("r1"), *batch], 0)
    assert list(store.storage.events["r1"]) == list(plain.storage.events["r1"])
    assert store.load("r1") == plain.load("r1")


@pytest.mark.parametrize(
    "spoil", ["another head", "another table", "other events", "too few records"]
)
def test_a_fold_the_store_cannot_trust_is_done_again(started: Started, spoil: str) -> None:
    """Onto an equal but other record, by a reducer of another table, of equal but other
    event objects, or not one record an event: the store folds the batch itself."""
    store, calls, head = started
    batch = tool_turn("r1", 2, "a1")
    by = Reducer(DEFAULT_TABLE)
    fold = folded(by, head, batch)
    if spoil == "another head":
        fold = Folded(by, RunRecord.loads(head.dumps()), fold.events, fold.after)
    elif spoil == "another table":
        other = DEFAULT_TABLE.derive(name="other")
        fold = Folded(Reducer(other), head, fold.events, fold.after)
    elif spoil == "other events":
        fold = Folded(by, head, tuple(tool_turn("r1", 2, "a1")), fold.after)
    else:
        fold = Folded(by, head, fold.events, fold.after[:-1])
    got = store.append("r1", batch, 1, folded=fold)
    assert sum(calls.values()) == len(batch)
    assert got == folded(Reducer(DEFAULT_TABLE), head, batch).after[-1]


def test_a_handed_fold_does_not_make_an_illegal_event_legal(
    started: Started,
) -> None:
    """A record claimed for an event no edge takes from the run's state: refused in the
    reducer's words, nothing written."""
    store, _, head = started
    again = make_event(
        "run.started", run_id="r1", sequence=2, occurred_at="2026-09-01T10:00:02Z", agent="a"
    )
    claimed = folded(Reducer(DEFAULT_TABLE), head, tool_turn("r1", 2, "a1")).after[:1]
    with pytest.raises(IllegalTransitionError, match=r"event 'run\.started' \(sequence 2\)"):
        store.append(
            "r1", [again], 1, folded=Folded(Reducer(DEFAULT_TABLE), head, (again,), claimed)
        )
    assert store.load("r1").version == 1


def test_a_handed_fold_still_meets_the_stores_guards() -> None:
    """The store checks the run's own limits even when its writer did not."""
    store = MemoryEventStore()
    limited = make_event(
        "run.started", run_id="r1", sequence=1, occurred_at="2026-09-01T10:00:01Z", agent="a",
        limits={"max_turns": 1},
    )  # fmt: skip
    head = store.append("r1", [limited, *tool_turn("r1", 2, "a1")], 0)
    second = tool_turn("r1", 7, "a2")[:1]  # a second model call: past max_turns
    lax = Reducer(DEFAULT_TABLE, run_limits=False)
    with pytest.raises(GuardRejectedError, match=r"max_turns|turn"):
        store.append("r1", second, 6, folded=folded(lax, head, second))
    assert store.load("r1").version == 6


def test_the_runner_hands_its_fold_so_the_store_folds_only_the_first_append() -> None:
    """A whole run: the store's reducer handles `run.started` (no head to trust yet), and
    no other event, yet the stored run is the one a plain fold makes."""
    reducer = Reducer(DEFAULT_TABLE)
    calls = counting(reducer)
    store = MemoryEventStore(options=StoreOptions(reducer=reducer))
    agent = one_tool_agent()
    result = Runner(store, agent).run("r1")
    assert result.status == "completed"
    assert calls == Counter({"run.started": 1})
    assert Reducer(DEFAULT_TABLE).replay(store.events("r1")) == store.load("r1")


class Counting(MemoryEventStore):
    def append(self, run_id: str, events: Sequence[Event], expected_version: int) -> RunRecord:
        return super().append(run_id, events, expected_version)


def test_an_append_override_without_the_mark_is_not_handed_a_fold() -> None:
    """A subclass's `append` (a wrapper that counts, say) may not pass `folded=` on."""
    assert hands_fold(MemoryEventStore())
    assert not hands_fold(Counting())
    assert not hands_fold(object())
    agent = one_tool_agent()
    assert Runner(Counting(), agent).run("r1").status == "completed"


@settings(max_examples=150, deadline=None)
@given(legal_runs(run_id="r", max_events=25), st.lists(st.integers(1, 4), min_size=25, max_size=25))
def test_any_run_appended_with_its_fold_is_stored_as_without(
    events: list[Event], sizes: list[int]
) -> None:
    """Any legal run, in batches of any size, each handed its fold: each append returns the
    record a plain append returns, and the rows and runs row are the same."""
    handed, plain = MemoryEventStore(), MemoryEventStore()
    by = Reducer(DEFAULT_TABLE)
    head: RunRecord | None = None
    start = 0
    for size in sizes:
        batch = events[start : start + size]
        if not batch:
            break
        fold = folded(by, head, batch) if head is not None else None
        head = handed.append("r", batch, start, folded=fold)
        assert head == plain.append("r", batch, start)
        start += len(batch)
    assert handed.storage.events == plain.storage.events
    assert handed.run_info("r") == plain.run_info("r")


async def _async_run(store: AsyncEventStore) -> str:
    agent = one_tool_agent()
    return (await AsyncRunner(store, agent).run("r1")).status


def test_the_async_runner_hands_its_fold_through_the_threaded_store() -> None:
    """`ThreadedAsyncEventStore` passes the fold on to the sync store it wraps."""
    reducer = Reducer(DEFAULT_TABLE)
    calls = counting(reducer)
    inner = MemoryEventStore(options=StoreOptions(reducer=reducer))
    assert asyncio.run(_async_run(ThreadedAsyncEventStore(inner))) == "completed"
    assert calls == Counter({"run.started": 1})
    assert Reducer(DEFAULT_TABLE).replay(inner.events("r1")) == inner.load("r1")


def test_the_async_runner_hands_its_fold_to_async_postgres(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """The natively async PostgreSQL store takes the fold too, and stores the same run."""
    from agentfsm.stores.postgres import AsyncPostgresEventStore

    reducer = Reducer(DEFAULT_TABLE)
    calls = counting(reducer)

    async def scenario() -> tuple[str, Counter[str], list[Event], RunRecord]:
        store = await AsyncPostgresEventStore.connect(
            postgres_dsn, table_prefix=pg_prefix, migrate=True,
            options=StoreOptions(reducer=reducer),
        )  # fmt: skip
        try:
            status = await _async_run(store)
            folds = calls.copy()  # before `load`, which folds the log again
            return status, folds, [e async for e in store.events("r1")], await store.load("r1")
        finally:
            await store.close()

    status, folds, events, record = asyncio.run(scenario())
    assert status == "completed"
    assert folds == Counter({"run.started": 1})
    assert Reducer(DEFAULT_TABLE).replay(events) == record


def test_a_run_read_back_from_a_snapshot_is_still_handed_over() -> None:
    """A record whose table reference was read back from a snapshot (equal, not the same
    object) is under the reducer's table all the same: its fold is admitted, not redone."""
    first = make_event(
        "run.started", run_id="r1", sequence=1, occurred_at="2026-09-01T10:00:01Z", agent="a",
        table=DEFAULT_TABLE.ref.model_dump(),
    )  # fmt: skip
    reducer = Reducer(DEFAULT_TABLE)
    head = Snapshot.loads(Snapshot(reducer.replay([first])).dumps()).record
    assert head.table == DEFAULT_TABLE.ref
    assert head.table is not DEFAULT_TABLE.ref
    calls = counting(reducer)
    event = tool_turn("r1", 2, "a1")[0]
    after = Reducer(DEFAULT_TABLE).reduce(head, event)
    assert reducer.admit(head, event, after) is after
    assert sum(calls.values()) == 0
