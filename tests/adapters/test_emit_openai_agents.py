"""A function tool of the OpenAI Agents SDK causes a loan event: `AgentsRun.emit`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("agents")

from agents import Agent, function_tool
from agents.testing import assistant_message, function_call
from agents.tool_context import ToolContext

from agentfsm.adapters.openai_agents import AgentsRun
from agentfsm.runtime import Emit, append_event
from tests.adapters._emit import (
    DOCUMENTS,
    RECEIVED,
    TOLD_RECEIVED,
    answered_then_completed,
    refused_then_completed,
    told_refused,
    waits_for_documents,
)
from tests.adapters._openai_agents_app import scripted
from tests.fixtures.emit_loan import loan_store


def documents_tool(loans: AgentsRun, event: Emit, told: list[Any]) -> Any:
    """A tool proposing `event` (the call id from the SDK's `ToolContext`)."""

    @function_tool
    def request_documents(ctx: ToolContext[Any], applicant: str) -> str:
        """Ask the applicant for documents."""
        told.append(loans.emit(ctx.tool_call_id, event))
        return "asked"

    return request_documents


def loan_agent(loans: AgentsRun, documents: Any, told: list[Any]) -> Agent[Any]:
    """Asks for documents, then answers."""
    tool = documents_tool(loans, Emit("loan.documents_requested", documents=documents), told)
    model = scripted(
        [function_call("request_documents", {"applicant": "A-7"}, call_id="call_d1")],
        [assistant_message("Waiting.")],
    )
    return Agent(name="loans", model=model, tools=[tool])


def drive(documents: Any) -> tuple[Any, Any, list[Any]]:
    store = loan_store()
    loans = AgentsRun(store, "L-1")
    told: list[Any] = []
    with capture_logs():
        done = asyncio.run(loans.arun(loan_agent(loans, documents, told), "loan for A-7"))
    return store, done, told


def test_a_function_tool_makes_the_run_wait(tmp_path: Path) -> None:
    """The event follows the call's outcome; the SDK stops before its next model call."""
    store, done, told = drive(DOCUMENTS)
    assert told == [None]
    waits_for_documents(store, done, "call_d1", tmp_path)


def test_fields_the_type_refuses_are_told_to_the_tool() -> None:
    """The refusal is the tool's to tell; it is recorded with the outcome; the run goes on."""
    store, done, told = drive("id")
    refused_then_completed(store, done, told)


def test_only_a_running_call_proposes() -> None:
    """A call id that is no running call of the run is refused by name."""
    loans = AgentsRun(loan_store(), "L-1")
    with pytest.raises(ValueError, match="is not a call of run 'L-1'") as caught:
        loans.emit("call_x", Emit("loan.noted", text="n"))
    assert str(caught.value) == (
        "call 'call_x' is not a call of run 'L-1': an event is proposed by a call while it runs"
    )


def said_to_the_model(model: Any) -> list[str]:
    """The user messages of the model's last input (what it read besides the tools)."""
    return [
        item["content"]
        for item in model.last_call.input
        if isinstance(item, dict) and item.get("role") == "user"
    ]


def test_drive_goes_on_after_the_person_answers(tmp_path: Path) -> None:
    """Waiting in `documents_requested`, the documents come from outside; `adrive` goes on
    from the conversation the store kept (the tool's call and result), and the model reads
    what was appended meanwhile."""
    store, done, _ = drive(DOCUMENTS)
    assert done.status == "documents_requested"
    loans = AgentsRun(store, "L-1")
    model = scripted([assistant_message("Documents complete.")])
    resumed = Agent(name="loans", model=model, tools=[documents_tool(loans, Emit("x"), [])])
    with capture_logs():  # not answered yet: it still waits, nothing runs
        assert asyncio.run(loans.adrive(resumed)).status == "documents_requested"
    assert model.calls == ()
    append_event(store, "L-1", "loan.documents_received", document_ids=RECEIVED)
    with capture_logs():
        again = asyncio.run(loans.adrive(resumed))
    answered_then_completed(store, again, "Documents complete.")
    assert said_to_the_model(model) == ["loan for A-7", TOLD_RECEIVED]
    outputs = [i for i in model.last_call.input if i.get("type") == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [("call_d1", "asked")]


def test_the_model_reads_a_proposal_refused_when_the_batch_resolved() -> None:
    """A proposal valid in itself but not where the batch leaves the run is refused after
    the tool returned: the model's next input says so, with what was allowed."""
    store = loan_store()
    loans = AgentsRun(store, "L-1")
    told: list[Any] = []
    tool = documents_tool(loans, Emit("loan.documents_received", document_ids=["payslip-1"]), told)
    model = scripted(
        [function_call("request_documents", {"applicant": "A-7"}, call_id="call_d1")],
        [assistant_message("Understood.")],
    )
    with capture_logs():
        done = asyncio.run(loans.arun(Agent(name="loans", model=model, tools=[tool]), "loan"))
    assert (told, done.status) == ([None], "completed")
    assert said_to_the_model(model) == ["loan", told_refused("call_d1", "request_documents")]
    assert [e.type for e in store.events("L-1")].count("emit.refused") == 1
