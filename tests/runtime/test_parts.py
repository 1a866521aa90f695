"""The Runner's parts: decisions, streamed decisions, tools and registries, control errors."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm.errors import ActionError, IllegalTransitionError
from agentfsm.events import Limits, Usage
from agentfsm.runtime import (
    Agent,
    Decision,
    IncompleteStreamError,
    ModelError,
    ProposedCall,
    ScriptedModel,
    StreamAssembler,
    Subagent,
    SubagentTool,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolPolicy,
    ToolRegistry,
    UsageDelta,
    approve,
    cancel,
    pause,
    subagent,
    submit,
)
from agentfsm.stores import MemoryEventStore

from .helpers import Calls, order_tools, runner_for, types


class TestDecisions:
    """A decision says exactly one thing."""

    def test_a_tool_calls_decision_needs_calls(self) -> None:
        """An empty batch is refused at construction."""
        with pytest.raises(ValueError, match=r"^a 'tool_calls' decision needs at least one call$"):
            Decision.call_tools()

    def test_call_arguments_must_be_an_object(self) -> None:
        """Arguments are a JSON object with string keys."""
        with pytest.raises(TypeError, match="must be a JSON object"):
            ProposedCall("t", [1, 2])  # type: ignore[arg-type]


class TestStreaming:
    """Only complete, parsed calls enter the batch."""

    def test_fragments_assemble_into_calls_with_usage(self) -> None:
        """Name first, arguments in pieces, usage last."""
        a = StreamAssembler()
        for chunk in [
            TextDelta("Looking"),
            ToolCallDelta(0, tool="get_order", action_id="c1", arguments='{"order_'),
            ToolCallDelta(0, arguments='id": "O-1"}'),
            ToolCallDelta(1, tool="get_order", arguments="{}", done=True),
            UsageDelta(Usage(input_tokens=5)),
        ]:
            a.feed(chunk)
        assert a.complete_calls() == (ProposedCall("get_order", {}),)
        assert a.finish() == Decision.call_tools(
            ProposedCall("get_order", {"order_id": "O-1"}, "c1"),
            ProposedCall("get_order", {}),
            usage=Usage(input_tokens=5),
            output="Looking",
        )

    def test_a_call_whose_arguments_never_completed_is_never_a_call(self) -> None:
        """`IncompleteStreamError` (retryable) names the call and what arrived."""
        a = StreamAssembler()
        a.feed(ToolCallDelta(0, tool="refund", arguments='{"amount": 1'))
        with pytest.raises(IncompleteStreamError) as info:
            a.finish()
        assert (info.value.index, info.value.retryable, str(info.value)) == (
            0,
            True,
            "tool call 0 ('refund') ended with incomplete arguments: '{\"amount\": 1'",
        )

    def test_a_cut_stream_is_asked_again_and_nothing_partial_runs(self) -> None:
        """The Runner retries the model call; the partial call never ran."""
        calls = Calls()
        model = ScriptedModel(
            [
                lambda ctx: iter([ToolCallDelta(0, tool="create_ticket", arguments='{"order')]),
                lambda ctx: iter([TextDelta("nothing to do")]),
            ]
        )
        store = MemoryEventStore()
        result = runner_for(store, model, order_tools(calls)).run("r1")
        assert (result.final_output, model.calls, calls.log) == ("nothing to do", 2, [])
        assert types(store, "r1") == [
            "run.started",
            "model.started",
            "model.completed",
            "run.completed",
        ]


class TestTools:
    """Tool declarations are checked when made."""

    def test_a_registry_refuses_two_tools_of_one_name(self) -> None:
        """Names are unique."""
        tool = Tool("x", lambda ctx: None)
        with pytest.raises(ValueError, match=r"^a tool named 'x' is already registered$"):
            ToolRegistry([tool, tool])

    def test_a_bad_json_schema_is_refused_at_once(self) -> None:
        """The schema itself is checked when the tool is made."""
        import jsonschema

        with pytest.raises(jsonschema.SchemaError):
            Tool("x", lambda ctx: None, args={"type": "no-such-type"})

    def test_max_attempts_must_be_positive(self) -> None:
        """At least one attempt."""
        with pytest.raises(ValueError, match=r"^max_attempts must be an integer >= 1, got 0$"):
            Tool("x", lambda ctx: None, max_attempts=0)

    def test_safe_to_repeat_follows_the_flags(self) -> None:
        """No side effects or idempotent."""
        flags = [(True, False), (True, True), (False, False)]
        assert [
            Tool("x", print, side_effects=s, idempotent=i).safe_to_repeat for s, i in flags
        ] == [
            False,
            True,
            True,
        ]

    def test_the_registry_lists_polling_tools_for_the_loop_detector(self) -> None:
        """`polling` maps each polling tool to its poll limit."""
        registry = ToolRegistry(
            [Tool("status", print, polling=True, poll_limit=8), Tool("x", print)]
        )
        assert registry.polling == {"status": 8}

    def test_a_subagent_is_a_tool_that_names_its_child_run(self) -> None:
        """`subagent(...)` is a `SubagentTool`: a tool (idempotent, so safe to resume) that
        carries the child's agent and limits; a plain tool has no such part."""
        helper = Agent("helper", ScriptedModel([]))
        tool = subagent("delegate", helper, limits=Limits(max_turns=2))
        assert isinstance(tool, SubagentTool)
        assert (tool.name, tool.safe_to_repeat) == ("delegate", True)
        assert tool.subagent == Subagent(helper, tool.subagent.objective, Limits(max_turns=2))
        assert not isinstance(Tool("x", print), SubagentTool)


