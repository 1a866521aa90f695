"""The wire format: strict parsing, clear errors, exact round trips, the JSON Schema."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import EventFormatError, LogBuilder, dump_event, parse_event, read_events
from agentfsm.events import EVENT_CLASSES, codec, event_json_schema, event_to_dict, models
from tests.conftest import EXAMPLES

# Fixed offsets of whole minutes, of seconds (as old local mean times had), naive readings.
_zones = st.one_of(
    st.none(),
    st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23)).map(
        lambda d: timezone(d)
    ),
    st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)
SCHEMA = Path(__file__).resolve().parent.parent / "agentfsm" / "events" / "schema.json"
BASE = {"run_id": "run_1", "sequence": 1, "occurred_at": "2026-09-01T10:02:11+08:00"}


def _fails(data: dict[str, object], line: int | None = None) -> EventFormatError:
    with pytest.raises(EventFormatError) as info:
        parse_event(json.dumps(data), line=line)
    return info.value


class TestRoundTrip:
    @pytest.mark.parametrize("name", ["order_ticket.jsonl", "cancel_order_approval.jsonl"])
    def test_every_bundled_line_round_trips(self, name: str) -> None:
        """parse then dump gives the same JSON object, and dump is a fixed point."""
        for line in (EXAMPLES / name).read_text(encoding="utf-8").splitlines():
            event = parse_event(line)
            assert json.loads(dump_event(event)) == json.loads(line)
            assert dump_event(parse_event(dump_event(event))) == dump_event(event)
            assert event_to_dict(event) == json.loads(line)

    def test_timestamps_keep_their_spelling(self) -> None:
        """`Z`, offsets and nanoseconds come back exactly as written."""
        for stamp in ("2026-09-01T02:02:11Z", "2026-09-01T10:02:11.123456789+08:00"):
            event = parse_event({**BASE, "type": "run.resumed", "occurred_at": stamp})
            assert event.occurred_at == stamp
            assert json.loads(dump_event(event))["occurred_at"] == stamp

    def test_lower_case_t_and_z_are_rfc_3339_too(self) -> None:
        """RFC 3339 allows `t` and `z`; they parse and keep their spelling."""
        from agentfsm.events.models import parse_timestamp

        event = parse_event({**BASE, "type": "run.resumed", "occurred_at": "2026-09-01t02:02:11z"})
        assert event.occurred_at == "2026-09-01t02:02:11z"
        assert parse_timestamp(event.occurred_at).isoformat() == "2026-09-01T02:02:11+00:00"

    def test_builder_numbers_and_stamps_events(self) -> None:
        """LogBuilder writes contiguous sequences and validated events."""
        log = LogBuilder("run_7")
        log.add("run.started", objective="x")
        log.add("model.started")
        assert [e.sequence for e in log.events] == [1, 2]
        assert log.events[1].occurred_at == "2026-09-01T10:00:01+00:00"


class TestStrictness:
    def test_a_string_where_an_integer_belongs(self) -> None:
        """`"two"` and even `"2"` are not sequences."""
        for bad in ("two", "2"):
            err = _fails({**BASE, "type": "run.resumed", "sequence": bad}, line=3)
            assert err.problems == (
                f"field 'sequence': Input should be a valid integer (got {bad!r})",
            )
            assert (err.line, err.run_id, err.sequence) == (3, "run_1", None)

    def test_a_bool_is_not_an_integer(self) -> None:
        """JSON true is not sequence 1."""
        err = _fails({**BASE, "type": "run.resumed", "sequence": True})
        assert err.problems == ("field 'sequence': Input should be a valid integer (got True)",)

    def test_unknown_type(self) -> None:
        """The error lists every type that would have been accepted."""
        err = _fails({**BASE, "type": "run.exploded"}, line=9)
        assert err.problems[0].startswith(
            "unknown event type 'run.exploded'; expected one of 'approval.accepted'"
        )
        assert str(err).startswith(
            "line 9, run 'run_1', sequence 1: not a valid event: unknown event type"
        )

    def test_unknown_and_missing_fields_are_all_reported(self) -> None:
        """Every problem of the line is named, not only the first."""
        err = _fails({**BASE, "type": "tool.completed", "colour": "red"})
        assert set(err.problems) == {
            "field 'action_id' is required",
            "field 'colour' is not part of 'tool.completed'",
        }

    def test_timestamp_without_offset(self) -> None:
        """A local time without an offset is ambiguous, so it is refused."""
        err = _fails({**BASE, "type": "run.resumed", "occurred_at": "2026-09-01T10:02:11"})
        assert err.problems == (
            "field 'occurred_at': '2026-09-01T10:02:11' is not an RFC 3339 timestamp with an "
            "offset (like 2026-09-01T10:02:11+08:00 or 2026-09-01T02:02:11Z)",
        )

    def test_every_timestamp_is_checked_whatever_came_before(self) -> None:
        """A timestamp accepted before lets no other through."""
        good = "2026-09-01T10:02:11+08:00"
        for bad in ("", "2026-09-01T10:02:11", good + " "):
            assert parse_event(json.dumps({**BASE, "type": "run.resumed", "occurred_at": good}))
            err = _fails({**BASE, "type": "run.resumed", "occurred_at": bad})
            assert err.problems[0].startswith(f"field 'occurred_at': {bad!r} is not an RFC 3339")

    @settings(max_examples=500, deadline=None)
    @given(
        st.datetimes(
            min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_zones
        )
    )
    def test_a_clocks_reading_is_trusted_only_when_it_is_a_valid_timestamp(
        self, moment: datetime
    ) -> None:
        """The Runner stamps events with its clock's `isoformat`: an event stamped with any
        reading (naive, an offset with seconds, any year) is refused exactly when the
        timestamp parser refuses the text."""
        text = moment.isoformat()
        try:
            models.parse_timestamp(text)
        except ValueError:
            valid = False
        else:
            valid = True
        event = {**BASE, "type": "run.resumed", "occurred_at": text}
        if valid:
            assert parse_event(json.dumps(event)).occurred_at == text
        else:
            assert _fails(event).problems[0].startswith(f"field 'occurred_at': {text!r}")

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("occurred_at", "x" * 1_000_000),  # not a timestamp: parse_timestamp's words
            ("occurred_at", "2026-09-01T10:02:11Z" + "9" * 1_000_000),
            ("sequence", "7" * 1_000_000),  # a string for an integer: pydantic's, with "got"
            ("run_id", 10**4000),
        ],
        ids=["not-a-timestamp", "timestamp-and-more", "string-for-int", "int-for-string"],
    )
    def test_a_problem_quotes_a_huge_value_clipped(self, field: str, value: object) -> None:
        """A line may hold megabytes in one field: its refusal names the field and shows the
        value's start, not all of it (`agentfsm validate` prints one problem a bad line)."""
        err = _fails({**BASE, "type": "run.resumed", field: value})
        (problem,) = err.problems
        assert problem.startswith(f"field '{field}': ")
        assert repr(value)[:40] in problem
        assert len(problem) < 400, len(problem)

    def test_a_line_of_many_problems_names_the_first_and_counts_the_rest(self) -> None:
        """Thousands of unknown keys (a line may hold 8 MiB of them) are not thousands of
        sentences: the first few are named, the rest counted."""
        extra = {f"k{i}": 0 for i in range(10_000)}
        err = _fails({**BASE, "type": "run.resumed", **extra})
        shown = [f"field 'k{i}' is not part of 'run.resumed'" for i in range(codec.PROBLEMS)]
        assert err.problems == (*shown, f"and {10_000 - codec.PROBLEMS:,} more problems")
        assert len(str(err)) < 3_000

    def test_a_huge_unknown_key_or_type_is_named_by_its_start(self) -> None:
        key = "k" * 1_000_000
        (problem,) = _fails({**BASE, "type": "run.resumed", key: 1}).problems
        assert problem.startswith(f"field '{'k' * 40}")
        assert problem.endswith("'run.resumed'")
        assert len(problem) < 200
        (problem,) = _fails({**BASE, "type": key}).problems
        assert problem.startswith(f"unknown event type '{'k' * 40}")
        assert len(problem) < 2_000  # the known types are listed

    def test_empty_run_id_and_zero_sequence(self) -> None:
        """Run ids are non-empty and sequences start at 1."""
        err = _fails({**BASE, "type": "run.resumed", "run_id": "", "sequence": 0})
        assert err.problems == (
            "field 'run_id': String should have at least 1 character (got '')",
            "field 'sequence': Input should be greater than or equal to 1 (got 0)",
        )

    def test_tool_calls_must_match_the_decision(self) -> None:
        """A `tool_calls` decision needs calls; a final one may not carry any."""
        err = _fails({**BASE, "type": "model.completed", "decision": "tool_calls"})
        assert err.problems == ("decision 'tool_calls' needs a non-empty 'tool_calls' list",)
        call = {"action_id": "a", "tool": "t", "arguments": {}}
        err = _fails({**BASE, "type": "model.completed", "decision": "final", "tool_calls": [call]})
        assert err.problems == ("decision 'final' cannot carry 'tool_calls'",)
        err = _fails(
            {
                **BASE,
                "type": "model.completed",
                "decision": "tool_calls",
                "tool_calls": [call, call],
            }
        )
        assert err.problems == ("'tool_calls' repeats action_id 'a'",)

    def test_the_repeat_check_grows_linearly_with_the_calls(self) -> None:
        """Twenty times the calls in one decision costs a few tens of times the parse, not
        four hundred: the ids are counted once (a growth bound; the speed is in benchmarks/).
        With `ids.count` per id, 3,000 calls took 0.2 s on every load of the run."""

        def parse_ms(calls: int) -> float:
            tool_calls = [
                {"action_id": f"a{i}", "tool": "t", "arguments": {}} for i in range(calls)
            ]
            line = json.dumps({**BASE, "type": "model.completed", "decision": "tool_calls",
                               "tool_calls": tool_calls})  # fmt: skip
            best = float("inf")
            for _ in range(5):  # CPU time, the least of five: other work on the machine is not ours
                start = time.process_time()
                parse_event(line)
                best = min(best, time.process_time() - start)
            return best

        assert parse_ms(10_000) / parse_ms(500) < 100  # ~26 counted once; ~450 with ids.count

    def test_nested_problems_name_their_path(self) -> None:
        """A bad field inside a nested object is named by its path."""
        err = _fails({**BASE, "type": "run.started", "limits": {"max_turns": 0}})
        assert err.problems == (
            "field 'limits.max_turns': Input should be greater than or equal to 1 (got 0)",
        )

    def test_not_json_and_not_an_object(self) -> None:
        """Broken text and non-objects get their own sentences."""
        with pytest.raises(EventFormatError) as info:
            parse_event('{"run_id": ', line=2)
        assert info.value.problems[0].startswith("not JSON (")
        assert info.value.line == 2
        with pytest.raises(EventFormatError) as info:
            parse_event("[1, 2]")
        assert info.value.problems == ("expected a JSON object, got list",)

    def test_read_events_names_the_bad_line_and_skips_blank_ones(self) -> None:
        """Line numbers are the input's, blank lines included."""
        good = dump_event(parse_event({**BASE, "type": "run.resumed"}))
        lines = [good, "", good.replace('"sequence":1', '"sequence":"x"')]
        reader = read_events(lines)
        assert next(reader)[0] == 1
        with pytest.raises(EventFormatError) as info:
            next(reader)
        assert info.value.line == 3

    def test_events_are_frozen(self) -> None:
        """An event is a fact: it cannot be changed after it was read."""
        event = parse_event({**BASE, "type": "run.resumed"})
        with pytest.raises(ValueError, match="frozen"):
            event.sequence = 2  # type: ignore[misc]


