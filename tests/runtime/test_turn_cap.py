"""Every Runner has a turn cap unless told otherwise (issue 26, item 3).

A Runner with no turn limit ran forever when its model never gave a final answer (a runaway
under a cost budget whose model reported no cost ran until it was killed). Now each run a
Runner starts, or `submit` creates, is capped at `DEFAULT_MAX_TURNS` (100) turns, written
into its `run.started.limits` like the cap on calls per decision, so the log says which cap
it ran under. `RunnerConfig(max_turns=None)` lifts it for every run, a run's own
`Limits(max_turns=...)` sets or lifts it for that run. The SDK adapters write the same
default (`tests/adapters/test_scenarios.py::TestTurnCap`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm.events import Limits, dump_event
from agentfsm.guards import DEFAULT_MAX_TURNS, with_calls_cap, with_caps
from agentfsm.runtime import (
    Agent,
    Decision,
    ModelContext,
    ProposedCall,
    Runner,
    RunnerConfig,
    Tool,
    ToolContext,
    Worker,
    submit,
)
from agentfsm.stores import SQLiteEventStore
from agentfsm.stores.leases import SQLiteLeases

from .helpers import RUNNERS, drive_r1

#: What each of `Busy`'s calls reports: tokens, at no cost.
_FREE = {"input_tokens": 10, "output_tokens": 1}


class Busy:
    """A model that checks the weather again and again, answering only at turn `answer_at`,
    under a budget its calls cost nothing against (the runaway of the issue): each reports
    its tokens at no cost (a call that reports no usage at all stops a budgeted run)."""

    def __init__(self, answer_at: int = 10_000) -> None:
        self.answer_at = answer_at
        self.turns = 0

    def __call__(self, ctx: ModelContext) -> Decision:
        self.turns += 1
        if ctx.turn >= self.answer_at:
            return Decision.answer("sunny, finally", usage=_FREE)
        return Decision.call_tools(ProposedCall("weather", {"city": "Lisbon"}), usage=_FREE)


def weather() -> list[Tool]:
    def look(ctx: ToolContext) -> Any:
        return {"sky": "cloudy"}

    return [Tool("weather", look, side_effects=False)]


def _limits(store: Any) -> Any:
    started = json.loads(dump_event(next(iter(store.events("r1")))))
    return started.get("limits")


@RUNNERS
class TestTheDefaultCap:
    """A model that never answers stops at 100 turns, for a reason the log names."""

    def test_a_model_that_never_answers_is_stopped(self, runner: str) -> None:
        """Under a cost budget it spends nothing of: 100 turns, then `run.terminated`
        (`max_turns`); the log's `run.started` says the cap."""
        model = Busy()
        result, store = drive_r1(runner, model, weather(), limits=Limits(max_cost=1.0))
        assert (result.status, result.stop_reason, result.record.stop_detail) == (
            "terminated",
            "max_turns",
            "100 of 100 turns used",
        )
        assert (result.record.turn, model.turns) == (100, 100)
        assert _limits(store) == {"max_turns": 100, "max_cost": 1.0, "max_calls_per_decision": 64}

    def test_it_can_be_lifted_for_every_run(self, runner: str) -> None:
        """`RunnerConfig(max_turns=None)`: the run takes its 150 turns and completes; its
        log states no turn cap."""
        config = RunnerConfig(max_turns=None)
        result, store = drive_r1(runner, Busy(answer_at=150), weather(), config=config)
        assert (result.status, result.record.turn) == ("completed", 150)
        assert _limits(store) == {"max_calls_per_decision": 64}

    def test_it_can_be_lifted_or_set_for_one_run(self, runner: str) -> None:
        """A run's own `max_turns=None` lifts it (the log says so); its own number wins,
        higher or lower."""
        lifted, store = drive_r1(runner, Busy(answer_at=150), weather(),
                                 limits=Limits(max_turns=None))  # fmt: skip
        assert (lifted.status, _limits(store)) == (
            "completed",
            {"max_turns": None, "max_calls_per_decision": 64},
        )
        higher, _ = drive_r1(runner, Busy(answer_at=120), weather(), limits=Limits(max_turns=200))
        assert (higher.status, higher.record.turn) == ("completed", 120)
        lower, _ = drive_r1(runner, Busy(), weather(), limits=Limits(max_turns=3))
        assert (lower.stop_reason, lower.record.stop_detail) == ("max_turns", "3 of 3 turns used")

    def test_the_runner_can_set_its_own(self, runner: str) -> None:
        """`RunnerConfig(max_turns=5)` caps every run it starts at 5."""
        result, store = drive_r1(runner, Busy(), weather(), config=RunnerConfig(max_turns=5))
        assert (result.stop_reason, result.record.stop_detail) == ("max_turns", "5 of 5 turns used")
        assert _limits(store)["max_turns"] == 5


