"""A Runner that meets a state its table gives no move it needs fails the run once, saying
which state and which move, instead of raising the same refusal on every resume."""

from __future__ import annotations

import asyncio

import pytest

from agentfsm.errors import IllegalTransitionError
from agentfsm.events import ErrorInfo, LogBuilder, step_clock
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers import Reducer
from agentfsm.runtime import AsyncRunner, Decision, ScriptedModel, Tool, call
from agentfsm.stores import MemoryEventStore, StoreOptions, ThreadedAsyncEventStore
from tests.fixtures.tables import NO_RESUME, NO_START, NO_TURN
from tests.runtime.helpers import runner_for, types


def _store(table: TransitionTable) -> MemoryEventStore:
    return MemoryEventStore(options=StoreOptions(reducer=Reducer(table)))


def _answers() -> ScriptedModel:
    return ScriptedModel([Decision.answer("done")])


def _stranded(table: str, state: str, kind: str, event: str) -> ErrorInfo:
    return ErrorInfo(
        kind="stranded",
        message=f"state '{state}' ('{kind}') of table '{table}' has no '{event}', which the "
        "Runner appends next: the run cannot go on under this table",
    )


class TestTheRunFailsOnce:
    def test_a_paused_run_with_no_way_to_resume(self) -> None:
        """`resume` cannot append `run.resumed`: the run fails there, once; a second
        `resume` returns the failed run and appends nothing."""
        store = _store(NO_RESUME)
        log = LogBuilder("r1")
        log.add("run.started", objective="wait", table=NO_RESUME.ref.model_dump())
        log.add("run.paused", reason="waiting for the customer")
        store.append("r1", log.events, 0)
        runner = runner_for(store, _answers(), [])
        first = runner.resume("r1")
        assert (first.status, first.record.error) == (
            "failed", _stranded("no_resume", "paused", "paused", "run.resumed"),
        )  # fmt: skip
        assert types(store, "r1") == ["run.started", "run.paused", "run.failed"]
        again = runner.resume("r1")
        assert (again.status, again.record.version) == ("failed", 3)

    def test_a_running_run_with_no_turn(self) -> None:
        """A new run cannot start a model turn in `running`: it fails at once."""
        store = _store(NO_TURN)
        result = runner_for(store, _answers(), []).run("r1", "answer")
        assert (result.status, result.record.error) == (
            "failed", _stranded("no_turn", "running", "active", "model.started"),
        )  # fmt: skip
        assert types(store, "r1") == ["run.started", "run.failed"]

    def test_a_call_that_cannot_start(self) -> None:
        """A requested call in `waiting_tool`, whose table has no `tool.started`: the
        batch stops and the run fails, the call never made."""
        store = _store(NO_START)
        made: list[str] = []
        tool = Tool("lookup", lambda ctx: made.append("called"), side_effects=False)
        model = ScriptedModel([Decision.call_tools(call("lookup")), Decision.answer("done")])
        result = runner_for(store, model, [tool]).run("r1", "look it up")
        assert (result.status, result.record.error, made) == (
            "failed", _stranded("no_start", "waiting_tool", "in_flight", "tool.started"), [],
        )  # fmt: skip
        assert types(store, "r1")[-2:] == ["tool.requested", "run.failed"]

    def test_the_async_runner_too(self) -> None:
        """The same core: the AsyncRunner fails the run the same way."""
        store = _store(NO_TURN)
        runner = AsyncRunner(
            ThreadedAsyncEventStore(store),
            runner_for(store, _answers(), []).agents,
            clock=step_clock(),
        )
        result = asyncio.run(runner.run("r1", "answer"))
        assert (result.status, result.record.error) == (
            "failed", _stranded("no_turn", "running", "active", "model.started"),
        )  # fmt: skip


def test_a_table_that_cannot_fail_it_either_is_raised_with_a_note() -> None:
    """Where the table has no `run.failed` either, nothing can be recorded: the refusal is
    raised, saying so, and nothing is appended."""
    cannot_fail = NO_RESUME.derive(name="no_way_out", remove=[("paused", "run.failed", "failed")])
    store = _store(cannot_fail)
    log = LogBuilder("r1")
    log.add("run.started", table=cannot_fail.ref.model_dump())
    log.add("run.paused", reason="waiting")
    store.append("r1", log.events, 0)
    with pytest.raises(IllegalTransitionError) as info:
        runner_for(store, _answers(), []).resume("r1")
    assert (info.value.state, info.value.event) == ("paused", "run.resumed")
    assert info.value.__notes__ == [
        "the table has no 'run.failed' from 'paused' either: the run could not be failed"
    ]
    assert store.load("r1").version == 2
