"""`--table` once per version, or a module attribute listing them (issue 26, item 5).

After `migrate`, a run is under v2 but its log starts under v1: a command given only one
version refused it with a misleading `is 'created'`. Each `--table` (or a list of tables)
adds versions; the run is opened with the one its log names, and a version it needs that
is not given is named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from agentfsm import SQLiteEventStore
from agentfsm.cli import main
from agentfsm.reducers import Reducer
from agentfsm.stores import StoreOptions
from tests.fixtures.loan import LOAN_TABLE, LOAN_TABLE_V2, loan_runs

V1 = "tests.fixtures.loan:LOAN_TABLE"
V2 = "tests.fixtures.loan:LOAN_TABLE_V2"
BOTH = "tests.fixtures.loan:LOAN_TABLES"
LATE = 'document_ids:=["late-1"]'


def named(table: object) -> str:
    return f"'loan_application' ({table.digest})"  # type: ignore[attr-defined]


@pytest.fixture
def migrated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A store of the loan runs, `loan-uw` migrated to v2 while it waits for the
    underwriter."""
    db = tmp_path / "runs.db"
    options = StoreOptions(reducer=Reducer(LOAN_TABLE))
    with structlog.testing.capture_logs(), SQLiteEventStore(db, options=options) as store:
        loan_runs(store)
    args = ["migrate", "loan-uw", "--table", V1, "--to", V2, "--by", "ann", "--reason", "v2"]
    assert main([*args, "--store", str(db)]) == 0
    capsys.readouterr()
    return str(db)


