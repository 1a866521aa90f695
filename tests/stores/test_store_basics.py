"""The small pieces of the store package: options, the chain hash, reports, the async wrapper."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.errors import EventFormatError
from agentfsm.events import canonical_json, dump_event, event_to_dict, make_event
from agentfsm.events._canonical import canonical_text
from agentfsm.events.models import Event
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.stores import (
    GENESIS_HASH,
    MemoryEventStore,
    SQLiteEventStore,
    StoreOptions,
    ThreadedAsyncEventStore,
    VerifyReport,
    chain_hash,
)
from agentfsm.stores._append import Head, prepare_append
from agentfsm.testing import legal_runs, scripted_run
from agentfsm.testing.fixtures.postgres_server import unavailable_reason


def test_chain_hash_is_sha256_of_previous_plus_canonical() -> None:
    """The chain hash is documented as hex sha256 over the previous hash and the canonical JSON."""
    first = chain_hash(GENESIS_HASH, '{"a":1}')
    assert first == hashlib.sha256(b'{"a":1}').hexdigest()
    assert chain_hash(first, "{}") == hashlib.sha256((first + "{}").encode()).hexdigest()


def test_snapshot_every_must_be_positive() -> None:
    """A zero snapshot interval is refused; None turns snapshots off."""
    with pytest.raises(ValueError, match=r"^snapshot_every must be at least 1 or None, got 0$"):
        StoreOptions(snapshot_every=0)
    assert StoreOptions(snapshot_every=None).snapshot_every is None


def test_cache_size_must_not_be_negative() -> None:
    """A negative cache size is refused."""
    with pytest.raises(ValueError, match=r"^cache_size must not be negative, got -1$"):
        StoreOptions(cache_size=-1)


def test_a_broken_report_reads_as_a_sentence() -> None:
    """A failed verification prints the run, the sequence and the problem."""
    report = VerifyReport("r1", False, 4, "ab", 5, "the hash does not match")
    assert str(report) == "run 'r1', sequence 5: the hash does not match"


def test_negative_limit_is_refused() -> None:
    """`runs(limit=-1)` is a mistake, not 'no limit'."""
    with pytest.raises(ValueError, match=r"^limit must not be negative, got -1$"):
        MemoryEventStore().runs(limit=-1)


def test_negative_expected_version_is_refused() -> None:
    """A negative expected version is a mistake, not a new run."""
    with pytest.raises(ValueError, match=r"^expected_version must not be negative, got -1$"):
        MemoryEventStore().append("r1", scripted_run("r1", 0), -1)


def test_closing_the_threaded_store_closes_the_sync_one(tmp_path: Path) -> None:
    """The async wrapper owns its store: closing it closes the SQLite connection."""
    sync = SQLiteEventStore(tmp_path / "runs.db")

    async def scenario() -> None:
        async with ThreadedAsyncEventStore(sync) as store:
            await store.append("r1", scripted_run("r1", 0), 0)

    asyncio.run(scenario())
    with pytest.raises(Exception, match="closed database"):
        sync.run_info("r1")


class TestPostgresAvailability:
    """When PostgreSQL tests can run, and what the message says when they cannot."""

    def test_a_dsn_is_enough(self) -> None:
        """An existing server named by the environment needs no local binaries."""
        env = {"AGENTFSM_TEST_POSTGRES_DSN": "host=db"}
        assert unavailable_reason(env, find_bindir=lambda: None) is None

    def test_missing_binaries_say_how_to_run(self) -> None:
        """Without binaries the reason says what to install or which variable to set."""
        assert unavailable_reason({}, find_bindir=lambda: None) == (
            "no PostgreSQL server binaries were found; install them (Debian: apt-get install "
            "postgresql-15) or set AGENTFSM_TEST_POSTGRES_DSN='host=... user=... dbname=...' "
            "to use a running server"
        )

    def test_binaries_are_enough(self, tmp_path: Path) -> None:
        """With psycopg and the binaries, nothing stops the tests."""
        pytest.importorskip("psycopg")
        assert unavailable_reason({}, find_bindir=lambda: tmp_path) is None


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1.0, 3.0, 1e15, 1e16, 2.0**53, 1.5, 1e-7])
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(legal_runs(max_events=20))
def test_the_chain_covers_the_canonical_form_of_each_event(events: list[Event]) -> None:
    """What an append hashes, read from the line it stores, is `canonical_json` of the
    event as a dict (the documented chain), for every event of any legal run."""
    for event in events:
        assert canonical_text(dump_event(event)) == canonical_json(event_to_dict(event))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_tool_result_is_hashed_in_its_canonical_form(value: object) -> None:
    """The same for a result holding any JSON value (floats of every spelling included)."""
    event = make_event(
        "tool.completed", run_id="r", sequence=5, occurred_at="2026-09-01T10:00:05Z",
        action_id="c1", result=value,
    )  # fmt: skip
    assert canonical_text(dump_event(event)) == canonical_json(event_to_dict(event))


@pytest.mark.parametrize("bad", [float("nan"), float("-inf")])
def test_an_unvalidated_event_json_cannot_hold_is_refused_whole(bad: float) -> None:
    """An event built without validation holding NaN or Infinity is refused with the
    run and sequence, never stored as `null`; nothing of its batch is written."""
    store = MemoryEventStore()
    *before, completed = scripted_run("r", 1)
    assert completed.type == "tool.completed"
    store.append("r", before[:-1], 0)
    spoiled = completed.model_copy(update={"result": {"score": [1, bad]}})
    last = len(before)
    with pytest.raises(EventFormatError, match=rf"sequence {last + 1}: .*cannot be written"):
        store.append("r", [before[-1], spoiled], last - 1)
    assert store.load("r").version == last - 1


def test_a_batch_says_whether_it_moves_the_runs_status() -> None:
    """`PreparedAppend.moved`: False for events that leave the status (a backend then
    leaves the status index alone), True for those that change it; the runs row follows
    either way."""
    events = scripted_run("r", 1)
    store = SQLiteEventStore(":memory:", synchronous="NORMAL")
    head = Head(DEFAULT_REDUCER.initial("r"), GENESIS_HASH)
    moved = []
    for event in events:
        prepared = prepare_append(DEFAULT_REDUCER, head, [event], None)
        moved.append((event.type, prepared.moved))
        head = Head(prepared.record, prepared.rows[-1].hash)
        store.append("r", [event], event.sequence - 1)
        info = store.run_info("r")
        assert (info.status, info.version, info.updated_at) == (
            prepared.record.status, event.sequence, prepared.record.updated_at,
        )  # fmt: skip
        assert [i.run_id for i in store.runs(status=info.status)] == ["r"]
    assert moved == [
        ("run.started", True), ("model.started", False), ("model.completed", False),
        ("tool.requested", True), ("tool.started", False), ("tool.completed", True),
    ]  # fmt: skip
    assert store.verify("r").ok
