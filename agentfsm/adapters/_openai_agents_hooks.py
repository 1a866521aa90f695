"""The OpenAI Agents SDK adapter's ear: the SDK's run hooks turned into our events.

`_Hooks` are the `RunHooks` an `AgentsRun` hands `Runner.run`; `_Nested` routes an agent
tool's nested run to the hooks of the subagent run its call drives; `tool_failure` and the
run config's error formatter record failing tools; `record_failure` records an SDK run that
raised, and `partial_output` reads from the SDK's items what a stopped run leaves its user.
`agentfsm.adapters.openai_agents` is the public face (`AgentsRun`); this module is what it
listens with.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

from agents import (
    Agent,
    Handoff,
    ItemHelpers,
    MessageOutputItem,
    ModelResponse,
    RunContextWrapper,
    RunHooks,
    ToolApprovalItem,
    ToolCallOutputItem,
)
from agents.exceptions import AgentsException
from agents.models.interface import Model
from agents.run_config import CallModelData, ModelInputData, RunConfig, ToolErrorFormatterArgs
from agents.tool import Tool
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

from agentfsm.adapters._attempts import Attempts
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop
from agentfsm.adapters._storable import jsonable, parse_arguments
from agentfsm.errors import LifecycleError
from agentfsm.events import models as m
from agentfsm.names import ActionStatus, DecisionKind
from agentfsm.runtime._writer import Spec, call_started

SDK = "openai-agents"

#: The recorder of the run being driven in this task (the failure function finds it here).
_CURRENT: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "agentfsm_openai_agents_recorder", default=None
)


#: The hooks of the subagent run an `agent_tool` call drives in this task (see `_Nested`).
_SUBAGENT: contextvars.ContextVar[_Hooks | None] = contextvars.ContextVar(
    "agentfsm_openai_agents_subagent", default=None
)


class _Stopped(AgentsException):
    """Carries our stop through the SDK, which then attaches its partial items (`run_data`)."""

    def __init__(self, stop: GuardStop | CancelStop) -> None:
        super().__init__(str(stop))
        self.stop = stop


def tool_failure(ctx: RunContextWrapper[Any] | _FailureContext, error: Exception) -> str:
    """Record `tool.failed` for a failing tool, as a `function_tool(failure_error_function=)`.

    Tools that keep the SDK's default failure handling need nothing: the adapter records
    their failures through `RunConfig.tool_error_formatter`. This is for tools that set
    their own `failure_error_function` (call it from yours). Returns what the model reads
    (the SDK's default message); outside an observed run it only returns that.
    """
    recorder = _CURRENT.get()
    if recorder is not None and isinstance(ctx, ToolContext | _FailureContext):
        recorder.append(*_tool_failed(ctx.tool_call_id, error))
    return _failure_message(error)


async def _atool_failure(call_id: str, error: Exception) -> None:
    """`tool_failure` for the adapter's own async formatter: the store is written off the loop."""
    recorder = _CURRENT.get()
    if recorder is not None:
        await recorder.aappend(*_tool_failed(call_id, error))


def _tool_failed(call_id: str, error: Exception) -> tuple[str, list[Any]]:
    """The signal and the `tool.failed` of a call whose tool raised `error`."""
    failed = {"kind": type(error).__name__, "message": str(error)}
    return (
        f"failure_error_function (call '{call_id}')",
        [Spec(m.ToolFailed, {"action_id": call_id, "error": failed})],
    )


def _failure_message(error: Exception) -> str:
    """What the model reads of a failed tool: the SDK's default message."""
    return f"An error occurred while running the tool. Please try again. Error: {error}"


def _recording_failures(config: RunConfig | None) -> RunConfig:
    """`config` with a `tool_error_formatter` that records `tool.failed` first.

    The SDK calls it for a function tool that keeps its default failure handling, with the
    call id and the exception, and awaits what it returns (so it may write off the loop);
    what the model reads stays the caller's formatter's or the SDK's default message.
    """
    config = config if config is not None else RunConfig()
    formatter = config.tool_error_formatter

    async def record_then_format(args: ToolErrorFormatterArgs[Any]) -> Any:
        if args.kind == "tool_exception" and args.error is not None:
            await _atool_failure(args.call_id, args.error)
        if formatter is None:
            return None
        message = formatter(args)
        return await message if inspect.isawaitable(message) else message

    return dataclasses.replace(config, tool_error_formatter=record_then_format)


def _telling(config: RunConfig) -> RunConfig:
    """`config` with a `call_model_input_filter` that adds what the model has not read yet
    (`Recorder.notes`: a proposed event the table refused after its tool returned, what
    happened while the run waited) to the input of the next model call, as user messages,
    after the caller's own filter."""
    theirs = config.call_model_input_filter

    async def tell(data: CallModelData[Any]) -> ModelInputData:
        given = data.model_data
        if theirs is not None:
            filtered = theirs(data)
            given = await filtered if inspect.isawaitable(filtered) else filtered
        recorder = _CURRENT.get()
        notes = recorder.notes() if recorder is not None else []
        if not notes:
            return given
        told: list[Any] = [{"role": "user", "content": note} for note in notes]
        return ModelInputData(input=[*given.input, *told], instructions=given.instructions)

    return dataclasses.replace(config, call_model_input_filter=tell)


def model_name(model: str | Model | None) -> str | None:
    """The model's name for `pricing`: the agent's `model` string, or the name a model object
    was built with (`OpenAIResponsesModel(model="gpt-4.1", ...)`, the usual way to another
    endpoint), else None."""
    if isinstance(model, str):
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


class _FailureContext:
    """The part of a `ToolContext` `tool_failure` reads."""

    def __init__(self, call_id: str) -> None:
        self.tool_call_id = call_id


def _handoff_names(agent: Agent[Any]) -> set[str]:
    names = set()
    for h in agent.handoffs:
        names.add(h.tool_name if isinstance(h, Handoff) else Handoff.default_tool_name(h))
    return names


class _Hooks(RunHooks[Any]):
    """The SDK's run hooks, appending our events (see the module's table).

    The caller's own `RunHooks` (`run(..., hooks=...)`) are called after ours, so they see
    each signal once it is recorded (and not at all if our guards stopped the run).
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        #: Each HTTP attempt of the run's model calls, judged and recorded (`watching`).
        self.attempts = Attempts(recorder, stopping=_Stopped)
        self.theirs: RunHooks[Any] | None = None
        #: `RunConfig.model`, which the SDK uses instead of each agent's model.
        self.model: str | Model | None = None

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        """Only the caller's hook: an agent starting is no event of ours."""
        if self.theirs is not None:
            await self.theirs.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        """Only the caller's hook: the run's end is recorded when `Runner.run` returns."""
        if self.theirs is not None:
            await self.theirs.on_agent_end(context, agent, output)

    async def _append(self, signal: str, specs: list[Any]) -> None:
        try:
            await self.recorder.aappend(signal, specs)
        except (GuardStop, CancelStop) as stop:
            raise _Stopped(stop) from stop

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        """A model call is about to start: `model.started`."""
        signal = f"RunHooks.on_llm_start (agent '{agent.name}')"
        await self._append(signal, [self.recorder.model_call()])
        if self.theirs is not None:
            await self.theirs.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """The model answered: `model.completed` with its decision and usage."""
        handoffs = _handoff_names(agent)
        calls: list[dict[str, Any]] = []
        items: list[ResponseFunctionToolCall] = []
        handoff = False
        texts: list[str] = []
        for item in response.output:
            if isinstance(item, ResponseFunctionToolCall):
                if item.name in handoffs:
                    handoff = True
                else:
                    items.append(item)
                    calls.append(
                        {
                            "action_id": item.call_id,
                            "tool": item.name,
                            "arguments": parse_arguments(item.arguments),
                        }
                    )
            elif isinstance(item, ResponseOutputMessage):
                texts.append(ItemHelpers.extract_last_text(item) or "")
        model = model_name(self.model if self.model is not None else agent.model)
        usage = self.recorder.reported_usage(
            response.usage.input_tokens, response.usage.output_tokens, model
        )
        if calls:
            fields: dict[str, Any] = {"decision": DecisionKind.TOOL_CALLS, "tool_calls": calls}
        elif handoff:
            fields = {"decision": DecisionKind.HANDOFF}
        else:
            fields = {"decision": DecisionKind.FINAL, "output": "".join(texts)}
        await self._append(
            f"RunHooks.on_llm_end (agent '{agent.name}')",
            [Spec(m.ModelCompleted, {**fields, "usage": usage})],
        )
        refusal = self.recorder.record.last_refusal
        if refusal is not None:
            # Recorded as refused (too many calls): the SDK's approval record answers each
            # call with the refusal's message, before it would run or wait for a person.
            for item in items:
                approval = ToolApprovalItem(agent=agent, raw_item=item, tool_name=item.name)
                context.reject_tool(approval, rejection_message=refusal.message)
        if self.theirs is not None:
            await self.theirs.on_llm_end(context, agent, response)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """A function tool is about to run: `tool.requested` and `tool.started`."""
        if isinstance(context, ToolContext):  # hosted and shell-like tools carry no call id
            aid = context.tool_call_id
            action = self.recorder.record.actions.get(aid)
            # An agent tool whose subagent paused for approval runs again on the drive,
            # continuing the subagent: the call started before, and still runs.
            if action is None or action.status != ActionStatus.STARTED:
                args = parse_arguments(context.tool_arguments)
                await self._append(
                    f"RunHooks.on_tool_start (call '{aid}')",
                    call_started(aid, context.tool_name, args),
                )
        if self.theirs is not None:
            await self.theirs.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """A function tool returned: `tool.completed` (unless `tool_failure` saw it fail)."""
        if isinstance(context, ToolContext):
            aid = context.tool_call_id
            action = self.recorder.record.actions.get(aid)
            # A failure was recorded by the failure function; the SDK reports its message.
            if action is None or action.status != ActionStatus.FAILED:
                await self._append(
                    f"RunHooks.on_tool_end (call '{aid}')",
                    [Spec(m.ToolCompleted, {"action_id": aid, "result": jsonable(result)})],
                )
        if self.theirs is not None:
            await self.theirs.on_tool_end(context, agent, tool, result)

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """The SDK handed the run to another agent: `handoff`."""
        await self._append(
            f"RunHooks.on_handoff ('{from_agent.name}' → '{to_agent.name}')",
            [Spec(m.Handoff, {"to_agent": to_agent.name})],
        )
        if self.theirs is not None:
            await self.theirs.on_handoff(context, from_agent=from_agent, to_agent=to_agent)


class _Nested(RunHooks[Any]):
    """The hooks an `agent_tool` gives the SDK's nested runs.

    One tool serves every call, each call a subagent run of its own: each signal goes to the
    hooks of the run the current call drives (`_SUBAGENT`, set around the nested run).
    """

    @staticmethod
    def _hooks() -> _Hooks:
        hooks = _SUBAGENT.get()
        assert hooks is not None, "a nested run outside an agent_tool call"
        return hooks

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        await self._hooks().on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        await self._hooks().on_agent_end(context, agent, output)

    async def on_llm_start(
        self, context: Any, agent: Agent[Any], system_prompt: str | None, input_items: Any
    ) -> None:
        await self._hooks().on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Agent[Any], response: ModelResponse) -> None:
        await self._hooks().on_llm_end(context, agent, response)

    async def on_tool_start(self, context: Any, agent: Agent[Any], tool: Tool) -> None:
        await self._hooks().on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Agent[Any], tool: Tool, result: Any) -> None:
        await self._hooks().on_tool_end(context, agent, tool, result)

    async def on_handoff(self, context: Any, from_agent: Agent[Any], to_agent: Agent[Any]) -> None:
        await self._hooks().on_handoff(context, from_agent, to_agent)


