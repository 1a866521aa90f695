"""What a Runner needs of a table in each state (`agentfsm.fsm.needs`), and the migrations
that would take it away: refused by `migrate` and reported by `check-table --against`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import DEFAULT_TABLE, LogBuilder, SQLiteEventStore
from agentfsm.cli import main
from agentfsm.errors import MigrationError
from agentfsm.fsm.diff import Stranded, diff_tables
from agentfsm.fsm.needs import RunnerNeeds, runner_needs, unmet_needs
from agentfsm.reducers import Reducer
from agentfsm.runtime import migrate, pause
from agentfsm.stores import StoreOptions
from examples.lifecycles.ticket import TICKET_TABLE
from examples.lifecycles.ticket_v2 import TICKET_TABLE_V2
from tests.fixtures.tables import NO_RESUME, NO_START, NO_TURN

SPECS = {"no_resume": "tests.fixtures.tables:NO_RESUME", "no_turn": "tests.fixtures.tables:NO_TURN"}


def named(table: object) -> str:
    """How errors name a table: `'name' (digest)`."""
    return f"'{table.name}' ({table.digest})"  # type: ignore[attr-defined]


class TestWhatARunnerNeeds:
    """One list per state, by its kind (and the initial and cancel-settling states)."""

    def test_in_each_state_of_the_default_table(self) -> None:
        """The moves a Runner appends in each state, and why those."""
        assert {s: runner_needs(DEFAULT_TABLE, s) for s in DEFAULT_TABLE.state_names} == {
            "created": RunnerNeeds(("run.started",), "in the initial state"),
            "running": RunnerNeeds(
                ("model.started", "model.completed", "run.completed", "run.failed"),
                "in every 'active' state",
            ),
            "waiting_tool": RunnerNeeds(
                (
                    "tool.started", "tool.completed", "tool.failed", "tool.outcome_unknown",
                    "run.failed",
                ),
                "in every 'in_flight' state",
            ),
            "waiting_approval": RunnerNeeds((), "in every 'waiting' state"),
            "paused": RunnerNeeds(("run.resumed",), "in every 'paused' state"),
            "cancel_requested": RunnerNeeds(
                (
                    "tool.completed", "tool.failed", "tool.outcome_unknown", "run.cancelled",
                    "run.failed",
                ),
                "where a cancel settles",
            ),
            **{s: RunnerNeeds((), "in a terminal state") for s in DEFAULT_TABLE.terminal_states},
        }

    @pytest.mark.parametrize("table", [DEFAULT_TABLE, TICKET_TABLE, TICKET_TABLE_V2])
    def test_the_shipped_tables_meet_every_need(self, table: object) -> None:
        """The default and the ticket tables let a Runner go on in every state."""
        assert {s: unmet_needs(table, s) for s in table.state_names} == dict.fromkeys(  # type: ignore[attr-defined]
            table.state_names, ()  # type: ignore[attr-defined]
        )

    def test_a_table_that_drops_one_is_named(self) -> None:
        """`unmet_needs` names what is missing where."""
        assert unmet_needs(NO_RESUME, "paused") == ("run.resumed",)
        assert unmet_needs(NO_TURN, "running") == ("model.started",)
        assert unmet_needs(NO_START, "waiting_tool") == ("tool.started",)


@given(
    removed=st.lists(
        st.sampled_from(DEFAULT_TABLE.transitions), min_size=1, max_size=4, unique=True
    )
)
def test_every_need_taken_away_is_stranded_where_the_old_version_met_it(
    removed: list[object],
) -> None:
    """Whatever edges a new version drops, `stranded` is exactly the needs the old version
    met and the new one does not, state by state."""
    try:
        new = DEFAULT_TABLE.derive(name="less", remove=removed)  # type: ignore[arg-type]
    except ValueError:  # the edges left make no valid table (a trap, an unreachable state)
        return
    diff = diff_tables(DEFAULT_TABLE, new)
    lost = {
        s: tuple(e for e in runner_needs(DEFAULT_TABLE, s).moves if e not in new.allowed(s))
        for s in DEFAULT_TABLE.state_names
    }
    assert {st.state: st.moves for st in diff.stranded} == {s: m for s, m in lost.items() if m}
    for stranded in diff.stranded:
        assert stranded.state in stranded.reached_from
        for state in stranded.reached_from:
            assert stranded.reason(state) in diff.cannot_migrate(state)


class TestTheDiff:
    """`diff_tables` says where a new version strands a Runner, and what cannot move to it."""

    def test_a_paused_state_without_its_resume(self) -> None:
        """`paused` keeps its kind but loses `run.resumed`: a sentence, and refused moves."""
        diff = diff_tables(DEFAULT_TABLE, NO_RESUME)
        assert diff.stranded == (
            Stranded(
                "paused", ("run.resumed",), "in every 'paused' state",
                ("created", "running", "waiting_tool", "waiting_approval", "paused"),
            ),
        )  # fmt: skip
        assert diff.sentences() == (
            "the table is named 'no_resume', was 'agent_run'",
            "state 'paused' has no 'run.resumed' in the new table (a Runner needs it in "
            "every 'paused' state)",
            "'paused' on 'run.resumed' is no longer allowed (it went to 'running')",
        )
        assert diff.takes_away
        assert diff.cannot_migrate("paused") == (
            "state 'paused' has no 'run.resumed' in the new table (a Runner needs it in "
            "every 'paused' state)",
        )
        assert diff.cannot_migrate("waiting_approval") == (
            "the run can come to state 'paused', which has no 'run.resumed' in the new table "
            "(a Runner needs it in every 'paused' state)",
        )
        assert diff.cannot_migrate("cancel_requested") == ()  # it only ends from there

    def test_a_turn_taken_away_strands_a_paused_run_too(self) -> None:
        """A paused run comes to `running` once resumed, where there is no turn any more."""
        diff = diff_tables(DEFAULT_TABLE, NO_TURN)
        assert diff.cannot_migrate("paused") == (
            "the run can come to state 'running', which has no 'model.started' in the new "
            "table (a Runner needs it in every 'active' state)",
        )
        assert diff.affects("paused") == diff.cannot_migrate("paused")

    def test_as_json(self) -> None:
        """The stranded states, with their moves and where runs come to them from."""
        out = diff_tables(DEFAULT_TABLE, NO_TURN).to_json()
        assert out["stranded"] == [
            {
                "state": "running",
                "moves": ["model.started"],
                "where": "in every 'active' state",
                "reached_from": [
                    "created", "running", "waiting_tool", "waiting_approval", "paused",
                ],
            }
        ]  # fmt: skip

    def test_what_was_never_met_is_not_the_new_versions_doing(self) -> None:
        """A need the old version did not meet either is no change: nothing stranded."""
        assert diff_tables(NO_RESUME, NO_RESUME.derive(name="again")).stranded == ()


def _paused_store(path: Path) -> Path:
    """A SQLite store with run `r1` of the default table, paused between steps."""
    log = LogBuilder("r1")
    log.add("run.started", objective="wait", table=DEFAULT_TABLE.ref.model_dump())
    with SQLiteEventStore(path) as store:
        store.append("r1", log.events, 0)
        pause(store, "r1", "waiting for the customer")
    return path


class TestMigrate:
    """`migrate` (the library verb and the command) refuses a version that strands the run."""

    @pytest.mark.parametrize(
        ("new", "problem"),
        [
            (
                NO_RESUME,
                "state 'paused' has no 'run.resumed' in the new table (a Runner needs it in "
                "every 'paused' state)",
            ),
            (
                NO_TURN,
                "the run can come to state 'running', which has no 'model.started' in the new "
                "table (a Runner needs it in every 'active' state)",
            ),
        ],
    )
    def test_the_verb_refuses_and_writes_nothing(
        self, new: object, problem: str, tmp_path: Path
    ) -> None:
        """A `MigrationError` naming the state and the move; the run stays as it was."""
        db = _paused_store(tmp_path / "runs.db")
        options = StoreOptions(reducer=Reducer(DEFAULT_TABLE, tables=[new]))  # type: ignore[list-item]
        with SQLiteEventStore(db, options=options) as store:
            with pytest.raises(MigrationError) as info:
                migrate(store, "r1", to=new, by="ann", reason="v2")  # type: ignore[arg-type]
            assert info.value.problems == (problem,)
            assert str(info.value) == (
                "run 'r1' is 'paused': event 'run.migrated' (sequence 3) cannot move the run "
                f"from table {named(DEFAULT_TABLE)} to {named(new)}: {problem}"
            )
            assert store.load("r1").version == 2

    def test_the_command_refuses_with_exit_one(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One line on stderr with the reason; nothing written."""
        db = str(_paused_store(tmp_path / "runs.db"))
        args = ["migrate", "r1", "--to", SPECS["no_resume"], "--by", "ann", "--reason", "v2"]
        assert main([*args, "--store", db]) == 1
        assert capsys.readouterr() == (
            "",
            "agentfsm migrate: refused: run 'r1' is 'paused': event 'run.migrated' (sequence "
            f"3) cannot move the run from table {named(DEFAULT_TABLE)} to {named(NO_RESUME)}: "
            "state 'paused' has no 'run.resumed' in the new table (a Runner needs it in every "
            "'paused' state)\n",
        )
        with SQLiteEventStore(db) as store:
            assert store.load("r1").version == 2


class TestCheckTableAgainst:
    """`check-table NEW --against OLD` says where the new version strands a Runner."""

    def test_the_diff_says_it_and_exits_one(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The stranded state is a line of the diff; the new version takes something away."""
        args = ["check-table", SPECS["no_resume"], "--against", "agentfsm.fsm.default:DEFAULT_TABLE"]
        assert main(args) == 1
        lines = capsys.readouterr().out.splitlines()
        assert (
            "- state 'paused' has no 'run.resumed' in the new table (a Runner needs it in "
            "every 'paused' state)"
        ) in lines

    def test_a_paused_run_in_the_store_is_affected(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With `--store`, the paused run is listed with why it could not be moved."""
        db = str(_paused_store(tmp_path / "runs.db"))
        args = ["check-table", SPECS["no_turn"], "--against", "agentfsm.fsm.default:DEFAULT_TABLE"]
        assert main([*args, "--store", db, "--format", "json"]) == 1
        runs = json.loads(capsys.readouterr().out)["runs"]
        assert runs["affected"] == [
            {
                "run_id": "r1",
                "status": "paused",
                "reasons": [
                    "the run can come to state 'running', which has no 'model.started' in the "
                    "new table (a Runner needs it in every 'active' state)"
                ],
            }
        ]

