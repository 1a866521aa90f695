"""Moving a run in flight to a newer version of its table: `run.migrated`, end to end.

The ticket lifecycle's two versions (`examples/lifecycles/ticket.py`, `ticket_v2.py`: v2
drops `escalated_urgent` and lets `escalated` be paused) are the running example: a run
parked in `escalated` under v1 is migrated to v2, and can then be paused, which v1 forbade.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentfsm import (
    DEFAULT_TABLE,
    Agent,
    Decision,
    Runner,
    ScriptedModel,
    State,
    Tool,
    Transition,
)
from agentfsm.cli import main
from agentfsm.errors import (
    EventFormatError,
    IllegalTransitionError,
    InvalidTableError,
    MigrationError,
    TableMismatchError,
)
from agentfsm.events import (
    BUILTIN_EVENTS,
    EVENT_CLASSES,
    CustomEvent,
    LogBuilder,
    dump_event,
    event_json_schema,
    parse_event,
    step_clock,
)
from agentfsm.events.models import Event, RunMigrated, TableRef
from agentfsm.fsm import TransitionTable, registry
from agentfsm.names import EventType, StateKind
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer, Snapshot
from agentfsm.runtime import ProposedCall, ToolPolicy, append_event, migrate, pause, reject
from agentfsm.stores import SQLiteEventStore, StoreOptions
from agentfsm.testing import legal_runs
from examples.lifecycles.ticket import TICKET_TABLE
from examples.lifecycles.ticket_v2 import TICKET_TABLE_V2
from tests.test_versions import ticket_store

V1, V2 = TICKET_TABLE, TICKET_TABLE_V2
REPO = Path(__file__).resolve().parent.parent
AT = {"run_id": "t-3", "sequence": 3, "occurred_at": "2026-09-01T10:00:02+00:00"}


def migrated_fields(old: Any = V1, new: Any = V2, **more: Any) -> dict[str, Any]:
    """The own fields of a `run.migrated` from `old` to `new`, by ann, as the CLI writes them."""
    return {
        "from_table": old.ref.model_dump(),
        "to_table": new.ref.model_dump(),
        "by": "ann",
        "reason": "v2 lets a person pause an escalated ticket",
        **more,
    }


class TestTheWire:
    """`run.migrated` is a built-in event type like the others."""

    def test_it_round_trips_byte_for_byte(self) -> None:
        """Parsed then dumped, a `run.migrated` line is the line it was, fields in order."""
        envelope = {"run_id": "t-3", "sequence": 3, "type": "run.migrated"}
        fields = {**envelope, "occurred_at": AT["occurred_at"], **migrated_fields()}
        line = json.dumps(fields, separators=(",", ":"))
        event = parse_event(line)
        assert isinstance(event, RunMigrated)
        assert (event.from_table, event.to_table) == (V1.ref, V2.ref)
        assert (event.by, event.reason) == ("ann", "v2 lets a person pause an escalated ticket")
        assert dump_event(event) == line

    def test_every_field_is_required(self) -> None:
        """From and to, who and why: a migration without any of them is not one."""
        with pytest.raises(EventFormatError) as info:
            parse_event({**AT, "type": "run.migrated"})
        assert info.value.problems == (
            "field 'from_table' is required",
            "field 'to_table' is required",
            "field 'by' is required",
            "field 'reason' is required",
        )

    def test_who_and_why_are_not_empty(self) -> None:
        """An empty `by` or `reason` says nothing: refused like an empty agent name."""
        with pytest.raises(EventFormatError) as info:
            parse_event({**AT, "type": "run.migrated", **migrated_fields(by="", reason="")})
        assert info.value.problems == (
            "field 'by': String should have at least 1 character (got '')",
            "field 'reason': String should have at least 1 character (got '')",
        )

    def test_the_table_references_are_checked(self) -> None:
        """A reference is a name and a `sha256:` digest, as on `run.started`."""
        fields = migrated_fields()
        fields["to_table"] = {"name": "support_ticket", "digest": "v2"}
        with pytest.raises(EventFormatError) as info:
            parse_event({**AT, "type": "run.migrated", **fields})
        assert info.value.problems == (
            "field 'to_table.digest': String should match pattern '^sha256:[0-9a-f]{64}$' "
            "(got 'v2')",
        )

    def test_it_is_a_built_in_type(self) -> None:
        """Every table's vocabulary reads it, and the names list it."""
        assert EVENT_CLASSES["run.migrated"] is RunMigrated
        assert EventType.RUN_MIGRATED == "run.migrated"
        assert "run.migrated" in V1.event_types
        assert "run.migrated" not in V1.event_types.custom

    def test_the_builder_writes_it(self) -> None:
        """`LogBuilder` numbers and stamps it like any event."""
        log = LogBuilder("t-3")
        log.add("run.started", table=V1.ref.model_dump())
        log.add("run.migrated", **migrated_fields())
        assert log.events[1].type == "run.migrated"
        assert log.events[1].sequence == 2


