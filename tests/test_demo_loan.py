"""The loan lifecycle runs as `make demo-loan` runs it: the agent moves its own run into the
lifecycle's states, an applicant answers from the command line, the embedded Worker's timer
expires the offer, and the log validates under its table.

Real parts throughout: a SQLite store with the timers' hook and its lease rows, a Worker,
the command line, and the wall clock (the demo's offer is open one second).
"""

from __future__ import annotations

import importlib.util
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentfsm.cli import main as cli
from agentfsm.events.models import parse_timestamp
from agentfsm.reducers import Reducer
from agentfsm.stores import SQLiteEventStore, StoreOptions
from examples.lifecycles.loan import DEMO_LOAN_TABLE, LOAN_TABLE

REPO = Path(__file__).resolve().parent.parent
TABLE = "examples.lifecycles.loan:DEMO_LOAN_TABLE"
DOCUMENTS = 'document_ids:=["payslip-1","id-1"]'


def _demo() -> Any:
    spec = importlib.util.spec_from_file_location("demo_loan", REPO / "examples" / "demo_loan.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_loan"] = module
    spec.loader.exec_module(module)
    return module


def _events(db: Path) -> list[Any]:
    options = StoreOptions(reducer=Reducer(DEMO_LOAN_TABLE))
    with SQLiteEventStore(db, options=options) as store:
        return list(store.events("L-1"))


def _lines(out: str) -> list[str]:
    """Only the demo's own lines: an earlier test may have configured structlog to print."""
    return [line for line in out.splitlines() if line.startswith("run L-1: ")]


def test_the_agent_moves_the_run_and_the_offer_times_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its tool's event makes it wait for documents; answered from the command line, the
    Worker drives it on: its decision makes the offer; nobody signs, and the Worker's timer
    declines it. No person appended any event but the documents."""
    monkeypatch.chdir(REPO)
    demo = _demo()
    db, export = tmp_path / "loans.db", tmp_path / "loans.jsonl"
    store = ["--store", str(db), "--table", TABLE]
    assert demo.main(["start", "--db", str(db)]) == 0
    assert cli(["append", "L-1", "loan.documents_received", DOCUMENTS, *store]) == 0
    work = ["work", "--db", str(db), "--until-settled", "--export", str(export)]
    assert demo.main(work) == 0
    assert _lines(capsys.readouterr().out) == [
        "run L-1: documents_requested (waiting) {'requested': ['payslip', 'id']}",
        "run L-1: running (version 11)",
        "run L-1: offer_made (waiting) {'requested': ['payslip', 'id'], 'received': "
        "['payslip-1', 'id-1'], 'offer': {'amount': 25000, 'rate': 0.061}}",
        "run L-1: declined (terminal) {'requested': ['payslip', 'id'], 'received': "
        "['payslip-1', 'id-1'], 'offer': {'amount': 25000, 'rate': 0.061}, "
        "'declined_because': 'the offer was not signed in time'}",
    ]
    events = _events(db)
    ours = [e for e in events if e.type.startswith("loan.")]
    lifecycle = [(e.type, e.emitted_by) for e in ours]
    requested, offered = (e.emitted_by for e in ours if e.emitted_by is not None)
    assert lifecycle == [
        ("loan.documents_requested", requested),  # the tool's call
        ("loan.documents_received", None),  # the applicant, from the command line
        ("loan.offer_made", offered),  # the model's decision
        ("loan.offer_expired", None),  # the Worker, when its time came
    ]
    assert (requested.action_id, offered.turn) == ("t1.2", 2)
    made, expired = (e for e in events if e.type in ("loan.offer_made", "loan.offer_expired"))
    waited = parse_timestamp(expired.occurred_at) - parse_timestamp(made.occurred_at)
    assert waited >= timedelta(seconds=1)
    assert cli(["validate", "--quiet", "--table", TABLE, str(export)]) == 0


def test_signed_in_time_the_loan_is_approved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same run, the offer signed from the command line while it is open: `approved`,
    and no timer fires after it."""
    monkeypatch.chdir(REPO)
    demo = _demo()
    db = tmp_path / "loans.db"
    store = ["--store", str(db), "--table", TABLE]
    assert demo.main(["start", "--db", str(db)]) == 0
    assert cli(["append", "L-1", "loan.documents_received", DOCUMENTS, *store]) == 0
    assert demo.main(["work", "--db", str(db)]) == 0
    assert cli(["append", "L-1", "loan.offer_accepted", *store]) == 0
    assert demo.main(["work", "--db", str(db), "--until-settled"]) == 0
    assert [e.type for e in _events(db)][-2:] == ["loan.offer_made", "loan.offer_accepted"]
    assert _lines(capsys.readouterr().out)[-1] == "run L-1: approved (version 15)"


def test_the_shipped_table_waits_days_and_passes_check_table() -> None:
    """The demo's table is the shipped one but for the offer's wait; both check clean."""
    waits = {
        table: [(t.event, t.after) for t in table.timeouts("offer_made")]
        for table in (LOAN_TABLE, DEMO_LOAN_TABLE)
    }
    assert waits == {
        LOAN_TABLE: [("loan.offer_expired", timedelta(days=3))],
        DEMO_LOAN_TABLE: [("loan.offer_expired", timedelta(seconds=1))],
    }
    assert {
        s.name: s.kind.value
        for s in LOAN_TABLE.states
        if s.name in ("offer_made", "documents_requested", "approved", "declined")
    } == {
        "documents_requested": "waiting",
        "offer_made": "waiting",
        "approved": "terminal",
        "declined": "terminal",
    }
    for table in ("examples.lifecycles.loan:LOAN_TABLE", TABLE):
        assert cli(["check-table", "--table", table]) == 0
