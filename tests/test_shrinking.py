"""Counterexamples from `legal_runs` shrink to the few events that show the bug."""

from __future__ import annotations

import attrs
from hypothesis import Phase, given, settings

from agentfsm import Event, Reducer, RunRecord, TransitionTable
from agentfsm.events import dump_event
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.testing import legal_runs


class ForgetfulReducer(Reducer):
    """A deliberately broken reducer: it drops the facts a successful tool call records."""

    def __init__(self) -> None:
        super().__init__()
        completed = self._handlers["tool.completed"]

        def forget(table: TransitionTable, rec: RunRecord, ev: object, move: object) -> RunRecord:
            return attrs.evolve(completed(table, rec, ev, move), facts={})

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
    types = [e.type for e in minimal]
    # The shortest path to a result is five events; the shrinker may keep a `tool.started`.
    assert types in (
        ["run.started", "model.started", "model.completed", "tool.requested", "tool.completed"],
        [
            "run.started",
            "model.started",
            "model.completed",
            "tool.requested",
            "tool.started",
            "tool.completed",
        ],
    )
    # Readable: plain values, the first action id, timestamps a second apart.
    assert dump_event(minimal[2]) == (
        '{"run_id":"run_0","sequence":3,"type":"model.completed",'
        '"occurred_at":"2026-09-01T10:00:03Z","decision":"tool_calls",'
        '"tool_calls":[{"action_id":"act_1","tool":"lookup","arguments":{}}]}'
    )
    # Minimal: without its last event the log no longer shows the bug.
    assert broken.replay(minimal[:-1]) == DEFAULT_REDUCER.replay(minimal[:-1])
