"""The `transitions` adapter: a strict machine compiled from the table, checked against ours."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from transitions import MachineError

from agentfsm import DEFAULT_TABLE, Event, IllegalTransitionError, State, Transition
from agentfsm.adapters.transitions import to_machine
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.testing import IllegalStep, illegal_steps, legal_runs

SETTINGS = settings(max_examples=120, deadline=None)


def test_no_shortcuts_bypass_the_table() -> None:
    """auto_transitions is off: no `to_<state>` method exists on the machine."""
    machine = to_machine()
    assert not [name for name in dir(machine) if name.startswith("to_")]
    assert set(machine.get_triggers("created")) == {
        "run.started",
        "run.cancel_requested",
        "run.failed",
        "run.terminated",
    }


def test_states_edges_and_terminals_match_the_table() -> None:
    """Every state is there; terminal states are `final`; the initial state is the table's."""
    machine = to_machine()
    assert list(machine.states) == list(DEFAULT_TABLE.state_names)
    assert {n for n, s in machine.states.items() if s.final} == set(DEFAULT_TABLE.terminal_states)
    assert machine.state == "created"


def test_every_pair_without_an_edge_raises() -> None:
    """The whole (state, event) matrix: where the table has no edge, the machine refuses."""
    for state in DEFAULT_TABLE.state_names:
        for event in DEFAULT_TABLE.events:
            if event in DEFAULT_TABLE.allowed(state):
                continue
            machine = to_machine(initial=state)
            with pytest.raises(MachineError):
                machine.trigger(event)
            assert machine.state == state


@SETTINGS
@given(legal_runs())
def test_legal_runs_take_the_same_path(events: list[Event]) -> None:
    """For every event of a legal run, the machine moves to the state our reducer reaches."""
    machine = to_machine()
    record = DEFAULT_REDUCER.initial(events[0].run_id)
    for event in events:
        after = DEFAULT_REDUCER.reduce(record, event)
        assert machine.trigger(event.type, record, event) is True
        assert machine.state == after.status
        record = after


@SETTINGS
@given(illegal_steps(kinds=("table",)))
def test_table_illegal_steps_are_refused_by_both(step: IllegalStep) -> None:
    """Where the table refuses, the machine refuses too: it raises, or (its way for a failed
    condition) returns False and stays put — never a move."""
    record = step.record
    with pytest.raises(IllegalTransitionError):
        DEFAULT_TABLE.step(record.status, step.event.type, record, step.event)
    machine = to_machine(initial=record.status)
    try:
        moved = machine.trigger(step.event.type, record, step.event)
    except MachineError:
        moved = False
    assert moved is False
    assert machine.state == record.status


def test_an_existing_model_keeps_its_callbacks() -> None:
    """A team's model object gets the table's lifecycle and keeps its own hooks."""

    class Order:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_enter_running(self, *args: object) -> None:
            self.seen.append("running")

    order = Order()
    to_machine(model=order)
    order.trigger("run.started")  # type: ignore[attr-defined]
    assert (order.state, order.seen) == ("running", ["running"])  # type: ignore[attr-defined]


def test_derived_tables_compile_too() -> None:
    """A table with an `escalated` state compiles with it."""
    table = DEFAULT_TABLE.derive(
        add_states=[State("escalated")],
        add=[Transition("waiting_approval", "run.paused", "escalated"),
             Transition("escalated", "run.failed", "failed")],
    )  # fmt: skip
    machine = to_machine(table, initial="waiting_approval")
    machine.trigger("run.paused")
    assert machine.state == "escalated"


def test_the_adapter_owns_the_strict_options() -> None:
    """A caller cannot switch the shortcuts back on."""
    with pytest.raises(ValueError, match="to_machine sets auto_transitions itself"):
        to_machine(auto_transitions=True)