class TestTheSchema:
    """The JSON Schema describes `run.migrated` as strictly as the parser reads it."""

    def _errors(self, data: dict[str, object]) -> list[str]:
        jsonschema = pytest.importorskip("jsonschema")
        validator = jsonschema.Draft202012Validator(
            event_json_schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        return sorted(e.message for e in validator.iter_errors(data))

    def test_a_valid_migration_passes(self) -> None:
        """What the parser accepts, a standard validator accepts."""
        assert self._errors({**AT, "type": "run.migrated", **migrated_fields()}) == []

    def test_a_missing_reason_is_named(self) -> None:
        """A standard validator names the missing field, not "no schema matched"."""
        fields = migrated_fields()
        del fields["reason"]
        assert self._errors({**AT, "type": "run.migrated", **fields}) == [
            "'reason' is a required property"
        ]

    def test_a_bad_reference_is_named(self) -> None:
        """The references are closed objects, like `run.started`'s `table`."""
        fields = migrated_fields()
        fields["from_table"] = {"name": "support_ticket", "digest": V1.digest, "v": 1}
        assert self._errors({**AT, "type": "run.migrated", **fields}) == [
            "Additional properties are not allowed ('v' was unexpected)"
        ]


def test_the_reference_is_the_one_run_started_records() -> None:
    """`from_table`/`to_table` are `TableRef`s, the type of `run.started.table`."""
    assert RunMigrated.model_fields["from_table"].annotation is TableRef
    assert RunMigrated.model_fields["to_table"].annotation is TableRef


def named(table: Any) -> str:
    """How errors name a table: `'name' (digest)`."""
    return f"'{table.name}' ({table.digest})"


@pytest.fixture
def no_tables_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as a fresh process has it: the default table only (other tests
    register the ticket tables, and the registry is process-wide)."""
    monkeypatch.setattr(registry, "_registered", {DEFAULT_TABLE.digest: DEFAULT_TABLE})
    monkeypatch.setattr(registry, "_published", lambda: iter(()))


def escalated(run_id: str = "t-3", table: Any = V1, **escalation: Any) -> LogBuilder:
    """A run of `table` waiting in `escalated` (or `escalated_urgent`) at version 2."""
    log = LogBuilder(run_id, events=table.event_types)
    log.add("run.started", objective="refund", table=table.ref.model_dump())
    log.add("ticket.escalated", escalated_to="ann", **escalation)
    return log


def migrated(run_id: str = "t-3") -> list[Event]:
    """The escalated v1 run, migrated to v2 at sequence 3, then paused at 4."""
    log = escalated(run_id)
    log.add("run.migrated", **migrated_fields())
    log.add("run.paused", reason="ann is on leave until Monday")
    return log.events


def fold(reducer: Reducer, events: list[Event]) -> RunRecord:
    """Event by event, as a store folds a run it appends to (no check of where it ends)."""
    record = reducer.initial(events[0].run_id)
    for event in events:
        record = reducer.reduce(record, event)
    return record


class TestFoldingAMigration:
    """A migrated run is folded under v1's rules up to the migration, v2's after it."""

    def test_the_run_is_under_the_new_table_after_it(self) -> None:
        """The state, the ledger and what the run recorded stay; the table changes."""
        events = migrated()[:3]
        before = Reducer(V1).replay(events[:2])
        after = Reducer(V2, tables=[V1]).replay(events)
        assert (after.status, after.version, after.custom) == ("escalated", 3, before.custom)
        assert (before.table, before.migrated_from, before.migrated_at) == (V1.ref, None, None)
        assert (after.table, after.migrated_from, after.migrated_at) == (V2.ref, V1.ref, 3)

    def test_the_new_rules_apply_after_it(self) -> None:
        """v1 forbids pausing an escalated ticket; after the migration v2 allows it."""
        log = escalated()
        log.add("run.paused", reason="ann is on leave until Monday")
        with pytest.raises(IllegalTransitionError):
            Reducer(V1).replay(log.events)
        record = Reducer(V2, tables=[V1]).replay(migrated())
        assert (record.status, record.pause_reason) == ("paused", "ann is on leave until Monday")

    def test_the_old_rules_apply_before_it(self) -> None:
        """An escalation marked urgent goes to `escalated_urgent`, a state only v1 has."""
        log = escalated(priority="urgent")
        log.add("ticket.handed_back", note="done")
        log.add("run.migrated", **migrated_fields())
        record = Reducer(V2, tables=[V1]).replay(log.events)
        assert (record.status, record.table) == ("running", V2.ref)

    def test_the_old_table_is_found_in_the_registry(self) -> None:
        """Without `tables=`, a registered old version is looked up by its digest."""
        registry.register(V1)
        assert Reducer(V2).replay(migrated()).status == "paused"

    def test_a_snapshot_after_the_migration_folds_on_under_the_new_table(self) -> None:
        """Through JSON and back, at every cut, a snapshot plus the tail is the full fold."""
        events = migrated()
        reducer = Reducer(V2, tables=[V1])
        full = reducer.replay(events)
        for cut in range(1, len(events)):
            snapshot = Snapshot.loads(Snapshot(fold(reducer, events[:cut])).dumps())
            assert reducer.replay(events[cut:], snapshot=snapshot) == full

    def test_the_record_says_where_it_was_migrated(self) -> None:
        """The record's JSON carries the table it is under and the migration, and reads back."""
        record = Reducer(V2, tables=[V1]).replay(migrated())
        data = record.to_json()
        assert (data["table"], data["migrated_from"], data["migrated_at"]) == (
            V2.ref.model_dump(),
            V1.ref.model_dump(),
            3,
        )
        assert RunRecord.loads(record.dumps()) == record


class TestTheOldVersionRefusesWhatFollows:
    """A reducer of v1 folds up to the migration, and refuses the run from there."""

    def test_the_event_after_the_migration(self) -> None:
        """The first event under v2 is refused, naming v2."""
        with pytest.raises(TableMismatchError) as info:
            Reducer(V1, tables=[V2]).replay(migrated())
        assert str(info.value) == (
            "run 't-3' is 'escalated': event 'run.paused' (sequence 4) follows the run's "
            f"migration to table {named(V2)} at sequence 3: fold the run with that table, not "
            f"{named(V1)} (`--table`, or the registry of `agentfsm.fsm.registry`)"
        )
        assert (info.value.started_under, info.value.folded_with) == (named(V2), named(V1))

    def test_a_run_whose_last_event_is_the_migration(self) -> None:
        """Nothing follows the migration: the whole run is still not v1's to fold."""
        with pytest.raises(TableMismatchError) as info:
            Reducer(V1, tables=[V2]).replay(migrated()[:3])
        assert str(info.value) == (
            "run 't-3' is 'escalated': event 'run.migrated' (sequence 3) moved the run to "
            f"table {named(V2)}: fold the run with that table, not {named(V1)} (`--table`, or "
            "the registry of `agentfsm.fsm.registry`)"
        )

    def test_a_new_version_it_cannot_find(self, no_tables_registered: None) -> None:
        """v1's reducer cannot check a migration to a table it does not know: named."""
        with pytest.raises(TableMismatchError) as info:
            Reducer(V1).replay(migrated())
        assert str(info.value) == (
            "run 't-3' is 'escalated': event 'run.migrated' (sequence 3) moves the run to "
            f"table {named(V2)}, which is not known: fold the run with that table, not "
            f"{named(V1)} (`--table`, or the registry of `agentfsm.fsm.registry`)"
        )


class TestTheNewVersionNeedsTheOldOne:
    """v2's reducer folds the part before the migration with v1: it must find it."""

    def test_an_old_version_it_cannot_find(self, no_tables_registered: None) -> None:
        """Says which table must be known, and why: the run may have been migrated since
        (a reducer folds a log event by event, and cannot know yet)."""
        with pytest.raises(TableMismatchError) as info:
            Reducer(V2).replay(migrated())
        assert str(info.value) == (
            "run 't-3' is 'created': event 'run.started' (sequence 1) was started under table "
            f"{named(V1)}, not {named(V2)}: fold it with the table it started with (`--table`, "
            f"or the registry of `agentfsm.fsm.registry`); if it was migrated to {named(V2)} "
            "since, the table it started with must be known too (`register()` it, or pass "
            "it in `Reducer(tables=...)`)"
        )
        assert (info.value.started_under, info.value.folded_with) == (named(V1), named(V2))

    def test_a_run_that_never_migrated_is_still_refused(self) -> None:
        """Found or not, v1 is not v2: a v1 run that never moved is refused, naming both."""
        log = escalated()
        with pytest.raises(TableMismatchError) as info:
            Reducer(V2, tables=[V1]).replay(log.events)
        assert str(info.value) == (
            "run 't-3' is 'created': event 'run.started' (sequence 1) was started under table "
            f"{named(V1)}, not {named(V2)}: fold it with the table it started with "
            "(`--table`, or the registry of `agentfsm.fsm.registry`)"
        )


class TestWhenAMigrationIsLegal:
    """Only a run that has not ended, from the table it is under, to a table with its state."""

    def _refused(self, log: LogBuilder, reducer: Reducer | None = None) -> Exception:
        with pytest.raises((MigrationError, IllegalTransitionError)) as info:
            (reducer or Reducer(V2, tables=[V1])).replay(log.events)
        return info.value

    def test_not_after_the_run_ended(self) -> None:
        """A terminal state absorbs every event, a migration too."""
        log = escalated()
        log.add("run.failed", error={"kind": "gave_up", "message": "no refund"})
        log.add("run.migrated", **migrated_fields())
        error = self._refused(log, Reducer(V1, tables=[V2]))
        assert isinstance(error, IllegalTransitionError)
        assert str(error) == (
            "run 't-3' is 'failed' (terminal): event 'run.migrated' (sequence 4) is not "
            "allowed; allowed: none"
        )

    def test_not_before_the_run_started(self) -> None:
        """The first event of a run is its `run.started`."""
        log = LogBuilder("t-3")
        log.add("run.migrated", **migrated_fields())
        error = self._refused(log, Reducer(V1, tables=[V2]))
        assert isinstance(error, IllegalTransitionError)
        assert str(error) == (
            "run 't-3' is 'created': event 'run.migrated' (sequence 1) is not allowed; "
            "allowed: 'run.cancel_requested', 'run.failed', 'run.started', 'run.terminated'"
        )

    def test_not_from_another_table_than_the_runs(self) -> None:
        """`from_table` must name the table the run is under."""
        log = escalated()
        log.add("run.migrated", **migrated_fields(old=DEFAULT_TABLE))
        error = self._refused(log)
        assert isinstance(error, MigrationError)
        assert str(error) == (
            "run 't-3' is 'escalated': event 'run.migrated' (sequence 3) cannot move the run "
            f"from table {named(DEFAULT_TABLE)} to {named(V2)}: the run is under table "
            f"{named(V1)}"
        )
        assert (error.from_table, error.to_table) == (named(DEFAULT_TABLE), named(V2))

    def test_not_to_the_table_it_is_under(self) -> None:
        """A migration moves the run somewhere."""
        log = escalated()
        log.add("run.migrated", **migrated_fields(new=V1))
        error = self._refused(log, Reducer(V1))
        assert str(error) == (
            "run 't-3' is 'escalated': event 'run.migrated' (sequence 3) cannot move the run "
            f"from table {named(V1)} to {named(V1)}: the run is under that table already"
        )

    def test_not_out_of_a_state_the_new_table_lacks(self) -> None:
        """v2 has no `escalated_urgent`: named, with both tables."""
        log = escalated(priority="urgent")
        log.add("run.migrated", **migrated_fields())
        error = self._refused(log)
        assert isinstance(error, MigrationError)
        assert str(error) == (
            "run 't-3' is 'escalated_urgent': event 'run.migrated' (sequence 3) cannot move "
            f"the run from table {named(V1)} to {named(V2)}: state 'escalated_urgent' is not "
            "in the new table"
        )
        assert (error.state, error.problems) == (
            "escalated_urgent",
            ("state 'escalated_urgent' is not in the new table",),
        )

    def test_not_into_a_state_that_ends_the_run_there(self) -> None:
        """A migration changes the rules, never ends a run: no ending event, nothing settled."""
        closing = V1.derive(
            remove_states=["escalated"],
            add_states=[State("escalated", terminal=True)],
            add=[Transition("running", "ticket.escalated", "escalated")],
        )
        log = escalated()
        log.add("run.migrated", **migrated_fields(new=closing))
        error = self._refused(log, Reducer(closing, tables=[V1]))
        assert str(error) == (
            "run 't-3' is 'escalated': event 'run.migrated' (sequence 3) cannot move the run "
            f"from table {named(V1)} to {named(closing)}: state 'escalated' is terminal in the "
            "new table, and a migration cannot end a run"
        )

    def test_not_for_a_run_that_names_no_table(self) -> None:
        """A run whose `run.started` names no table (written before runs recorded one) is
        folded with whichever table folds it: there is no version to move it from."""
        log = LogBuilder("t-3")
        log.add("run.started")
        log.add("run.migrated", **migrated_fields(old=DEFAULT_TABLE))
        error = self._refused(log, Reducer(DEFAULT_TABLE, tables=[V2]))
        assert str(error) == (
            "run 't-3' is 'running': event 'run.migrated' (sequence 2) cannot move the run "
            f"from table {named(DEFAULT_TABLE)} to {named(V2)}: its run.started names no "
            "table, so any table folds it already"
        )

    def test_a_table_cannot_take_it_on_an_edge(self) -> None:
        """The reducer applies it in every state that has not ended; an edge would lie."""
        with pytest.raises(InvalidTableError) as info:
            DEFAULT_TABLE.derive(add=[Transition("running", "run.migrated", "paused")])
        assert info.value.problems == (
            "edge running --run.migrated--> paused: 'run.migrated' cannot be on an edge (a "
            "migration keeps the run's state, in any state that has not ended)",
        )


class EscalatedToATeam(CustomEvent):
    """`ticket.escalated` as a later version declares it: a team, no priority."""

    type: Literal["ticket.escalated"] = "ticket.escalated"
    escalated_to: str
    team: str = "support"


#: The ticket table whose `ticket.escalated` has other fields: v1's escalations do not
#: parse under it (`priority` is not one of its fields).
TEAMS = TransitionTable(
    V1.name,
    V1.states,
    V1.initial,
    V1.transitions,
    BUILTIN_EVENTS.extend(EscalatedToATeam, V1.event_types.classes["ticket.handed_back"]),
)


class TestStoresReadEachStretchWithItsTypes:
    """A store of the new version reads the events before a migration with the old
    version's event types, which may differ from its own."""

    def test_load_events_and_verify(self, tmp_path: Path) -> None:
        """v1's `ticket.escalated` carries `priority`, the new version's does not: the
        store still loads, streams and verifies the run migrated between them."""
        log = escalated(priority="normal")
        log.add("run.migrated", **migrated_fields(new=TEAMS))
        log.add("ticket.handed_back", note="done")
        with pytest.raises(EventFormatError):
            parse_event(dump_event(log.events[1]), events=TEAMS.event_types)
        db = tmp_path / "runs.db"
        old = StoreOptions(reducer=Reducer(V1, tables=[TEAMS]), snapshot_every=2)
        with SQLiteEventStore(db, options=old) as store:
            store.append("t-3", log.events[:3], 0)
        new = Reducer(TEAMS, tables=[V1])
        with SQLiteEventStore(db, options=StoreOptions(reducer=new)) as store:
            store.append("t-3", log.events[3:], 3)
        with SQLiteEventStore(db, options=StoreOptions(reducer=new)) as store:
            assert store.load("t-3") == new.replay(log.events)
            assert [dump_event(e) for e in store.events("t-3")] == list(map(dump_event, log.events))
            assert store.verify("t-3").ok


#: The default table without `paused`: a new version that takes a state away.
NO_PAUSE = DEFAULT_TABLE.derive(remove_states=["paused"])
MIGRATION = {"by": "ann", "reason": "the pause state is gone"}


def started_under(table: TransitionTable, events: list[Event]) -> list[Event]:
    """The log, its `run.started` naming `table` (as every agentfsm writer does)."""
    first = parse_event({**json.loads(dump_event(events[0])), "table": table.ref.model_dump()})
    return [first, *events[1:]]


@settings(max_examples=150, deadline=None)
@given(legal_runs(DEFAULT_TABLE), st.data())
def test_a_migration_changes_the_table_and_nothing_else(events: list[Event], data: Any) -> None:
    """Cut any legal log of the old version where the run has not ended: appending
    `run.migrated` and folding with the new version gives the old fold, with the new table
    recorded, when the new version has the run's state; a MigrationError naming the state
    when it does not. The old version's fold refuses nothing before the migration."""
    assume(events[0].type == "run.started")  # (a walk may start with an ending instead)
    events = started_under(DEFAULT_TABLE, events)
    cut = data.draw(st.integers(1, len(events)), label="cut")
    prefix = events[:cut]
    before = Reducer(DEFAULT_TABLE).replay(prefix)
    assume(not DEFAULT_TABLE.is_terminal(before.status))
    migration = parse_event(
        {
            "type": "run.migrated", "run_id": before.run_id, "sequence": cut + 1,
            "occurred_at": prefix[-1].occurred_at, "from_table": DEFAULT_TABLE.ref.model_dump(),
            "to_table": NO_PAUSE.ref.model_dump(), **MIGRATION,
        }
    )  # fmt: skip
    new = Reducer(NO_PAUSE, tables=[DEFAULT_TABLE])
    if before.status not in NO_PAUSE.state_names:
        with pytest.raises(MigrationError) as info:
            new.replay([*prefix, migration])
        assert info.value.problems == (f"state '{before.status}' is not in the new table",)
        return
    after = new.replay([*prefix, migration])
    assert after == attrs.evolve(
        before,
        version=cut + 1,
        updated_at=migration.occurred_at,
        table=NO_PAUSE.ref,
        migrated_from=DEFAULT_TABLE.ref,
        migrated_at=cut + 1,
    )


def ticket_agent() -> Agent:
    """The shipped ticket demo's agent: asks to refund (approval needed), then answers."""
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("refund", {"order_id": "O-1001", "amount": 40})),
            Decision.answer("Your refund is done."),
        ],
        by_turn=True,
    )
    refund = Tool("refund", lambda ctx: {"refunded": ctx.args["amount"]})
    return Agent("support", model, [refund], policy=ToolPolicy(approval={"refund"}))