class TestControl:
    """Control functions append one event, or refuse with the reducer's error."""

    def test_approving_a_call_that_is_not_waiting_is_refused(self) -> None:
        """`ActionError` names the action; nothing is written."""
        store = MemoryEventStore()
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("create_ticket", {"order_id": "1"}))]
        )
        policy = ToolPolicy(approval={"create_ticket"})
        runner_for(store, model, order_tools(Calls()), policy=policy).run("r1")
        with pytest.raises(ActionError) as info:
            approve(store, "r1", "a9", "alice")
        assert (info.value.action_id, info.value.reason) == (
            "a9",
            "for action 'a9' is refused: no such action was proposed or requested",
        )
        assert store.load("r1").version == 4

    def test_cancelling_a_finished_run_is_illegal(self) -> None:
        """Terminal states are absorbing."""
        store = MemoryEventStore()
        model = ScriptedModel([Decision.answer("done")])
        runner_for(store, model, []).run("r1")
        with pytest.raises(IllegalTransitionError) as info:
            cancel(store, "r1")
        assert (info.value.state, info.value.terminal) == ("completed", True)

    def test_pausing_needs_a_run_between_steps(self) -> None:
        """A run waiting for approval cannot be paused."""
        store = MemoryEventStore()
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("create_ticket", {"order_id": "1"}))]
        )
        runner_for(
            store, model, order_tools(Calls()), policy=ToolPolicy(approval={"create_ticket"})
        ).run("r1")
        with pytest.raises(IllegalTransitionError):
            pause(store, "r1", "lunch")

    def test_a_submitted_run_is_driven_by_runner_drive(self) -> None:
        """`submit` only starts it; the default agent takes it."""
        store = MemoryEventStore()
        submit(store, "r1", "say hi")
        model = ScriptedModel([lambda ctx: Decision.answer(f"{ctx.agent}: {ctx.objective}")])
        assert runner_for(store, model, []).drive("r1").final_output == "support: say hi"


def test_a_model_past_its_script_says_so() -> None:
    """The scripted model raises a non-retryable `ModelError` past its end."""
    model = ScriptedModel([])
    with pytest.raises(ModelError, match=r"^the script has 0 steps; call 1 is past it$"):
        model(Any)  # type: ignore[arg-type]
