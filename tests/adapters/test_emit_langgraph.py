"""A tool of a LangGraph graph causes a loan event: `GraphRun.emit`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentfsm.adapters.langgraph import GraphRun
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


class Heard:
    """The graph's model node: a scripted chat model, keeping what it read each time."""

    def __init__(self, *messages: AIMessage) -> None:
        self.model = GenericFakeChatModel(messages=iter(messages), disable_streaming=True)
        self.inputs: list[list[BaseMessage]] = []

    def __call__(self, state: MessagesState) -> dict[str, Any]:
        self.inputs.append(list(state["messages"]))
        return {"messages": [self.model.invoke(state["messages"])]}

    def read(self) -> list[tuple[str, Any]]:
        """The last input: each message's type and content."""
        return [(m.type, m.content) for m in self.inputs[-1]]


def heard_graph(loans: GraphRun, event: Emit, model: Heard) -> Any:
    """agent -> tools -> agent, `request_documents` proposing `event`, with a checkpointer."""

    @tool
    def request_documents(applicant: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Ask the applicant for documents."""
        assert loans.emit(tool_call_id, event) is None
        return "asked"

    g = StateGraph(MessagesState)
    g.add_node("agent", model)
    g.add_node("tools", ToolNode([request_documents]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=InMemorySaver())


CONFIG: dict[str, Any] = {"configurable": {"thread_id": "L-1"}}


def test_drive_goes_on_after_the_person_answers() -> None:
    """Waiting in `documents_requested`, the documents come from outside; `drive` streams
    the graph on from its checkpoint, a user message first saying what was appended."""
    store = loan_store()
    loans = GraphRun(store, "L-1")
    model = Heard(call("request_documents", "call_d1", applicant="A-7"), answer("Complete."))
    graph = heard_graph(loans, Emit("loan.documents_requested", documents=DOCUMENTS), model)
    with capture_logs():
        done = loans.run(graph, {"messages": [("user", "loan for A-7")]}, CONFIG)
        assert done.status == "documents_requested"
        waited = list(store.events("L-1"))
        # not answered yet: it still waits, nothing runs
        assert GraphRun(store, "L-1").drive(graph, CONFIG).status == "documents_requested"
    assert list(store.events("L-1")) == waited
    append_event(store, "L-1", "loan.documents_received", document_ids=RECEIVED)
    with capture_logs():
        done = GraphRun(store, "L-1").drive(graph, CONFIG)
    answered_then_completed(store, done, "Complete.")
    assert model.read() == [
        ("human", "loan for A-7"),
        ("ai", ""),
        ("tool", "asked"),
        ("human", TOLD_RECEIVED),
    ]


def test_the_model_reads_a_proposal_refused_when_the_batch_resolved() -> None:
    """A proposal valid in itself but not where the batch leaves the run is refused after
    the tool returned: the call's result the model reads next says so, with what was
    allowed."""
    store = loan_store()
    loans = GraphRun(store, "L-1")
    model = Heard(call("request_documents", "call_d1", applicant="A-7"), answer("Understood."))
    event = Emit("loan.documents_received", document_ids=["payslip-1"])
    with capture_logs():
        done = loans.run(heard_graph(loans, event, model), {"messages": [("user", "loan")]}, CONFIG)
    assert done.status == "completed"
    assert model.read()[-1] == (
        "tool",
        "asked\n\n" + told_refused("call_d1", "request_documents"),
    )
    assert [e.type for e in store.events("L-1")].count("emit.refused") == 1