def opened(db: Path, table: TransitionTable, *others: TransitionTable) -> SQLiteEventStore:
    """The store at `db`, its runs folded with `table` (and the versions `others`)."""
    return SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(table, tables=others)))


def parked(db: Path, run_id: str = "t-3", **escalation: Any) -> None:
    """A v1 run the Runner returned waiting in `escalated` (or `escalated_urgent`): the
    approver rejected the refund, and escalated the ticket to a person."""
    with opened(db, V1) as store:
        runner = Runner(store, ticket_agent(), clock=step_clock())
        waiting = runner.run(run_id, "Refund order O-1001, charged twice")
        [action] = waiting.record.pending_approvals
        reject(store, run_id, action, approver="ann", reason="needs a human")
        append_event(store, run_id, "ticket.escalated", escalated_to="ann", **escalation)
        assert runner.drive(run_id).kind == StateKind.WAITING


class TestTheRunnerAfterAMigration:
    """The ticket example: a run parked in `escalated` under v1, migrated to v2, is paused
    (which v1 forbade) and driven to the end under v2."""

    def test_the_run_goes_on_under_the_new_version(self, tmp_path: Path) -> None:
        """`migrate` records who moved it and why; the Runner resumes it under v2."""
        db = tmp_path / "runs.db"
        parked(db)
        with opened(db, V1) as store, pytest.raises(IllegalTransitionError):
            pause(store, "t-3", "ann is on leave")
        with opened(db, V1, V2) as store:
            at = datetime(2026, 9, 2, 9, 0, tzinfo=UTC)
            record = migrate(
                store, "t-3", to=V2, by="ann", reason="v2 can pause it", clock=lambda: at
            )
            assert (record.status, record.table, record.migrated_from) == (
                "escalated", V2.ref, V1.ref,
            )  # fmt: skip
        with opened(db, V2, V1) as store:
            *_, event = store.events("t-3", after=record.version - 1)
            assert dump_event(event) == (
                f'{{"run_id":"t-3","sequence":{record.version},"type":"run.migrated",'
                f'"occurred_at":"2026-09-02T09:00:00+00:00","from_table":{{"name":'
                f'"support_ticket","digest":"{V1.digest}"}},"to_table":{{"name":'
                f'"support_ticket","digest":"{V2.digest}"}},"by":"ann",'
                '"reason":"v2 can pause it"}'
            )
            runner = Runner(store, ticket_agent(), clock=step_clock())
            assert runner.drive("t-3").status == "escalated"
            assert pause(store, "t-3", "ann is on leave").status == "paused"
            done = runner.drive("t-3")
            assert (done.status, done.final_output) == ("completed", "Your refund is done.")
            assert store.verify("t-3").ok

    def test_a_runner_of_the_old_version_is_refused_the_run(self, tmp_path: Path) -> None:
        """After the migration the run is v2's: a store of v1 names v2 when it loads it."""
        db = tmp_path / "runs.db"
        parked(db)
        with opened(db, V1, V2) as store:
            migrate(store, "t-3", to=V2, by="ann", reason="v2 can pause it")
            with pytest.raises(TableMismatchError) as info:
                Runner(store, ticket_agent()).drive("t-3")
        assert info.value.started_under == named(V2)