class TestSchema:
    def test_committed_schema_is_fresh(self) -> None:
        """agentfsm/events/schema.json is what the models export (`agentfsm schema > agentfsm/events/schema.json`)."""
        assert json.loads(SCHEMA.read_text(encoding="utf-8")) == event_json_schema()

    def test_schema_names_every_event_type(self) -> None:
        """Producers in other languages can validate every type."""
        schema = event_json_schema()
        assert schema["properties"]["type"]["enum"] == sorted(EVENT_CLASSES)
        assert [c["if"]["properties"]["type"]["const"] for c in schema["allOf"]] == sorted(
            EVENT_CLASSES
        )

    def _errors(self, data: dict[str, object]) -> list[str]:
        jsonschema = pytest.importorskip("jsonschema")
        validator = jsonschema.Draft202012Validator(
            event_json_schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        return sorted(e.message for e in validator.iter_errors(data))

    def test_a_standard_validator_reports_the_real_field_error(self) -> None:
        """An unknown field is named as such, not "not valid under any of the schemas"."""
        data = {**BASE, "type": "tool.completed", "action_id": "a1", "bogus": 1}
        assert self._errors(data) == [
            "Additional properties are not allowed ('bogus' was unexpected)"
        ]

    def test_the_schema_refuses_a_timestamp_without_an_offset(self) -> None:
        """As strict as the parser: `2026-09-01T10:02:11` (no offset) is refused by both."""
        data = {**BASE, "type": "run.resumed", "occurred_at": "2026-09-01T10:02:11"}
        with pytest.raises(EventFormatError):
            parse_event(data)
        pattern = event_json_schema()["$defs"]["RunResumed"]["properties"]["occurred_at"]["pattern"]
        assert self._errors(data) == [f"'2026-09-01T10:02:11' does not match {pattern!r}"]

    def test_the_schema_accepts_what_the_parser_accepts(self) -> None:
        """Every line of the bundled logs is valid under the schema too."""
        for name in ("order_ticket.jsonl", "cancel_order_approval.jsonl"):
            for line in (EXAMPLES / name).read_text(encoding="utf-8").splitlines():
                assert self._errors(json.loads(line)) == []

    def test_an_unknown_type_is_named(self) -> None:
        """A type no table knows: the enum of known types is the error."""
        errors = self._errors({**BASE, "type": "ticket.escalated"})
        assert len(errors) == 1
        assert errors[0].startswith("'ticket.escalated' is not one of ['approval.accepted'")
