"""What the adapters' emit tests share: the loan run's checks (`tests/fixtures/emit_loan.py`).

A tool of each SDK proposes `loan.documents_requested` through its run object's
`emit(call_id, Emit(...))` (the call id from the context the SDK gives the tool). The
proposal rides on the call's `tool.completed`, the event follows in the same append, naming
the call, and the run waits in `documents_requested`: the SDK is stopped before its next
model call, and the adapter returns the run waiting there. A proposal whose fields the type
refuses is returned to the tool (to tell the model in its result), recorded as
`emit.refused` with the outcome, and the run goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentfsm.cli import main as cli
from agentfsm.events import dump_event
from agentfsm.events.models import Refusal
from agentfsm.stores import MemoryEventStore
from tests.adapters._common import types

#: What the tool asks for; a string instead is what its sloppy twin gets wrong.
DOCUMENTS = ["payslip", "id"]
INVALID = (
    "invalid_fields",
    "the fields of 'loan.documents_requested' are invalid: at documents: Input should be a "
    "valid array",
)


def waits_for_documents(store: MemoryEventStore, done: Any, call_id: str, tmp_path: Path) -> None:
    """The run stopped waiting in `documents_requested`, its event caused by `call_id`,
    appended with the call's outcome, and nothing after it; the log validates."""
    assert (done.status, done.waiting, done.kind) == ("documents_requested", True, "waiting")
    events = list(store.events("L-1"))
    # After it, only what the SDK reported it spent (the Claude CLI, as its leg ended).
    completed, caused = [e for e in events if e.type != "usage.reported"][-2:]
    assert events.index(caused) == len(events) - 1 or {
        e.type for e in events[events.index(caused) + 1 :]
    } == {"usage.reported"}
    assert completed.type == "tool.completed"
    assert completed.emit is not None
    assert completed.emit.model_dump() == {
        "type": "loan.documents_requested",
        "fields": {"documents": DOCUMENTS},
    }
    assert caused.model_dump(exclude={"occurred_at", "run_id", "sequence"}) == {
        "type": "loan.documents_requested",
        "event_id": None,
        "emitted_by": {"action_id": call_id, "turn": None},
        "documents": DOCUMENTS,
    }
    assert completed.occurred_at == caused.occurred_at  # one append, one stamp
    assert store.load("L-1").custom == {"requested": DOCUMENTS}
    path = tmp_path / "L-1.jsonl"
    path.write_text("".join(dump_event(e) + "\n" for e in events))
    table = "tests.fixtures.emit_loan:LOAN_TABLE"
    assert cli(["validate", "--quiet", "--table", table, str(path)]) == 0


def refused_then_completed(store: MemoryEventStore, done: Any, told: list[Any]) -> None:
    """The sloppy proposal was returned to the tool and refused with its outcome; the run
    completed."""
    assert done.status == "completed"
    (refusal,) = told
    assert isinstance(refusal, Refusal)
    assert (refusal.kind, refusal.message) == INVALID
    said = types(store, "L-1")
    assert said[said.index("emit.refused") - 1] == "tool.completed"
    assert "loan.documents_requested" not in said
    (action,) = store.load("L-1").actions.values()
    assert action.refusal == refusal


#: What the person appends while the run waits for documents, and what the model reads of it
#: on the resumed run's next input.
RECEIVED = ["payslip-1", "id-1"]
TOLD_RECEIVED = (
    "While the run waited in 'documents_requested', its lifecycle went on: "
    '\'loan.documents_received\' {"document_ids": ["payslip-1", "id-1"]}. '
    "It is 'running' now."
)


def told_refused(call_id: str, tool: str) -> str:
    """What the model reads of `loan.documents_received` proposed by call `call_id` of
    `tool` in `running`, refused once the batch was resolved."""
    return (
        f"The event 'loan.documents_received' that your call '{call_id}' ({tool}) proposed "
        "was refused: 'loan.documents_received' is not allowed where the run stands "
        "('running'); events of its lifecycle allowed there: 'loan.documents_requested', "
        "'loan.noted', 'loan.sent_to_underwriting'."
    )


def answered_then_completed(store: MemoryEventStore, done: Any, answer: str) -> None:
    """The resumed run went on from the wait to the model's answer: the person's event,
    then one model call, and nothing of the first part again."""
    assert (done.status, done.final_output) == ("completed", answer)
    said = types(store, "L-1")
    after = said[said.index("loan.documents_received") :]
    assert after == [
        "loan.documents_received",
        "model.started",
        "model.completed",
        "run.completed",
    ]
    assert said.count("tool.started") == 1  # the tool ran once, before the wait
