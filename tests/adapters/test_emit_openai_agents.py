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
from agentfsm.runtime import Emit
from tests.adapters._emit import DOCUMENTS, refused_then_completed, waits_for_documents
from tests.adapters._openai_agents_app import scripted
from tests.fixtures.emit_loan import loan_store


def loan_agent(loans: AgentsRun, documents: Any, told: list[Any]) -> Agent[Any]:
    """Asks for documents (the call id from the SDK's `ToolContext`), then answers."""

    @function_tool
    def request_documents(ctx: ToolContext[Any], applicant: str) -> str:
        """Ask the applicant for documents."""
        event = Emit("loan.documents_requested", documents=documents)
        told.append(loans.emit(ctx.tool_call_id, event))
        return "asked"

    model = scripted(
        [function_call("request_documents", {"applicant": "A-7"}, call_id="call_d1")],
        [assistant_message("Waiting.")],
    )
    return Agent(name="loans", model=model, tools=[request_documents])


def drive(documents: Any) -> tuple[Any, Any, list[Any]]:
    store = loan_store()
    loans = AgentsRun(store, "L-1")
    told: list[Any] = []
    with capture_logs():
        done = asyncio.run(loans.run(loan_agent(loans, documents, told), "loan for A-7"))
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
