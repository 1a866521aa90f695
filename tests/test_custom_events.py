"""Your own lifecycle, end to end: event types of your own through every layer.

The support-ticket lifecycle of `examples/lifecycles/ticket.py` (the default table plus
`escalated`, reached by `ticket.escalated`, which carries who owns the ticket) is built,
logged, parsed, folded, stored, validated and described exactly like the built-in one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from agentfsm.cli import main
from agentfsm.errors import EventFormatError, InvalidTableError
from agentfsm.events import (
    BUILTIN_EVENTS,
    CustomEvent,
    LogBuilder,
    dump_event,
    event_json_schema,
    parse_event,
)
from agentfsm.reducers import Reducer
from agentfsm.stores import SQLiteEventStore, StoreOptions
from examples.lifecycles.ticket import TICKET_TABLE, TicketEscalated

TYPES = TICKET_TABLE.event_types


def escalated_log(priority: str = "normal") -> LogBuilder:
    """A ticket run escalated to tier-2 between two steps."""
    log = LogBuilder("t-1", events=TYPES)
    log.add("run.started", objective="refund a double charge")
    log.add("model.started")
    log.add("model.completed", decision="final", output="escalating")
    log.add("ticket.escalated", escalated_to="tier-2", priority=priority)
    return log


class TestTheWireFormat:
    """A custom type parses, validates and dumps byte for byte, like a built-in one."""

    def test_it_round_trips_byte_for_byte(self) -> None:
        """parse(dump(e)) == e, and the dump is a fixed point."""
        event = escalated_log().events[-1]
        assert isinstance(event, TicketEscalated)
        line = dump_event(event)
        assert line == (
            '{"run_id":"t-1","sequence":4,"type":"ticket.escalated","occurred_at":'
            '"2026-09-01T10:00:03+00:00","escalated_to":"tier-2","priority":"normal"}'
        )
        assert parse_event(line, events=TYPES) == event
        assert dump_event(parse_event(line, events=TYPES)) == line

    def test_its_fields_are_strict_and_closed(self) -> None:
        """A wrong field type or an unknown field is named, as for built-in events."""
        line = {
            "run_id": "t-1", "sequence": 4, "type": "ticket.escalated",
            "occurred_at": "2026-09-01T10:00:03Z", "escalated_to": 7, "mood": "grumpy",
        }  # fmt: skip
        with pytest.raises(EventFormatError) as info:
            parse_event(line, events=TYPES)
        assert info.value.problems == (
            "field 'escalated_to': Input should be a valid string (got 7)",
            "field 'mood' is not part of 'ticket.escalated'",
        )

    def test_its_values_meet_the_same_limits(self) -> None:
        """NaN in a custom field is refused like anywhere else."""

        class Scored(CustomEvent):
            type: Literal["ticket.scored"] = "ticket.scored"
            score: float

        with pytest.raises(EventFormatError) as info:
            parse_event(
                {"run_id": "r", "sequence": 1, "type": "ticket.scored",
                 "occurred_at": "2026-09-01T10:00:03Z", "score": float("nan")},
                events=BUILTIN_EVENTS.extend(Scored),
            )  # fmt: skip
        assert info.value.problems == (
            "field 'score': the value is nan, which JSON cannot hold (numbers must be finite)",
        )

    def test_the_builtin_vocabulary_does_not_know_it(self) -> None:
        """Without the table's types, the line is an unknown type, named."""
        line = dump_event(escalated_log().events[-1])
        with pytest.raises(EventFormatError) as info:
            parse_event(line)
        assert info.value.problems[0].startswith("unknown event type 'ticket.escalated'")

    def test_it_is_in_the_tables_json_schema(self) -> None:
        """The schema of the table's types lists the custom one with its fields."""
        schema = event_json_schema(TYPES)
        assert "ticket.escalated" in schema["properties"]["type"]["enum"]
        escalated = schema["$defs"]["TicketEscalated"]
        assert escalated["required"] == ["run_id", "sequence", "occurred_at", "escalated_to"]
        assert escalated["additionalProperties"] is False

    def test_a_built_in_type_cannot_be_redeclared(self) -> None:
        """A lifecycle may add types, never replace `run.started`'s model."""

        class Fake(CustomEvent):
            type: Literal["run.started"] = "run.started"

        with pytest.raises(ValueError, match="already declared") as info:
            BUILTIN_EVENTS.extend(Fake)
        assert str(info.value) == (
            "event type(s) 'run.started' are already declared with another model"
        )