def with_escalated(kind: StateKind) -> TransitionTable:
    """v1 with `escalated` of another kind (and its moves as before)."""
    return V1.derive(
        remove_states=["escalated"],
        add_states=[State("escalated", kind=kind)],
        add=[
            Transition("running", "ticket.escalated", "escalated"),
            Transition("escalated", "ticket.handed_back", "running"),
            *(
                Transition("escalated", event, target)
                for event, target in (
                    ("run.cancel_requested", "cancel_requested"),
                    ("run.failed", "failed"),
                    ("run.terminated", "terminated"),
                )
            ),
        ],
    )


class TestTheApiRefuses:
    """`migrate` checks what `check-table NEW --against OLD` checks for the run, and writes
    nothing when it refuses."""

    def test_a_state_the_new_version_removed(self, tmp_path: Path) -> None:
        """An urgent escalation waits in `escalated_urgent`, which v2 has no more."""
        db = tmp_path / "runs.db"
        parked(db, priority="urgent")
        with opened(db, V1, V2) as store:
            version = store.load("t-3").version
            with pytest.raises(MigrationError) as info:
                migrate(store, "t-3", to=V2, by="ann", reason="v2")
            assert str(info.value) == (
                f"run 't-3' is 'escalated_urgent': event 'run.migrated' (sequence "
                f"{version + 1}) cannot move the run from table {named(V1)} to {named(V2)}: "
                "state 'escalated_urgent' is not in the new table"
            )
            assert store.load("t-3").version == version

    def test_a_state_of_another_kind(self, tmp_path: Path) -> None:
        """A person owning the ticket is not a pause: the run would be driven otherwise."""
        db = tmp_path / "runs.db"
        parked(db)
        paused_kind = with_escalated(StateKind.PAUSED)
        with opened(db, V1, paused_kind) as store, pytest.raises(MigrationError) as info:
            migrate(store, "t-3", to=paused_kind, by="ann", reason="v3")
        assert info.value.problems == (
            "state 'escalated' is 'paused' in the new table, was 'waiting'",
        )

    def test_who_and_why_must_be_said(self, tmp_path: Path) -> None:
        """Checked before any I/O, with the parser's own words."""
        db = tmp_path / "runs.db"
        parked(db)
        with opened(db, V1, V2) as store, pytest.raises(EventFormatError) as info:
            migrate(store, "t-3", to=V2, by="", reason="v2")
        assert str(info.value) == (
            "run 't-3': not a valid event: field 'by': String should have at least 1 "
            "character (got '')"
        )

    def test_a_store_that_cannot_find_the_new_version(self, tmp_path: Path) -> None:
        """The migration is checked by the store's reducer: it must know the new table."""
        db = tmp_path / "runs.db"
        parked(db)
        with opened(db, V1) as store, pytest.raises(ValueError, match=r"^the store") as info:
            migrate(store, "t-3", to=V2, by="ann", reason="v2")
        assert str(info.value) == (
            f"the store's reducer cannot find table {named(V2)} to check the migration "
            "against: open the store with `Reducer(OLD, tables=[NEW])`, or `register()` the "
            "new table"
        )


