"""The drive core alone: scripted outcomes sent to its generators, no store, no threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentfsm.errors import GuardRejectedError, RunSupersededError
from agentfsm.events import models as m
from agentfsm.events import step_clock
from agentfsm.guards.budget import SharedBudget
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import DEFAULT_REDUCER
from agentfsm.runtime import (
    Agent,
    Decision,
    ModelError,
    ProposedCall,
    RunResult,
    ScriptedModel,
    Tool,
)
from agentfsm.runtime import _effects as fx
from agentfsm.runtime._drive import Driver
from agentfsm.runtime._recovery import rebuild_steps
from agentfsm.runtime._writer import BudgetTree, StateChanged, _Base

T = Any


class Core(Driver):
    """The core with a writer that only holds state (appends are folded by the test)."""

    def _writer(self, record: RunRecord, budget: BudgetTree | None) -> _Base:
        return _Base(
            record,
            reducer=self.reducer,
            store_reducer=DEFAULT_REDUCER,
            clock=self.clock,
            logger=None,
            budget=budget,
            max_conflicts=3,
        )


def _fold(writer: _Base, specs: Any) -> RunRecord:
    """What a store would do with an `Append`: fold the events in, without a store."""
    put = writer._prepare(specs)
    record = put.record
    for event in put.events:
        record = DEFAULT_REDUCER.reduce(record, event)
    return writer._settle(put, record)


class Script:
    """Performs effects from a script: `answer(effect) -> outcome`; records what was asked."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        self.answer = answer
        self.effects: list[str] = []

    def run(self, steps: fx.Steps[T]) -> T:
        got: Any = None
        while True:
            try:
                effect = steps.send(got)
            except StopIteration as done:
                return done.value
            self.effects.append(type(effect).__name__)
            if isinstance(effect, fx.Batch):
                ends = []
                for work in effect.works:
                    end = self.run(effect.job(work, lambda: False))
                    if end is not None:
                        ends.append(end)
                        break
                got = ends
            else:
                got = self.answer(effect)


def _default(effect: Any) -> Any:
    if isinstance(effect, fx.Start):
        return DEFAULT_REDUCER.reduce(RunRecord(run_id=effect.event.run_id), effect.event)
    if isinstance(effect, fx.Append):
        return _fold(effect.writer, effect.specs)
    if isinstance(effect, fx.Ask):
        return effect.agent.model(effect.ctx)
    if isinstance(effect, fx.Call):
        return fx.Returned(effect.tool.fn(effect.ctx))
    if isinstance(effect, fx.Largest):
        return (0, 0.0)
    return None


def _core(*decisions: Decision, tools: list[Tool] | None = None) -> Core:
    agent = Agent("a", ScriptedModel(list(decisions)), tools or [Tool("echo", lambda c: "hi")])
    return Core(agent, store_reducer=DEFAULT_REDUCER, clock=step_clock())


