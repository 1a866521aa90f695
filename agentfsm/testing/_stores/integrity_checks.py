"""Bad data and attacks: what every store must detect, whoever edited its rows.

`StoreConformance` includes these checks; they need its `tamper` fixture (a `Tamper`,
direct access to the backend's rows) and are skipped without one. Each one is an attack
carried out against an earlier agentfsm, or damage a disk or an operator can cause:

- a row edited, re-hashed, deleted, or put in another place;
- a snapshot edited in place (a pending payment marked approved, limits removed), with or
  without its digest recomputed; with an integrity key, a chain recomputed without it;
- a runs row moved away from where the log ends;
- run ids and events no backend can hold or read back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from agentfsm.errors import (
    CorruptLogError,
    EventFormatError,
    InvalidRunIdError,
    RunNotFoundError,
    StoreInconsistentError,
)
from agentfsm.events._bounds import MAX_EVENT_BYTES
from agentfsm.events.codec import dump_event, event_to_dict
from agentfsm.reducers.reduce import replay
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._integrity import Integrity
from agentfsm.stores.base import AsyncEventStore, EventStore, StoreOptions
from agentfsm.stores.rows import StoredSnapshot
from agentfsm.testing._stores.scripted import scripted_run, tool_turn
from agentfsm.testing._stores.snapshot_checks import SnapshotIntegrityChecks
from agentfsm.testing._stores.tamper import (
    KEY,
    OpenStore,
    Tamper,
    approved_in_snapshot,
    chain,
    ignored_snapshot_reasons,
    payment_waiting_for_approval,
)

__all__ = ["AsyncIntegrityChecks", "IntegrityChecks"]


class IntegrityChecks(SnapshotIntegrityChecks):
    """The bad-data part of `StoreConformance` (its fixtures: `open_store`, `store`, `tamper`)."""

    # -- the log -----------------------------------------------------------------------------

    def test_verify_names_the_first_changed_event(self, store: EventStore, tamper: Tamper) -> None:
        """An event edited in storage breaks the chain at its sequence, and verify says so."""
        events = scripted_run("r1", 2)
        store.append("r1", events, 0)
        edited = event_to_dict(events[4])
        edited["result"] = {"found": "forged"}
        tamper.set_event_data("r1", 5, json.dumps(edited))
        report = store.verify("r1")
        assert (report.ok, report.sequence, report.checked) == (False, 5, 4)
        assert report.problem == (
            "the hash does not match: this event or its stored hash was changed (or the "
            "store was written under another integrity key, or none)"
        )
        assert report.head_hash == chain(events[:4])[-1]

    def test_verify_names_a_changed_hash(self, store: EventStore, tamper: Tamper) -> None:
        """A stored hash that was replaced is reported at its sequence."""
        store.append("r1", scripted_run("r1", 1), 0)
        tamper.set_event_hash("r1", 3, "0" * 64)
        report = store.verify("r1")
        assert (report.ok, report.sequence) == (False, 3)

    def test_verify_names_a_missing_event(self, store: EventStore, tamper: Tamper) -> None:
        """A deleted row is reported as the first missing sequence."""
        store.append("r1", scripted_run("r1", 1), 0)
        tamper.delete_event("r1", 4)
        report = store.verify("r1")
        assert (report.ok, report.sequence, report.checked) == (False, 4, 3)
        assert report.problem == "the log has no event at sequence 4"

    def test_a_corrupt_row_names_run_and_sequence(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """A stored line that is not an event fails load with the run and its sequence."""
        store = open_store(snapshot_every=None)
        store.append("r1", scripted_run("r1", 1), 0)
        store.append("r2", scripted_run("r2", 1), 0)
        tamper.set_event_data("r1", 3, '{"run_id": "r1", "sequence": 3')
        reader = open_store(snapshot_every=None)
        with pytest.raises(CorruptLogError) as info:
            reader.load("r1")
        assert (info.value.run_id, info.value.sequence) == ("r1", 3)
        assert str(info.value).startswith(
            "run 'r1', sequence 3: the stored event is not a valid event: not JSON ("
        )
        with pytest.raises(CorruptLogError) as streamed:
            list(reader.events("r1"))
        assert streamed.value.sequence == 3
        assert reader.load("r2").dumps() == replay(scripted_run("r2", 1)).dumps()

    def test_a_row_holding_a_lone_surrogate_is_reported_not_raised(
        self, store: EventStore, tamper: Tamper
    ) -> None:
        """A stored line edited to spell a lone surrogate (`\\ud800`, which no UTF-8 text
        holds): verify names the row, it does not raise."""
        events = scripted_run("r1", 1)
        store.append("r1", events, 0)
        edited = dump_event(events[5]).replace('"found":"act-1"', '"found":"\\ud800"')
        assert "\\ud800" in edited
        tamper.set_event_data("r1", 6, edited)
        report = store.verify("r1")
        assert (report.ok, report.sequence, report.checked) == (False, 6, 5)
        problem = report.problem or ""
        assert problem.startswith("the stored line is not JSON (")
        assert "surrogates not allowed" in problem

    def test_a_row_of_another_place_is_corrupt(self, open_store: OpenStore, tamper: Tamper) -> None:
        """A valid event stored under the wrong sequence is reported, not folded."""
        store = open_store(snapshot_every=None)
        events = scripted_run("r1", 1)
        store.append("r1", events, 0)
        tamper.set_event_data("r1", 2, dump_event(events[2]))
        with pytest.raises(CorruptLogError) as info:
            open_store(snapshot_every=None).load("r1")
        assert str(info.value) == (
            "run 'r1', sequence 2: the stored event names run 'r1', sequence 3"
        )

    # -- keyed integrity -----------------------------------------------------------------------

    def test_a_keyed_store_chains_hmacs(self, open_store: OpenStore) -> None:
        """With a key, every link is an HMAC under it: the plain chain does not match."""
        events = scripted_run("r1", 1)
        store = open_store(integrity_key=KEY)
        store.append("r1", events, 0)
        report = store.verify("r1")
        assert (report.ok, report.head_hash) == (True, chain(events, Integrity(KEY))[-1])
        assert report.head_hash != chain(events)[-1]

    def test_a_keyed_store_refuses_a_chain_recomputed_without_the_key(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """An event edited and the whole chain recomputed (in plain SHA-256, the key being
        secret) fails at load, at the edited event, and in `verify`."""
        events = scripted_run("r1", 2)
        open_store(integrity_key=KEY, snapshot_every=None).append("r1", events, 0)
        edited = event_to_dict(events[5])
        edited["result"] = {"found": "forged"}
        forged = [*events[:5], type(events[5]).model_validate(edited), *events[6:]]
        for sequence, (event, link) in enumerate(zip(forged, chain(forged), strict=True), 1):
            tamper.set_event_data("r1", sequence, dump_event(event))
            tamper.set_event_hash("r1", sequence, link)
        reader = open_store(integrity_key=KEY, snapshot_every=None)
        with pytest.raises(CorruptLogError) as info:
            reader.load("r1")
        assert (info.value.sequence, str(info.value)) == (
            1,
            "run 'r1', sequence 1: the hash does not match: this event or its stored hash "
            "was changed (or the store was written under another integrity key, or none)",
        )
        assert (reader.verify("r1").ok, reader.verify("r1").sequence) == (False, 1)

    # -- the runs row ------------------------------------------------------------------------

    def test_a_runs_row_lowered_to_hide_an_event_is_reported(
        self, store: EventStore, tamper: Tamper
    ) -> None:
        """The last event edited and the runs row lowered to hide it: `verify` reads every
        row and says the store is inconsistent; an append says so too, never "a race"."""
        events = scripted_run("r1", 2)
        store.append("r1", events, 0)
        edited = event_to_dict(events[-1])
        edited["result"] = {"found": "forged"}
        tamper.set_event_data("r1", 11, json.dumps(edited))
        tamper.set_runs_version("r1", 10)
        report = store.verify("r1")
        assert (report.ok, report.sequence) == (False, 11)
        tamper.set_event_data("r1", 11, dump_event(events[-1]))
        report = store.verify("r1")
        assert (report.ok, report.sequence, report.problem) == (
            False,
            11,
            "store inconsistent: the runs table says version 10 but the log ends at 11",
        )
        with pytest.raises(StoreInconsistentError) as info:
            store.append("r1", tool_turn("r1", 12, "late"), 11)
        assert str(info.value) == (
            "run 'r1': store inconsistent: the runs table says version 10, but the log goes "
            "on to sequence 11; it was changed outside agentfsm (see `verify`)"
        )

    def test_a_runs_row_ahead_of_the_log_is_reported(
        self, store: EventStore, tamper: Tamper
    ) -> None:
        """A runs row that claims events the log lacks: verify and append both say so."""
        store.append("r1", scripted_run("r1", 1), 0)
        tamper.set_runs_version("r1", 9)
        report = store.verify("r1")
        assert (report.ok, report.sequence, report.problem) == (
            False,
            7,
            "store inconsistent: the runs table says version 9 but the log ends at 6",
        )
        with pytest.raises(StoreInconsistentError) as info:
            store.append("r1", tool_turn("r1", 7, "late"), 6)
        assert info.value.runs_version == 9

    # -- what no store can hold ----------------------------------------------------------------

    @pytest.mark.parametrize(
        ("run_id", "problem"),
        [
            ("a\x00b", "it holds a NUL character"),
            ("\ud800", "it is not valid Unicode (a lone surrogate)"),
            ("", "it is empty"),
        ],
    )
    def test_a_run_id_no_store_can_hold_is_refused_alike(
        self, store: EventStore, run_id: str, problem: str
    ) -> None:
        """Every backend refuses such a run id with the same error, before any I/O."""
        expected = f"run id {run_id!r} cannot be stored: {problem}"
        for call in (
            lambda: store.load(run_id),
            lambda: store.events(run_id),
            lambda: store.run_info(run_id),
            lambda: store.verify(run_id),
            lambda: store.append(run_id, scripted_run("r1", 0), 0),
        ):
            with pytest.raises(InvalidRunIdError) as info:
                call()
            assert str(info.value) == expected
        with pytest.raises(RunNotFoundError):
            store.load("a b")  # an ordinary id still reads as usual

    @pytest.mark.parametrize(
        ("value", "why"),
        [
            (float("nan"), "ValueError: Out of range float values are not JSON compliant"),
            ("\ud800", "PydanticSerializationError: Error serializing to JSON: "
             "UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800' in position "
             "0: surrogates not allowed"),
        ],
    )  # fmt: skip
    def test_an_event_built_without_validation_is_refused_cleanly(
        self, store: EventStore, value: Any, why: str
    ) -> None:
        """`model_copy(update=...)` skips validation; the store still refuses what it cannot
        write with `EventFormatError`, never a raw ValueError, and writes nothing."""
        events = scripted_run("r1", 1)
        store.append("r1", events[:5], 0)
        forged = events[5].model_copy(update={"result": value})
        with pytest.raises(EventFormatError) as info:
            store.append("r1", [forged], 5)
        assert str(info.value) == (
            f"run 'r1', sequence 6: not a valid event: it cannot be written as JSON ({why})"
        )
        assert store.run_info("r1").version == 5

    def test_an_event_too_large_to_read_back_is_refused(self, store: EventStore) -> None:
        """A tool result over the size limit is refused at append; nothing is written."""
        events = scripted_run("r1", 1)
        store.append("r1", events[:5], 0)
        big = events[5].model_copy(update={"result": "x" * MAX_EVENT_BYTES})
        with pytest.raises(EventFormatError) as info:
            store.append("r1", [big], 5)
        size = len(dump_event(big).encode())
        assert str(info.value) == (
            f"run 'r1', sequence 6: not a valid event: the event is {size:,} bytes of JSON; "
            f"at most {MAX_EVENT_BYTES:,} are allowed"
        )
        assert store.run_info("r1").version == 5
        assert store.verify("r1").ok


MakeAsync = Callable[[StoreOptions], Awaitable[AsyncEventStore]]


class AsyncIntegrityChecks:
    """The bad-data part of `AsyncStoreConformance` (its fixtures: `make_store`, `tamper`).

    A native async backend folds, verifies and appends with its own code paths; these make
    sure they trust and report exactly what the sync stores do.
    """

    @pytest.fixture
    def tamper(self) -> Tamper:
        """Override to run the bad-data checks."""
        pytest.skip("this backend has no `tamper` fixture: bad-data checks not run")

    def test_a_snapshot_edited_in_place_is_ignored(
        self, make_store: MakeAsync, tamper: Tamper
    ) -> None:
        """A forged snapshot is not trusted by an async load, and `verify` reports it."""
        events = payment_waiting_for_approval("pay-1")

        async def scenario() -> None:
            async with await make_store(StoreOptions(snapshot_every=4)) as store:
                await store.append("pay-1", events, 0)
                report = await store.verify("pay-1")
                assert report.ok
            real = StoredSnapshot(
                4, report.head_hash, Snapshot(replay(events)).dumps(), "sha256:" + "0" * 64
            )
            tamper.set_snapshot("pay-1", attrs.evolve(real, data=approved_in_snapshot(real.data)))
            async with await make_store(StoreOptions(snapshot_every=4)) as store:
                with capture_logs() as logs:
                    record = await store.load("pay-1")
                assert record.dumps() == replay(events).dumps()
                assert ignored_snapshot_reasons(logs) == [
                    "its digest does not match its content: it was changed after it was written"
                ]
                report = await store.verify("pay-1")
                assert (report.ok, report.sequence) == (False, 4)

        asyncio.run(scenario())

    def test_a_runs_row_behind_the_log_is_reported(
        self, make_store: MakeAsync, tamper: Tamper
    ) -> None:
        """An async append to a store whose runs row was lowered says it is inconsistent."""
        events = scripted_run("r1", 2)

        async def scenario() -> None:
            async with await make_store(StoreOptions()) as store:
                await store.append("r1", events, 0)
            tamper.set_runs_version("r1", 10)
            async with await make_store(StoreOptions()) as store:
                with pytest.raises(StoreInconsistentError) as info:
                    await store.append("r1", tool_turn("r1", 12, "late"), 11)
                assert (info.value.runs_version, info.value.log_at) == (10, (10, 11))
                report = await store.verify("r1")
                assert (report.ok, report.sequence, report.problem) == (
                    False,
                    11,
                    "store inconsistent: the runs table says version 10 but the log ends at 11",
                )

        asyncio.run(scenario())

    def test_a_keyed_store_refuses_a_chain_recomputed_without_the_key(
        self, make_store: MakeAsync, tamper: Tamper
    ) -> None:
        """Under a key, an async load refuses rows whose links were recomputed without it."""
        events = scripted_run("r1", 1)

        async def scenario() -> None:
            options = StoreOptions(integrity_key=KEY, snapshot_every=None)
            async with await make_store(options) as store:
                await store.append("r1", events, 0)
            for sequence, link in enumerate(chain(events), 1):
                tamper.set_event_hash("r1", sequence, link)
            async with await make_store(options) as store:
                with pytest.raises(CorruptLogError) as info:
                    await store.load("r1")
                assert info.value.sequence == 1

        asyncio.run(scenario())

    def test_a_run_id_no_store_can_hold_is_refused_alike(self, make_store: MakeAsync) -> None:
        """NUL, a lone surrogate or an empty id: the same `InvalidRunIdError` as sync stores."""

        async def scenario() -> None:
            async with await make_store(StoreOptions()) as store:
                for run_id in ("a\x00b", "\ud800", ""):
                    with pytest.raises(InvalidRunIdError):
                        await store.load(run_id)
                    with pytest.raises(InvalidRunIdError):
                        await store.append(run_id, scripted_run("r1", 0), 0)
                    with pytest.raises(InvalidRunIdError):
                        await store.run_info(run_id)

        asyncio.run(scenario())
