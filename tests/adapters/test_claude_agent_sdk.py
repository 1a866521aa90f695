"""Fast tests of the Claude adapter's parts the shared scenarios do not reach.

Over the scripted CLI (`agentfsm.testing.fixtures.claude_transport`): in-process SDK MCP tools and
tools the CLI runs itself in one run, calls needing approval asked beside other calls, a
subagent whose call sits in a batch; and the pure parts (`tool_result`, the refusal of a call
needing approval inside one of the CLI's own subagents).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (
    AgentDefinition,
    ClaudeAgentOptions,
    PermissionResultDeny,
    ToolPermissionContext,
    create_sdk_mcp_server,
    tool,
)

from agentfsm.adapters._claude_signals import (
    CLI_SUBAGENT_APPROVAL,
    Signals,
    one_waiting_call,
    tool_result,
)
from agentfsm.adapters.claude_agent_sdk import ClaudeRun, Subagent
from agentfsm.errors import RunNotFoundError
from agentfsm.runtime import approve
from agentfsm.stores import MemoryEventStore
from agentfsm.testing.fixtures.claude_transport import Answer, Use, scripted_cli
from tests.adapters._common import run, types, validates

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


@tool("refund", "Refund an order", {"order_id": str})
async def refund(args: dict[str, Any]) -> dict[str, Any]:
    """An SDK MCP tool (it runs in this process; the CLI asks the SDK to call it)."""
    RAN.append(f"refund {args['order_id']}")
    return {"content": [{"type": "text", "text": f"refunded {args['order_id']}"}]}


@tool("explode", "Fail", {})
async def explode(args: dict[str, Any]) -> dict[str, Any]:
    """An SDK MCP tool that raises: the SDK answers the CLI with an error result."""
    raise RuntimeError("boom")


def weather(city: str) -> str:
    """A tool the CLI runs itself (as it runs `Bash`): no MCP involved."""
    RAN.append(f"weather {city}")
    return f"sunny in {city}"


def shop() -> ClaudeAgentOptions:
    """Options with the in-process `shop` server."""
    return ClaudeAgentOptions(
        mcp_servers={"shop": create_sdk_mcp_server("shop", tools=[refund, explode])}
    )


class TestToolResult:
    """What a tool's response becomes in our log."""

    @pytest.mark.parametrize(
        ("response", "kept"),
        [
            ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "ab"),
            ({"content": [{"type": "text", "text": "x"}]}, "x"),
            ({"content": [{"type": "text", "text": "x"}], "is_error": False}, "x"),
            ([{"type": "image", "data": "..."}], [{"type": "image", "data": "..."}]),
            ({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2, "c": 3}),
            ([], []),
            ("plain", "plain"),
            (None, None),
        ],
    )
    def test_text_blocks_are_joined_anything_else_kept_as_json(
        self, response: Any, kept: Any
    ) -> None:
        """An SDK MCP tool's text blocks read as one string; other shapes are kept as JSON."""
        assert tool_result(response) == kept


class TestScriptedTools:
    """Both kinds of tools through the scripted CLI, with the SDK's real client."""

    def test_mcp_and_cli_tools_in_one_run_are_recorded_alike(self, tmp_path: Path) -> None:
        """An SDK MCP tool (asked over `mcp_message`), a tool the CLI runs, a failing MCP
        tool: each call requested, started and ended; the failure's message kept."""
        store = MemoryEventStore()
        steps = [
            Answer(uses=(Use("toolu_1", "mcp__shop__refund", {"order_id": "O-1"}),)),
            Answer(uses=(Use("toolu_2", "weather", {"city": "Paris"}),)),
            Answer(uses=(Use("toolu_3", "mcp__shop__explode", {}),)),
            Answer("Done."),
        ]
        transport = scripted_cli(steps, {"weather": weather}, tmp_path)
        done = run(ClaudeRun(store, "r1").run("go", shop(), transport=transport))
        assert (done.status, done.final_output) == ("completed", "Done.")
        assert RAN == ["refund O-1", "weather Paris"]
        actions = done.record.actions
        assert (actions["toolu_1"].result, actions["toolu_2"].result) == (
            "refunded O-1",
            "sunny in Paris",
        )
        assert actions["toolu_3"].status == "failed"
        assert "boom" in str(actions["toolu_3"].error.message)  # type: ignore[union-attr]
        assert validates(store, "r1", tmp_path) == 0


