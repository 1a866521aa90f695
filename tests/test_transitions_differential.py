"""Differential test: our table's `step` and the compiled `transitions.Machine` agree.

At every prefix of generated legal runs, every candidate event of every type (legal ones,
and ones that break the table, a condition or the ledger) is put to both, and both must
give the same outcome: the same target, a refusal, or the same exception from a condition.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from transitions import Machine, MachineError

from agentfsm import (
    DEFAULT_TABLE,
    Condition,
    Event,
    IllegalTransitionError,
    Reducer,
    RunRecord,
    State,
    Transition,
    TransitionTable,
)
from agentfsm.adapters.transitions import to_machine
from agentfsm.events import make_event
from agentfsm.testing import legal_runs
from agentfsm.testing._runs.candidates import EVENT_ORDER, Clock, plausible, rule_breaking

Outcome = tuple[str, str]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ours(table: TransitionTable, record: RunRecord, event: Event) -> Outcome:
    try:
        return ("moved", table.step(record.status, event.type, record, event))
    except IllegalTransitionError:
        return ("refused", record.status)
    except Exception as exc:  # noqa: BLE001 - a condition's own error must match too
        return ("raised", type(exc).__name__)


def theirs(machine: Machine, record: RunRecord, event: Event) -> Outcome:
    machine.set_state(record.status)
    try:
        moved = machine.trigger(event.type, record, event)
    except MachineError:
        return ("refused", machine.state)
    except Exception as exc:  # noqa: BLE001 - a condition's own error must match too
        return ("raised", type(exc).__name__)
    return ("moved" if moved else "refused", machine.state)


def every_candidate(record: RunRecord) -> list[Event]:
    at = Clock().at(record.version + 1)
    return [
        cand.event(record, at)
        for event_type in EVENT_ORDER
        for cand in plausible(record, event_type) + rule_breaking(record, event_type)
    ]


def agree_along(table: TransitionTable, events: list[Event]) -> int:
    """Compare both at every prefix of `events`; return how many pairs were compared."""
    reducer = Reducer(table)
    machine = to_machine(table)
    record = reducer.initial(events[0].run_id)
    compared = 0
    for event in events:
        for candidate in every_candidate(record):
            assert ours(table, record, candidate) == theirs(machine, record, candidate), (
                f"{candidate.type} in '{record.status}': {candidate!r}"
            )
            compared += 1
        record = reducer.reduce(record, event)
    return compared


@SETTINGS
@given(legal_runs())
def test_default_table_agrees_on_every_candidate(events: list[Event]) -> None:
    """On the default table, both agree on every candidate at every step of a legal run."""
    assert agree_along(DEFAULT_TABLE, events) > 0


def _has_actions(record: Any, event: Any) -> Any:
    # Truthy, not a bool: the ledger itself. Conditions are typed `-> bool`, but a user's
    # predicate may return any truthy value, and our `step` goes by truthiness.
    return record.actions


#: The default table plus a pause during approval that needs "some action exists", tested
#: with a predicate that returns a mapping rather than a bool.
TRUTHY = DEFAULT_TABLE.derive(
    name="truthy",
    add_states=[State("blocked")],
    add=[
        Transition(
            "waiting_approval", "run.paused", "blocked", Condition("has actions", _has_actions)
        ),
        Transition("blocked", "run.failed", "failed"),
    ],
)


@SETTINGS
@given(legal_runs(TRUTHY))
def test_truthy_conditions_agree(events: list[Event]) -> None:
    """A condition returning a truthy non-bool passes in both (transitions wants `== True`)."""
    assert agree_along(TRUTHY, events) > 0


def test_a_truthy_condition_moves_both() -> None:
    """The case the test above guards: our `step` moves, and so must the machine."""
    at = "2026-09-01T10:00:00Z"
    log = [
        make_event("run.started", run_id="r", sequence=1, occurred_at=at),
        make_event(
            "approval.requested",
            run_id="r",
            sequence=2,
            occurred_at=at,
            action_id="act_1",
            tool="refund",
            arguments={},
        ),
    ]
    record = Reducer(TRUTHY).replay(log)
    pause = make_event("run.paused", run_id="r", sequence=3, occurred_at=at, reason="escalate")
    assert ours(TRUTHY, record, pause) == ("moved", "blocked")
    assert theirs(to_machine(TRUTHY), record, pause) == ("moved", "blocked")
