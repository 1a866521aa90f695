"""The loan lifecycle of issue 26 driven by a Runner, people moving it on in between: the
Runner stops at each state that waits for a person and never raises on one."""

from __future__ import annotations

from agentfsm.events import step_clock
from agentfsm.names import StateKind
from agentfsm.reducers import Reducer
from agentfsm.runtime import Runner, append_event
from agentfsm.stores import MemoryEventStore, StoreOptions
from tests.fixtures.loan import LOAN_TABLE, review_agent
from tests.runtime.helpers import types


def test_a_loan_from_application_to_approval() -> None:
    """Waits for documents, reviews them, waits for the underwriter, ends approved; a
    resume while a person holds it appends nothing."""
    store = MemoryEventStore(options=StoreOptions(reducer=Reducer(LOAN_TABLE)))
    runner = Runner(store, review_agent(), clock=step_clock())
    first = runner.run("loan-1", "review the application")
    assert (first.status, first.kind, first.waiting) == (
        "documents_requested", StateKind.WAITING, True,
    )  # fmt: skip
    assert runner.drive("loan-1").record.version == first.record.version
    append_event(store, "loan-1", "loan.documents_received", document_ids=["payslip-1"])
    reviewed = runner.drive("loan-1")
    assert (reviewed.status, reviewed.waiting, reviewed.final_output) == (
        "underwriting", True, "documents complete: recommend approval",
    )  # fmt: skip
    decided = append_event(
        store, "loan-1", "loan.underwriter_decision", decision="approved", amount=25000
    )
    assert (decided.status, dict(decided.custom)) == (
        "approved",
        {"document_ids": ["payslip-1"], "decision": "approved", "amount": 25000},
    )
    assert types(store, "loan-1") == [
        "run.started", "loan.documents_received", "model.started", "model.completed",
        "run.completed", "loan.underwriter_decision",
    ]  # fmt: skip
    assert runner.drive("loan-1").status == "approved"