class TestApprovalInABatch:
    """The CLI runs an answer's free calls and keeps one deferred call (as the real one)."""

    def test_a_call_needing_approval_beside_a_free_one_waits_while_the_free_one_runs(
        self, tmp_path: Path
    ) -> None:
        """[refund, weather]: weather runs, the refund's approval is recorded after it (the
        table takes it beside calls in flight), the run waits; approved, the resume runs
        the refund: each call once."""
        store = MemoryEventStore()
        steps = [
            Answer(
                uses=(
                    Use("toolu_r", "mcp__shop__refund", {"order_id": "O-1"}),
                    Use("toolu_w", "weather", {"city": "Paris"}),
                )
            ),
            Answer("Refunded; sunny."),
        ]
        transport = scripted_cli(steps, {"weather": weather}, tmp_path)
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        paused = run(claude.run("go", shop(), transport=transport))
        assert (paused.status, paused.record.pending_approvals) == (
            "waiting_approval",
            ("toolu_r",),
        )
        assert RAN == ["weather Paris"]
        assert types(store, "r1")[3:] == [
            "tool.requested", "tool.started", "tool.completed", "approval.requested",
        ]  # fmt: skip
        approve(store, "r1", "toolu_r", approver="alice")
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        done = run(claude.resume(shop(), transport=transport))
        assert (done.status, done.final_output) == ("completed", "Refunded; sunny.")
        assert RAN == ["weather Paris", "refund O-1"]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_second_call_needing_approval_in_the_answer_is_declined_saying_why(
        self, tmp_path: Path
    ) -> None:
        """The CLI keeps one deferred call: the second refund is declined (rejected by the
        adapter, the model reads why), the first waits, weather runs; nothing unapproved."""
        store = MemoryEventStore()
        steps = [
            Answer(
                uses=(
                    Use("toolu_r", "mcp__shop__refund", {"order_id": "O-1"}),
                    Use("toolu_q", "mcp__shop__refund", {"order_id": "O-2"}),
                    Use("toolu_w", "weather", {"city": "Paris"}),
                )
            ),
        ]
        transport = scripted_cli(steps, {"weather": weather}, tmp_path)
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        paused = run(claude.run("go", shop(), transport=transport))
        assert (paused.status, paused.record.pending_approvals) == (
            "waiting_approval",
            ("toolu_r",),
        )
        second = paused.record.actions["toolu_q"]
        assert (second.status, second.reason) == ("rejected", one_waiting_call("toolu_r"))
        assert RAN == ["weather Paris"]
        assert validates(store, "r1", tmp_path) == 0


class TestSubagentInABatch:
    """A subagent that waits for approval pauses its caller, beside other calls too."""

    def test_a_waiting_child_beside_a_free_call_pauses_its_caller(self, tmp_path: Path) -> None:
        """[subagent, weather]: the child pauses for its refund, the caller's call is
        deferred, weather runs; the caller waits on the child."""
        store = MemoryEventStore()
        child = scripted_cli(
            [Answer(uses=(Use("toolu_c", "mcp__shop__refund", {"order_id": "O-1"}),))],
            sessions=tmp_path,
        )
        steps = [
            Answer(
                uses=(
                    Use("toolu_m", "mcp__subagents__refunds", {"prompt": "refund O-1"}),
                    Use("toolu_w", "weather", {"city": "Paris"}),
                )
            ),
        ]
        refunds = Subagent("Refunds orders.", shop(), transport=child)
        claude = ClaudeRun(
            store, "m1", needs_approval={"mcp__shop__refund"}, subagents={"refunds": refunds}
        )
        done = run(claude.run("go", shop(), transport=scripted_cli(steps, {"weather": weather},
                                                                   tmp_path)))  # fmt: skip
        assert (done.status, [p.run_id for p in done.pending_approvals]) == (
            "waiting_tool",
            ["m1/toolu_m"],
        )
        assert RAN == ["weather Paris"]
        assert store.load("m1/toolu_m").pending_approvals == ("toolu_c",)
        assert validates(store, "m1", tmp_path) == 0

    def test_a_waiting_child_whose_call_cannot_be_deferred_is_cancelled(
        self, tmp_path: Path
    ) -> None:
        """[refund, subagent]: the refund is the leg's deferred call, so the child that
        pauses cannot be waited on: it is cancelled (its refund never runs), the caller's
        call failed with why."""
        store = MemoryEventStore()
        child = scripted_cli(
            [Answer(uses=(Use("toolu_c", "mcp__shop__refund", {"order_id": "O-1"}),))],
            sessions=tmp_path,
        )
        steps = [
            Answer(
                uses=(
                    Use("toolu_r", "mcp__shop__refund", {"order_id": "O-2"}),
                    Use("toolu_m", "mcp__subagents__refunds", {"prompt": "refund O-1"}),
                )
            ),
        ]
        refunds = Subagent("Refunds orders.", shop(), transport=child)
        claude = ClaudeRun(
            store, "m1", needs_approval={"mcp__shop__refund"}, subagents={"refunds": refunds}
        )
        done = run(claude.run("go", shop(), transport=scripted_cli(steps, sessions=tmp_path)))
        assert (done.status, done.record.pending_approvals) == ("waiting_approval", ("toolu_r",))
        assert RAN == []
        call = done.record.actions["toolu_m"]
        assert call.status == "failed"
        assert call.error is not None
        assert call.error.message == (
            f"cancelled: its caller could not wait: {one_waiting_call('toolu_r')}"
        )
        kid = store.load("m1/toolu_m")
        assert (kid.status, kid.actions["toolu_c"].status) == ("cancelled", "rejected")
        assert validates(store, "m1", tmp_path) == 0
        assert validates(store, "m1/toolu_m", tmp_path) == 0