class TestTheReducer:
    """The table moves the run; the event's `fold` records its fields."""

    def test_escalation_moves_to_a_waiting_state_and_records_the_owner(self) -> None:
        """`ticket.escalated` in `running` goes to `escalated` (a waiting kind)."""
        record = Reducer(TICKET_TABLE).replay(escalated_log().events)
        assert (record.status, record.version) == ("escalated", 4)
        assert record.custom == {"escalated_to": "tier-2", "priority": "normal"}
        assert TICKET_TABLE.kind(record.status) == "waiting"

    def test_a_condition_on_a_custom_field_picks_the_target(self) -> None:
        """An urgent escalation goes to `escalated_urgent`, chosen by the event's field."""
        record = Reducer(TICKET_TABLE).replay(escalated_log("urgent").events)
        assert record.status == "escalated_urgent"

    def test_handing_back_goes_on_and_keeps_the_note(self) -> None:
        """`ticket.handed_back` returns the run to `running`; the note stays on the record."""
        log = escalated_log()
        log.add("ticket.handed_back", note="refunded by hand")
        record = Reducer(TICKET_TABLE).replay(log.events)
        assert (record.status, record.custom) == (
            "running",
            {"priority": "normal", "note": "refunded by hand"},
        )

    def test_the_snapshot_keeps_what_custom_events_recorded(self) -> None:
        """A record with custom fields dumps and reads back equal."""
        from agentfsm.reducers import Snapshot

        record = Reducer(TICKET_TABLE).replay(escalated_log().events)
        assert Snapshot.loads(Snapshot(record).dumps()).record == record


