"""A Runner and a table that lacks a move the Runner makes.

A move every run of a state's kind makes (`agentfsm.fsm.needs`: a turn in an `active` state,
`run.resumed` in a `paused` one) is checked when the Runner is built: a table without it is
refused, nothing written. A move only some runs make (a call, a batch's second call, an
approval) is met as the run goes: the run fails once, saying which state and which move,
instead of raising the same refusal on every resume.
"""

from __future__ import annotations

import asyncio

import pytest

from agentfsm import DEFAULT_TABLE, Condition, Transition
from agentfsm.errors import IllegalTransitionError, InvalidTableError
from agentfsm.events import ErrorInfo, LogBuilder, step_clock
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers import Reducer
from agentfsm.runtime import AsyncRunner, Decision, ProposedCall, ScriptedModel, Tool, ToolPolicy
from agentfsm.stores import MemoryEventStore, StoreOptions, ThreadedAsyncEventStore
from tests.fixtures.tables import NO_RESUME, NO_START, NO_TURN
from tests.runtime.helpers import runner_for, types

#: No call from `running`: an agent with tools strands there (one without never does).
NO_CALL = DEFAULT_TABLE.derive(
    name="no_call", remove=[("running", "tool.requested", "waiting_tool")]
)
#: One call per batch: a batch's second call strands in `waiting_tool`.
ONE_CALL = DEFAULT_TABLE.derive(
    name="one_call", remove=[("waiting_tool", "tool.requested", "waiting_tool")]
)
#: No approval from `running`: a policy that asks strands there.
NO_ASKING = DEFAULT_TABLE.derive(
    name="no_asking", remove=[("running", "approval.requested", "waiting_approval")]
)


def _store(table: TransitionTable) -> MemoryEventStore:
    return MemoryEventStore(options=StoreOptions(reducer=Reducer(table)))


def _lookup(made: list[str]) -> Tool:
    return Tool("lookup", lambda ctx: made.append(ctx.args["q"]), side_effects=False)


def _two_calls() -> ScriptedModel:
    return ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("lookup", {"q": "a"}), ProposedCall("lookup", {"q": "b"})
            ),
            Decision.answer("ok"),
        ]
    )


def _stranded(table: str, state: str, kind: str, event: str) -> ErrorInfo:
    return ErrorInfo(
        kind="stranded",
        message=f"state '{state}' ('{kind}') of table '{table}' has no '{event}', which the "
        "Runner appends next: the run cannot go on under this table",
    )


class TestTheRunnerRefusesTheTable:
    """What every run of a kind needs is checked before a run is driven."""

    @pytest.mark.parametrize(
        ("table", "problem"),
        [
            (
                NO_RESUME,
                "state 'paused' has no 'run.resumed' (a Runner needs it in every 'paused' "
                "state): no Runner can drive a run there; if a person or an outside event "
                "moves it on, declare it kind='waiting'",
            ),
            (
                NO_TURN,
                "state 'running' has no 'model.started' (a Runner needs it in every 'active' "
                "state): no Runner can drive a run there; add an edge on it",
            ),
            (
                NO_START,
                "state 'waiting_tool' has no 'tool.started' (a Runner needs it in every "
                "'in_flight' state): no Runner can drive a run there; add an edge on it",
            ),
        ],
    )
    def test_a_paused_run_stays_as_it_was(self, table: TransitionTable, problem: str) -> None:
        """The Runner is not built; the paused run in the store is untouched (before, a
        `drive` of it under NO_RESUME failed it)."""
        store = _store(table)
        log = LogBuilder("r1")
        log.add("run.started", objective="wait", table=table.ref.model_dump())
        log.add("run.paused", reason="waiting for the customer")
        store.append("r1", log.events, 0)
        with pytest.raises(InvalidTableError) as info:
            runner_for(store, _two_calls(), [])
        assert info.value.problems == (problem,)
        assert types(store, "r1") == ["run.started", "run.paused"]


