"""Custom states a Runner can always drive (issue 26, item 2).

A state declared without a kind is `active`; a Runner makes a turn there. A waiting state of
the user's own declared so (`documents_requested`, left only by `loan.documents_received`)
passed `check-table` and crashed the Runner. Now `check-table` says so, as an error, and a
Runner refuses such a table before it writes anything; a table a Runner takes it can drive
in every state it declares.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import DEFAULT_TABLE, State, Transition, TransitionTable
from agentfsm.errors import InvalidTableError
from agentfsm.events import LogBuilder, step_clock
from agentfsm.fsm.check import check_table
from agentfsm.fsm.needs import runner_problems, unmet_needs
from agentfsm.names import StateKind
from agentfsm.reducers import Reducer
from agentfsm.runtime import Agent, AsyncRunner, Decision, ProposedCall, Runner, ScriptedModel, Tool
from agentfsm.stores import MemoryEventStore, StoreOptions, ThreadedAsyncEventStore
from tests.fixtures.loan import LOAN_TABLE, loan_table
from tests.fixtures.tables import NO_RESUME, NO_TURN

ROOT = Path(__file__).resolve().parent.parent
AGENTFSM = Path(sys.executable).parent / "agentfsm"

#: What check-table and the Runner say of the loan table with its waiting states left
#: without a kind (the applicant's also times out, which only a waiting state can).
UNKINDED = tuple(
    f"state '{state}' has no 'model.started', 'model.completed', 'run.completed' (a Runner "
    "needs them in every 'active' state, and a State declared without a kind is 'active'): "
    "no Runner can drive a run there; if a person or an outside event moves it on, declare "
    "it kind='waiting'"
    for state in ("documents_requested", "underwriting")
)
UNKINDED = (
    UNKINDED[0],
    "state 'documents_requested' times out ('loan.documents_expired' after 7 d), but it is "
    "'active': a Runner drives a run there without waiting, so no timeout falls due; only a "
    "'waiting' or 'paused' state times out (declare its kind)",
    UNKINDED[1],
)


def _store(table: TransitionTable) -> MemoryEventStore:
    return MemoryEventStore(options=StoreOptions(reducer=Reducer(table)))


def _agent() -> Agent:
    return Agent("underwriter_aide", ScriptedModel([Decision.answer("all documents present")]))


class TestCheckTable:
    """The static check names each state no Runner can drive a run in, as an error."""

    def test_the_loan_table_with_its_kinds_is_clean(self) -> None:
        """Declared `waiting`, the people's states need nothing of a Runner."""
        report = check_table(LOAN_TABLE)
        assert (report.errors, report.warnings) == ((), ())

    def test_without_kinds_each_waiting_state_is_an_error(self) -> None:
        """Each state, what it lacks, why a Runner needs it, and what to declare."""
        assert check_table(loan_table(declare_kinds=False)).errors == UNKINDED

    def test_a_state_that_lacks_part_of_its_kind_is_told_to_get_the_edge(self) -> None:
        """A state that has some of its kind's moves wants the rest, not another kind."""
        assert runner_problems(NO_TURN) == (
            "state 'running' has no 'model.started' (a Runner needs it in every 'active' "
            "state): no Runner can drive a run there; add an edge on it",
        )

    def test_the_command_exits_one_and_prints_them(self, tmp_path: Path) -> None:
        """`agentfsm check-table` on the unkinded table: the errors and `invalid`, exit 1."""
        module = tmp_path / "unkinded_loan.py"
        module.write_text(
            "from tests.fixtures.loan import loan_table\nTABLE = loan_table(declare_kinds=False)\n",
            encoding="utf-8",
        )
        done = subprocess.run(
            [str(AGENTFSM), "check-table", "unkinded_loan:TABLE"],
            capture_output=True, text=True, check=False, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "NO_COLOR": "1"},
        )  # fmt: skip
        assert (done.returncode, done.stderr) == (1, "")
        lines = done.stdout.splitlines()
        assert [line for line in lines if line.startswith("error: ")] == [
            f"error: {p}" for p in UNKINDED
        ]
        assert lines[-1] == "invalid: 3 error(s), 0 warning(s)"


