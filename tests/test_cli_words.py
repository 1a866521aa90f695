"""What the command line says of a run of the loan lifecycle (issue 26, item 5): the
refused event by name, the lifecycle's own fields, and how to write a number."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from agentfsm import SQLiteEventStore
from agentfsm.cli import main
from agentfsm.events import dump_event
from agentfsm.reducers import Reducer
from agentfsm.stores import StoreOptions
from tests.fixtures.loan import LOAN_TABLE, loan_runs

LOAN = "tests.fixtures.loan:LOAN_TABLE"


@pytest.fixture
def loans(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    options = StoreOptions(reducer=Reducer(LOAN_TABLE))
    with structlog.testing.capture_logs(), SQLiteEventStore(db, options=options) as store:
        loan_runs(store)
    return db


def _log(db: Path, run_id: str, path: Path, *extra: str) -> Path:
    with SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(LOAN_TABLE))) as store:
        lines = [dump_event(e) for e in store.events(run_id)]
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
    return path


def test_inspect_names_the_refused_event(
    loans: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decision on a run still waiting for its documents: the line names the event (it
    read `refused at sequence 2: is not allowed`)."""
    decided = (
        '{"run_id":"loan-docs","sequence":2,"type":"loan.underwriter_decision",'
        '"occurred_at":"2026-09-01T10:00:09+00:00","decision":"approved","amount":25000}'
    )
    log = _log(loans, "loan-docs", tmp_path / "docs.jsonl", decided)
    assert main(["inspect", str(log), "--table", LOAN]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  refused at sequence 2: event 'loan.underwriter_decision' is not allowed; allowed: "
        "'loan.documents_expired', 'loan.documents_received', 'run.cancel_requested', "
        "'run.failed', 'run.terminated'"
    )


def test_replay_shows_the_lifecycles_own_fields(
    loans: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `loan.documents_received` and `loan.underwriter_decision` recorded, a key a
    line, after the run's usage (they were left out)."""
    log = _log(loans, "loan-ok", tmp_path / "ok.jsonl")
    assert main(["replay", str(log), "--table", LOAN]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run loan-ok: approved (version 6, 1 turn)",
        "  agent: loan_reviewer",
        "  usage: 0 input + 0 output tokens, cost 0",
        "  final output: documents complete: recommend approval",
        "  custom:",
        '    document_ids: ["payslip-1"]',
        "    decision: approved",
        "    amount: 25000",
    ]


class TestAppendSaysHowToWriteANumber:
    """`amount=25000` is text; the field wants an integer, written `amount:=25000`."""

    def test_an_integer_given_as_text(
        self, loans: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The field's problem says what it wants and how to write it; nothing written."""
        args = ["append", "loan-uw", "loan.underwriter_decision", "decision=approved"]
        assert main([*args, "amount=25000", "--table", LOAN, "--store", str(loans)]) == 2
        assert capsys.readouterr().err == (
            "agentfsm append: error: run 'loan-uw': not a valid event: field 'amount' wants "
            "an integer: write amount:=25000\n"
        )
        with SQLiteEventStore(loans, options=StoreOptions(reducer=Reducer(LOAN_TABLE))) as s:
            assert s.load("loan-uw").status == "underwriting"

    def test_text_that_is_no_number_keeps_its_own_problem(
        self, loans: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`amount=lots` is no JSON either: the parser's own sentence stands."""
        args = ["append", "loan-uw", "loan.underwriter_decision", "decision=approved"]
        assert main([*args, "amount=lots", "--table", LOAN, "--store", str(loans)]) == 2
        assert capsys.readouterr().err == (
            "agentfsm append: error: run 'loan-uw': not a valid event: field 'amount': Input "
            "should be a valid integer (got 'lots')\n"
        )

    def test_written_as_json_it_is_recorded(
        self, loans: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`amount:=25000` approves the loan."""
        args = ["append", "loan-uw", "loan.underwriter_decision", "decision=approved"]
        assert main([*args, "amount:=25000", "--table", LOAN, "--store", str(loans)]) == 0
        assert capsys.readouterr().out == "run loan-uw: approved (version 6)\n"