class TestStoresAndTools:
    """Stores, validation and the command line read a run with its table's types."""

    def test_a_store_keeps_and_verifies_a_custom_run(self, tmp_path: Path) -> None:
        """Appended, reloaded from a fresh handle, streamed and verified."""
        options = StoreOptions(reducer=Reducer(TICKET_TABLE), snapshot_every=2)
        events = escalated_log().events
        with SQLiteEventStore(tmp_path / "t.db", options=options) as store:
            store.append("t-1", events, 0)
        with SQLiteEventStore(tmp_path / "t.db", options=options) as fresh:
            assert fresh.load("t-1").custom == {"escalated_to": "tier-2", "priority": "normal"}
            assert [e.type for e in fresh.events("t-1")][-1] == "ticket.escalated"
            assert fresh.verify("t-1").ok

    def test_validate_with_the_table(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`agentfsm validate --table` accepts the custom event; without it, it is unknown."""
        log = tmp_path / "ticket.jsonl"
        log.write_text("".join(dump_event(e) + "\n" for e in escalated_log().events))
        spec = "examples.lifecycles.ticket:TICKET_TABLE"
        assert main(["validate", str(log), "--table", spec]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0] == "t-1  escalated  version 4"
        assert main(["validate", str(log)]) == 2
        assert "unknown event type 'ticket.escalated'" in capsys.readouterr().out

    def test_check_table_and_schema_know_the_types(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`check-table` is clean, and the spec of the table names its own event types."""
        assert main(["check-table", "--table", "examples.lifecycles.ticket:TICKET_TABLE"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "ok: 0 error(s), 0 warning(s)"
        described: Any = TICKET_TABLE.describe()
        assert described["event_types"] == ["ticket.escalated", "ticket.handed_back"]
        assert json.loads(json.dumps(described)) == described

    def test_an_undeclared_type_is_a_build_time_error(self) -> None:
        """Using `ticket.closed` without declaring it fails when the table is built."""
        from agentfsm.fsm import Transition

        with pytest.raises(InvalidTableError) as info:
            TICKET_TABLE.derive(add=[Transition("escalated", "ticket.closed", "completed")])
        assert info.value.problems == (
            "event type 'ticket.closed' is not declared (edges escalated --> completed): add "
            "it with event_types=BUILTIN_EVENTS.extend(...) or derive(add_events=[...])",
        )


class TestTheRunnerByKinds:
    """The Runner decides by the kinds the table declares, never by the default names."""

    def test_a_run_escalated_to_a_person_waits_and_goes_on_when_handed_back(
        self, tmp_path: Path
    ) -> None:
        """Driving a run in `escalated` on returns it waiting (it used to raise "'escalated':
        event 'model.started' is not allowed"); once handed back, `drive` finishes it."""
        from agentfsm.runtime import (
            Agent,
            Decision,
            ProposedCall,
            Runner,
            ScriptedModel,
            Tool,
            ToolPolicy,
            reject,
        )  # fmt: skip

        store = SQLiteEventStore(
            tmp_path / "t.db", options=StoreOptions(reducer=Reducer(TICKET_TABLE))
        )
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("refund", {"amount": 40})),
                lambda ctx: Decision.answer(f"refunded by hand: {ctx.record.custom['note']}"),
            ],
            by_turn=True,
        )
        refund = Tool("refund", lambda ctx: {"refunded": ctx.args["amount"]})
        agent = Agent("support", model, [refund], policy=ToolPolicy(approval={"refund"}))
        assert Runner(store, agent).run("t-1").status == "waiting_approval"
        reject(store, "t-1", "t1.1", "ann", "needs a human")

        def happen(type_: str, **fields: Any) -> None:
            version = store.load("t-1").version
            log = LogBuilder("t-1", start=version + 1, events=TYPES)
            log.add(type_, **fields)
            store.append("t-1", log.events, version)

        happen("ticket.escalated", escalated_to="tier-2")
        waiting = Runner(store, agent).drive("t-1")
        assert (waiting.status, waiting.waiting) == ("escalated", True)
        assert waiting.record.custom["escalated_to"] == "tier-2"
        happen("ticket.handed_back", note="done in the billing tool")
        done = Runner(store, agent).drive("t-1")
        assert (done.status, done.final_output) == (
            "completed",
            "refunded by hand: done in the billing tool",
        )
        store.close()


