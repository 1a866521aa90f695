"""Edge coverage: the kit reaches every edge of a table and says which ones it missed."""

from __future__ import annotations

from typing import Any, Literal

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentfsm import DEFAULT_TABLE, Condition, Event, Reducer, State, Transition
from agentfsm.events import CustomEvent, dump_event, parse_event
from agentfsm.testing import EdgeCoverage, assert_edge_coverage, edge_covering_paths, legal_runs
from examples.lifecycles.ticket import TICKET_TABLE

PRIORITY = {"priority": st.sampled_from(["normal", "urgent"])}

NEVER = Condition("never", lambda record, event: False, "a condition that never holds")
#: The default table plus an edge no log can take: its condition never holds.
UNREACHABLE = DEFAULT_TABLE.derive(
    name="with_a_dead_edge",
    add_states=[State("parked")],
    add=[
        Transition("waiting_approval", "run.resumed", "parked", NEVER),
        Transition("parked", "run.failed", "failed"),
    ],
)


class RefundRequested(CustomEvent):
    """A refund the agent asks for; a big one goes to a person for review."""

    type: Literal["refund.requested"] = "refund.requested"
    amount: int


BIG = Condition("big", lambda record, event: event.amount > 1_000, "more than 1,000")
#: The default table plus a refund whose size decides where the run goes.
REFUNDS = DEFAULT_TABLE.derive(
    name="with_refunds",
    add_states=[State("review")],
    add_events=[RefundRequested],
    add=[
        Transition("running", "refund.requested", "review", BIG),
        Transition("running", "refund.requested", "running"),
        Transition("review", "run.resumed", "running"),
    ],
)
BIG_REFUND = ("running", "refund.requested", "review", "big")


def _jsonl(events: list[Event]) -> str:
    return "\n".join(dump_event(e) for e in events)


def _covered(table: Any, logs: Any) -> EdgeCoverage:
    coverage = EdgeCoverage(table)
    for log in logs:
        coverage.record(log)
    return coverage


class TestEdgeCoveringPaths:
    """`edge_covering_paths` gives one short legal log per edge, every edge included."""

    @pytest.mark.parametrize("table", [DEFAULT_TABLE, TICKET_TABLE], ids=lambda t: t.name)
    def test_they_take_every_edge_and_end(self, table: Any) -> None:
        """Every edge is taken, every log is legal and ends in a terminal state."""
        logs = edge_covering_paths(table)
        assert len(logs) == len(table.transitions)
        assert _covered(table, logs).missing == ()
        reducer = Reducer(table)
        assert all(table.is_terminal(reducer.replay(log).status) for log in logs)

    def test_the_urgent_branch_is_taken_through_the_priority_field(self) -> None:
        """`ticket.escalated` reaches `escalated_urgent` with `priority` "urgent", and
        `escalated` otherwise."""
        logs = edge_covering_paths(TICKET_TABLE, fields=PRIORITY)
        ends = {
            (getattr(e, "priority", None), Reducer(TICKET_TABLE).replay(log[: i + 1]).status)
            for log in logs
            for i, e in enumerate(log)
            if str(e.type) == "ticket.escalated"
        }
        assert ends == {("normal", "escalated"), ("urgent", "escalated_urgent")}

    def test_they_can_be_asked_for_inside_a_given_test(self) -> None:
        """With `fields=`, the payload examples are drawn outside the running `@given` test
        (Hypothesis refuses to nest one), and the logs are the ones a plain call gives."""
        inside: list[list[list[Any]]] = []

        @settings(max_examples=2, database=None, deadline=None)
        @given(st.integers())
        def property_test(n: int) -> None:
            # A new strategy object each time, so no cached examples can stand in.
            fields = {"priority": st.sampled_from(["normal", "urgent"])}
            inside.append(edge_covering_paths(TICKET_TABLE, fields=fields))

        property_test()
        outside = edge_covering_paths(
            TICKET_TABLE, fields={"priority": st.sampled_from(["normal", "urgent"])}
        )
        assert len(outside) == len(TICKET_TABLE.transitions)
        assert inside == [outside, outside]

    def test_an_unreachable_edge_has_no_path_and_is_reported_missing(self) -> None:
        """The dead edge is named by `.missing` and by the threshold's message."""
        logs = edge_covering_paths(UNREACHABLE)
        coverage = _covered(UNREACHABLE, logs)
        assert [e.key for e in coverage.missing] == [
            ("waiting_approval", "run.resumed", "parked", "never"),
            ("parked", "run.failed", "failed", None),
        ]
        with pytest.raises(AssertionError) as info:
            assert_edge_coverage(UNREACHABLE, logs, min=1.0)
        assert str(info.value) == (
            "edge coverage is below 100%\n"
            "table 'with_a_dead_edge': 53 of 55 edges taken (96%) by 53 logs\n"
            "  missing: waiting_approval --run.resumed--> parked [never]: 'run.resumed' never "
            "came in 'waiting_approval' (visited 14 times), and the table takes it there only "
            "if a condition such as 'never' holds\n"
            "  missing: parked --run.failed--> failed: 'parked' was never visited (no log took "
            "an edge into it: waiting_approval --run.resumed--> parked [never])"
        )