V1_SPEC = "examples.lifecycles.ticket:TICKET_TABLE"
V2_SPEC = "examples.lifecycles.ticket_v2:TICKET_TABLE_V2"
#: v1 with `escalated` of kind `paused`, for the command line (`MODULE:ATTR`).
PAUSED_ESCALATION = with_escalated(StateKind.PAUSED)
WHY = ["--by", "ann", "--reason", "v2 lets a person pause it"]


class TestTheCommand:
    """`agentfsm migrate RUN_ID --to NEW [--table OLD] --by NAME --reason TEXT --store`."""

    def test_it_migrates_and_says_what_changes_for_the_run(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The run, both versions and who; then how the run's moves change. The run is then
        steered under v2 without flags, its versions being registered (as published)."""
        db = str(ticket_store(tmp_path / "runs.db"))
        registry.register(V1, V2)
        assert main(["migrate", "t-3", "--to", V2_SPEC, *WHY, "--store", db]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"run t-3: escalated (version 3), migrated from {named(V1)} to {named(V2)} by ann",
            "  its moves changed: 'run.paused' added",
        ]
        assert main(["pause", "t-3", "--reason", "ann is away", "--store", db]) == 0
        assert capsys.readouterr().out == "run t-3: paused (version 4)\n"

    def test_the_old_version_can_be_named(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With `--table` and `--to`, neither version needs to be registered."""
        db = str(ticket_store(tmp_path / "runs.db"))
        args = ["migrate", "t-3", "--table", V1_SPEC, "--to", V2_SPEC, *WHY, "--store", db]
        assert main(args) == 0
        assert capsys.readouterr().out.startswith("run t-3: escalated (version 3), migrated")
        with SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(V2, tables=[V1]))) as s:
            assert (s.load("t-3").table, s.verify("t-3").ok) == (V2.ref, True)

    @pytest.mark.parametrize(
        ("run_id", "to", "message"),
        [
            (
                "t-2", V2_SPEC,
                "run 't-2' is 'escalated_urgent': event 'run.migrated' (sequence 3) cannot "
                f"move the run from table {named(V1)} to {named(V2)}: state 'escalated_urgent' "
                "is not in the new table",
            ),
            (
                "t-3", "tests.test_migration:PAUSED_ESCALATION",
                "run 't-3' is 'escalated': event 'run.migrated' (sequence 3) cannot move the "
                f"run from table {named(V1)} to {named(PAUSED_ESCALATION)}: state 'escalated' "
                "is 'paused' in the new table, was 'waiting'",
            ),
            (
                "t-4", V2_SPEC,
                "run 't-4' is 'cancelled' (terminal): event 'run.migrated' (sequence 4) is not "
                "allowed; allowed: none",
            ),
            (
                "t-5", V2_SPEC,
                "run 't-5' is 'escalated': event 'run.migrated' (sequence 3) cannot move the "
                f"run from table {named(V2)} to {named(V2)}: the run is under that table "
                "already",
            ),
        ],
    )  # fmt: skip
    def test_a_refusal_names_the_reasons_and_writes_nothing(
        self,
        run_id: str,
        to: str,
        message: str,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A removed state, another kind, an ended run, a run already there: exit 1."""
        db = str(ticket_store(tmp_path / "runs.db"))
        registry.register(V1, V2)
        with SQLiteEventStore(db) as store:
            before = store.run_info(run_id)
        assert main(["migrate", run_id, "--to", to, *WHY, "--store", db]) == 1
        assert capsys.readouterr() == ("", f"agentfsm migrate: refused: {message}\n")
        with SQLiteEventStore(db) as store:
            assert store.run_info(run_id) == before

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["nope", "--to", V2_SPEC, *WHY],
                "agentfsm migrate: run 'nope' is not in the store; start it by appending "
                "'run.started' with expected_version 0",
            ),
            (
                ["t-3", "--to", "examples.lifecycles.nope:V9", *WHY],
                "agentfsm migrate: cannot import 'examples.lifecycles.nope': "
                "ModuleNotFoundError: No module named 'examples.lifecycles.nope'",
            ),
            (
                ["t-3", "--to", V2_SPEC, "--by", "ann"],
                "agentfsm migrate: the following arguments are required: --reason (see "
                "`agentfsm migrate --help`)",
            ),
            (
                ["t-3", "--to", V2_SPEC, "--by", "ann", "--reason", " "],
                "agentfsm migrate: argument --reason: a reason must not be empty: ' ' (see "
                "`agentfsm migrate --help`)",
            ),
        ],
    )
    def test_what_cannot_be_done_is_one_line(
        self, args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown run, a new version that is not there, a missing reason: exit 2."""
        db = str(ticket_store(tmp_path / "runs.db"))
        registry.register(V1)
        assert main(["migrate", *args, "--store", db]) == 2
        assert capsys.readouterr() == ("", message + "\n")

    def test_a_run_under_an_unknown_table_is_named(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_tables_registered: None
    ) -> None:
        """Without `--table`, the run's table must be known: named, exit 2."""
        db = str(ticket_store(tmp_path / "runs.db"))
        assert main(["migrate", "t-3", "--to", V2_SPEC, *WHY, "--store", db]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm migrate: run 't-3': table 'support_ticket' ({V1.digest}) is not "
            "registered; no table named 'support_ticket' is known: pass it with --table "
            "MODULE:ATTR, register() it, or publish it under the 'agentfsm.tables' entry "
            "point group\n"
        )

    def test_from_the_console_script(self, tmp_path: Path) -> None:
        """The installed command, in a process of its own: no traceback, the exit status."""
        db = str(ticket_store(tmp_path / "runs.db"))
        args = ["migrate", "t-2", "--table", V1_SPEC, "--to", V2_SPEC, *WHY, "--store", db]
        out = subprocess.run(
            [sys.executable, "-m", "agentfsm", *args],
            capture_output=True, text=True, check=False, cwd=REPO,
        )  # fmt: skip
        assert (out.returncode, out.stdout) == (1, "")
        assert out.stderr.startswith("agentfsm migrate: refused: run 't-2' is 'escalated_urgent'")


class TestCheckTableAfterAMigration:
    """`check-table NEW --against OLD --store` lists a migrated run as such."""

    def test_a_migrated_run_is_not_affected_nor_not_compared(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Migrated, `t-3` leaves the affected runs; the exit status follows the others."""
        db = str(ticket_store(tmp_path / "runs.db"))
        args = ["migrate", "t-3", "--table", V1_SPEC, "--to", V2_SPEC, *WHY, "--store", db]
        assert main(args) == 0
        capsys.readouterr()
        assert main(["check-table", V2_SPEC, "--against", V1_SPEC, "--store", db]) == 1
        assert capsys.readouterr().out.splitlines()[-6:] == [
            "runs in flight: 5 checked, 2 affected, 0 extended, 1 migrated, 2 not compared",
            "affected: run 't-1' in 'running': its moves changed: 'ticket.escalated' changed",
            "affected: run 't-2' in 'escalated_urgent': state 'escalated_urgent' is not in "
            "the new table",
            "migrated: run 't-3' in 'escalated': started under the old version, migrated to "
            "the new",
            f"not compared: run 'd-1' in 'running': started under 'agent_run' "
            f"({DEFAULT_TABLE.digest}), not the old version",
            "not compared: run 't-5' in 'escalated': started under the new version already",
        ]

    def test_as_json(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The migrated runs are a list of their own."""
        db = str(ticket_store(tmp_path / "runs.db"))
        args = ["migrate", "t-3", "--table", V1_SPEC, "--to", V2_SPEC, *WHY, "--store", db]
        assert main(args) == 0
        capsys.readouterr()
        args = ["check-table", V2_SPEC, "--against", V1_SPEC, "--store", db, "--format", "json"]
        assert main(args) == 1
        assert json.loads(capsys.readouterr().out)["runs"]["migrated"] == [
            {
                "run_id": "t-3",
                "status": "escalated",
                "reason": "started under the old version, migrated to the new",
            }
        ]


def jsonl(path: Path, events: list[Event]) -> str:
    """`events` written to `path` as JSON Lines; the path as text."""
    path.write_text("".join(dump_event(e) + "\n" for e in events), encoding="utf-8")
    return str(path)


class TestLogCommands:
    """`validate`, `replay` and `inspect` read a migrated log with the table it ends under."""

    @pytest.mark.parametrize("command", ["validate", "replay", "inspect"])
    def test_a_migrated_log_is_legal(
        self, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without flags: the table the run ends under is found past its `run.started`."""
        registry.register(V1, V2)
        log = jsonl(tmp_path / "t.jsonl", migrated())
        assert main([command, log, "--format", "json"]) == 0, capsys.readouterr().err
        out = json.loads(capsys.readouterr().out)
        final = {
            "validate": lambda: out["runs"][0]["status"],
            "replay": lambda: (out[0]["status"], out[0]["table"], out[0]["migrated_at"]),
            "inspect": lambda: out["final_state"],
        }[command]()
        expected = ("paused", V2.ref.model_dump(), 3) if command == "replay" else "paused"
        assert final == expected

    def test_each_run_is_read_with_its_own_event_types(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Before the migration, `ticket.escalated` has v1's fields, which the new version
        does not take: those lines are read with v1's types."""
        registry.register(V1)
        log = escalated(priority="normal")
        log.add("run.migrated", **migrated_fields(new=TEAMS))
        log.add("ticket.handed_back", note="done")
        path = jsonl(tmp_path / "t.jsonl", log.events)
        args = ["validate", path, "--table", "tests.test_migration:TEAMS", "--format", "json"]
        assert main(args) == 0, capsys.readouterr().out
        assert json.loads(capsys.readouterr().out)["runs"][0]["status"] == "running"

    def test_a_run_that_never_reaches_the_table_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Folded to its end under v1, the run is not v2's: a finding at its first line."""
        registry.register(V1)
        path = jsonl(tmp_path / "t.jsonl", escalated().events)
        assert main(["validate", path, "--table", V2_SPEC, "--format", "json"]) == 1
        finding = json.loads(capsys.readouterr().out)["error"]
        assert (finding["line"], finding["sequence"], finding["message"]) == (
            1,
            1,
            "run 't-3' is 'created': event 'run.started' (sequence 1) was started under table "
            f"{named(V1)}, not {named(V2)}: fold it with the table it started with (`--table`, "
            "or the registry of `agentfsm.fsm.registry`)",
        )


def test_the_docs_show_what_migrate_prints(tmp_path: Path) -> None:
    """The migration example of docs/lifecycles.md, run on the store `ticket_store` builds
    (the page's "Versions" store), prints exactly what the page shows, refusal included."""
    page = (REPO / "docs" / "lifecycles.md").read_text(encoding="utf-8")
    section = page.split("**Moving a run to a new version**", 1)[1]
    block = section.split("```console\n", 1)[1].split("```", 1)[0]
    runs: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            runs.append((line.removeprefix("$ "), []))
        else:
            runs[-1][1].append(line)
    db = ticket_store(tmp_path / "runs.db")
    for command, shown in runs:
        program, *args = shlex.split(command)
        assert (program, args[-2:]) == ("agentfsm", ["--store", "runs.db"])
        out = subprocess.run(
            [sys.executable, "-m", "agentfsm", *args[:-1], str(db)],
            capture_output=True, text=True, check=False, cwd=REPO,
        )  # fmt: skip
        assert (out.stdout + out.stderr).splitlines() == shown
