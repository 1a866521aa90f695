"""Moving a run in flight to a newer version of its table: `run.migrated`, end to end.

The ticket lifecycle's two versions (`examples/lifecycles/ticket.py`, `ticket_v2.py`: v2
drops `escalated_urgent` and lets `escalated` be paused) are the running example: a run
parked in `escalated` under v1 is migrated to v2, and can then be paused, which v1 forbade.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentfsm.errors import EventFormatError
from agentfsm.events import EVENT_CLASSES, LogBuilder, dump_event, event_json_schema, parse_event
from agentfsm.events.models import RunMigrated, TableRef
from agentfsm.names import EventType
from examples.lifecycles.ticket import TICKET_TABLE
from examples.lifecycles.ticket_v2 import TICKET_TABLE_V2

V1, V2 = TICKET_TABLE, TICKET_TABLE_V2
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