class TestLegalRunsCoverage:
    """`legal_runs` draws one plain log per edge among its first examples, so every edge a
    log can take is taken, whatever Hypothesis' seed or the modules imported before."""

    def test_the_default_table_is_covered_entirely(self) -> None:
        """200 derandomized examples take all 53 edges of the default table."""
        coverage = assert_edge_coverage(DEFAULT_TABLE, legal_runs(), min=1.0, max_examples=200)
        assert len(coverage.taken) == 53

    def test_the_ticket_table_is_covered_entirely_both_branches_included(self) -> None:
        """200 derandomized examples take all 63 edges of the ticket table, built-in and its
        own, both branches of `ticket.escalated` among them."""
        coverage = assert_edge_coverage(
            TICKET_TABLE, legal_runs(TICKET_TABLE, fields=PRIORITY), min=1.0, max_examples=200
        )
        assert len(coverage.taken) == 63
        assert coverage.counts[("running", "ticket.escalated", "escalated_urgent", "urgent")]
        assert coverage.counts[("running", "ticket.escalated", "escalated", None)]

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_coverage_does_not_depend_on_the_seed(self, seed: int) -> None:
        """Random (not derandomized) runs of 200 examples take every edge too."""
        coverage = EdgeCoverage(TICKET_TABLE)

        @hypothesis.seed(seed)
        @settings(
            max_examples=200,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(legal_runs(TICKET_TABLE, fields=PRIORITY))
        def collect(events: list[Event]) -> None:
            coverage.record(events)

        collect()
        assert coverage.missing == ()

    def test_a_condition_only_a_given_field_strategy_meets_is_taken(self) -> None:
        """`amount > 1000` never holds for the ints built from the annotation (-1000 to
        1000), so neither its edge nor the one out of `review` is taken; with
        `fields={"amount": ...}` up to 5000, both are."""
        plain = assert_edge_coverage(REFUNDS, legal_runs(REFUNDS), min=0.0, max_examples=200)
        assert [e.key for e in plain.missing] == [
            BIG_REFUND,
            ("review", "run.resumed", "running", None),
        ]
        amounts = {"amount": st.integers(0, 5_000)}
        given_fields = assert_edge_coverage(
            REFUNDS, legal_runs(REFUNDS, fields=amounts), min=1.0, max_examples=200
        )
        assert given_fields.counts[BIG_REFUND]

    def test_edges_no_log_can_take_are_the_only_ones_missing(self) -> None:
        """The dead edges of `UNREACHABLE` are missed, and every other edge is taken."""
        coverage = assert_edge_coverage(
            UNREACHABLE, legal_runs(UNREACHABLE), min=0.0, max_examples=200
        )
        assert [e.key for e in coverage.missing] == [
            ("waiting_approval", "run.resumed", "parked", "never"),
            ("parked", "run.failed", "failed", None),
        ]

    def test_the_plain_logs_respect_the_settings(self) -> None:
        """With `finished=True` and `min_events=6`, every log ends in a terminal state and
        has six events or more, and every edge that such a log can take is taken: all but
        the three that can only be a run's first event."""
        reducer = Reducer(TICKET_TABLE)
        strategy = legal_runs(TICKET_TABLE, finished=True, min_events=6, run_id="run_x")
        coverage = EdgeCoverage(TICKET_TABLE)

        @settings(max_examples=200, database=None, deadline=None, derandomize=True)
        @given(strategy)
        def ends(events: list[Event]) -> None:
            coverage.record(events)
            assert len(events) >= 6
            assert {e.run_id for e in events} == {"run_x"}
            assert TICKET_TABLE.is_terminal(reducer.replay(events).status)

        ends()
        assert [e.key for e in coverage.missing] == [
            ("created", "run.cancel_requested", "cancel_requested", None),
            ("created", "run.failed", "failed", None),
            ("created", "run.terminated", "terminated", None),
        ]

    def test_finished_examples_include_every_edge_covering_path(self) -> None:
        """With `finished=True`, the plain logs are `edge_covering_paths`' logs: each of
        them is among the first 200 examples."""
        drawn: set[str] = set()

        @settings(max_examples=200, database=None, deadline=None, derandomize=True)
        @given(legal_runs(TICKET_TABLE, finished=True))
        def collect(events: list[Event]) -> None:
            drawn.add(_jsonl(events))

        collect()
        paths = {_jsonl(log) for log in edge_covering_paths(TICKET_TABLE, run_id="run_0")}
        assert paths - drawn == set()

    def test_the_plain_logs_take_their_run_id_from_the_given_strategy(self) -> None:
        """With a strategy of run ids, the plain logs use the simplest id it draws."""
        ids = st.sampled_from(["ticket-7", "ticket-9"])
        seen: set[str] = set()

        @settings(max_examples=100, database=None, deadline=None, derandomize=True)
        @given(legal_runs(run_id=ids))
        def collect(events: list[Event]) -> None:
            seen.update(e.run_id for e in events)

        collect()
        assert seen == {"ticket-7", "ticket-9"}


class TestCounterexamples:
    """A failing property shows the generated log as JSON Lines."""

    def test_the_failing_log_is_noted_as_json_lines(self) -> None:
        """The note is a header line and then one parseable event per line."""

        @settings(max_examples=50, database=None, suppress_health_check=list(HealthCheck))
        @given(legal_runs(min_events=3))
        def fails(events: Any) -> None:
            raise AssertionError("boom")

        with pytest.raises(AssertionError) as info:
            fails()
        notes = [n for n in getattr(info.value, "__notes__", []) if n.startswith("legal_runs")]
        header, *lines = notes[-1].split("\n")
        assert header == (
            "legal_runs log of table 'agent_run' (JSON Lines; `agentfsm validate FILE` reads it "
            "back):"
        )
        events = [parse_event(line) for line in lines]
        assert [dump_event(e) for e in events] == lines
        assert len(events) == 3  # shrunk to `min_events`
        assert events[0].type == "run.started"
        assert events[0].table == DEFAULT_TABLE.ref  # what `validate` reads