_NESTED = _Nested()


def partial_output(items: Sequence[Any]) -> Any:
    """The last thing said or returned in `items`: what a stopped run leaves its user."""
    for item in reversed(items):
        if isinstance(item, MessageOutputItem):
            return ItemHelpers.text_message_output(item)
        if isinstance(item, ToolCallOutputItem):
            return jsonable(item.output)
    return None


async def record_failure(recorder: Recorder, exc: BaseException) -> None:
    """Record how the SDK run ended abnormally, unless the run cannot take it.

    A cancelled asyncio task is a cancel (`run.cancel_requested` + `run.cancelled`);
    any other exception is `run.failed`.
    """
    if not isinstance(exc, asyncio.CancelledError):
        await recorder.off_loop(recorder.failed, exc)
        return
    # One worker-thread call for both steps: a second cancel of the task (its caller's run
    # being cancelled too) cannot stop it between the request and the end, which left the
    # run waiting in `cancel_requested` with nothing to end it.
    await recorder.off_loop(_cancel_now, recorder)


def _cancel_now(recorder: Recorder) -> None:
    with contextlib.suppress(LifecycleError, GuardStop, CancelStop):
        recorder.append(
            "asyncio cancellation",
            [Spec(m.RunCancelRequested, {"reason": "the asyncio task was cancelled"})],
        )
    # Asked already (the calling run ends its subagents so too): end it all the same.
    with contextlib.suppress(LifecycleError, GuardStop, CancelStop):
        recorder.cancelled()
