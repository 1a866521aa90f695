"""`agentfsm inspect` says what caused an event of the run's lifecycle, and what it refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentfsm.cli import main
from agentfsm.events import dump_event, step_clock
from agentfsm.runtime import Agent, Decision, ProposedCall, Runner, ScriptedModel
from tests.fixtures.emit_loan import loan_store, loan_tools

TABLE = "tests.fixtures.emit_loan:LOAN_TABLE"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """A loan run whose two calls ask for documents: the first's event applied, the
    second's refused where the first left the run."""
    store = loan_store()
    asks = [ProposedCall("request_documents", {"documents": [d]}) for d in ("payslip", "id")]
    with capture_logs():
        runner = Runner(
            store,
            Agent("loans", ScriptedModel([Decision.call_tools(*asks)]), loan_tools()),
            clock=step_clock(),
        )
        runner.run("L-1")
    path = tmp_path / "L-1.jsonl"
    path.write_text("".join(dump_event(e) + "\n" for e in store.events("L-1")))
    return path


def test_inspect_names_the_call_behind_each_event(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The applied event names the call and its tool; the refusal names the call and why."""
    assert main(["inspect", str(log), "--table", TABLE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:] == [
        "    10  loan.documents_requested running -> documents_requested  caused by call "
        "'t1.1' (request_documents)",
        "    11  emit.refused           documents_requested -> documents_requested  refused, "
        "call 't1.2' (request_documents): not_allowed",
        "  ends in documents_requested",
    ]


def test_inspect_json_carries_it(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--format json`: each step's `caused_by` (None for the others)."""
    assert main(["inspect", str(log), "--table", TABLE, "--format", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [s["caused_by"] for s in steps][-3:] == [
        None,
        "call 't1.1' (request_documents)",
        "call 't1.2' (request_documents): not_allowed",
    ]
