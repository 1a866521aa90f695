"""SIGKILL the Runner at every append of the emit path; a fresh process resumes: nothing lost
or doubled.

The loan run on SQLite (`tests/fixtures/emit_loan.py`): a batch whose call causes
`loan.documents_requested` (with a second call's proposal refused, in one variant), then,
once a person sent the documents, the model's decision causing
`loan.sent_to_underwriting`. A worker process is killed right after its N-th durable append
(for every N the run has), or inside the tool right after its backend acted. Each time the
next process ends where the unharmed run does, each lifecycle event is in the log exactly
once (naming the call or the turn that proposed it), a refusal is recorded once, the log
verifies, and the backend acted once per idempotency key.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog

from agentfsm.events import Event
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer
from agentfsm.runtime import (
    Agent,
    Decision,
    Emit,
    ProposedCall,
    Runner,
    ScriptedModel,
    Tool,
    ToolContext,
    append_event,
)
from agentfsm.stores import SQLiteEventStore, StoreOptions
from tests.fixtures.emit_loan import LOAN_TABLE, check_credit, loan_script

from .helpers import DurableLedger

RUN_ID = "L-1"
#: Appends of the unharmed run: until it waits for the documents; then until it waits for
#: the underwriter.
APPENDS = {"single": (6, 2), "twice": (6, 2)}


class DyingStore(SQLiteEventStore):
    """A SQLite store of loan runs whose process is SIGKILLed after its `die_after`-th append."""

    def __init__(self, path: Path, die_after: int | None) -> None:
        options = StoreOptions(reducer=Reducer(LOAN_TABLE))
        super().__init__(path, options=options, synchronous="NORMAL")
        self.die_after = die_after
        self.appends = 0

    def append(
        self, run_id: str, events: Sequence[Event], expected_version: int, **kwargs: Any
    ) -> RunRecord:
        record = super().append(run_id, events, expected_version, **kwargs)
        self.appends += 1
        if self.appends == self.die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return record


def runner(store: SQLiteEventStore, scenario: str, ledger: DurableLedger, die_in: bool) -> Runner:
    """The loan agent; `request_documents` acts on its backend (honouring its key)."""

    def request_documents(ctx: ToolContext) -> Emit:
        ledger.act(ctx, honour_key=True)
        if die_in:
            os.kill(os.getpid(), signal.SIGKILL)
        return Emit("loan.documents_requested", documents=list(ctx.args["documents"]))

    tools = [
        Tool(
            "request_documents",
            request_documents,
            idempotent=True,
            emits=("loan.documents_requested",),
        ),
        Tool("check_credit", check_credit, side_effects=False),
    ]
    model = loan_script() if scenario == "single" else twice()
    return Runner(store, Agent("loans", model, tools))


def twice() -> ScriptedModel:
    """Two calls ask for documents in one batch: the second one's event is refused."""
    return ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("request_documents", {"documents": ["payslip"]}),
                ProposedCall("request_documents", {"documents": ["id"]}),
            ),
            Decision.emit(Emit("loan.sent_to_underwriting", summary="all in")),
        ],
        by_turn=True,
    )


def _drive(workdir: Path, scenario: str, phase: str, die_after: int | None, die_in: bool) -> None:
    """In a child process: start the run, or resume it."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ledger = DurableLedger(workdir / "effects.db")
    with DyingStore(workdir / "runs.db", die_after) as store:
        loans = runner(store, scenario, ledger, die_in)
        if phase == "start":
            loans.run(RUN_ID, "Loan for A-7")
        else:
            loans.drive(RUN_ID)


def _in_child(*args: Any) -> int | None:
    proc = multiprocessing.get_context("fork").Process(target=_drive, args=args)
    proc.start()
    proc.join(timeout=120)
    return proc.exitcode


def _store(workdir: Path) -> SQLiteEventStore:
    return SQLiteEventStore(workdir / "runs.db", options=StoreOptions(reducer=Reducer(LOAN_TABLE)))


def _check(workdir: Path, scenario: str, status: str) -> RunRecord:
    """The run stands where the unharmed one does, every lifecycle event once."""
    with _store(workdir) as store:
        record = store.load(RUN_ID)
        assert store.verify(RUN_ID).ok
        events = list(store.events(RUN_ID))
    assert record.status == status
    types = [e.type for e in events]
    assert types.count("loan.documents_requested") == 1
    caused = [e for e in events if getattr(e, "emitted_by", None) is not None]
    claims = [e.emitted_by.model_dump(exclude_none=True) for e in caused]  # type: ignore[attr-defined]
    expected: list[dict[str, Any]] = [{"action_id": "t1.2" if scenario == "single" else "t1.1"}]
    if status == "underwriting":
        expected.append({"turn": 2})
    assert claims == expected
    assert types.count("emit.refused") == (1 if scenario == "twice" else 0)
    rows = DurableLedger(workdir / "effects.db").rows()
    assert all(effects == 1 for _, effects, _ in rows.values()), rows
    return record


@pytest.mark.parametrize("scenario", ["single", "twice"])
def test_the_unharmed_runs_take_the_counted_appends(tmp_path: Path, scenario: str) -> None:
    """The kill points below cover every append these runs make."""
    ledger = DurableLedger(tmp_path / "effects.db")
    with DyingStore(tmp_path / "runs.db", None) as store:
        loans = runner(store, scenario, ledger, die_in=False)
        assert loans.run(RUN_ID, "Loan for A-7").status == "documents_requested"
        first = store.appends
        append_event(store, RUN_ID, "loan.documents_received", document_ids=["D-1"])
        store.appends = 0
        assert loans.drive(RUN_ID).status == "underwriting"
        assert (first, store.appends) == APPENDS[scenario]
    _check(tmp_path, scenario, "underwriting")


KILLS = [
    (scenario, phase, n, False)
    for scenario, (before, after) in APPENDS.items()
    for phase, count in (("start", before), ("resume", after))
    for n in range(1, count + 1)
] + [(scenario, "start", None, True) for scenario in APPENDS]


@pytest.mark.parametrize(("scenario", "phase", "die_after", "die_in"), KILLS)
def test_a_kill_at_any_append_loses_and_doubles_nothing(
    tmp_path: Path, scenario: str, phase: str, die_after: int | None, die_in: bool
) -> None:
    """Killed after one append (or inside the tool, its backend having acted), resumed by
    another process: the same end, each event once, each effect once."""
    if phase == "start":
        assert _in_child(tmp_path, scenario, "start", die_after, die_in) == -signal.SIGKILL
        assert _in_child(tmp_path, scenario, "resume", None, False) == 0
    else:
        assert _in_child(tmp_path, scenario, "start", None, False) == 0
    _check(tmp_path, scenario, "documents_requested")
    with _store(tmp_path) as store:
        append_event(store, RUN_ID, "loan.documents_received", document_ids=["D-1"])
    if phase == "resume":
        assert _in_child(tmp_path, scenario, "resume", die_after, False) == -signal.SIGKILL
    assert _in_child(tmp_path, scenario, "resume", None, False) == 0
    record = _check(tmp_path, scenario, "underwriting")
    assert record.custom == {
        "requested": ["payslip", "id"] if scenario == "single" else ["payslip"],
        "received": ["D-1"],
    }
