"""The strategies keep their promises: legal logs are accepted, illegal steps refused."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from agentfsm import DEFAULT_TABLE, Event, IllegalTransitionError, Reducer, State, Transition
from agentfsm.events import make_event, parse_timestamp
from agentfsm.events.models import EVENT_CLASSES
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.testing import FEATURES, IllegalStep, illegal_steps, legal_runs, payloads, timestamps

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ESCALATING = DEFAULT_TABLE.derive(
    name="escalating",
    add_states=[State("escalated", description="a human took over")],
    add=[
        Transition("waiting_approval", "run.paused", "escalated"),
        Transition("escalated", "run.resumed", "running"),
        Transition("escalated", "run.failed", "failed"),
    ],
)


def _well_formed(events: list[Event]) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len({e.run_id for e in events}) == 1
    times = [parse_timestamp(e.occurred_at) for e in events]
    assert times == sorted(times)


def _asked_beside_calls(events: list[Event]) -> bool:
    """Some approval was asked while calls of its batch were running or left to run."""
    record = DEFAULT_REDUCER.initial(events[0].run_id)
    for event in events:
        if event.type == "approval.requested" and record.status == "waiting_tool":
            return True
        record = DEFAULT_REDUCER.reduce(record, event)
    return False


class TestLegalRuns:
    @FAST
    @given(legal_runs())
    def test_default_table_logs_replay(self, events: list[Event]) -> None:
        """Every generated log has contiguous sequences, one run, and replays cleanly."""
        _well_formed(events)
        assert DEFAULT_REDUCER.replay(events).version == len(events)

    @FAST
    @given(legal_runs(ESCALATING, features=FEATURES - {"run_failures", "terminations"}))
    def test_derived_table_logs_replay(self, events: list[Event]) -> None:
        """A derived table gets logs its own reducer accepts."""
        _well_formed(events)
        Reducer(ESCALATING).replay(events)

    @FAST
    @given(legal_runs(finished=True))
    def test_finished_runs_end_terminal(self, events: list[Event]) -> None:
        """With `finished=True` every log ends in a terminal state."""
        assert DEFAULT_TABLE.is_terminal(DEFAULT_REDUCER.replay(events).status)

    @FAST
    @given(legal_runs(finished=False, max_events=12))
    def test_unfinished_runs_stay_open(self, events: list[Event]) -> None:
        """With `finished=False` no log ends in a terminal state, and none is too long."""
        assert not DEFAULT_TABLE.is_terminal(DEFAULT_REDUCER.replay(events).status)
        assert len(events) <= 12

    @FAST
    @given(legal_runs(min_events=8, max_events=10, finished=False))
    def test_length_bounds(self, events: list[Event]) -> None:
        """`min_events` and `max_events` bound the length of a log that is not finished."""
        assert 8 <= len(events) <= 10

    @FAST
    @given(legal_runs(features={"tools"}, finished=True))
    def test_features_limit_what_appears(self, events: list[Event]) -> None:
        """With only `tools`, no approval, pause, handoff, failure or cancellation appears."""
        allowed = {
            "run.started",
            "model.started",
            "model.completed",
            "tool.requested",
            "tool.started",
            "tool.completed",
            "run.completed",
        }
        assert {e.type for e in events} <= allowed
        for e in events:
            if e.type == "model.completed" and e.tool_calls:
                assert len(e.tool_calls) == 1  # no `batches`

    @FAST
    @given(legal_runs(features=(), finished=True))
    def test_no_features_still_complete(self, events: list[Event]) -> None:
        """With no features at all, runs are model calls that end by completing."""
        assert {e.type for e in events} <= {
            "run.started",
            "model.started",
            "model.completed",
            "run.completed",
        }
        assert events[-1].type == "run.completed"

    @FAST
    @given(legal_runs(run_id="run_fixed"))
    def test_fixed_run_id(self, events: list[Event]) -> None:
        """A fixed run id is used for every event."""
        assert {e.run_id for e in events} == {"run_fixed"}

    @pytest.mark.parametrize(
        ("features", "probe"),
        [
            (
                {"tools", "batches"},
                lambda es: any(len(getattr(e, "tool_calls", None) or ()) > 1 for e in es),
            ),
            (
                {"tools", "tool_failures", "retries"},
                lambda es: any(e.type == "tool.started" and e.attempt > 1 for e in es),
            ),
            (
                {"tools", "approvals"},
                lambda es: {"approval.accepted", "approval.rejected"} <= {e.type for e in es},
            ),
            (
                {"tools", "outcome_unknown"},
                lambda es: any(e.type == "tool.outcome_unknown" for e in es),
            ),
            ({"tools", "batches", "approvals"}, lambda es: _asked_beside_calls(es)),
            ({"pauses"}, lambda es: any(e.type == "run.resumed" for e in es)),
            ({"handoffs"}, lambda es: any(e.type == "handoff" for e in es)),
            (
                {"tools", "cancellation"},
                lambda es: any(
                    e.type == "tool.completed" and es[e.sequence - 2].type == "run.cancel_requested"
                    for e in es
                ),
            ),
        ],
        ids=[
            "batches",
            "retries",
            "approvals",
            "outcome_unknown",
            "beside_calls",
            "pauses",
            "handoffs",
            "late",
        ],
    )
    def test_each_feature_shows_up(self, features: set[str], probe: Any) -> None:
        """Each feature appears in some log when it is turned on (found without shrinking)."""
        example = find(
            legal_runs(features=features),
            probe,
            settings=settings(
                max_examples=1_000, database=None, phases=[Phase.generate], derandomize=True
            ),
        )
        DEFAULT_REDUCER.replay(example)

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"min_events": 0}, "min_events must be at least 1, got 0"),
            ({"min_events": 5, "max_events": 4}, "max_events (4) is less than min_events (5)"),
            ({"max_calls": 0}, "max_calls must be at least 1, got 0"),
        ],
    )
    def test_rejects_bad_arguments(self, kwargs: dict[str, int], message: str) -> None:
        """Nonsense knobs are refused when the strategy is built, with the reason."""
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            legal_runs(**kwargs)  # type: ignore[arg-type]

    def test_rejects_unknown_features(self) -> None:
        """An unknown feature name is refused, listing the known ones."""
        message = f"unknown features ['telepathy']; known: {sorted(FEATURES)}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            legal_runs(features={"tools", "telepathy"})


class TestIllegalSteps:
    @FAST
    @given(illegal_steps(kinds=("table", "rule", "envelope")))
    def test_refused_and_record_unchanged(self, step: IllegalStep) -> None:
        """The reducer refuses the step with the recorded error and the record is unchanged."""
        before = step.record.dumps()
        if step.prefix:
            assert DEFAULT_REDUCER.replay(step.prefix) == step.record
        with pytest.raises(type(step.error)) as info:
            DEFAULT_REDUCER.reduce(step.record, step.event)
        assert str(info.value) == str(step.error)
        assert step.record.dumps() == before
        assert step.event.sequence == step.record.version + 1 or step.kind == "envelope"

    @FAST
    @given(illegal_steps(kinds=("table",)))
    def test_table_kind_is_not_in_the_table(self, step: IllegalStep) -> None:
        """A `table` step names an event type the table does not allow in the reached state."""
        assert isinstance(step.error, IllegalTransitionError)
        assert step.event.type not in DEFAULT_TABLE.allowed(step.record.status)

    @FAST
    @given(illegal_steps(kinds=("rule",)))
    def test_rule_kind_is_in_the_table(self, step: IllegalStep) -> None:
        """A `rule` step's type is allowed in the state; a condition or ledger rule refuses it."""
        assert step.event.type in DEFAULT_TABLE.allowed(step.record.status)

    @FAST
    @given(illegal_steps(ESCALATING))
    def test_derived_table(self, step: IllegalStep) -> None:
        """Illegal steps of a derived table are refused by that table's reducer."""
        reducer = Reducer(ESCALATING)
        with pytest.raises(type(step.error)):
            reducer.reduce(step.record, step.event)

    @pytest.mark.parametrize("kinds", [(), ("bogus",)])
    def test_rejects_unknown_kinds(self, kinds: tuple[str, ...]) -> None:
        """Unknown or no kinds are refused."""
        message = "kinds must be a non-empty subset of ['envelope', 'rule', 'table']"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            illegal_steps(kinds=kinds)


class TestPayloads:
    @FAST
    @given(st.data())
    def test_every_type_builds_a_valid_event(self, data: st.DataObject) -> None:
        """Each type's payload strategy gives fields that validate as that event."""
        for event_type in EVENT_CLASSES:
            fields = data.draw(payloads(event_type))
            event = make_event(
                event_type, run_id="run_1", sequence=1, occurred_at="2026-09-01T10:00:00Z", **fields
            )
            assert event.type == event_type

    def test_unknown_type(self) -> None:
        """An unknown event type is refused, listing the known ones."""
        known = ", ".join(f"'{t}'" for t in sorted(EVENT_CLASSES))
        message = f"unknown event type 'tool.exploded'; expected one of {known}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            payloads("tool.exploded")

    @FAST
    @given(timestamps())
    def test_timestamps_do_not_go_back(self, stamps: list[str]) -> None:
        """Sequential timestamps parse and never go back in time."""
        moments = [parse_timestamp(s) for s in stamps]
        assert moments == sorted(moments)
