"""Versions of a table: what a change does, which runs in flight it touches, and that a run
keeps the version it started with.

The ticket lifecycle's two versions (`examples/lifecycles/ticket.py`, `ticket_v2.py`: v2
drops `escalated_urgent` and lets `escalated` be paused) are the running example.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from agentfsm import DEFAULT_TABLE
from agentfsm.cli import main
from agentfsm.errors import TableMismatchError
from agentfsm.events import BUILTIN_EVENTS, CustomEvent, LogBuilder
from agentfsm.events.models import RunStarted
from agentfsm.fsm import Condition, State, Transition, TransitionTable
from agentfsm.fsm.diff import Edge, KindChange, diff_tables
from agentfsm.fsm.registry import lookup, register
from agentfsm.names import StateKind
from agentfsm.reducers import Reducer
from agentfsm.runtime import submit
from agentfsm.stores import SQLiteEventStore, StoreOptions
from examples.lifecycles.ticket import TICKET_TABLE
from examples.lifecycles.ticket_v2 import TICKET_TABLE_V2

V1 = "examples.lifecycles.ticket:TICKET_TABLE"
V2 = "examples.lifecycles.ticket_v2:TICKET_TABLE_V2"

#: What v2 changes, as `diff_tables(TICKET_TABLE, TICKET_TABLE_V2).sentences()` says it.
V1_TO_V2 = (
    "state 'escalated_urgent' was removed",
    "'escalated_urgent' on 'run.cancel_requested' is no longer allowed (it went to "
    "'cancel_requested')",
    "'escalated_urgent' on 'run.failed' is no longer allowed (it went to 'failed')",
    "'escalated_urgent' on 'run.terminated' is no longer allowed (it went to 'terminated')",
    "'escalated_urgent' on 'ticket.handed_back' is no longer allowed (it went to 'running')",
    "'running' on 'ticket.escalated': the edge to 'escalated_urgent' when 'urgent' was removed",
    "'escalated' on 'run.paused' is now allowed: to 'paused'",
)


def _always(_record: Any, _event: Any) -> bool:
    return True


X, Y = Condition("x", _always), Condition("y", _always)


def tiny(
    *transitions: Transition, b_kind: StateKind = StateKind.WAITING, name: str = "tiny"
) -> TransitionTable:
    """`a` (active) and `b` to `done`; `a` reaches `b` on `run.paused`, and `b` ends on
    `run.terminated`, in every variant."""
    return TransitionTable(
        name,
        [State("a"), State("b", kind=b_kind), State("done", terminal=True)],
        "a",
        [
            Transition("a", "run.paused", "b"),
            Transition("b", "run.terminated", "done"),
            *transitions,
        ],
    )


class TestTheDiff:
    """`diff_tables` lists every difference, one sentence each, in a stable order."""

    def test_the_ticket_tables_second_version(self) -> None:
        """Removals first (a state, the moves leaving it), then changes, then additions."""
        diff = diff_tables(TICKET_TABLE, TICKET_TABLE_V2)
        assert diff.sentences() == V1_TO_V2
        assert diff.summary() == "moves: 4 removed, 1 changed, 1 added"
        assert (diff.identical, diff.takes_away) == (False, True)
        assert diff.moves_of("changed")[0].old == (
            Edge("escalated_urgent", "urgent"),
            Edge("escalated"),
        )

    def test_a_table_against_itself_is_the_same_version(self) -> None:
        """Equal digests: no sentence, nothing taken away."""
        diff = diff_tables(TICKET_TABLE, TICKET_TABLE)
        assert (diff.identical, diff.sentences(), diff.takes_away) == (True, (), False)

    def test_kinds_targets_guards_and_moves(self) -> None:
        """A kind, a conditional edge's target and an edge's guards change; a move goes, one
        comes."""
        old = tiny(
            Transition("a", "model.started", "b", X),
            Transition("a", "model.started", "a"),
            Transition("b", "run.completed", "done", guards=("max_turns",)),
            Transition("b", "run.failed", "done"),
        )
        new = tiny(
            Transition("a", "model.started", "done", X),
            Transition("a", "model.started", "a"),
            Transition("b", "run.completed", "done"),
            Transition("a", "run.failed", "done"),
            b_kind=StateKind.PAUSED,
        )
        diff = diff_tables(old, new)
        assert diff.kinds_changed == (KindChange("b", StateKind.WAITING, StateKind.PAUSED),)
        assert diff.sentences() == (
            "state 'b' is 'paused', was 'waiting'",
            "'b' on 'run.failed' is no longer allowed (it went to 'done')",
            "'a' on 'model.started': the edge when 'x' goes to 'done', was 'b'",
            "'b' on 'run.completed': the edge checks no guards, was 'max_turns'",
            "'a' on 'run.failed' is now allowed: to 'done'",
        )

    def test_the_order_conditions_are_tried_in(self) -> None:
        """The first condition that holds wins, so swapping two is a change."""
        old = tiny(
            Transition("a", "model.started", "b", X),
            Transition("a", "model.started", "done", Y),
        )
        new = tiny(
            Transition("a", "model.started", "done", Y),
            Transition("a", "model.started", "b", X),
        )
        assert diff_tables(old, new).sentences() == (
            "'a' on 'model.started': conditions are tried in the order 'y', 'x', was 'x', 'y'",
        )

    def test_a_change_that_only_adds_takes_nothing_away(self) -> None:
        """The default table to the ticket table: a new name, states, event types, moves."""
        diff = diff_tables(DEFAULT_TABLE, TICKET_TABLE)
        assert diff.takes_away is False
        assert diff.sentences()[0] == "the table is named 'support_ticket', was 'agent_run'"
        assert diff.states_added == ("escalated", "escalated_urgent")
        assert diff.events_added == ("ticket.escalated", "ticket.handed_back")
        assert diff.summary() == "moves: 0 removed, 0 changed, 9 added"

    def test_an_own_event_type_with_other_fields(self) -> None:
        """Its schema is part of the digest, so the diff names it."""

        class Escalated(CustomEvent):
            type: Literal["ticket.escalated"] = "ticket.escalated"
            escalated_to: str
            team: str = "support"

        other = ticket_like(Escalated)
        diff = diff_tables(TICKET_TABLE, other)
        assert diff.sentences() == ("event type 'ticket.escalated' has other fields",)
        assert diff.takes_away is True

    def test_edges_declared_in_another_order(self) -> None:
        """Another digest, the same moves: the diff says so rather than print nothing."""
        old = tiny(Transition("b", "run.completed", "done"), Transition("b", "run.failed", "done"))
        new = tiny(Transition("b", "run.failed", "done"), Transition("b", "run.completed", "done"))
        diff = diff_tables(old, new)
        assert diff.sentences() == ("edges are declared in another order; every move is the same",)
        assert (diff.identical, diff.takes_away) == (False, False)

    def test_which_states_a_change_touches(self) -> None:
        """A removed state, a state whose moves changed; others are untouched."""
        diff = diff_tables(TICKET_TABLE, TICKET_TABLE_V2)
        assert diff.affects("escalated_urgent") == (
            "state 'escalated_urgent' is not in the new table",
        )
        assert diff.affects("running") == ("its moves changed: 'ticket.escalated' changed",)
        assert diff.affects("escalated") == ("its moves changed: 'run.paused' added",)
        assert diff.affects("waiting_approval") == ()

    def test_what_breaks_a_run_apart_from_what_only_adds(self) -> None:
        """`breaks` is what a run there relies on and loses; `adds` the moves it gains."""
        diff = diff_tables(TICKET_TABLE, TICKET_TABLE_V2)
        assert [(diff.breaks(s), diff.adds(s)) for s in ("running", "escalated")] == [
            (("its moves changed: 'ticket.escalated' changed",), ()),
            ((), ("it gains moves: 'run.paused'",)),
        ]
        assert diff.breaks("escalated_urgent") == (
            "state 'escalated_urgent' is not in the new table",
        )


def ticket_like(escalated: type[CustomEvent]) -> TransitionTable:
    """The ticket table, its `ticket.escalated` declared by `escalated` instead."""
    events = BUILTIN_EVENTS.extend(
        escalated, TICKET_TABLE.event_types.classes["ticket.handed_back"]
    )
    return TransitionTable(
        TICKET_TABLE.name,
        TICKET_TABLE.states,
        TICKET_TABLE.initial,
        TICKET_TABLE.transitions,
        events,
    )


def ticket_store(path: Path) -> Path:
    """Runs of both versions and of the default table, some in flight, one done."""

    def run(table: TransitionTable, run_id: str, *steps: tuple[str, dict[str, Any]]) -> None:
        with SQLiteEventStore(path, options=StoreOptions(reducer=Reducer(table))) as store:
            submit(store, run_id, "refund")
            if steps:
                log = LogBuilder(run_id, start=2, events=table.event_types)
                for type_, fields in steps:
                    log.add(type_, **fields)
                store.append(run_id, log.events, 1)

    run(TICKET_TABLE, "t-1")
    run(TICKET_TABLE, "t-2", ("ticket.escalated", {"escalated_to": "ann", "priority": "urgent"}))
    run(TICKET_TABLE, "t-3", ("ticket.escalated", {"escalated_to": "ann"}))
    run(TICKET_TABLE, "t-4", ("run.cancel_requested", {}), ("run.cancelled", {}))
    run(TICKET_TABLE_V2, "t-5", ("ticket.escalated", {"escalated_to": "bob"}))
    run(DEFAULT_TABLE, "d-1")
    return path


class TestTheCommandLine:
    """`agentfsm check-table NEW --against OLD [--store]`."""

    def test_the_diff_as_text(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Both versions named by digest, a line per change, a count; exit 1: it removes."""
        assert main(["check-table", V2, "--against", V1]) == 1
        assert capsys.readouterr().out.splitlines() == [
            f"old: 'support_ticket' ({TICKET_TABLE.digest})",
            f"new: 'support_ticket' ({TICKET_TABLE_V2.digest})",
            *(f"- {s}" for s in V1_TO_V2),
            "moves: 4 removed, 1 changed, 1 added",
        ]

    def test_a_change_that_only_adds_exits_0(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The ticket table against the default one, with `--table` naming the new one."""
        assert main(["check-table", "--table", V1, "--against", "agentfsm:DEFAULT_TABLE"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "moves: 0 removed, 0 changed, 9 added"

    def test_spec_files(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Two table specs diff like the tables (their own event types by name only)."""
        (tmp_path / "v1.json").write_text(json.dumps(TICKET_TABLE.describe()), encoding="utf-8")
        (tmp_path / "v2.json").write_text(json.dumps(TICKET_TABLE_V2.describe()), encoding="utf-8")
        code = main(
            ["check-table", str(tmp_path / "v2.json"), "--against", str(tmp_path / "v1.json")]
        )
        assert code == 1
        lines = capsys.readouterr().out.splitlines()
        assert lines[2:] == [*(f"- {s}" for s in V1_TO_V2), "moves: 4 removed, 1 changed, 1 added"]

    def test_the_runs_in_flight_it_touches(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Runs under v1 standing where the change takes away a move are affected, with
        why; one that only gains a move is extended; the cancelled one is done; runs under
        other tables are not compared. Exit 1 (two runs are affected)."""
        db = ticket_store(tmp_path / "runs.db")
        assert main(["check-table", V2, "--against", V1, "--store", str(db)]) == 1
        out = capsys.readouterr().out.splitlines()
        assert out[len(V1_TO_V2) + 3 :] == [
            "runs in flight: 5 checked, 2 affected, 1 extended, 0 migrated, 2 not compared",
            "affected: run 't-1' in 'running': its moves changed: 'ticket.escalated' changed",
            "affected: run 't-2' in 'escalated_urgent': state 'escalated_urgent' is not in "
            "the new table",
            "extended: run 't-3' in 'escalated': it gains moves: 'run.paused'",
            f"not compared: run 'd-1' in 'running': started under 'agent_run' "
            f"({DEFAULT_TABLE.digest}), not the old version",
            "not compared: run 't-5' in 'escalated': started under the new version already",
        ]

    def test_no_run_touched_exits_0(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A change to `waiting_approval` only, and no run waiting there: exit 0, though the
        change removes a move."""
        db = ticket_store(tmp_path / "runs.db")
        new = "tests.test_versions:NO_TERMINATE_WHILE_APPROVING"
        assert main(["check-table", new, "--against", V1, "--store", str(db)]) == 0
        assert capsys.readouterr().out.splitlines()[-3:] == [
            "runs in flight: 5 checked, 0 affected, 0 extended, 0 migrated, 2 not compared",
            f"not compared: run 'd-1' in 'running': started under 'agent_run' "
            f"({DEFAULT_TABLE.digest}), not the old version",
            f"not compared: run 't-5' in 'escalated': started under 'support_ticket' "
            f"({TICKET_TABLE_V2.digest}), not the old version",
        ]

    def test_as_json(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The structured diff, its sentences, and the runs."""
        db = ticket_store(tmp_path / "runs.db")
        args = ["check-table", V2, "--against", V1, "--store", str(db), "--format", "json"]
        assert main(args) == 1
        out = json.loads(capsys.readouterr().out)
        assert out["sentences"] == list(V1_TO_V2)
        assert out["states"]["removed"] == ["escalated_urgent"]
        assert out["moves"][4] == {
            "source": "running",
            "event": "ticket.escalated",
            "change": "changed",
            "old": [
                {"target": "escalated_urgent", "condition": "urgent", "guards": []},
                {"target": "escalated", "condition": None, "guards": []},
            ],
            "new": [{"target": "escalated", "condition": None, "guards": []}],
            "details": [V1_TO_V2[5]],
        }
        assert out["runs"]["affected"][1] == {
            "run_id": "t-2",
            "status": "escalated_urgent",
            "reasons": ["state 'escalated_urgent' is not in the new table"],
        }
        assert (out["runs"]["checked"], len(out["runs"]["not_compared"])) == (5, 2)

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                [V2, "--table", V1],
                "agentfsm check-table: give NEW or --table/--spec, not both",
            ),
            (["--store", "x.db"], "agentfsm check-table: --store goes with --against OLD"),
            (
                [V2, "--against", V1, "--matrix"],
                "agentfsm check-table: --matrix does not go with --against",
            ),
        ],
    )
    def test_usage_errors(
        self, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Arguments that do not go together: exit 2, one line."""
        assert main(["check-table", *args]) == 2
        assert capsys.readouterr().err == message + "\n"

    def test_an_old_version_that_is_not_a_table(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """OLD must be a valid table to compare with: its problems are named, exit 2."""
        spec = dict(DEFAULT_TABLE.describe())
        spec["initial"] = "nowhere"
        (tmp_path / "old.json").write_text(json.dumps(spec), encoding="utf-8")
        assert main(["check-table", V1, "--against", str(tmp_path / "old.json")]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm check-table: --against '{tmp_path / 'old.json'}' is not a valid table: "
            "initial state 'nowhere' is not declared\n"
        )


#: The ticket table without `waiting_approval --run.terminated--> terminated`.
NO_TERMINATE_WHILE_APPROVING = TICKET_TABLE.derive(
    remove=[("waiting_approval", "run.terminated", "terminated")]
)


class TestARunKeepsItsVersion:
    """Both versions registered, one store: each run is loaded with its own version."""

    def test_each_run_loads_with_the_version_it_started_with(self, tmp_path: Path) -> None:
        """Open the store per run with the table its `run.started` names (the registry finds
        it by digest): the v1 run in `escalated_urgent`, a state v2 no longer has, loads as
        well as the v2 run; folding the v1 run with v2 is refused, naming both."""
        register(TICKET_TABLE, TICKET_TABLE_V2)
        db = ticket_store(tmp_path / "runs.db")
        loaded = {}
        for run_id in ("t-2", "t-5"):
            with SQLiteEventStore(db) as plain:  # `run.started` reads under any table
                started = next(plain.events(run_id))
            assert isinstance(started, RunStarted)
            assert started.table is not None
            ref = started.table
            table = lookup(ref)
            with SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(table))) as store:
                loaded[run_id] = (table, store.load(run_id).status)
        assert loaded == {
            "t-2": (TICKET_TABLE, "escalated_urgent"),
            "t-5": (TICKET_TABLE_V2, "escalated"),
        }
        with SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(TICKET_TABLE))) as store:
            events = list(store.events("t-2"))
        with pytest.raises(TableMismatchError) as info:
            Reducer(TICKET_TABLE_V2).replay(events)
        assert str(info.value) == (
            f"run 't-2' is 'created': event 'run.started' (sequence 1) was started under "
            f"table 'support_ticket' ({TICKET_TABLE.digest}), not 'support_ticket' "
            f"({TICKET_TABLE_V2.digest}): fold it with the table it started with (`--table`, "
            "or the registry of `agentfsm.fsm.registry`)"
        )
        assert (info.value.started_under, info.value.folded_with) == (
            f"'support_ticket' ({TICKET_TABLE.digest})",
            f"'support_ticket' ({TICKET_TABLE_V2.digest})",
        )

    def test_a_store_opened_with_the_new_version_refuses_an_old_run(self, tmp_path: Path) -> None:
        """Loading, not only replaying, is refused, as a table mismatch (not as corruption:
        nothing is wrong with the stored log)."""
        db = ticket_store(tmp_path / "runs.db")
        with SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(TICKET_TABLE_V2))) as store:
            with pytest.raises(TableMismatchError) as info:
                store.load("t-1")
            assert str(info.value) == (
                "run 't-1' is 'created': event 'run.started' (sequence 1) was started under table "
                f"'support_ticket' ({TICKET_TABLE.digest}), not 'support_ticket' "
                f"({TICKET_TABLE_V2.digest}): fold it with the table it started with "
                "(`--table`, or the registry of `agentfsm.fsm.registry`); if it was migrated "
                f"to 'support_ticket' ({TICKET_TABLE_V2.digest}) since, the table it started "
                "with must be known too (`register()` it, or pass it in `Reducer(tables=...)`)"
            )
            assert store.load("t-5").status == "escalated"


def test_the_docs_show_what_the_command_prints(tmp_path: Path) -> None:
    """The "Versions" example of docs/lifecycles.md, run on the store `ticket_store` builds,
    prints exactly the block the page shows."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "lifecycles.md").read_text(
        encoding="utf-8"
    )
    block = page.split("### Versions", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    command, *shown = block.splitlines()
    args = command.removeprefix("$ agentfsm ").split()
    assert args[-2:] == ["--store", "runs.db"]
    db = ticket_store(tmp_path / "runs.db")
    out = subprocess.run(
        [sys.executable, "-m", "agentfsm", *args[:-1], str(db)],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert (out.returncode, out.stdout.splitlines(), out.stderr) == (1, shown, "")
