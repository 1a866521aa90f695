"""A model answer without usage under a budget stops the run: the Runner's side of the rule
every SDK adapter follows too (`agentfsm.runtime._metering`, issue 31)."""

from __future__ import annotations

import pytest

from agentfsm.events import Limits, Usage
from agentfsm.guards import Budget
from agentfsm.runtime import Decision, RunnerConfig, ScriptedModel
from agentfsm.runtime._metering import MISSING_USAGE

from .helpers import RUNNERS, drive_r1, types

_ANSWER = Decision.answer("done")  # reports no usage


@RUNNERS
@pytest.mark.parametrize(
    ("limits", "under"),
    [(Limits(max_tokens=1_000), "max_tokens 1,000"), (Limits(max_cost=2.5), "max_cost 2.5")],
)
def test_an_answer_without_usage_stops_a_run_with_a_limit(
    runner: str, limits: Limits, under: str
) -> None:
    result, store = drive_r1(runner, ScriptedModel([_ANSWER]), [], limits=limits)
    assert (result.status, result.stop_reason) == ("terminated", "budget")
    assert result.record.stop_detail.startswith(f"{MISSING_USAGE}: ")
    assert under in result.record.stop_detail
    # The answer is kept (the call happened), with no usage: the log does not say 0 tokens.
    assert types(store, "r1")[-2:] == ["model.completed", "run.terminated"]
    assert [e.usage for e in store.events("r1") if e.type == "model.completed"] == [None]
    assert result.partial_output == "done"


@RUNNERS
def test_a_budget_guard_or_a_reservation_needs_usage_too(runner: str) -> None:
    guarded, _ = drive_r1(runner, ScriptedModel([_ANSWER]), [], guards=[Budget(max_tokens=50)])
    assert guarded.record.stop_detail.startswith(MISSING_USAGE)
    assert "the guard 'budget'" in guarded.record.stop_detail
    config = RunnerConfig(reserve=Usage(input_tokens=10))
    reserved, _ = drive_r1(runner, ScriptedModel([_ANSWER]), [], config=config)
    assert reserved.record.stop_detail.startswith(MISSING_USAGE)
    assert "the call's reservation" in reserved.record.stop_detail


@RUNNERS
def test_without_a_budget_an_answer_without_usage_is_fine(runner: str) -> None:
    result, _ = drive_r1(runner, ScriptedModel([_ANSWER]), [])
    assert (result.status, result.final_output) == ("completed", "done")


@RUNNERS
def test_an_answer_with_usage_goes_on_under_a_limit(runner: str) -> None:
    model = ScriptedModel([Decision.answer("done", usage=Usage(input_tokens=10))])
    result, _ = drive_r1(runner, model, [], limits=Limits(max_tokens=1_000))
    assert result.status == "completed"