class TestTheTableTravelsWithTheRun:
    """Each run records the table it was started under; it is folded with that one only."""

    def test_runs_record_their_table(self, tmp_path: Path) -> None:
        """`submit` and the Runner write the table's name and digest on `run.started`."""
        from agentfsm.runtime import submit

        store = SQLiteEventStore(
            tmp_path / "t.db", options=StoreOptions(reducer=Reducer(TICKET_TABLE))
        )
        submit(store, "t-9", "help")
        started = next(store.events("t-9"))
        assert started.table == TICKET_TABLE.ref
        assert started.table.name == "support_ticket"
        assert started.table.digest.startswith("sha256:")
        store.close()

    def test_folding_with_another_table_is_refused_naming_both(self) -> None:
        """A ticket run folded with the default table: a TableMismatchError, not a puzzling
        refusal later in the log."""
        from agentfsm.errors import TableMismatchError
        from agentfsm.fsm import DEFAULT_TABLE

        log = LogBuilder("t-1", events=TYPES)
        log.add("run.started", table=TICKET_TABLE.ref.model_dump())
        with pytest.raises(TableMismatchError) as info:
            Reducer(DEFAULT_TABLE).replay(log.events)
        assert str(info.value) == (
            f"run 't-1' is 'created': event 'run.started' (sequence 1) was started under "
            f"table 'support_ticket' ({TICKET_TABLE.digest}), not 'agent_run' "
            f"({DEFAULT_TABLE.digest}): fold it with the table it started with (`--table`, "
            "or the registry of `agentfsm.fsm.registry`); if it was migrated to 'agent_run' "
            f"({DEFAULT_TABLE.digest}) since, the table it started with must be known too "
            "(`register()` it, or pass it in `Reducer(tables=...)`)"
        )

    def test_a_changed_table_is_another_version(self) -> None:
        """One more edge is another digest: a run started before is not folded with it."""
        from agentfsm.fsm import Transition

        changed = TICKET_TABLE.derive(add=[Transition("escalated", "run.paused", "paused")])
        assert changed.name == TICKET_TABLE.name
        assert changed.digest != TICKET_TABLE.digest

    def test_the_registry_finds_a_table_by_its_digest(self) -> None:
        """Registered (or published under the entry point group), a table is found again
        from what a run recorded; an unknown one is named with its known versions."""
        from agentfsm.errors import UnknownTableError
        from agentfsm.fsm import Transition
        from agentfsm.fsm.registry import lookup, register

        register(TICKET_TABLE)
        assert lookup(TICKET_TABLE.ref) is TICKET_TABLE
        other = TICKET_TABLE.derive(add=[Transition("escalated", "run.paused", "paused")])
        with pytest.raises(UnknownTableError) as info:
            lookup(other.ref)
        assert str(info.value) == (
            f"table 'support_ticket' ({other.digest}) is not registered; known versions of "
            f"'support_ticket': {TICKET_TABLE.digest}: pass it with --table MODULE:ATTR, "
            "register() it, or publish it under the 'agentfsm.tables' entry point group"
        )


