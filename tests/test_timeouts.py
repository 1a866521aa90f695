"""States that time out (issue 26, item 3): the declaration, its checks, and the fold.

An edge declared with `after=` is taken by time alone: its event is legal once the run has
stood in the edge's state that long, counted from the event that entered it (an edge that
stays in the state does not restart it; leaving and coming back does). The record says when
the run next times out (`RunRecord.timeout`), as the table the run is under says, also after
a migration. The runtime's side (timers, the Runner appending the event) is in
`tests/runtime/test_timeouts.py`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import DEFAULT_TABLE, State, Transition, TransitionTable
from agentfsm.cli import main
from agentfsm.errors import IllegalTransitionError, InvalidTableError, MigrationError
from agentfsm.events import BUILTIN_EVENTS, CustomEvent, Event, parse_event
from agentfsm.fsm._timeouts import duration_words
from agentfsm.fsm.check import check_table, table_from_spec
from agentfsm.fsm.diff import diff_tables
from agentfsm.fsm.needs import runner_problems
from agentfsm.record import RunRecord, Timeout
from agentfsm.reducers import Reducer
from agentfsm.reducers.snapshot import Snapshot
from tests.fixtures.loan import LOAN_TABLE, loan_table

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
WEEK = timedelta(days=7)
#: The loan lifecycle before it timed out (what a store may hold runs of).
UNTIMED = loan_table(documents_wait=None)


def at(delta: timedelta = timedelta(0)) -> str:
    """A timestamp `delta` after `T0`."""
    return (T0 + delta).isoformat()


def event(of: TransitionTable, sequence: int, type_: str, when: str, **fields: Any) -> Event:
    """One event of run `r1` in the vocabulary of table `of`."""
    return parse_event(
        {"run_id": "r1", "sequence": sequence, "type": type_, "occurred_at": when, **fields},
        events=of.event_types,
    )


def fold(table: TransitionTable, *events: Event) -> RunRecord:
    """`events` folded by a reducer of `table`."""
    return Reducer(table).replay(events)


def waiting(table: TransitionTable = LOAN_TABLE) -> list[Event]:
    """A loan run that entered `documents_requested` at `T0`."""
    return [event(table, 1, "run.started", at(), table=table.ref.model_dump())]


#: Docs a run is asked for, checked by a person who can send them back: a way to leave the
#: timed state and come back, and a reminder that stays in it.
RECHECKED = TransitionTable(
    name="rechecked",
    event_types=BUILTIN_EVENTS.extend(
        "docs.sent", "docs.returned", "docs.reminded", "docs.expired"
    ),
    states=[
        State("started"),
        State("asked", kind="waiting"),
        State("checking", kind="waiting"),
        State("done", terminal=True),
        State("expired", terminal=True),
    ],
    initial="started",
    transitions=[
        Transition("started", "run.started", "asked"),
        Transition("asked", "docs.reminded", "asked"),
        Transition("asked", "docs.sent", "checking"),
        Transition("asked", "docs.expired", "expired", after=WEEK),
        Transition("checking", "docs.returned", "asked"),
        Transition("checking", "run.completed", "done"),
    ],
)


class TestDeclaration:
    """`after=` makes an edge a timeout: its condition is its time."""

    def test_the_edge_is_conditioned_on_its_time(self) -> None:
        """The condition is named by the wait (`after 7 d`) and says how long."""
        edge = Transition("documents_requested", "loan.documents_expired", "declined", after=WEEK)
        assert edge.after == WEEK
        assert edge.condition is not None
        assert (edge.condition.name, edge.condition.after) == ("after 7 d", WEEK)
        assert edge.key == (
            "documents_requested",
            "loan.documents_expired",
            "declined",
            "after 7 d",
        )

    @pytest.mark.parametrize(
        ("after", "words"),
        [
            (timedelta(days=7), "7 d"),
            (timedelta(hours=36), "1 d 12 h"),
            (timedelta(minutes=90), "1 h 30 min"),
            (timedelta(seconds=90), "1 min 30 s"),
            (timedelta(milliseconds=1500), "1.5 s"),
            (timedelta(days=2, seconds=5), "2 d 5 s"),
        ],
    )
    def test_a_wait_in_words(self, after: timedelta, words: str) -> None:
        """Days, hours, minutes, seconds, as diagrams and messages say them."""
        assert duration_words(after) == words

    def test_a_wait_is_a_positive_timedelta(self) -> None:
        """Zero, a negative wait or a number of seconds are refused by name."""
        with pytest.raises(ValueError, match="positive") as zero:
            Transition("a", "e", "b", after=timedelta(0))
        assert str(zero.value) == "edge a --e--> b: after must be a positive duration, got 0:00:00"
        with pytest.raises(TypeError) as number:
            Transition("a", "e", "b", after=7)  # type: ignore[arg-type]
        assert str(number.value) == "edge a --e--> b: after must be a timedelta, got 7"

    def test_a_timeout_takes_no_other_condition(self) -> None:
        """The runtime appends the event with nothing but the clock to go by."""
        from tests.fixtures.loan import APPROVED

        with pytest.raises(ValueError, match="by time alone") as info:
            Transition("a", "e", "b", APPROVED, after=WEEK)
        assert str(info.value) == (
            "edge a --e--> b waits 7 d and has condition 'approved': an edge declared with "
            "after= is taken by time alone (the runtime appends its event with nothing else to "
            "go by); put the condition on another edge"
        )

    def test_the_timeout_is_part_of_the_tables_content(self) -> None:
        """Another wait, or none, is another digest; a table without timeouts keeps the
        digest it had before timeouts existed (its runs' logs name it)."""
        three_days = loan_table(documents_wait=timedelta(days=3))
        assert len({LOAN_TABLE.digest, three_days.digest, UNTIMED.digest}) == 3
        assert DEFAULT_TABLE.digest == (
            "sha256:3a8d78b732de41c02e45913d9a1a46549b22481209f5dec8e221b369f80e0391"
        )
        assert [t["after"] for t in LOAN_TABLE.describe()["transitions"] if "after" in t] == [
            604800
        ]

    def test_a_spec_keeps_the_timeout(self) -> None:
        """`check-table --spec` reads a described table back with its timeout."""
        name, states, initial, transitions, _ = table_from_spec(
            json.loads(json.dumps(LOAN_TABLE.describe()))
        )
        rebuilt = TransitionTable(name, states, initial, transitions, LOAN_TABLE.event_types)
        assert rebuilt.timeout("documents_requested") == LOAN_TABLE.timeout("documents_requested")
        assert rebuilt.digest == LOAN_TABLE.digest

    def test_the_table_says_which_states_time_out(self) -> None:
        """Each state's timed edges, and the one that falls due first (the shortest wait)."""
        from tests._diagram_tables import TIMED

        assert TIMED.timed_states == ("asked", "reminded")
        assert [t.event for t in TIMED.timeouts("asked")] == ["docs.expired", "docs.reminded"]
        first = TIMED.timeout("asked")
        assert first is not None
        assert (first.event, first.after) == ("docs.reminded", timedelta(hours=36))
        assert TIMED.timeout("started") is None


class Expired(CustomEvent):
    """An expiry that carries a reason it cannot do without."""

    type: Literal["docs.expired"] = "docs.expired"
    reason: str


class TestTableChecks:
    """A timeout that cannot work is one problem of `InvalidTableError`, by name."""

    def _problems(self, *transitions: Transition, events: Any = None) -> tuple[str, ...]:
        with pytest.raises(InvalidTableError) as info:
            TransitionTable(
                "t",
                [State("a"), State("w", kind="waiting"), State("end", terminal=True)],
                "a",
                [Transition("a", "run.started", "w"), Transition("w", "run.completed", "end"),
                 *transitions],
                events or BUILTIN_EVENTS.extend("x.expired"),
            )  # fmt: skip
        return info.value.problems

    def test_a_timeout_must_leave_its_state(self) -> None:
        """Counted from entering the state, it would fall due again at once."""
        assert self._problems(Transition("w", "x.expired", "w", after=WEEK)) == (
            "edge w --x.expired--> w waits 7 d and stays in 'w': a timeout must leave its "
            "state (the time is counted from entering it, so it would fall due again at once)",
        )

    def test_the_initial_state_cannot_time_out(self) -> None:
        """No event enters it: there is no time to count from."""
        assert self._problems(Transition("a", "x.expired", "end", after=WEEK)) == (
            "edge a --x.expired--> end waits 7 d in the initial state 'a', which no event "
            "enters: there is no time to count from",
        )

    def test_the_event_must_be_one_the_runtime_can_build(self) -> None:
        """It is appended with no fields: a required field is named, with the way out."""
        problems = self._problems(
            Transition("w", "docs.expired", "end", after=WEEK),
            events=BUILTIN_EVENTS.extend(Expired),
        )
        assert problems == (
            "edge w --docs.expired--> end waits 7 d, so the runtime appends 'docs.expired' by "
            "itself, with no fields: it requires 'reason' (give it a default)",
        )
        built_in = self._problems(Transition("w", "run.failed", "end", after=WEEK))
        assert built_in == (
            "edge w --run.failed--> end waits 7 d, so the runtime appends 'run.failed' by "
            "itself, with no fields: it requires 'error' (give it a default)",
        )

    def test_one_timeout_per_state_and_event(self) -> None:
        """Two waits on one event would say two times for one thing."""
        assert self._problems(
            Transition("w", "x.expired", "end", after=WEEK),
            Transition("w", "x.expired", "a", after=timedelta(days=3)),
        ) == (
            "'w' on 'x.expired': 2 edges wait (7 d, 3 d); a state times out on one event "
            "once: give the others events of their own",
        )

    def test_every_problem_at_once(self) -> None:
        """A loop out of the initial state: both sentences, in one error."""
        assert len(self._problems(Transition("a", "x.expired", "a", after=WEEK))) == 2

    def test_a_state_a_runner_drives_cannot_time_out(self) -> None:
        """A Runner never waits in an active state: check-table says so, and the Runner
        refuses the table (the table itself still checks logs others write)."""
        table = DEFAULT_TABLE.derive(
            add_events=["x.slow"],
            add=[Transition("running", "x.slow", "failed", after=timedelta(hours=1))],
        )
        problem = (
            "state 'running' times out ('x.slow' after 1 h), but it is 'active': a Runner "
            "drives a run there without waiting, so no timeout falls due; only a 'waiting' "
            "or 'paused' state times out (declare its kind)"
        )
        assert runner_problems(table) == (problem,)
        assert check_table(table).errors == (problem,)

    def test_a_waiting_or_paused_state_may_time_out(self) -> None:
        """The loan's documents, and a pause that is cancelled after a day."""
        paused = DEFAULT_TABLE.derive(
            add=[
                Transition("paused", "run.cancel_requested", "cancelled", after=timedelta(days=1))
            ],
            remove=[("paused", "run.cancel_requested", "cancel_requested")],
        )
        assert runner_problems(LOAN_TABLE) == ()
        assert runner_problems(paused) == ()


class TestFold:
    """The reducer takes a timeout's event at or after its time, never before."""

    def test_at_its_time_the_event_is_taken(self) -> None:
        """Seven days after the run entered `documents_requested` it may be declined."""
        record = fold(
            LOAN_TABLE, *waiting(), event(LOAN_TABLE, 2, "loan.documents_expired", at(WEEK))
        )
        assert (record.status, record.timeout) == ("declined", None)
        assert record.custom == {"declined_because": "no documents in time"}

    def test_the_record_says_when_it_times_out(self) -> None:
        """Entering the state sets the time it counts from and the timeout due then."""
        record = fold(LOAN_TABLE, *waiting())
        assert record.entered_at == at()
        assert record.timeout == Timeout("loan.documents_expired", at(WEEK))

    def test_before_its_time_the_event_is_refused(self) -> None:
        """A second early: refused, naming the condition and when it falls due."""
        early = event(LOAN_TABLE, 2, "loan.documents_expired", at(WEEK - timedelta(seconds=1)))
        with pytest.raises(IllegalTransitionError) as info:
            fold(LOAN_TABLE, *waiting(), early)
        assert info.value.failed_conditions == ("after 7 d",)
        assert info.value.due_at == at(WEEK)
        assert str(info.value) == (
            "run 'r1' is 'documents_requested': event 'loan.documents_expired' (sequence 2) "
            "is not allowed: condition 'after 7 d' does not hold (it comes before its time: "
            "the timeout falls due at 2026-09-08T10:00:00+00:00); allowed: "
            "'loan.documents_expired', 'loan.documents_received', 'run.cancel_requested', "
            "'run.failed', 'run.terminated'"
        )

    def test_staying_in_the_state_does_not_restart_it(self) -> None:
        """A reminder six days in stays in `asked`: the expiry is still due on day 7."""
        record = fold(
            RECHECKED,
            event(RECHECKED, 1, "run.started", at()),
            event(RECHECKED, 2, "docs.reminded", at(timedelta(days=6))),
            event(RECHECKED, 3, "docs.expired", at(WEEK)),
        )
        assert record.status == "expired"

    def test_coming_back_restarts_it(self) -> None:
        """Sent on day 5, returned on day 6: the week counts from day 6."""
        back = [
            event(RECHECKED, 1, "run.started", at()),
            event(RECHECKED, 2, "docs.sent", at(timedelta(days=5))),
            event(RECHECKED, 3, "docs.returned", at(timedelta(days=6))),
        ]
        record = fold(RECHECKED, *back)
        assert (record.entered_at, record.timeout) == (
            at(timedelta(days=6)),
            Timeout("docs.expired", at(timedelta(days=13))),
        )
        with pytest.raises(IllegalTransitionError) as info:
            fold(RECHECKED, *back, event(RECHECKED, 4, "docs.expired", at(timedelta(days=8))))
        assert info.value.due_at == at(timedelta(days=13))
        done = fold(RECHECKED, *back, event(RECHECKED, 4, "docs.expired", at(timedelta(days=13))))
        assert done.status == "expired"

    def test_leaving_the_state_drops_the_timeout(self) -> None:
        """In `checking` nothing waits: no timeout, and the expiry is not allowed."""
        record = fold(
            RECHECKED,
            event(RECHECKED, 1, "run.started", at()),
            event(RECHECKED, 2, "docs.sent", at(timedelta(days=1))),
        )
        assert (record.status, record.timeout) == ("checking", None)

    @given(
        entered=st.integers(0, 10**8),
        wait=st.integers(1, 10**8),
        offset=st.integers(-(10**8), 10**8),
    )
    def test_the_event_is_taken_exactly_from_its_time_on(
        self, entered: int, wait: int, offset: int
    ) -> None:
        """For any entry, wait and moment (in milliseconds): legal exactly when the moment
        is at or past the entry plus the wait."""
        table = RECHECKED.derive(
            remove=[("asked", "docs.expired", "expired")],
            add=[
                Transition("asked", "docs.expired", "expired", after=timedelta(milliseconds=wait))
            ],
        )
        start = timedelta(milliseconds=entered)
        moment = start + timedelta(milliseconds=wait + offset)
        events = [
            event(table, 1, "run.started", at(start)),
            event(table, 2, "docs.expired", at(moment)),
        ]
        if offset >= 0:
            assert fold(table, *events).status == "expired"
            return
        with pytest.raises(IllegalTransitionError) as info:
            fold(table, *events)
        assert info.value.due_at == at(start + timedelta(milliseconds=wait))

    def test_the_record_reads_back_with_its_timeout(self) -> None:
        """JSON and snapshots keep `entered_at` and `timeout`, byte for byte."""
        record = fold(LOAN_TABLE, *waiting())
        assert RunRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
        assert record.to_json()["timeout"] == {
            "event": "loan.documents_expired",
            "at": "2026-09-08T10:00:00+00:00",
        }
        snapshot = Snapshot(record)
        assert Snapshot.loads(snapshot.dumps()) == snapshot


class TestMigration:
    """A migrated run keeps or drops its timeout as the new table says, counted from when
    it came to its state (not from the migration)."""

    def _migrated(self, old: TransitionTable, new: TransitionTable, when: str) -> RunRecord:
        events = [
            *waiting(old),
            event(
                old, 2, "run.migrated", when,
                from_table=old.ref.model_dump(), to_table=new.ref.model_dump(),
                by="ops", reason="the documents now expire",
            ),
        ]  # fmt: skip
        return Reducer(new, tables=[old]).replay(events)

    def test_to_a_table_that_times_out(self) -> None:
        """Migrated on day 3 to the timed table: due on day 7 still."""
        record = self._migrated(UNTIMED, LOAN_TABLE, at(timedelta(days=3)))
        assert record.timeout == Timeout("loan.documents_expired", at(WEEK))
        assert record.entered_at == at()

    def test_to_a_table_without_the_timeout(self) -> None:
        """Migrated to the untimed table: nothing waits, and the expiry is not allowed."""
        record = self._migrated(LOAN_TABLE, UNTIMED, at(timedelta(days=3)))
        assert record.timeout is None
        late = event(LOAN_TABLE, 3, "loan.documents_expired", at(timedelta(days=8)))
        with pytest.raises(IllegalTransitionError):
            Reducer(UNTIMED, tables=[LOAN_TABLE]).reduce(record, late)

    def test_to_another_wait(self) -> None:
        """Three days instead of seven: due on day 3, from the same entry."""
        shorter = loan_table(documents_wait=timedelta(days=3))
        record = self._migrated(LOAN_TABLE, shorter, at(timedelta(days=1)))
        assert record.timeout == Timeout("loan.documents_expired", at(timedelta(days=3)))

    def test_a_migration_past_the_new_wait_leaves_it_due(self) -> None:
        """Ten days in, migrated to a table that waits seven: it is due already."""
        record = self._migrated(UNTIMED, LOAN_TABLE, at(timedelta(days=10)))
        assert record.timeout == Timeout("loan.documents_expired", at(WEEK))

    def test_the_migration_itself_is_checked_as_before(self) -> None:
        """A state missing from the new table is still refused (the timeout changes nothing)."""
        other = UNTIMED.derive(remove_states=["documents_requested"], add_states=[],
                               initial="created",
                               add=[Transition("created", "run.started", "running")])  # fmt: skip
        with pytest.raises(MigrationError):
            self._migrated(LOAN_TABLE, other, at(timedelta(days=1)))


class TestChanges:
    """A timeout added, removed or changed is a change between versions, said so."""

    def test_adding_one_gains_the_waiting_runs_a_move(self) -> None:
        """The edge is new, a run standing there gains it (nothing it relies on goes)."""
        diff = diff_tables(UNTIMED, LOAN_TABLE)
        assert diff.sentences() == (
            "'documents_requested' on 'loan.documents_expired' is now allowed: to 'declined' "
            "after 7 d",
            "event type 'loan.documents_expired' was added",
        )
        assert diff.adds("documents_requested") == (
            "it gains moves: 'loan.documents_expired' (a timeout after 7 d)",
        )
        assert diff.breaks("documents_requested") == ()
        assert diff.moves[0].to_json()["new"] == [
            {"target": "declined", "condition": "after 7 d", "guards": [], "after": 604800}
        ]

    def test_removing_one_takes_it_away(self) -> None:
        """The expiry goes: a run waiting for its documents relies on it."""
        diff = diff_tables(LOAN_TABLE, UNTIMED)
        assert diff.sentences()[:2] == (
            "event type 'loan.documents_expired' was removed",
            "'documents_requested' on 'loan.documents_expired' is no longer allowed (it went "
            "to 'declined' after 7 d)",
        )
        assert diff.breaks("documents_requested") == (
            "its moves changed: 'loan.documents_expired' removed",
        )

    def test_another_wait_is_a_changed_move(self) -> None:
        """Seven days to three: one sentence, the same alternative."""
        diff = diff_tables(LOAN_TABLE, loan_table(documents_wait=timedelta(days=3)))
        assert diff.sentences() == (
            "'documents_requested' on 'loan.documents_expired': the timeout to 'declined' "
            "waits 3 d, was 7 d",
        )
        assert diff.takes_away


class TestCheckTable:
    """`check-table` lists every timeout, and `--against` every change of one."""

    def test_the_report_lists_the_timeouts(self) -> None:
        """A line per timed edge, in the text and in the JSON."""
        report = check_table(LOAN_TABLE)
        assert report.timeouts == (
            {
                "state": "documents_requested",
                "event": "loan.documents_expired",
                "target": "declined",
                "after": 604800,
            },
        )
        assert (
            "timeout: 'documents_requested' after 7 d: 'loan.documents_expired' to 'declined'"
            in report.render().splitlines()
        )
        assert (
            "note: 'documents_requested' on 'loan.documents_expired' is refused before its "
            "time (after 7 d)" in report.render().splitlines()
        )

    def test_the_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`agentfsm check-table --table ...` prints it and exits 0."""
        assert main(["check-table", "--table", "tests.fixtures.loan:LOAN_TABLE"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line for line in lines if line.startswith("timeout: ")] == [
            "timeout: 'documents_requested' after 7 d: 'loan.documents_expired' to 'declined'",
        ]

    def test_against_an_older_version(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The added timeout is listed; adding it takes nothing away (exit 0), changing its
        wait does (exit 1)."""
        module = tmp_path / "loan_versions.py"
        module.write_text(
            "from datetime import timedelta\n"
            "from tests.fixtures.loan import loan_table\n"
            "UNTIMED = loan_table(documents_wait=None)\n"
            "SHORTER = loan_table(documents_wait=timedelta(days=3))\n",
            encoding="utf-8",
        )
        import sys

        sys.path.insert(0, str(tmp_path))
        try:
            added = main(
                [
                    "check-table",
                    "tests.fixtures.loan:LOAN_TABLE",
                    "--against",
                    "loan_versions:UNTIMED",
                ]
            )
            out = capsys.readouterr().out
            changed = main(
                [
                    "check-table",
                    "loan_versions:SHORTER",
                    "--against",
                    "tests.fixtures.loan:LOAN_TABLE",
                ]
            )
            changed_out = capsys.readouterr().out
        finally:
            sys.path.remove(str(tmp_path))
        assert added == 0
        assert (
            "'documents_requested' on 'loan.documents_expired' is now allowed: to 'declined' "
            "after 7 d" in out
        )
        assert changed == 1
        assert (
            "'documents_requested' on 'loan.documents_expired': the timeout to 'declined' "
            "waits 3 d, was 7 d" in changed_out
        )
