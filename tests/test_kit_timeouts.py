"""The testing kit generates timeouts like any other edge (issue 26, item 3).

An event on a timed edge is legal only once its run has stood in the edge's state that
long, so a kit that stamps events a second apart never took one. Now each candidate on a
timed edge is also tried at the moment it falls due (the events after it go on from there),
so `legal_runs` logs take timeouts and the edges tried before them, the edge-covering paths
reach them, coverage counts them, and `illegal_steps` finds a timeout's event before its time.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, find, given, settings
from hypothesis.stateful import run_state_machine_as_test

from agentfsm import State, Transition, TransitionTable
from agentfsm.events import BUILTIN_EVENTS, Event
from agentfsm.events.models import parse_timestamp
from agentfsm.reducers import Reducer
from agentfsm.testing import (
    assert_edge_coverage,
    edge_covering_paths,
    edge_ids,
    illegal_steps,
    legal_runs,
    record_problems,
    run_machine,
)
from agentfsm.testing._runs.coverage import edge_name

WEEK = timedelta(days=7)

#: Documents a run waits for: a reminder after 36 h, an expiry after 7 d (a person's early
#: expiry is a reminder), and the reminded run expires after 5 d more.
KIT = TransitionTable(
    name="kit",
    event_types=BUILTIN_EVENTS.extend("docs.sent", "docs.reminded", "docs.expired"),
    states=[
        State("created"),
        State("asked", kind="waiting"),
        State("reminded", kind="waiting"),
        State("done", terminal=True),
        State("expired", terminal=True),
    ],
    initial="created",
    transitions=[
        Transition("created", "run.started", "asked"),
        Transition("asked", "docs.sent", "done"),
        Transition("asked", "docs.reminded", "reminded", after=timedelta(hours=36)),
        Transition("asked", "docs.expired", "expired", after=WEEK),
        Transition("asked", "docs.expired", "reminded"),
        Transition("reminded", "docs.sent", "done"),
        Transition("reminded", "docs.expired", "expired", after=timedelta(days=5)),
    ],
)
REDUCER = Reducer(KIT)
TIMED = [t for t in KIT.transitions if t.after is not None]


def _times(events: list[Event]) -> list[float]:
    return [parse_timestamp(e.occurred_at).timestamp() for e in events]


def test_every_edge_is_taken_timeouts_and_fallbacks_alike() -> None:
    """Coverage counts each timeout, and the untimed `docs.expired` tried after one."""
    coverage = assert_edge_coverage(KIT, legal_runs(KIT), max_examples=3 * len(KIT.transitions))
    assert [coverage.counts[t.key] > 0 for t in KIT.transitions] == [True] * 7


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(legal_runs(KIT))
def test_legal_runs_take_timeouts_at_their_time(events: list[Event]) -> None:
    """Every log folds; its times never go back; each record is sound (its timeout the
    table's for its state); a timeout's event comes exactly when it fell due."""
    record = REDUCER.initial(events[0].run_id)
    assert _times(events) == sorted(_times(events))
    for e in events:
        before = record
        record = REDUCER.reduce(before, e)
        assert record_problems(record, KIT) == []
        timed = [t for t in KIT.timeouts(before.status) if t.event == e.type]
        if timed and before.entered_at is not None and record.status == timed[0].target:
            due = parse_timestamp(before.entered_at) + (timed[0].after or timedelta(0))
            assert parse_timestamp(e.occurred_at) >= due


def test_the_paths_reach_each_timeout_the_moment_it_falls_due() -> None:
    """The shortest log to the 7-day expiry: started, then expired 7 days later to the
    second; the shortest to the reminded run's 5-day expiry goes there by a person's early
    expiry, and counts the 5 days from it."""
    paths = dict(zip(edge_ids(KIT), edge_covering_paths(KIT), strict=True))
    expiry = paths[edge_name(TIMED[1])]
    assert [(e.type, e.occurred_at) for e in expiry] == [
        ("run.started", "2026-09-01T10:00:01Z"),
        ("docs.expired", "2026-09-08T10:00:01Z"),
    ]
    late = paths[edge_name(TIMED[2])]
    assert [(e.type, e.occurred_at) for e in late] == [
        ("run.started", "2026-09-01T10:00:01Z"),
        ("docs.expired", "2026-09-01T10:00:02Z"),
        ("docs.expired", "2026-09-06T10:00:02Z"),
    ]
    assert edge_name(TIMED[1]) == "asked --docs.expired--> expired after 7 d"


def test_the_state_machine_keeps_every_invariant_through_timeouts() -> None:
    """The rule-based machine of the table runs, its record sound at every step."""
    run_state_machine_as_test(
        run_machine(KIT),
        settings=settings(max_examples=30, stateful_step_count=12, deadline=None),
    )


def test_illegal_steps_find_a_timeout_before_its_time() -> None:
    """A reminder a second after the run was asked is refused (a condition's refusal:
    kind `rule`), saying when it is due."""
    step = find(
        illegal_steps(KIT, kinds=("rule",)),
        lambda s: s.event.type == "docs.reminded" and s.error.due_at is not None,
        settings=settings(max_examples=500, database=None),
    )
    assert step.error.failed_conditions == ("after 1 d 12 h",)
