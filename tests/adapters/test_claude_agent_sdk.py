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
from structlog.testing import capture_logs

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
from agentfsm.adapters.claude_agent_sdk import ClaudeRun, Subagent, per_million_tokens
from agentfsm.errors import RunNotFoundError
from agentfsm.events import Limits
from agentfsm.guards import MaxTurns
from agentfsm.runtime import approve, cancel
from agentfsm.stores import MemoryEventStore
from agentfsm.testing.fixtures.claude_transport import COST_PER_ANSWER, Answer, Use, scripted_cli
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
        done = run(ClaudeRun(store, "r1").arun("go", shop(), transport=transport))
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
        paused = run(claude.arun("go", shop(), transport=transport))
        assert (paused.status, paused.record.pending_approvals) == (
            "waiting_approval",
            ("toolu_r",),
        )
        assert RAN == ["weather Paris"]
        assert types(store, "r1", reports=True)[3:] == [
            "tool.requested", "tool.started", "tool.completed", "approval.requested",
            "usage.reported",  # the CLI's cost of the leg (see TestCostAtEveryMoment)
        ]  # fmt: skip
        approve(store, "r1", "toolu_r", approver="alice")
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        done = run(claude.adrive(shop(), transport=transport))
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
        paused = run(claude.arun("go", shop(), transport=transport))
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
        done = run(claude.arun("go", shop(), transport=scripted_cli(steps, {"weather": weather},
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
        done = run(claude.arun("go", shop(), transport=scripted_cli(steps, sessions=tmp_path)))
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
            run(ClaudeRun(store, "r1").arun("go", options, transport=scripted_cli([])))
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
        done = run(claude.arun("go", shop(), transport=transport))
        assert (done.status, texts) == ("completed", ["Looking.", "Sunny."])
        assert "StreamEvent" not in kinds
        assert kinds[-1] == "ResultMessage"


@tool("slow", "Look something up slowly", {})
async def slow(args: dict[str, Any]) -> dict[str, Any]:
    """Asks for the run's cancel (as another process would), then works until interrupted."""
    cancel(CANCELLING[0], "r1", reason="closed the tab")
    await asyncio.sleep(30)
    return {"content": [{"type": "text", "text": "never"}]}


#: The store `slow` cancels its run in.
CANCELLING: list[MemoryEventStore] = []


def usage_of(record: Any) -> tuple[int, int, float]:
    """The record's tokens and cost (the cost rounded past the floating point's noise)."""
    u = record.usage
    return (u.input_tokens, u.output_tokens, round(u.cost, 12))


class TestCostAtEveryMoment:
    """The CLI reports its cost (`total_cost_usd`) and tokens (`modelUsage`) over the
    session at the end of each leg: the record holds them as soon as it does, whether the
    run pauses, is stopped, cancelled or ends (without `pricing=`)."""

    REFUND = Use("toolu_r", "mcp__shop__refund", {"order_id": "O-1"})

    def test_a_paused_run_holds_the_clis_cost_and_the_driven_one_its_total(
        self, tmp_path: Path
    ) -> None:
        """Waiting for approval: the CLI's cost of the leg is in the record
        (`usage.reported`, after the approval asked); resumed and ended: the CLI's total."""
        store = MemoryEventStore()
        cli = scripted_cli([Answer(uses=(self.REFUND,)), Answer("Refunded.")], sessions=tmp_path)
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        paused = run(claude.arun("go", shop(), transport=cli))
        assert paused.status == "waiting_approval"
        assert usage_of(store.load("r1")) == (10, 5, COST_PER_ANSWER)
        assert paused.sdk_result.total_cost_usd == COST_PER_ANSWER
        assert types(store, "r1", reports=True)[-2:] == ["approval.requested", "usage.reported"]
        approve(store, "r1", "toolu_r", approver="alice")
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        done = run(claude.adrive(shop(), transport=cli))
        assert done.status == "completed"
        assert usage_of(done.record) == (20, 10, round(done.sdk_result.total_cost_usd, 12))
        assert done.sdk_result.total_cost_usd == pytest.approx(2 * COST_PER_ANSWER)
        ended = ["model.started", "model.completed", "run.completed"]  # no report: it rode
        assert types(store, "r1", reports=True)[-3:] == ended  # on the final answer
        assert validates(store, "r1", tmp_path) == 0

    def test_a_run_a_guard_stopped_holds_what_the_cli_spent_also_on_the_refused_call(
        self, tmp_path: Path
    ) -> None:
        """MaxTurns(2) and no gateway (a custom transport): the third answer was asked for
        and streamed before its start was refused; the CLI counts it, so does the record."""
        store = MemoryEventStore()
        steps = [Answer(uses=(Use(f"toolu_{i}", "weather", {"city": "Paris"}),)) for i in range(3)]
        cli = scripted_cli(steps, {"weather": weather}, tmp_path)
        done = run(ClaudeRun(store, "r1", guards=[MaxTurns(2)]).arun("go", shop(), transport=cli))
        assert (done.status, done.stop_reason) == ("terminated", "max_turns")
        assert types(store, "r1", reports=True).count("model.completed") == 2
        assert usage_of(done.record) == (30, 15, round(3 * COST_PER_ANSWER, 12))
        assert types(store, "r1", reports=True)[-2:] == ["usage.reported", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_cancelled_run_holds_what_the_cli_spent(self, tmp_path: Path) -> None:
        """A cancel while a tool runs: the CLI is interrupted and reports the leg's cost,
        in the record before `run.cancelled`."""
        store = MemoryEventStore()
        CANCELLING[:] = [store]
        options = ClaudeAgentOptions(
            mcp_servers={"shop": create_sdk_mcp_server("shop", tools=[slow])}
        )
        cli = scripted_cli([Answer(uses=(Use("toolu_s", "mcp__shop__slow", {}),))], {}, tmp_path)
        done = run(ClaudeRun(store, "r1", cancel_poll=0.02).arun("go", options, transport=cli))
        assert (done.status, done.record.cancel_reason) == ("cancelled", "closed the tab")
        assert usage_of(done.record) == (10, 5, COST_PER_ANSWER)
        assert types(store, "r1", reports=True)[-3:] == [
            "usage.reported", "tool.outcome_unknown", "run.cancelled",
        ]  # fmt: skip
        assert validates(store, "r1", tmp_path) == 0

    def test_a_cost_limit_reads_the_clis_figure_at_the_pause(self, tmp_path: Path) -> None:
        """max_cost under the leg's cost: the report at the pause is past it, so the run is
        stopped for `budget` instead of waiting (the refund never runs)."""
        store = MemoryEventStore()
        cli = scripted_cli([Answer(uses=(self.REFUND,))], sessions=tmp_path)
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        limits = Limits(max_cost=COST_PER_ANSWER / 2)
        done = run(claude.arun("go", shop(), limits=limits, transport=cli))
        assert (done.status, done.stop_reason) == ("terminated", "budget")
        assert done.record.stop_detail == "spent 0.00014 > max cost 0.00007"
        assert store.attachment("r1", "claude-agent-sdk/session") is None
        assert RAN == []

    def test_with_pricing_the_record_holds_your_prices_not_the_clis(self, tmp_path: Path) -> None:
        """`pricing=`: every call is priced by you as it is recorded; the CLI's cost is not
        added (the tokens it reports are the calls' already)."""
        store = MemoryEventStore()
        cli = scripted_cli([Answer(uses=(self.REFUND,))], sessions=tmp_path)
        claude = ClaudeRun(
            store, "r1", needs_approval={"mcp__shop__refund"},
            pricing=per_million_tokens(1.0, 2.0),
        )  # fmt: skip
        paused = run(claude.arun("go", shop(), transport=cli))
        assert paused.status == "waiting_approval"
        assert usage_of(store.load("r1")) == (10, 5, round(20 / 1_000_000, 12))
        assert "usage.reported" not in types(store, "r1", reports=True)


class TestAdapterJobs:
    """`AdapterJobs`: a job engine's advance of a run, done by the adapter, under the job's
    lease (the engine itself is tested in `test_claude_procrastinate.py`)."""

    def paused(self, tmp_path: Path) -> tuple[MemoryEventStore, Any]:
        store = MemoryEventStore()
        refund_o1 = Use("toolu_r", "mcp__shop__refund", {"order_id": "O-1"})
        cli = scripted_cli([Answer(uses=(refund_o1,)), Answer("Refunded.")], sessions=tmp_path)
        claude = ClaudeRun(store, "r1", needs_approval={"mcp__shop__refund"})
        assert run(claude.arun("go", shop(), transport=cli)).status == "waiting_approval"
        approve(store, "r1", "toolu_r", approver="alice")
        return store, cli

    def test_the_adapter_drives_under_the_jobs_lease_and_leaves_it_held(
        self, tmp_path: Path
    ) -> None:
        """The job holds the run's lease; the adapter's resume drives under it (a lease of
        its own would be refused) and does not release it: the job does."""
        from agentfsm.adapters.jobs import AdapterJobs
        from agentfsm.errors import RunHeldError

        store, cli = self.paused(tmp_path)

        def drive(store: Any, run_id: str) -> Any:
            claude = ClaudeRun(store, run_id, needs_approval={"mcp__shop__refund"})
            return claude.adrive(shop(), transport=cli)

        lease = store.hold("r1", holder="job-1")
        with capture_logs():
            result = AdapterJobs(store, drive).drive("r1", lease=lease)
        assert (result.status, result.final_output) == ("completed", "Refunded.")
        assert RAN == ["refund O-1"]
        with pytest.raises(RunHeldError):  # still the job's, until it lets go
            store.hold("r1", holder="someone-else")
        lease.release()
        store.hold("r1", holder="someone-else").release()

    def test_a_run_the_adapter_leaves_goes_to_the_runner_or_is_left_as_it_is(
        self, tmp_path: Path
    ) -> None:
        """The adapter returns None: the fallback Runner drives it; without one, nothing runs
        and the job says so (`engine.not_driven`)."""
        from agentfsm.adapters.jobs import AdapterJobs

        store, _ = self.paused(tmp_path)
        asked: list[str] = []

        class Fallback:
            reducer = store.reducer

            def drive(self, run_id: str, **kw: Any) -> Any:
                asked.append(run_id)
                return "the runner's"

        jobs = AdapterJobs(store, lambda store, run_id: None, runner=Fallback())  # type: ignore[arg-type]
        assert jobs.drive("r1") == "the runner's"
        assert asked == ["r1"]
        with capture_logs() as logs:
            left = AdapterJobs(store, lambda store, run_id: None).drive("r1")
        assert (left.status, RAN) == ("running", [])
        assert [e["event"] for e in logs] == ["engine.not_driven"]
