"""A tool of a pydantic-ai agent causes a loan event: `AgentIterRun.emit`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext

from agentfsm.adapters.pydantic_ai import AgentIterRun
from agentfsm.runtime import Emit
from tests.adapters._emit import DOCUMENTS, refused_then_completed, waits_for_documents
from tests.adapters._pydantic_ai_app import answer, call, scripted
from tests.fixtures.emit_loan import loan_store


def loan_agent(loans: AgentIterRun, documents: Any, told: list[Any]) -> Agent[None, str]:
    """Asks for documents (the call id from the SDK's `RunContext`), then answers."""
    agent: Agent[None, str] = Agent(
        scripted(call("request_documents", "call_d1", applicant="A-7"), answer("Waiting.")),
        name="loans",
    )

    @agent.tool
    def request_documents(ctx: RunContext[None], applicant: str) -> str:
        """Ask the applicant for documents."""
        assert ctx.tool_call_id is not None
        event = Emit("loan.documents_requested", documents=documents)
        told.append(loans.emit(ctx.tool_call_id, event))
        return "asked"

    return agent


def drive(documents: Any) -> tuple[Any, Any, list[Any]]:
    store = loan_store()
    loans = AgentIterRun(store, "L-1")
    told: list[Any] = []
    with capture_logs():
        done = asyncio.run(loans.run(loan_agent(loans, documents, told), "loan for A-7"))
    return store, done, told


def test_a_tool_makes_the_run_wait(tmp_path: Path) -> None:
    """The event follows the call's outcome; the iteration stops before the next request."""
    store, done, told = drive(DOCUMENTS)
    assert told == [None]
    waits_for_documents(store, done, "call_d1", tmp_path)


def test_fields_the_type_refuses_are_told_to_the_tool() -> None:
    """The refusal is the tool's to tell; it is recorded with the outcome; the run goes on."""
    store, done, told = drive("id")
    refused_then_completed(store, done, told)
