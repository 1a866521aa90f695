"""A tool of a pydantic-ai agent causes a loan event: `AgentIterRun.emit`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentfsm.adapters.pydantic_ai import AgentIterRun, SavedStateError
from agentfsm.runtime import Agent as RunnerAgent
from agentfsm.runtime import Decision, Emit, Runner, ScriptedModel, append_event
from tests.adapters._emit import (
    DOCUMENTS,
    RECEIVED,
    TOLD_RECEIVED,
    answered_then_completed,
    refused_then_completed,
    told_refused,
    waits_for_documents,
)
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
        done = asyncio.run(loans.arun(loan_agent(loans, documents, told), "loan for A-7"))
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


class Heard:
    """A model answering the n-th request of a run with `responses[n]`, keeping what it read."""

    def __init__(self, *responses: ModelResponse) -> None:
        self.responses = responses
        self.inputs: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.inputs.append(list(messages))
        return self.responses[sum(isinstance(m, ModelResponse) for m in messages)]

    def prompts(self) -> list[str]:
        """The user prompts of the last input, in order."""
        return [
            str(part.content)
            for message in self.inputs[-1]
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]


def heard_agent(loans: AgentIterRun, event: Emit, model: Heard) -> Agent[None, str]:
    """`request_documents` proposing `event`, on `model`."""
    agent: Agent[None, str] = Agent(FunctionModel(model), name="loans")

    @agent.tool
    def request_documents(ctx: RunContext[None], applicant: str) -> str:
        """Ask the applicant for documents."""
        assert ctx.tool_call_id is not None
        assert loans.emit(ctx.tool_call_id, event) is None
        return "asked"

    return agent


def test_drive_goes_on_after_the_person_answers() -> None:
    """Waiting in `documents_requested`, the documents come from outside; `adrive` sends the
    request the store kept (the tool's return), which also says what was appended."""
    store = loan_store()
    loans = AgentIterRun(store, "L-1")
    model = Heard(call("request_documents", "call_d1", applicant="A-7"), answer("Complete."))
    agent = heard_agent(loans, Emit("loan.documents_requested", documents=DOCUMENTS), model)
    with capture_logs():
        assert asyncio.run(loans.arun(agent, "loan for A-7")).status == "documents_requested"
        # not answered yet: it still waits, nothing runs
        assert asyncio.run(loans.adrive(agent)).status == "documents_requested"
    assert len(model.inputs) == 1
    append_event(store, "L-1", "loan.documents_received", document_ids=RECEIVED)
    with capture_logs():
        done = asyncio.run(AgentIterRun(store, "L-1").adrive(agent))
    answered_then_completed(store, done, "Complete.")
    assert model.prompts() == ["loan for A-7", TOLD_RECEIVED]
    returned = [
        p.content for m in model.inputs[-1] for p in m.parts if p.part_kind == "tool-return"
    ]
    assert returned == ["asked"]


def test_the_model_reads_a_proposal_refused_when_the_batch_resolved() -> None:
    """A proposal valid in itself but not where the batch leaves the run is refused after
    the tool returned: the next request says so, with what was allowed."""
    store = loan_store()
    loans = AgentIterRun(store, "L-1")
    model = Heard(call("request_documents", "call_d1", applicant="A-7"), answer("Understood."))
    event = Emit("loan.documents_received", document_ids=["payslip-1"])
    with capture_logs():
        done = asyncio.run(loans.arun(heard_agent(loans, event, model), "loan"))
    assert done.status == "completed"
    assert model.prompts() == ["loan", told_refused("call_d1", "request_documents")]
    assert [e.type for e in store.events("L-1")].count("emit.refused") == 1


def test_a_kept_wait_another_driver_went_on_from_is_refused() -> None:
    """Another driver (a Runner) took the run on after the wait: the history kept at the
    wait is stale, and resuming from it is refused by name; nothing is appended."""
    store = loan_store()
    loans = AgentIterRun(store, "L-1")
    model = Heard(call("request_documents", "call_d1", applicant="A-7"), answer("Complete."))
    agent = heard_agent(loans, Emit("loan.documents_requested", documents=DOCUMENTS), model)
    with capture_logs():
        asyncio.run(loans.arun(agent, "loan for A-7"))
        append_event(store, "L-1", "loan.documents_received", document_ids=RECEIVED)
        send = Decision.emit(Emit("loan.sent_to_underwriting", summary="complete"))
        other = Runner(store, RunnerAgent("loans", ScriptedModel([send])))
        assert other.drive("L-1").status == "underwriting"
    before = list(store.events("L-1"))
    with pytest.raises(SavedStateError) as refused, capture_logs():
        asyncio.run(AgentIterRun(store, "L-1").adrive(agent))
    assert str(refused.value) == (
        "run 'L-1': cannot resume from the saved state 'pydantic-ai/lifecycle_wait': it was "
        "kept at version 7, but the run went on since ('model.started' at sequence 9): it is "
        "stale"
    )
    assert list(store.events("L-1")) == before
