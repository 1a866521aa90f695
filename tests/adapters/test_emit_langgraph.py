"""A tool of a LangGraph graph causes a loan event: `GraphRun.emit`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("langgraph")

from langchain_core.tools import InjectedToolCallId, tool

from agentfsm.adapters.langgraph import GraphRun
from agentfsm.runtime import Emit
from tests.adapters._emit import DOCUMENTS, refused_then_completed, waits_for_documents
from tests.adapters._langgraph_app import answer, call, graph_with_tools
from tests.fixtures.emit_loan import loan_store


def loan_graph(loans: GraphRun, documents: Any, told: list[Any]) -> Any:
    """Asks for documents (the call id from `InjectedToolCallId`), then answers."""

    @tool
    def request_documents(applicant: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Ask the applicant for documents."""
        event = Emit("loan.documents_requested", documents=documents)
        told.append(loans.emit(tool_call_id, event))
        return "asked"

    messages = [call("request_documents", "call_d1", applicant="A-7"), answer("Waiting.")]
    return graph_with_tools(messages, [request_documents])


def drive(documents: Any) -> tuple[Any, Any, list[Any]]:
    store = loan_store()
    loans = GraphRun(store, "L-1")
    told: list[Any] = []
    graph = loan_graph(loans, documents, told)
    with capture_logs():
        done = loans.run(graph, {"messages": [("user", "loan for A-7")]})
    return store, done, told


def test_a_tool_makes_the_run_wait(tmp_path: Path) -> None:
    """The event follows the call's outcome; the graph stops before its next model call."""
    store, done, told = drive(DOCUMENTS)
    assert told == [None]
    waits_for_documents(store, done, "call_d1", tmp_path)


def test_fields_the_type_refuses_are_told_to_the_tool() -> None:
    """The refusal is the tool's to tell; it is recorded with the outcome; the run goes on."""
    store, done, told = drive("id")
    refused_then_completed(store, done, told)