class TestCLISubagents:
    """A call of the CLI's own subagents (its `Agent` tool) carries their `agent_id`."""

    def signals(self) -> Signals:
        claude = ClaudeRun(MemoryEventStore(), "r1", needs_approval={"mcp__shop__refund"})

        async def interrupt() -> None:
            pass

        return Signals(claude.recorder, claude.needs_approval, None, interrupt)

    def test_one_needing_approval_is_refused_by_the_hook_and_by_can_use_tool(self) -> None:
        """The CLI could not pause there: refused, saying so, rather than run unapproved."""
        signals = self.signals()
        data = {"agent_id": "a1", "tool_name": "mcp__shop__refund",
                "tool_input": {"order_id": "O-1"}}  # fmt: skip
        out = asyncio.run(signals.pre_tool_use(data, "toolu_c", None))
        assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert out["hookSpecificOutput"]["permissionDecisionReason"] == CLI_SUBAGENT_APPROVAL
        context = ToolPermissionContext(tool_use_id="toolu_c", agent_id="a1")
        answer = asyncio.run(
            signals.can_use_tool("mcp__shop__refund", {"order_id": "O-1"}, context)
        )
        assert isinstance(answer, PermissionResultDeny)
        assert answer.message == CLI_SUBAGENT_APPROVAL

    def test_others_are_left_to_the_cli(self) -> None:
        """A free call of theirs is not ours to record or refuse."""
        signals = self.signals()
        data = {"agent_id": "a1", "tool_name": "weather", "tool_input": {"city": "Paris"}}
        assert asyncio.run(signals.pre_tool_use(data, "toolu_w", None)) == {}


class TestCLIAgents:
    """The CLI's own subagents (`agents=`) would run unrecorded: refused up front."""

    def test_options_with_agents_are_refused_naming_subagents_before_anything_is_logged(
        self,
    ) -> None:
        store = MemoryEventStore()
        definition = AgentDefinition("Refunds orders.", "You refund orders.")
        options = replace(shop(), agents={"refunds": definition})
        with pytest.raises(ValueError, match=r"ClaudeRun\(subagents=") as err:
            run(ClaudeRun(store, "r1").run("go", options, transport=scripted_cli([])))
        assert "(refunds)" in str(err.value)
        with pytest.raises(RunNotFoundError):  # refused before run.started
            store.load("r1")


class TestYourCallbacks:
    """What the adapter hands your code while it owns the SDK's client."""

    def test_on_text_gets_the_streamed_text_and_on_message_every_message(
        self, tmp_path: Path
    ) -> None:
        """`on_text` hears each streamed text piece of the answers (sync or async);
        `on_message` the SDK's messages, without the stream events your options did not
        ask for."""
        texts: list[str] = []
        kinds: list[str] = []

        async def heard(text: str) -> None:
            texts.append(text)

        steps = [
            Answer("Looking.", uses=(Use("toolu_1", "weather", {"city": "Paris"}),)),
            Answer("Sunny."),
        ]
        claude = ClaudeRun(
            MemoryEventStore(),
            "r1",
            on_text=heard,
            on_message=lambda m: kinds.append(type(m).__name__),
        )
        transport = scripted_cli(steps, {"weather": weather}, tmp_path)
        done = run(claude.run("go", shop(), transport=transport))
        assert (done.status, texts) == ("completed", ["Looking.", "Sunny."])
        assert "StreamEvent" not in kinds
        assert kinds[-1] == "ResultMessage"
