"""Contract tests: the real `claude` CLI goes on after the run waited in a state of its lifecycle.

An in-process SDK MCP tool proposes `loan.documents_requested` (issue 26): the run waits in
`documents_requested`, the CLI's session (id and transcript) kept in our store. A person
appends `loan.documents_received`; `adrive` resumes that session with what the model has not
read yet (`Recorder.notes`) as the new prompt, and the model reads it. A proposal the table
refuses once the batch resolved reaches the model with the tool's result (`PostToolUse`'s
`additionalContext`). The fake Messages API answers by what the CLI sent it, so each answer
says whether the model read the note. Skips and failures as in `test_claude_cli`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") == "true":
    import claude_agent_sdk  # noqa: F401  (under CI a missing SDK fails the run, loudly)
else:
    pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

from agentfsm.adapters._claude_sessions import TRANSCRIPT
from agentfsm.adapters.claude_agent_sdk import WAIT, ClaudeRun
from agentfsm.runtime import Emit, append_event
from tests.adapters._claude_app import options
from tests.adapters._common import types
from tests.adapters._emit import RECEIVED, TOLD_RECEIVED, answered_then_completed, told_refused
from tests.adapters._fake_anthropic import FakeAnthropic, Reply, ToolUse
from tests.adapters.test_claude_cli import _cli, drive, no_network  # noqa: F401  (fixtures)
from tests.fixtures.emit_loan import loan_store

TOOL = "mcp__loans__request_documents"
REFUSED = told_refused("toolu_d1", TOOL)


def script(body: dict[str, Any]) -> Reply | None:
    """The model: asks for documents first; then says whether it read a note of ours."""
    if not body.get("tools"):
        return None  # a side request of the CLI's
    sent = json.dumps(body.get("messages", []))
    if json.dumps(TOLD_RECEIVED)[1:-1] in sent:
        return Reply(text="Documents complete.")
    if json.dumps(REFUSED)[1:-1] in sent:
        return Reply(text="Understood.")
    if "tool_result" in sent:
        return Reply(text="Read nothing.")
    return Reply(tools=(ToolUse("toolu_d1", TOOL, {"applicant": "A-7"}),))


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(script) as server:
        yield server


def loan_options(api: FakeAnthropic, config: Path, loans: ClaudeRun, event: Emit) -> Any:
    """The contract tests' CLI options, with one SDK MCP tool proposing `event`."""

    @tool("request_documents", "Ask the applicant for documents", {"applicant": str})
    async def request_documents(args: dict[str, Any]) -> dict[str, Any]:
        loans.emit(loans.call_id("request_documents", args), event)
        return {"content": [{"type": "text", "text": "asked"}]}

    base: ClaudeAgentOptions = options(api.url, config)
    server = create_sdk_mcp_server("loans", tools=[request_documents])
    return ClaudeAgentOptions(
        mcp_servers={"loans": server},
        tools=[],
        setting_sources=[],
        env=base.env,
        cwd=base.cwd,
    )


def test_the_resumed_session_reads_what_the_person_appended(
    tmp_path: Path, api: FakeAnthropic
) -> None:
    """Waiting in `documents_requested`: the session is kept, nothing more is asked of the
    model; once the documents come, `adrive` goes on in the same CLI session, and the
    model's next input is the note of what happened meanwhile, on another machine too."""
    store = loan_store()
    loans = ClaudeRun(store, "L-1")
    event = Emit("loan.documents_requested", documents=["payslip", "id"])
    opts = loan_options(api, tmp_path / "claude", loans, event)
    done = drive(loans.arun("loan for A-7", opts))
    assert (done.status, done.waiting) == ("documents_requested", True)
    # Waiting in its lifecycle, the record holds the CLI's cost of the leg.
    assert done.sdk_result.total_cost_usd > 0
    assert done.record.usage.cost == pytest.approx(done.sdk_result.total_cost_usd)
    asked = len(api.requests)
    # The leg ended at the tool's result (`continue: false`): no request after it.
    assert len([r for r in api.requests if r.get("tools")]) == 1
    kept = store.attachment("L-1", TRANSCRIPT)
    waited = store.attachment("L-1", WAIT)
    assert kept is not None
    assert waited is not None
    session = json.loads(waited.data)["state"]["session_id"]
    assert session.encode() in kept.data
    assert drive(ClaudeRun(store, "L-1").adrive(opts)).status == "documents_requested"
    assert len(api.requests) == asked  # still waiting: the CLI was not even started
    append_event(store, "L-1", "loan.documents_received", document_ids=RECEIVED)
    # Another machine: its CLI has its own (empty) config dir; the store has the transcript.
    there = ClaudeRun(store, "L-1")
    elsewhere = loan_options(api, tmp_path / "there", there, event)
    again = drive(there.adrive(elsewhere))
    answered_then_completed(store, again, "Documents complete.")
    last = json.dumps(api.requests[-1]["messages"])
    assert "toolu_d1" in last  # the same session: the tool's call and result are in it
    assert json.dumps(TOLD_RECEIVED) in last  # the note is the new prompt
    assert list((tmp_path / "there" / "projects").glob(f"*/{session}.jsonl"))
    assert store.attachment("L-1", TRANSCRIPT) is None
    assert store.attachment("L-1", WAIT) is None


def test_the_model_reads_a_proposal_refused_when_the_batch_resolved(
    tmp_path: Path, api: FakeAnthropic
) -> None:
    """Valid in itself, not where the batch leaves the run: refused after the tool returned,
    and the CLI's next request carries why, with what was allowed."""
    store = loan_store()
    loans = ClaudeRun(store, "L-1")
    event = Emit("loan.documents_received", document_ids=["payslip-1"])
    done = drive(loans.arun("loan", loan_options(api, tmp_path / "claude", loans, event)))
    assert (done.status, done.final_output) == ("completed", "Understood.")
    assert types(store, "L-1").count("emit.refused") == 1