class TestDrive:
    def test_a_turn_with_a_call_then_an_answer(self) -> None:
        """Start, ask, append the decision, run the batch, ask again, complete: in order."""
        script = Script(_default)
        core = _core(Decision.call_tools(ProposedCall("echo")), Decision.answer("done"))
        result = script.run(core._run_new("r1", "go", None, None))
        assert isinstance(result, RunResult)
        assert (result.status, result.record.final_output) == ("completed", "done")
        assert script.effects == [
            "Start",
            "Append",  # model.started
            "Ask",
            "Append",  # model.completed + tool.requested
            "Batch",
            "Append",  # tool.started
            "Beat",  # before the side effect: the driver confirms it owns the run
            "Call",
            "Append",  # tool.completed
            "Append",  # model.started
            "Ask",
            "Append",  # model.completed
            "Append",  # run.completed
        ]

    def test_a_retryable_model_error_is_slept_on_and_asked_again(self) -> None:
        """The backoff is an effect: the core sleeps through its shell, then asks again."""
        asked: list[int] = []

        def answer(effect: Any) -> Any:
            if isinstance(effect, fx.Ask):
                asked.append(1)
                if len(asked) == 1:
                    return fx.Raised(ModelError("busy", retryable=True))
            return _default(effect)

        script = Script(answer)
        result = script.run(_core(Decision.answer("ok"))._run_new("r1", None, None, None))
        assert result.status == "completed"
        assert script.effects[2:5] == ["Ask", "Sleep", "Ask"]

    def test_a_raising_tool_is_recorded_as_failed(self) -> None:
        """`Raised` from a call becomes `tool.failed`; the run goes on."""

        def answer(effect: Any) -> Any:
            if isinstance(effect, fx.Call):
                return fx.Raised(RuntimeError("bug"))
            return _default(effect)

        result = Script(answer).run(
            _core(Decision.call_tools(ProposedCall("echo")), Decision.answer("x"))._run_new(
                "r", None, None, None
            )
        )
        action = result.record.actions["t1.1"]
        assert (action.status, action.error.kind) == ("failed", "exception")

    def test_a_superseded_append_returns_a_superseded_result(self) -> None:
        """A `Refused(RunSupersededError)` is a value: the core loads the run and stops."""
        loaded: list[str] = []
        seen: dict[str, RunRecord] = {}

        def answer(effect: Any) -> Any:
            if isinstance(effect, fx.Append) and effect.specs[0].cls.__name__ == "ModelStarted":
                seen["r"] = effect.writer.record
                return fx.Refused(RunSupersededError(run_id="r", sequence=2, event="x"))
            if isinstance(effect, fx.Load):
                loaded.append(effect.run_id)
                return seen["r"]
            return _default(effect)

        result = Script(answer).run(_core(Decision.answer("x"))._run_new("r", None, None, None))
        assert result.superseded
        assert loaded == ["r"]

    def test_a_changed_run_is_decided_again(self) -> None:
        """A `Refused(StateChanged)` is not an error: the core asks the planner again."""
        refused: list[int] = []

        def answer(effect: Any) -> Any:
            if isinstance(effect, fx.Append) and not refused:
                refused.append(1)
                return fx.Refused(StateChanged(effect.writer.record))
            return _default(effect)

        script = Script(answer)
        result = script.run(_core(Decision.answer("x"))._run_new("r", None, None, None))
        assert result.status == "completed"
        assert script.effects[:3] == ["Start", "Append", "Append"]


class TestSettle:
    def test_superseded_beats_a_refusal_which_beats_a_waiting_child(self) -> None:
        """The batch's ends add up in that order."""
        sup = RunSupersededError(run_id="r", sequence=1, event="x")
        ref = GuardRejectedError.__new__(GuardRejectedError)
        waiting = fx.Waiting(RunResult(RunRecord(run_id="r/c")))
        assert fx.settle([waiting, ref, sup]) is sup
        assert fx.settle([waiting, ref]) is ref
        assert fx.settle([None, waiting]) is waiting
        assert fx.settle([StateChanged(RunRecord(run_id="r")), None]) is None

    @pytest.mark.parametrize(("end", "stops"), [(None, False), ("waiting", False), ("sup", True)])
    def test_only_a_waiting_child_lets_the_batch_go_on(self, end: Any, stops: bool) -> None:
        """`stops` is what the async shell's concurrent calls check."""
        value = {
            None: None,
            "waiting": fx.Waiting(RunResult(RunRecord(run_id="r/c"))),
            "sup": RunSupersededError(run_id="r", sequence=1, event="x"),
        }[end]
        assert fx.stops(value) is stops


class TestRebuildSteps:
    def test_asks_for_no_child_of_a_call_that_never_ran(self) -> None:
        """Proposed and pending calls are skipped; a requested one's child is loaded."""
        core = _core(
            Decision.call_tools(ProposedCall("echo"), ProposedCall("echo")),
            tools=[Tool("echo", lambda c: "hi")],
        )
        record = Script(_default).run(core._start("p", None, None, None))
        events = [
            m.ModelStarted(run_id="p", sequence=2, occurred_at="2026-01-01T00:00:00+00:00"),
            m.ModelCompleted(
                run_id="p",
                sequence=3,
                occurred_at="2026-01-01T00:00:00+00:00",
                decision="tool_calls",
                tool_calls=[
                    {"action_id": "a", "tool": "echo", "arguments": {}},
                    {"action_id": "b", "tool": "echo", "arguments": {}},
                ],
            ),
            m.ToolRequested(
                run_id="p",
                sequence=4,
                occurred_at="2026-01-01T00:00:00+00:00",
                action_id="b",
                tool="echo",
                arguments={},
            ),
        ]
        for event in events:
            record = DEFAULT_REDUCER.reduce(record, event)
        assert record.actions["a"].status == "proposed"
        steps = rebuild_steps(record, BudgetTree(SharedBudget("p", 100, None)))
        first = next(steps)
        assert first == fx.Load("p/b")
        with pytest.raises(StopIteration):
            steps.send(None)