class TestTheRunnerRefusesWhatItCannotDrive:
    """`Runner(...)` and `AsyncRunner(...)` refuse such a table, before any run is written."""

    def test_the_runner(self) -> None:
        """An `InvalidTableError` holding the same sentences as check-table's errors."""
        store = _store(loan_table(declare_kinds=False))
        with pytest.raises(InvalidTableError) as info:
            Runner(store, _agent(), clock=step_clock())
        assert info.value.problems == UNKINDED
        assert str(info.value).splitlines()[0] == (
            "table 'loan_application' is invalid (3 problems):"
        )
        assert info.value.__notes__ == [
            "a Runner drives runs of this table: each state above needs the moves it names "
            "(`agentfsm check-table` reports the same)"
        ]
        assert store.runs() == []

    def test_the_async_runner(self) -> None:
        """The same check, the same error."""
        store = _store(NO_RESUME)
        with pytest.raises(InvalidTableError) as info:
            AsyncRunner(ThreadedAsyncEventStore(store), _agent(), clock=step_clock())
        assert info.value.problems == runner_problems(NO_RESUME)

    def test_with_its_kinds_the_loan_runs(self) -> None:
        """The declared table is driven: the run waits for the applicant's documents."""
        result = Runner(_store(LOAN_TABLE), _agent(), clock=step_clock()).run("loan-1", "review")
        assert (result.status, result.kind, result.waiting) == (
            "documents_requested", StateKind.WAITING, True,
        )  # fmt: skip


# -- the Runner never raises on a state of a table it took ------------------------------------

_EXTRA_KINDS = st.sampled_from([None, *StateKind])
_TOOL = Tool("lookup", lambda ctx: {"found": True}, side_effects=False)


def _script() -> ScriptedModel:
    return ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("lookup", {"q": "a"}), ProposedCall("lookup", {"q": "b"})
            ),
            Decision.answer("ok"),
        ]
    )


@st.composite
def _tables(draw: st.DrawFn) -> TransitionTable:
    """The default table, some of its edges gone, and a state of the user's own (of any
    kind, or none) that `running` moves to on an event of its own."""
    removed = draw(st.lists(st.sampled_from(DEFAULT_TABLE.transitions), max_size=3, unique=True))
    kind = draw(_EXTRA_KINDS)
    terminal = kind == StateKind.TERMINAL
    extra = State("review", terminal=terminal, **({"kind": kind} if kind else {}))
    out = [] if terminal else [Transition("review", "review.done", "running")]
    if not terminal and draw(st.booleans()):
        out.append(Transition("review", "run.failed", "failed"))
    try:
        return DEFAULT_TABLE.derive(
            name="drawn",
            remove=removed,
            add_states=[extra],
            add_events=["review.asked", "review.done"],
            add=[Transition("running", "review.asked", "review"), *out],
        )
    except InvalidTableError:  # a trap or an unreachable state: no table at all
        return DEFAULT_TABLE


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=_tables())
def test_a_runner_either_refuses_the_table_or_never_raises_on_its_states(
    table: TransitionTable,
) -> None:
    """Whatever edges a table lacks and whatever kind its own state has: `Runner(...)`
    refuses it exactly when `check-table` has an error; otherwise a new run with tools, and
    a run someone moved to the table's own state, each come back where the table says a
    Runner stops (ended, waiting or paused), with no exception."""
    store = _store(table)
    problems = runner_problems(table)
    assert check_table(table).errors == problems
    agent = Agent("a", _script(), [_TOOL])
    if problems:
        with pytest.raises(InvalidTableError) as info:
            Runner(store, agent, clock=step_clock())
        assert info.value.problems == problems
        assert any(unmet_needs(table, s) for s in table.state_names)
        return
    runner = Runner(store, agent, clock=step_clock())
    assert table.stops_driving(runner.run("r1", "go").status)
    if "review" in table.state_names:
        log = LogBuilder("r2", events=table.event_types)
        log.add("run.started", table=table.ref.model_dump())
        log.add("review.asked")
        store.append("r2", log.events, 0)
        assert table.stops_driving(runner.drive("r2").status)