class TestARunUnderTwoVersions:
    """A steering command meets the migrated run."""

    @pytest.mark.parametrize("tables", [["--table", V1, "--table", V2], ["--table", BOTH]])
    def test_both_versions_given_open_it(
        self, migrated: str, tables: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Given as two flags or as one list, the run is opened with v2 (its log's), the
        part before the migration folded with v1: a late document is recorded."""
        args = ["append", "loan-uw", "loan.documents_received", LATE, *tables]
        assert main([*args, "--store", migrated]) == 0
        assert capsys.readouterr() == ("run loan-uw: underwriting (version 7)\n", "")

    def test_v2_alone_names_the_version_it_started_under(
        self, migrated: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Exit 2 before anything is read or written, naming v1 and what to do."""
        args = ["append", "loan-uw", "loan.documents_received", LATE, "--table", V2]
        assert main([*args, "--store", migrated]) == 2
        assert capsys.readouterr() == (
            "",
            f"agentfsm append: run 'loan-uw' was started under table {named(LOAN_TABLE)}, "
            f"which is not among the --table given ({named(LOAN_TABLE_V2)}) nor registered: "
            "give that version too (--table once per version, or MODULE:ATTR of a list of "
            "them)\n",
        )

    def test_v1_alone_names_the_version_it_is_under(
        self, migrated: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The run is under v2 now: v1 alone is not its table."""
        args = ["append", "loan-uw", "loan.documents_received", LATE, "--table", V1]
        assert main([*args, "--store", migrated]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm append: run 'loan-uw' is under table {named(LOAN_TABLE_V2)}, which is "
            f"not among the --table given ({named(LOAN_TABLE)}): give that version too "
            "(--table once per version, or MODULE:ATTR of a list of them)\n"
        )

    def test_a_run_of_the_old_version_is_opened_with_it(
        self, migrated: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The list holds v1 too: a run still under v1 is steered under v1."""
        args = ["cancel", "loan-docs", "--reason", "withdrawn", "--table", BOTH]
        assert main([*args, "--store", migrated]) == 0
        assert capsys.readouterr().out == "run loan-docs: cancel_requested (version 2)\n"


class TestLogsOfTwoVersions:
    """A log-reading command picks, among the versions given, the one its run names."""

    def test_export_then_replay_the_migrated_run(
        self, migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Export reads every run with both versions known; replay folds the migrated one
        with v2, the start with v1."""
        log = tmp_path / "runs.jsonl"
        assert main(["export", "--store", migrated, "--table", BOTH, "-o", str(log)]) == 0
        capsys.readouterr()
        assert main(["replay", str(log), "--run-id", "loan-uw", "--table", BOTH]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0] == "run loan-uw: underwriting (version 6, 1 turn)"

    def test_validate_checks_against_one_table_when_one_is_given(
        self, migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One `--table` is the table to check against, whatever the log names; the
        refusal names both tables and lists no move as allowed (it listed `run.started`
        while refusing it)."""
        log = tmp_path / "uw.jsonl"
        assert main(["export", "--store", migrated, "--run-id", "loan-uw", "-o", str(log),
                     "--table", BOTH]) == 0  # fmt: skip
        capsys.readouterr()
        assert main(["validate", str(log), "--table", V2, "--format", "json"]) == 1
        error = json.loads(capsys.readouterr().out)["error"]
        assert (error["kind"], error["state"], error["event"], error["allowed"]) == (
            "lifecycle", "created", "run.started", [],
        )  # fmt: skip
        assert main(["validate", str(log), "--table", V2]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert not any(line.startswith("  allowed:") for line in lines)


class TestWhatATableSpecNames:
    """`MODULE:ATTR` is a table, a list of them, or a function building either."""

    def test_a_list_with_something_else_in_it(
        self, migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:  # fmt: skip
        """Each item is checked, by position."""
        (tmp_path / "versions.py").write_text(
            "from tests.fixtures.loan import LOAN_TABLE\nTABLES = [LOAN_TABLE, 'v2']\n",
            encoding="utf-8",
        )
        monkeypatch.chdir(tmp_path)
        assert main(["runs", "--store", migrated]) == 0
        capsys.readouterr()
        assert main(["cancel", "loan-docs", "--table", "versions:TABLES", "--store", migrated]) == 2
        assert capsys.readouterr().err == (
            "agentfsm cancel: item 1 of 'versions:TABLES' is a str, not a TransitionTable\n"
        )

    def test_a_command_that_shows_one_table_says_it_takes_one(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`schema` describes one table's events: two versions are refused by name."""
        assert main(["schema", "--table", BOTH]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm schema: --table names 2 tables ({named(LOAN_TABLE)}, "
            f"{named(LOAN_TABLE_V2)}); this command takes one\n"
        )

    def test_check_table_checks_one_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """With the list it says so; each version alone is clean."""
        assert main(["check-table", BOTH]) == 2
        assert capsys.readouterr().err == (
            f"agentfsm check-table: '{BOTH}' names 2 tables ({named(LOAN_TABLE)}, "
            f"{named(LOAN_TABLE_V2)}); check one version at a time (or compare two with "
            "--against)\n"
        )
        assert main(["check-table", V2]) == 0

    def test_diagram_draws_the_version_the_run_names(
        self, migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With several versions and a run, the run's table is drawn (v2 has the late
        document's move)."""
        log = tmp_path / "uw.jsonl"
        main(
            ["export", "--store", migrated, "--run-id", "loan-uw", "-o", str(log), "--table", BOTH]
        )
        capsys.readouterr()
        args = ["diagram", "--run", str(log), "--run-id", "loan-uw", "--table", BOTH]
        assert main([*args, "--format", "markdown"]) == 0
        out = capsys.readouterr().out
        assert "| `underwriting` | `loan.documents_received` |  | `underwriting` |  |" in out


class TestAnAdditiveChangeAgainstTheStore:
    """`check-table NEW --against OLD --store`: a version that only adds a move where runs
    wait breaks none of them (exit 0); they are listed as extended."""

    def test_a_run_that_gains_a_move_is_extended_not_affected(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """v2 records a late document during underwriting: `loan-uw` waits there, and it
        exited 1 as if deploying v2 stranded it."""
        db = tmp_path / "runs.db"
        options = StoreOptions(reducer=Reducer(LOAN_TABLE))
        with structlog.testing.capture_logs(), SQLiteEventStore(db, options=options) as store:
            loan_runs(store)
        assert main(["check-table", V2, "--against", V1, "--store", str(db)]) == 0
        assert capsys.readouterr().out.splitlines()[-3:] == [
            "moves: 0 removed, 0 changed, 1 added",
            "runs in flight: 3 checked, 0 affected, 1 extended, 0 migrated, 0 not compared",
            "extended: run 'loan-uw' in 'underwriting': it gains moves: "
            "'loan.documents_received'",
        ]
        args = ["check-table", V2, "--against", V1, "--store", str(db), "--format", "json"]
        assert main(args) == 0
        runs = json.loads(capsys.readouterr().out)["runs"]
        assert (runs["affected"], runs["extended"]) == (
            [],
            [
                {
                    "run_id": "loan-uw",
                    "status": "underwriting",
                    "reasons": ["it gains moves: 'loan.documents_received'"],
                }
            ],
        )

    def test_taking_the_move_away_again_affects_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The other way round (v2's runs, v1 as the new version), the run loses a move:
        affected, exit 1."""
        db = tmp_path / "runs.db"
        options = StoreOptions(reducer=Reducer(LOAN_TABLE_V2))
        with structlog.testing.capture_logs(), SQLiteEventStore(db, options=options) as store:
            loan_runs(store)
        assert main(["check-table", V1, "--against", V2, "--store", str(db)]) == 1
        assert capsys.readouterr().out.splitlines()[-2:] == [
            "runs in flight: 3 checked, 1 affected, 0 extended, 0 migrated, 0 not compared",
            "affected: run 'loan-uw' in 'underwriting': its moves changed: "
            "'loan.documents_received' removed",
        ]
