"""An in-process tool of the Claude Agent SDK causes a loan event: `ClaudeRun.emit`, the call
named by the tool and its arguments (`ClaudeRun.call_id`: the SDK gives such a tool nothing
else), over the scripted CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

from agentfsm.adapters.claude_agent_sdk import WAIT, ClaudeRun
from agentfsm.runtime import Emit, cancel
from agentfsm.testing.fixtures.claude_transport import Answer, Use, scripted_cli
from tests.adapters._emit import DOCUMENTS, refused_then_completed, waits_for_documents
from tests.fixtures.emit_loan import loan_store


def loan_options(loans: ClaudeRun, documents: Any, told: list[Any]) -> ClaudeAgentOptions:
    """One SDK MCP server, `loans`, with `request_documents`."""

    @tool("request_documents", "Ask the applicant for documents", {"applicant": str})
    async def request_documents(args: dict[str, Any]) -> dict[str, Any]:
        event = Emit("loan.documents_requested", documents=documents)
        told.append(loans.emit(loans.call_id("request_documents", args), event))
        return {"content": [{"type": "text", "text": "asked"}]}

    return ClaudeAgentOptions(
        mcp_servers={"loans": create_sdk_mcp_server("loans", tools=[request_documents])}
    )


def drive(documents: Any, tmp_path: Path) -> tuple[Any, Any, list[Any]]:
    store = loan_store()
    loans = ClaudeRun(store, "L-1")
    told: list[Any] = []
    use = Use("toolu_d1", "mcp__loans__request_documents", {"applicant": "A-7"})
    cli = scripted_cli([Answer(uses=(use,)), Answer("Waiting.")], {}, tmp_path)
    with capture_logs():
        done = asyncio.run(
            loans.arun("loan for A-7", loan_options(loans, documents, told), transport=cli)
        )
    return store, done, told


def test_an_sdk_mcp_tool_makes_the_run_wait(tmp_path: Path) -> None:
    """The event follows the call's outcome; the leg is interrupted before the next answer."""
    store, done, told = drive(DOCUMENTS, tmp_path)
    assert told == [None]
    waits_for_documents(store, done, "toolu_d1", tmp_path)


def test_fields_the_type_refuses_are_told_to_the_tool(tmp_path: Path) -> None:
    """The refusal is the tool's to tell; it is recorded with the outcome; the run goes on."""
    store, done, told = drive("id", tmp_path)
    refused_then_completed(store, done, told)


def test_a_call_is_named_by_its_tool_and_arguments() -> None:
    """No running call of that tool with those arguments: refused, saying so."""
    loans = ClaudeRun(loan_store(), "L-1")
    with pytest.raises(ValueError, match="no call of 'request_documents'") as caught:
        loans.call_id("request_documents", {"applicant": "A-7"})
    assert str(caught.value) == (
        "no call of 'request_documents' with these arguments is running in run 'L-1'"
    )


def test_the_session_is_kept_while_the_run_waits_and_dropped_when_a_cancel_ends_it(
    tmp_path: Path,
) -> None:
    """The wait keeps the CLI's session id for `adrive`; a cancel asked meanwhile ends the
    run at the resume, nothing runs, and what a resume would have needed is dropped."""
    store, done, _ = drive(DOCUMENTS, tmp_path)
    assert done.status == "documents_requested"
    kept = store.attachment("L-1", WAIT)
    assert kept is not None
    assert json.loads(kept.data)["state"]["session_id"]
    cancel(store, "L-1", reason="withdrawn")
    with capture_logs():
        ended = asyncio.run(ClaudeRun(store, "L-1").adrive(ClaudeAgentOptions()))
    assert ended.status == "cancelled"
    assert store.attachment("L-1", WAIT) is None
