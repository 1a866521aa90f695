"""The state machine generated from a table: rules, invariants, and hooks for users."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from agentfsm import DEFAULT_TABLE, Event, LifecycleError, RunRecord, State, Transition
from agentfsm.reducers import Action
from agentfsm.testing import RunMachine, record_problems, run_machine

QUICK = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

ESCALATING = DEFAULT_TABLE.derive(
    name="escalating",
    add_states=[State("escalated", description="a human took over")],
    add=[
        Transition("waiting_approval", "run.paused", "escalated"),
        Transition("escalated", "run.resumed", "running"),
        Transition("escalated", "run.failed", "failed"),
    ],
)


def test_one_rule_per_event_type() -> None:
    """The machine has a rule per event type of the table, plus the `refuse` rule."""
    machine = run_machine()
    rules = sorted(
        name for name in dir(machine) if hasattr(getattr(machine, name), "hypothesis_stateful_rule")
    )
    assert machine.__name__ == "AgentRunMachine"
    assert rules == sorted(
        ["event_" + t.replace(".", "_") for t in DEFAULT_TABLE.events] + ["refuse"]
    )


def test_default_table_machine_runs() -> None:
    """The default table's machine runs its rules with every invariant holding."""
    run_state_machine_as_test(run_machine(), settings=QUICK)


def test_derived_table_machine_runs() -> None:
    """A derived table's machine runs too, through its extra state."""
    run_state_machine_as_test(run_machine(ESCALATING), settings=QUICK)


class StatusMirror:
    """A toy system under test: it tracks each run's status from the events it is sent."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.refused = 0

    def handle(self, event: Event, record: RunRecord) -> None:
        state = self.status.get(event.run_id, DEFAULT_TABLE.initial)
        self.status[event.run_id] = DEFAULT_TABLE.step(state, event.type, record, event)


def test_subclass_binds_a_system_under_test() -> None:
    """A subclass sees every accepted and refused event through its hooks."""
    seen: list[int] = []

    class Mirrored(run_machine()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.mirror = StatusMirror()

        def on_event(self, event: Event, before: RunRecord, after: RunRecord) -> None:
            self.mirror.handle(event, before)
            assert self.mirror.status[event.run_id] == after.status
            seen.append(event.sequence)

        def on_refused(self, event: Event, record: RunRecord, error: LifecycleError) -> None:
            assert error.state == record.status
            self.mirror.refused += 1

    run_state_machine_as_test(Mirrored, settings=QUICK)
    assert seen


def test_a_wrong_system_is_caught() -> None:
    """A system under test that mishandles an event makes the machine fail."""

    # The toy system breaks on any run's third event, not on one type: which types a fixed
    # number of derandomized examples reaches moved with what the rest of the suite had run
    # before (seen in CI: 60 examples and no tool.completed, while alone the 4th had one).
    class Wrong(run_machine()):  # type: ignore[misc]
        def on_event(self, event: Event, before: RunRecord, after: RunRecord) -> None:
            assert event.sequence < 3, "the toy system cannot take a third event"

    with pytest.raises(AssertionError, match="the toy system cannot take a third event"):
        run_state_machine_as_test(
            Wrong,
            settings=settings(QUICK, max_examples=60, derandomize=True, phases=[Phase.generate]),
        )


def test_record_problems_of_a_sound_record() -> None:
    """A fresh record has no problems."""
    assert record_problems(RunRecord(run_id="run_1")) == []


def test_record_problems_lists_each_inconsistency() -> None:
    """Every inconsistency of a hand-broken record is listed, one sentence each."""
    action = Action("act_1", "lookup", {}, "started", attempts=0)
    record = RunRecord(
        run_id="run_1",
        status="completed",
        actions={"act_2": action},
        batch=("act_1", "act_1"),
        model_call_open=True,
    )
    assert record_problems(record) == [
        "ledger key 'act_2' holds action 'act_1'",
        "action 'act_2' is started but has no attempt",
        "the batch repeats an action: ['act_1', 'act_1']",
        "the batch names unknown action 'act_1'",
        "the batch names unknown action 'act_1'",
        "the run ended with unsettled actions ['act_1']",
        "the run ended with a model call open",
    ]
    assert record_problems(attrs.evolve(record, status="limbo", actions={}, batch=())) == [
        "status 'limbo' is not a state of table 'agent_run'"
    ]


def test_machine_base_is_exported() -> None:
    """Every generated machine is a `RunMachine`."""
    assert issubclass(run_machine(), RunMachine)


def test_a_tables_own_event_types_get_rules_and_fire() -> None:
    """The ticket table's machine has `event_ticket_escalated` and fires both of its own
    types along with the built-in ones."""
    from examples.lifecycles.ticket import TICKET_TABLE

    machine = run_machine(TICKET_TABLE)
    assert {"event_ticket_escalated", "event_ticket_handed_back"} <= set(dir(machine))
    seen: set[str] = set()

    class Ticket(machine):  # type: ignore[misc, valid-type]
        def on_event(self, event: Event, before: RunRecord, after: RunRecord) -> None:
            seen.add(event.type)

    run_state_machine_as_test(
        Ticket, settings=settings(QUICK, max_examples=120, derandomize=True, stateful_step_count=40)
    )
    assert {"ticket.escalated", "ticket.handed_back"} <= seen


def test_a_counterexample_shows_its_log_as_json_lines() -> None:
    """A failing example prints the run's events as JSON lines (each parses back), not only
    Hypothesis's "Draw 1 (candidate): 0"."""
    from agentfsm.events import parse_event

    class Wrong(run_machine()):  # type: ignore[misc]
        def on_event(self, event: Event, before: RunRecord, after: RunRecord) -> None:
            assert event.sequence < 3, "the toy system cannot take a third event"

    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(
            Wrong,
            settings=settings(QUICK, max_examples=60, derandomize=True, phases=[Phase.generate]),
        )
    notes = getattr(info.value, "__notes__", [])  # where Hypothesis writes the failing example
    lines = [line for note in notes for line in note.splitlines() if line.startswith("{")]
    events = [parse_event(line) for line in lines]
    assert events[0].type == "run.started"
    assert [e.sequence for e in events] == [1, 2, 3]  # the run up to the event it broke on
    assert len({e.run_id for e in events}) == 1