class TestTheRunFailsOnce:
    """A move only some runs make, with no edge: the run fails there, once."""

    def test_a_call_from_running(self) -> None:
        """The model asks for a call the table cannot request: the run fails, the call is
        never made; an agent without tools runs to its end under the same table."""
        store = _store(NO_CALL)
        made: list[str] = []
        result = runner_for(store, _two_calls(), [_lookup(made)]).run("r1", "look it up")
        assert (result.status, result.record.error, made) == (
            "failed", _stranded("no_call", "running", "active", "tool.requested"), [],
        )  # fmt: skip
        assert types(store, "r1")[-1] == "run.failed"
        plain = runner_for(store, ScriptedModel([Decision.answer("ok")]), []).run("r2", "answer")
        assert plain.status == "completed"

    def test_a_second_call_of_a_batch(self) -> None:
        """The batch's first call is requested, the second has no edge: the run fails, and
        a second `drive` returns the failed run, appending nothing."""
        store = _store(ONE_CALL)
        made: list[str] = []
        runner = runner_for(store, _two_calls(), [_lookup(made)])
        first = runner.run("r1", "look both up")
        assert (first.status, first.record.error, made) == (
            "failed", _stranded("one_call", "waiting_tool", "in_flight", "tool.requested"), [],
        )  # fmt: skip
        again = runner.drive("r1")
        assert (again.status, again.record.version) == ("failed", first.record.version)

    def test_an_approval_the_table_cannot_ask_for(self) -> None:
        """A policy that asks, and no `approval.requested` from `running`."""
        store = _store(NO_ASKING)
        made: list[str] = []
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("lookup", {"q": "a"})), Decision.answer("ok")]
        )
        runner = runner_for(store, model, [_lookup(made)], policy=ToolPolicy(approval={"lookup"}))
        result = runner.run("r1", "look it up")
        assert (result.status, result.record.error, made) == (
            "failed",
            _stranded("no_asking", "running", "active", "approval.requested"),
            [],
        )

    def test_a_result_no_alternative_of_which_holds(self) -> None:
        """The table dropped one of a result's alternatives (`batch resolved`): the last
        result of a batch matches none of the others, so the run fails, naming the
        conditions tried (before, the refusal was raised on every resume)."""
        table = DEFAULT_TABLE.derive(
            name="no_batch_end", remove=[("waiting_tool", "tool.completed", "running")]
        )
        store = _store(table)
        made: list[str] = []
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("lookup", {"q": "a"})), Decision.answer("ok")]
        )
        result = runner_for(store, model, [_lookup(made)]).run("r1", "look it up")
        assert (result.status, result.record.error, made) == (
            "failed",
            ErrorInfo(
                kind="stranded",
                message="state 'waiting_tool' ('in_flight') of table 'no_batch_end' has no "
                "'tool.completed' whose condition holds (tried 'calls left', 'only decisions "
                "left'), which the Runner appends next: the run cannot go on under this table",
            ),
            ["a"],
        )
        assert types(store, "r1")[-2:] == ["tool.started", "run.failed"]

    def test_the_async_runner_too(self) -> None:
        """The same core: the AsyncRunner fails the run the same way."""
        store = _store(ONE_CALL)
        made: list[str] = []
        runner = AsyncRunner(
            ThreadedAsyncEventStore(store),
            runner_for(store, _two_calls(), [_lookup(made)]).agents,
            clock=step_clock(),
        )
        result = asyncio.run(runner.run("r1", "look both up"))
        assert (result.status, result.record.error) == (
            "failed", _stranded("one_call", "waiting_tool", "in_flight", "tool.requested"),
        )  # fmt: skip


def test_a_table_whose_failure_is_refused_too_is_raised_with_a_note() -> None:
    """Where `run.failed` has an edge whose condition does not hold, nothing can be
    recorded: the refusal is raised, with the failure's own refusal as a note (from where
    the run stands: the batch's calls are requested from `running` in one append)."""
    never = Condition("never", lambda record, event: False, "no run fails here")
    table = ONE_CALL.derive(
        name="no_way_out",
        remove=[("running", "run.failed", "failed")],
        add=[Transition("running", "run.failed", "failed", never)],
    )
    store = _store(table)
    with pytest.raises(IllegalTransitionError) as info:
        runner_for(store, _two_calls(), [_lookup([])]).run("r1", "look both up")
    assert (info.value.state, info.value.event) == ("waiting_tool", "tool.requested")
    assert info.value.__notes__ == [
        "the run could not be failed either: run 'r1' is 'running': event 'run.failed' "
        "(sequence 3) is not allowed: condition 'never' does not hold; allowed: "
        "'approval.requested', "
        "'handoff', 'model.completed', 'model.started', 'run.cancel_requested', "
        "'run.completed', 'run.failed', 'run.paused', 'run.terminated', 'tool.requested', "
        "'tool.started'"
    ]
    assert types(store, "r1") == ["run.started", "model.started"]
