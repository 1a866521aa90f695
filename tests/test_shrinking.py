"""Counterexamples from `legal_runs` shrink to the few events that show the bug."""

from __future__ import annotations

import attrs
from hypothesis import Phase, given, settings

from agentfsm import DEFAULT_REDUCER, Event, Reducer, RunRecord
from agentfsm.events import dump_event
from agentfsm.testing import legal_runs


class ForgetfulReducer(Reducer):
    """A deliberately broken reducer: it drops the facts a successful tool call records."""

    def __init__(self) -> None:
        super().__init__()
        completed = self._handlers["tool.completed"]

        def forget(r: Reducer, rec: RunRecord, ev: object, move: object) -> RunRecord:
            return attrs.evolve(completed(r, rec, ev, move), facts={})

        self._handlers["tool.completed"] = forget


def test_broken_reducer_gives_a_minimal_log() -> None:
    """Comparing the broken reducer with the real one fails on the shortest path to a result."""
    broken = ForgetfulReducer()
    seen: list[list[Event]] = []

    @settings(
        max_examples=100,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate, Phase.shrink],  # no `explain`: it costs time, adds nothing here
    )
    @given(legal_runs(features={"tools"}))
    def agrees_with_the_real_reducer(events: list[Event]) -> None:
        seen.append(events)
        assert broken.replay(events) == DEFAULT_REDUCER.replay(events)

    try:
        agrees_with_the_real_reducer()
    except AssertionError:
        pass
    else:
        raise AssertionError("the broken reducer went unnoticed")
    # Hypothesis runs the shrunk example last, to report it.
    minimal = seen[-1]
    assert [dump_event(e) for e in minimal] == [
        '{"run_id":"run_0","sequence":1,"type":"run.started","occurred_at":"2026-09-01T10:00:01Z"}',
        '{"run_id":"run_0","sequence":2,"type":"model.started","occurred_at":"2026-09-01T10:00:02Z"}',
        '{"run_id":"run_0","sequence":3,"type":"model.completed",'
        '"occurred_at":"2026-09-01T10:00:03Z","decision":"tool_calls",'
        '"tool_calls":[{"action_id":"act_1","tool":"lookup","arguments":{}}]}',
        '{"run_id":"run_0","sequence":4,"type":"tool.requested",'
        '"occurred_at":"2026-09-01T10:00:04Z","action_id":"act_1","tool":"lookup","arguments":{}}',
        '{"run_id":"run_0","sequence":5,"type":"tool.completed",'
        '"occurred_at":"2026-09-01T10:00:05Z","action_id":"act_1"}',
    ]