def test_a_submitted_run_is_capped_whichever_runner_drives_it(tmp_path: Path) -> None:
    """`submit` writes the default caps; a Worker's Runner that lifts its own still stops
    the runaway at 100 (the run's log says what it is under, not the driver's settings)."""
    path = tmp_path / "runs.db"
    store = SQLiteEventStore(path, synchronous="NORMAL")
    record = submit(store, "r1", "what's the weather?")
    assert record.limits == Limits(max_turns=100, max_calls_per_decision=64)
    leases = SQLiteLeases(path)
    runner = Runner(store, Agent("a", Busy(), weather()), config=RunnerConfig(max_turns=None))
    [result] = Worker(runner, leases, worker_id="w1").drain()
    assert (result.status, result.stop_reason) == ("terminated", "max_turns")
    lifted = submit(store, "r2", limits=Limits(max_turns=None))
    assert lifted.limits == Limits(max_turns=None, max_calls_per_decision=64)
    leases.close()
    store.close()


def test_the_cap_is_a_positive_number_or_none() -> None:
    """Zero turns would stop every run before it starts: refused by name."""
    with pytest.raises(ValueError, match="max_turns") as info:
        RunnerConfig(max_turns=0)
    assert str(info.value) == "max_turns must be an integer >= 1 or None, got 0"
    assert RunnerConfig().max_turns == DEFAULT_MAX_TURNS == 100


_caps = st.one_of(st.none(), st.integers(1, 500))


@given(
    turns=st.one_of(st.just("unset"), _caps),
    calls=st.one_of(st.just("unset"), _caps),
    tokens=st.one_of(st.none(), st.integers(0, 10**6)),
    default_turns=_caps,
    default_calls=_caps,
)
def test_a_runs_own_limit_always_wins_over_a_default(
    turns: Any, calls: Any, tokens: int | None, default_turns: Any, default_calls: Any
) -> None:
    """Each cap is the run's own where it sets the field (a number or None), else the
    default (if any); every other limit is kept as given."""
    given_fields: dict[str, Any] = {}
    if turns != "unset":
        given_fields["max_turns"] = turns
    if calls != "unset":
        given_fields["max_calls_per_decision"] = calls
    if tokens is not None:
        given_fields["max_tokens"] = tokens
    limits = Limits(**given_fields) if given_fields else None
    capped = with_caps(limits, max_turns=default_turns, max_calls_per_decision=default_calls)
    got = capped.model_dump(exclude_unset=True) if capped is not None else {}
    expected = dict(given_fields)
    if "max_turns" not in given_fields and default_turns is not None:
        expected["max_turns"] = default_turns
    if "max_calls_per_decision" not in given_fields and default_calls is not None:
        expected["max_calls_per_decision"] = default_calls
    assert got == expected
    assert with_calls_cap(limits, default_calls) == with_caps(
        limits, max_calls_per_decision=default_calls
    )


def test_a_cap_must_be_a_limit() -> None:
    """A misspelt cap is not silently ignored."""
    with pytest.raises(TypeError) as info:
        with_caps(None, max_turn=3)
    assert str(info.value) == "max_turn is not a field of Limits"
