"""The second shipped lifecycle runs as `make demo-ticket` runs it: the Runner on SQLite,
a person's moves from the command line, and a log that validates under its table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from agentfsm.cli import main as cli

REPO = Path(__file__).resolve().parent.parent
TABLE = "examples.lifecycles.ticket:TICKET_TABLE"


def _demo() -> object:
    spec = importlib.util.spec_from_file_location(
        "demo_ticket", REPO / "examples" / "demo_ticket.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_ticket"] = module
    spec.loader.exec_module(module)
    return module


def test_the_ticket_demo_waits_for_a_person_and_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting for approval, rejected, escalated (the Runner returns it waiting), handed
    back, answered; the export validates under the ticket table."""
    monkeypatch.chdir(REPO)
    demo = _demo()
    db = str(tmp_path / "tickets.db")
    store = ["--store", db, "--table", TABLE]
    steps = [
        lambda: demo.main(["start", "--db", db]),  # type: ignore[attr-defined]
        lambda: cli(["reject", "t-1", "t1.1", "--approver", "ann", "--reason", "a human", *store]),
        lambda: cli(["append", "t-1", "ticket.escalated", "escalated_to=tier-2", *store]),
        lambda: demo.main(["drive", "--db", db]),  # type: ignore[attr-defined]
        lambda: cli(["append", "t-1", "ticket.handed_back", "note=refunded by hand", *store]),
        lambda: demo.main(["drive", "--db", db]),  # type: ignore[attr-defined]
    ]
    for step in steps:
        assert step() == 0
    # Only the demo's own lines: an earlier test may have configured structlog to print.
    out = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("run t-1", "  answer"))
    ]
    assert out[0] == "run t-1: waiting_approval (waiting)"
    assert "run t-1: escalated (waiting) {'escalated_to': 'tier-2', 'priority': 'normal'}" in out
    assert out[-2:] == [
        "run t-1: completed (terminal) {'priority': 'normal', 'note': 'refunded by hand'}",
        "  answer: Your refund is done (refunded by hand).",
    ]
    log = tmp_path / "tickets.jsonl"
    assert cli(["export", *store, "-o", str(log)]) == 0
    assert cli(["validate", str(log), "--table", TABLE]) == 0