class TestTheCommandLineFindsTheTable:
    """Steering commands open a run with the table it was started under, flags or not."""

    def _escalated_store(self, path: Path, table: Any = TICKET_TABLE) -> Path:
        from agentfsm.runtime import submit

        with SQLiteEventStore(path, options=StoreOptions(reducer=Reducer(table))) as store:
            submit(store, "t-1", "refund")
            log = LogBuilder("t-1", start=2, events=table.event_types)
            log.add("ticket.escalated", escalated_to="tier-2")
            store.append("t-1", log.events, 1)
        return path

    def test_with_the_table_flag(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`--table` names it: a cancel of a run waiting in `escalated` is accepted."""
        db = self._escalated_store(tmp_path / "t.db")
        spec = "examples.lifecycles.ticket:TICKET_TABLE"
        assert main(["cancel", "t-1", "--store", str(db), "--table", spec]) == 0
        assert capsys.readouterr().out == "run t-1: cancel_requested (version 3)\n"

    def test_from_the_registry_without_flags(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A registered table is found from what `run.started` recorded."""
        from agentfsm.fsm.registry import register

        register(TICKET_TABLE)
        db = self._escalated_store(tmp_path / "t.db")
        assert main(["pause", "t-1", "--store", str(db), "--reason", "x"]) == 1
        assert capsys.readouterr().err.startswith(
            "agentfsm pause: refused: run 't-1' is 'escalated': event 'run.paused'"
        )
        assert main(["cancel", "t-1", "--store", str(db)]) == 0
        assert capsys.readouterr().out == "run t-1: cancel_requested (version 3)\n"

    def test_an_unknown_table_is_named(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A run started under a table nobody registered: exit 2, naming it."""
        from agentfsm.fsm import Transition

        unknown = TICKET_TABLE.derive(
            name="ticket_v9", add=[Transition("escalated", "run.paused", "paused")]
        )
        db = self._escalated_store(tmp_path / "t.db", unknown)
        assert main(["cancel", "t-1", "--store", str(db)]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm cancel: run 't-1': table 'ticket_v9' ({unknown.digest}) is not "
            "registered; no table named 'ticket_v9' is known: pass it with --table "
            "MODULE:ATTR, register() it, or publish it under the 'agentfsm.tables' entry "
            "point group\n"
        )


def test_the_schema_command_takes_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`agentfsm schema --table` lists the table's own event types with their fields."""
    assert main(["schema", "--table", "examples.lifecycles.ticket:TICKET_TABLE"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == event_json_schema(TYPES)
    assert "ticket.handed_back" in schema["properties"]["type"]["enum"]


def test_append_names_a_field_the_type_does_not_take(tmp_path: Path) -> None:
    """`append_event` checks fields before any I/O and names the run, not a sequence."""
    from agentfsm.runtime import append_event, submit

    with SQLiteEventStore(
        tmp_path / "t.db", options=StoreOptions(reducer=Reducer(TICKET_TABLE))
    ) as store:
        submit(store, "t-1", "refund")
        with pytest.raises(EventFormatError) as info:
            append_event(store, "t-1", "ticket.escalated", escalated_to="x", mood="grumpy")
        assert str(info.value) == (
            "run 't-1': not a valid event: field 'mood' is not part of 'ticket.escalated'"
        )
        assert store.load("t-1").version == 1


def test_append_names_every_field_it_sets_itself(tmp_path: Path) -> None:
    """The envelope `append_event` stamps is refused by name, field by field, before any
    I/O: not a `TypeError` about keyword arguments, nor a type check on `type`."""
    from agentfsm.runtime import append_event, submit

    with SQLiteEventStore(
        tmp_path / "t.db", options=StoreOptions(reducer=Reducer(TICKET_TABLE))
    ) as store:
        submit(store, "t-1", "refund")
        stamped = {"type": "x", "occurred_at": "2026-09-01T10:00:00Z", "sequence": 2}
        with pytest.raises(EventFormatError) as info:
            append_event(store, "t-1", "ticket.escalated", {"run_id": "t-2"}, **stamped)
        assert info.value.problems == (
            "field 'run_id' is set by the append (the run it appends to); leave it out",
            "field 'sequence' is set by the append (the run's next sequence); leave it out",
            "field 'type' is set by the append (the event type it is given); leave it out",
            "field 'occurred_at' is set by the append (its time); leave it out",
        )
        assert info.value.run_id == "t-1"
        assert store.load("t-1").version == 1


def test_append_refuses_run_started_naming_submit(tmp_path: Path) -> None:
    """A run is started one way per job (`submit` for a worker, `Runner.run` here), so
    `append_event` refuses `run.started` by name, for a new run and an existing one alike,
    instead of a missing run or an illegal move."""
    from agentfsm.runtime import append_event, submit

    with SQLiteEventStore(
        tmp_path / "t.db", options=StoreOptions(reducer=Reducer(TICKET_TABLE))
    ) as store:
        submit(store, "t-1", "refund")
        for run_id in ("t-1", "t-2"):
            with pytest.raises(EventFormatError) as info:
                append_event(store, run_id, "run.started", objective="again")
            assert info.value.problems == (
                "'run.started' is written by agentfsm.runtime.control.submit (or Runner.run,"
                " which drives it too), not appended",
            )
        assert store.load("t-1").version == 1
        assert [r.run_id for r in store.runs()] == ["t-1"]


def test_append_takes_its_fields_as_a_mapping_too(tmp_path: Path) -> None:
    """Fields given as a mapping cannot collide with the verb's own keywords (`clock`)."""
    from agentfsm.runtime import append_event, submit

    with SQLiteEventStore(
        tmp_path / "t.db", options=StoreOptions(reducer=Reducer(TICKET_TABLE))
    ) as store:
        submit(store, "t-1", "refund")
        with pytest.raises(EventFormatError) as info:
            append_event(store, "t-1", "ticket.escalated", {"escalated_to": "x", "clock": 1})
        assert info.value.problems == ("field 'clock' is not part of 'ticket.escalated'",)
        record = append_event(store, "t-1", "ticket.escalated", {"escalated_to": "tier-2"})
        assert (record.version, record.status) == (2, "escalated")


class TestLogCommandsFindTheTable:
    """`validate`, `replay` and `inspect` read a log with the table its runs were started
    under, found from the first `run.started` in the log, as the steering commands do."""

    def _log(self, path: Path, table: Any = TICKET_TABLE) -> Path:
        from agentfsm.events import dump_event
        from agentfsm.runtime import submit

        with SQLiteEventStore(
            path.with_suffix(".db"), options=StoreOptions(reducer=Reducer(table))
        ) as store:
            submit(store, "t-1", "refund")
            log = LogBuilder("t-1", start=2, events=table.event_types)
            log.add("ticket.escalated", escalated_to="tier-2")
            store.append("t-1", log.events, 1)
            path.write_text("".join(dump_event(e) + "\n" for e in store.events("t-1")))
        return path

    @pytest.mark.parametrize("command", ["validate", "replay", "inspect"])
    def test_a_registered_table_is_found_without_flags(
        self, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from agentfsm.fsm.registry import register

        register(TICKET_TABLE)
        log = self._log(tmp_path / "t.jsonl")
        assert main([command, str(log), "--format", "json"]) == 0, capsys.readouterr().err
        out = json.loads(capsys.readouterr().out)
        final = {
            "validate": lambda: out["runs"][0]["status"],
            "replay": lambda: out[0]["status"],
            "inspect": lambda: out["final_state"],
        }[command]()
        assert final == "escalated"

    def test_stdin_is_read_once_and_whole(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Looking ahead for the table loses no line of a pipe."""
        import io

        from agentfsm.fsm.registry import register

        register(TICKET_TABLE)
        text = self._log(tmp_path / "t.jsonl").read_text()
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        assert main(["validate", "-", "--format", "json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["runs"] == [
            {"run_id": "t-1", "status": "escalated", "version": 2, "stop_reason": None}
        ]

    @pytest.mark.parametrize("command", ["validate", "replay", "inspect"])
    def test_an_unknown_table_is_named(
        self, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from agentfsm.fsm import Transition

        unknown = TICKET_TABLE.derive(
            name="ticket_v8", add=[Transition("escalated", "run.paused", "paused")]
        )
        log = self._log(tmp_path / "t.jsonl", unknown)
        assert main([command, str(log)]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm {command}: run 't-1' (line 1): table 'ticket_v8' ({unknown.digest}) is "
            "not registered; no table named 'ticket_v8' is known: pass it with --table "
            "MODULE:ATTR, register() it, or publish it under the 'agentfsm.tables' entry "
            "point group\n"
        )

    def test_the_table_flag_still_wins(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An explicit `--table` is used as given: the wrong one is a refusal at sequence 1
        (a log's event has no line once folded: inspect names the sequence)."""
        log = self._log(tmp_path / "t.jsonl")
        assert main(["inspect", str(log), "--table", "agentfsm.fsm.default:DEFAULT_TABLE"]) == 1
        out = capsys.readouterr().out
        assert "refused at sequence 1: " in out
        assert "line None" not in out


def test_a_lifecycle_event_that_ends_the_run_ends_it_as_a_built_in_end_does() -> None:
    """A person's event moves a run out of `running` while its model call is open, and
    another ends it: the record closes the model call and its reservation, as `run.failed` or
    `run.cancelled` would, and leaves nothing in flight (the testing kit's state machine found
    `the run ended with a model call open`)."""
    from agentfsm import Reducer
    from agentfsm.events import LogBuilder
    from agentfsm.testing import record_problems
    from tests.fixtures.emit_loan import LOAN_TABLE

    log = LogBuilder("r1", events=LOAN_TABLE.event_types)
    log.add("run.started")
    log.add("model.started", reserved_tokens=100)
    log.add("loan.sent_to_underwriting", summary="a person sends it on", amount=90_000)
    log.add("loan.underwriter_decision", decision="decline")
    reducer = Reducer(LOAN_TABLE)
    record = reducer.initial("r1")
    for event in log.events:
        record = reducer.reduce(record, event)
    assert (record.status, record.model_call_open, record.reserved_tokens) == ("declined", False, 0)
    assert record_problems(record, LOAN_TABLE) == []
