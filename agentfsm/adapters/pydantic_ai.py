"""Run a pydantic-ai agent under our lifecycle: validated, guarded, stored, logged.

`AgentIterRun(store, run_id, guards=[...]).arun(agent, prompt)` (sync: `.run`) drives
`agent.iter()` node by node and appends our events before the agent takes the next step:

- before the run: `run.started`;
- a `ModelRequestNode`: `model.started` (max turns, budget, deadline); each HTTP attempt the
  model's `openai` client retries behind it: `model.failed` for the attempt that failed, then
  `model.started` for the retry, judged before it is sent (`agentfsm.adapters._attempts`);
- a `CallToolsNode`: `model.completed` with the response's usage; its `ToolCallPart`s are the
  tool calls, with pydantic-ai's `tool_call_id`s as `action_id`s — except an output tool's
  call (structured output), which is the final answer (`decision: final`); a response with
  more calls than `max_calls_per_decision` is `refused`, and each of its calls fails with the
  refusal's message (`ToolFailed` from a `before_tool_validate` hook the run adds: none
  runs or waits for approval, and the model reads why in the next request);
- `FunctionToolCallEvent`: `tool.requested` + `tool.started` (loop, budget, deadline), except
  for a call that waits for approval;
- `FunctionToolResultEvent`: `tool.completed` (`outcome="success"`), `tool.failed`
  (`failed`, or `retried` after `ModelRetry`), `tool.outcome_unknown` (`interrupted`);
- the run's output: `run.completed`; a `DeferredToolRequests` output: `approval.requested`
  per call (`requires_approval=True` tools);
- `UsageLimitExceeded`: `run.terminated` (`budget`, or `max_turns` for the request limit);
  `RunCancelled`: `run.cancelled`; other exceptions: `run.failed` (a tool's own exception,
  which pydantic-ai lets end the run, is first `tool.failed` for the call that raised it).

A guard's refusal stops the iteration before the next model request or tool call; the run is
recorded as `run.terminated` and the partial output returned. Approvals are decided in our
store (`agentfsm.runtime.approve`/`reject`, any process); `adrive(agent)` reads the run's
message history JSON our store kept when it paused (attachment `pydantic-ai/messages`; also
returned as `ObservedRun.state`, and `adrive(agent, history)` takes one you pass), checks
each deferred call against the one approval was requested for (call id and arguments
digest; else `ApprovalMismatchError`, nothing runs) and continues with `DeferredToolResults`.
A response with free and deferred calls runs the free ones first, then waits.
Subagents: inside a tool, `run.subagent(ctx.tool_call_id).arun(other_agent, prompt)` is a run
of its own that draws on this run's token and cost limits; `await run.adelegate(ctx,
other_agent, prompt)` also pauses this run while the child waits for approval, and drives
the child on when this run is driven on.

Turns: pydantic-ai's `UsageLimits(request_limit=n)` counts model requests like our
`max_turns` does, but only within one `iter()`/`run()` call (a drive starts again at 0,
ours goes on), and it is checked before the request as ours is. Its default is 50.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Unpack

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    from pydantic_ai import (
        Agent,
        DeferredToolRequests,
        DeferredToolResults,
        RunContext,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.capabilities import Hooks
    from pydantic_ai.exceptions import (
        ApprovalRequired,
        RunCancelled,
        ToolFailed,
        UsageLimitExceeded,
    )
    from pydantic_ai.messages import (
        FunctionToolCallEvent,
        FunctionToolResultEvent,
        ModelMessagesTypeAdapter,
        ModelResponse,
        TextPart,
        ToolCallPart,
        UserPromptPart,
    )
except ImportError as exc:
    raise missing_extra("AgentIterRun", "pydantic-ai", exc) from exc

from agentfsm.adapters._attempts import Attempts, watching
from agentfsm.adapters._observed import ObservedRun, observed
from agentfsm.adapters._pricing import Pricing, per_million_tokens, price_table
from agentfsm.adapters._sdk_run import RunOptions, SdkRun, aleased
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop, WaitStop
from agentfsm.adapters._storable import jsonable
from agentfsm.adapters._subagents import approved_call, stopped_line, waiting_on
from agentfsm.adapters._sync import run_blocking
from agentfsm.errors import (
    ApprovalMismatchError,
    LifecycleError,
    SavedStateError,
    SignalIllegalTransitionError,
    UnknownModelError,
)
from agentfsm.events import models as m
from agentfsm.events.models import Limits
from agentfsm.names import ActionStatus, DecisionKind, RunStatus
from agentfsm.runtime._writer import Spec, approval_asked, call_started
from agentfsm.stores.base import EventStore

__all__ = [
    "AgentIterRun",
    "ApprovalMismatchError",
    "ObservedRun",
    "Pricing",
    "SavedStateError",
    "SignalIllegalTransitionError",
    "UnknownModelError",
    "per_million_tokens",
    "price_table",
]

SDK = "pydantic-ai"
#: The attachment our store keeps a paused run's message history JSON under.
STATE = "pydantic-ai/messages"


def _needing_approval(agent: Agent[Any, Any]) -> set[str]:
    """Names of the agent's function tools declared `requires_approval=True`."""
    names: set[str] = set()
    for toolset in agent.toolsets:
        for name, tool in getattr(toolset, "tools", {}).items():
            if getattr(tool, "requires_approval", False):
                names.add(name)
    return names


class AgentIterRun(SdkRun):
    """One of our runs, driven by a pydantic-ai `Agent.iter()` (see the module docstring).

    Args:
        store: any of our `EventStore`s.
        run_id: our id for the run.
        guards: Python guards checked before each model request and tool call.
        clock: stamps events and is the guards' `now` (UTC wall clock by default).
        logger: a structlog logger for the transition log lines.
        listeners: called with each stored event, in order (`RunSpans(tracer).feed`).
        reserve_tokens: tokens each model call reserves before it is made (see `SdkRun`).
        reserve_cost: cost each model call reserves before it is made.
        pricing: the cost of a model call from its tokens (see `SdkRun`).
        max_calls_per_decision: the calls one model answer may propose (64 by default; see
            `SdkRun`): the calls of an answer with more are refused, the model reads why.
        max_turns: the model calls a run may make (100 by default; see `SdkRun`).
        on_event: called (and awaited, if it returns an awaitable) with every event of
            the run's streams, as `agent.iter()`'s node streams yield them: the model's
            `PartStartEvent`/`PartDeltaEvent`s (a UI's tokens; the model is then asked to
            stream) and the tools' `FunctionToolCallEvent`/`FunctionToolResultEvent`s.
    """

    sdk = SDK
    #: See `on_event` above; a `subagent` run streams nothing.
    on_event: Callable[[Any], Any] | None = None

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        on_event: Callable[[Any], Any] | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        if on_event is not None:
            self.on_event = on_event
        super().__init__(store, run_id, **options)

    def _attach(self) -> None:
        self._last: Any = None
        # The SDK's usage of this leg, and the part of it our model.completed events hold:
        # a token limit of the SDK's own stops the run before its last answer reaches us.
        self._sdk_run: Any = None
        self._recorded = (0, 0, 0)  # requests, input tokens, output tokens
        #: Each HTTP attempt of the run's model calls, judged and recorded (`watching`).
        self.attempts = Attempts(self.recorder)

    async def _forward(self, event: Any) -> None:
        if self.on_event is not None:
            done = self.on_event(event)
            if inspect.isawaitable(done):
                await done

    @aleased
    async def arun(
        self,
        agent: Agent[Any, Any],
        prompt: str,
        *,
        limits: Limits | None = None,
        **iter_kwargs: Any,
    ) -> ObservedRun:
        """Start the run and drive `agent.iter(prompt, **iter_kwargs)` under our lifecycle.

        Args:
            agent: the pydantic-ai agent.
            prompt: the user prompt (the run's `objective`).
            limits: the run's own limits, recorded on `run.started` and enforced.
            **iter_kwargs: passed to `agent.iter` (`model`, `deps`, `usage_limits`, ...).
        """
        recorder = self.recorder
        await recorder.off_loop(recorder.start, objective=prompt, agent=agent.name, limits=limits)
        return await self._leg(agent, prompt, iter_kwargs)

    def run(self, agent: Agent[Any, Any], prompt: str, **kwargs: Any) -> ObservedRun:
        """`arun` for code without an event loop, as pydantic-ai's `agent.run_sync` (same
        arguments).

        It runs on an event loop this thread keeps, so an async client shared across
        `run` and `drive` calls (`AsyncOpenAI`) keeps working; called while a loop runs, it
        raises `RuntimeError` saying to `await arun()`.
        """
        return run_blocking(self.arun(agent, prompt, **kwargs), "run")

    def drive(
        self, agent: Agent[Any, Any], history: str | bytes | None = None, **kwargs: Any
    ) -> ObservedRun:
        """`adrive` for code without an event loop (same arguments), on the loop `run` uses."""
        return run_blocking(self.adrive(agent, history, **kwargs), "drive")

    async def adelegate(
        self, ctx: RunContext[Any], agent: Agent[Any, Any], prompt: str, **iter_kwargs: Any
    ) -> Any:
        """Ask `agent` as a subagent of the tool call in `ctx`; return what the model reads.

        Call it from a tool: the child is `subagent(ctx.tool_call_id)` (its own run, sharing
        this run's token and cost limits). It returns the child's output, or, for a child a
        guard or a cancel stopped, a line saying so and its partial output. A child that
        waits for approval pauses this run too: the tool's call stays started (it waits on
        the child), `pending_approvals` names the child's run and call, and the decision is
        taken in the child's run; `adrive` then calls the tool again (pydantic-ai's deferred
        approval of it), and `adelegate` drives the child on instead of starting it.

        Raises:
            ApprovalRequired: the child waits for a decision (pydantic-ai defers the call).
            ValueError: `ctx` is not a tool call's (it has no `tool_call_id`).
        """
        if ctx.tool_call_id is None:
            raise ValueError("adelegate() asks for a tool call's context: call it from a tool")
        child = self.subagent(ctx.tool_call_id)
        if await child.recorder.off_loop(
            child.recorder.stored
        ):  # called again by this run's drive: it paused
            done = await child.adrive(agent, **iter_kwargs)
        else:
            done = await child.arun(agent, prompt, **iter_kwargs)
        if done.status == RunStatus.COMPLETED:
            return done.final_output
        if done.pending_approvals:
            raise ApprovalRequired({"agentfsm_subagent": child.run_id})
        return stopped_line(agent.name, done.record, done.partial_output)

    @aleased
    async def adrive(
        self, agent: Agent[Any, Any], history: str | bytes | None = None, **iter_kwargs: Any
    ) -> ObservedRun:
        """Continue a run waiting for approval from its message history JSON, or one an
        event of its lifecycle made wait, once a person's event let it go on.

        After a wait in a state of the run's lifecycle (a tool's `emit`), the agent goes on
        from the message history our store kept when it stopped (its last request, the
        tools' returns, is sent), and that request also says which events were appended
        meanwhile (`loan.documents_received` and its fields); a run still waiting there is
        returned as it is. A run asked to cancel while it waited ends cancelled here, and
        nothing runs; a run that already ended is returned as it is (as `Runner.drive`
        does).

        Args:
            agent: the pydantic-ai agent, as this process builds it.
            history: the message history JSON the pause returned (`.state`); by default the
                one our store kept when the run paused.
            **iter_kwargs: passed to `agent.iter`.

        Raises:
            ApprovalMismatchError: a deferred call in `history` is not the call approval was
                requested for.
            SavedStateError: no history is given and the store keeps none, the run went on
                since it was saved, or it does not load.
        """
        recorder = self.recorder
        record = await recorder.off_loop(recorder.load)
        settled = await recorder.off_loop(self._settle_without_driving, record, STATE)
        if settled is not None:
            return settled
        if history is None:
            kept = await recorder.off_loop(recorder.kept_wait)
            if kept is not None:
                if recorder.store.reducer.table.stops_driving(record.status):
                    return observed(recorder.store, record)
                await recorder.off_loop(recorder.forget_wait)  # the agent goes on from it now
                kwargs = {**iter_kwargs, "message_history": _messages(kept)}
                return await self._leg(agent, None, kwargs)
            history = await recorder.off_loop(recorder.saved_state, STATE)
            try:
                messages = ModelMessagesTypeAdapter.validate_json(history)
            except ValueError as exc:  # pydantic's ValidationError is one
                raise SavedStateError.unreadable(record.run_id, STATE, exc) from exc
        else:
            messages = ModelMessagesTypeAdapter.validate_json(history)
        pending = [
            part
            for part in _last_response(messages).parts
            if isinstance(part, ToolCallPart) and part.tool_call_id in record.actions
        ]
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
        for part in pending:
            arguments = jsonable(part.args_as_dict())
            action = approved_call([record], part.tool_call_id, part.tool_name, arguments)
            if action.status == ActionStatus.REJECTED:
                approvals[part.tool_call_id] = ToolDenied(action.reason or "rejected")
            elif action.status in (ActionStatus.APPROVED, ActionStatus.STARTED):
                approvals[part.tool_call_id] = True  # started: `adelegate` drives its child on
        waiting = await recorder.off_loop(waiting_on, recorder.store, record)
        if waiting:
            state = history if isinstance(history, str) else history.decode()
            return observed(recorder.store, record, state=state, pending_approvals=waiting)
        kwargs = {
            **iter_kwargs,
            "message_history": messages,
            "deferred_tool_results": DeferredToolResults(approvals=approvals),
        }
        return await self._leg(agent, None, kwargs)

    async def _leg(
        self, agent: Agent[Any, Any], prompt: str | None, kwargs: dict[str, Any]
    ) -> ObservedRun:
        recorder = self.recorder
        try:
            with watching(self.attempts):
                return await self._iterate(agent, prompt, kwargs)
        except (GuardStop, CancelStop) as stop:
            record = await recorder.off_loop(recorder.stopped, stop)
            return observed(recorder.store, record, partial_output=self._last)
        except UsageLimitExceeded as exc:
            reason = "max_turns" if "request_limit" in str(exc) else "budget"
            end = Spec(m.RunTerminated, {"stop_reason": reason, "detail": str(exc).split(". ")[0]})
            try:
                record = await recorder.aappend("UsageLimitExceeded", [*self._unseen_answer(), end])
            except GuardStop as ours:  # the unseen answer overran our own limits too
                record = await recorder.off_loop(recorder.stopped, ours)
            return observed(recorder.store, record, partial_output=self._last)
        except RunCancelled:
            await recorder.aappend(
                "RunCancelled",
                [Spec(m.RunCancelRequested, {"reason": "the agent run was cancelled"})],
            )
            record = await recorder.off_loop(recorder.cancelled)
            return observed(recorder.store, record, partial_output=self._last)
        except Exception as exc:
            await self._tool_raised(exc)
            await recorder.off_loop(recorder.failed, exc)
            raise

    def _unseen_answer(self) -> list[Any]:
        """`model.completed` for a model call whose answer the SDK kept from us, if one is open.

        pydantic-ai checks a token limit after counting a response and before handing it on:
        the call happened, so what it used (the SDK's count beyond what our events hold) is
        recorded; its answer never reached us, so it has no output.
        """
        if self._sdk_run is None or not self.recorder.record.model_call_open:
            return []
        usage = self._sdk_run.usage
        requests, seen_in, seen_out = self._recorded
        if usage.requests <= requests:  # stopped before the request: no call was made
            return []
        tokens_in = max(0, (usage.input_tokens or 0) - seen_in)
        tokens_out = max(0, (usage.output_tokens or 0) - seen_out)
        fields = {
            "decision": DecisionKind.FINAL,
            "usage": self.recorder.usage(tokens_in, tokens_out),
        }
        return [Spec(m.ModelCompleted, fields)]

    async def _tool_raised(self, exc: Exception) -> None:
        """Record `tool.failed` for the call whose exception ended the run, when it is plain.

        pydantic-ai lets a tool's exception (other than `ModelRetry`) end the run. With one
        call in flight it is that call's failure; with several, which one raised is not
        known, and the run's end records them all as outcome unknown.
        """
        running = [
            a.action_id
            for a in self.recorder.record.actions.values()
            if a.status == ActionStatus.STARTED
        ]
        if len(running) == 1:
            error = {"kind": type(exc).__name__, "message": str(exc)}
            with contextlib.suppress(LifecycleError, GuardStop, CancelStop):
                await self.recorder.aappend(
                    f"tool exception (call '{running[0]}')",
                    [Spec(m.ToolFailed, {"action_id": running[0], "error": error})],
                )

    async def _iterate(
        self, agent: Agent[Any, Any], prompt: str | None, kwargs: dict[str, Any]
    ) -> ObservedRun:
        recorder = self.recorder
        approval = _needing_approval(agent)
        refusing = Hooks[Any](before_tool_validate=self._refuse)
        kwargs = {**kwargs, "capabilities": [*(kwargs.get("capabilities") or ()), refusing]}
        async with agent.iter(prompt, **kwargs) as run:
            self._sdk_run, self._recorded = run, (0, 0, 0)
            async for node in run:
                if Agent.is_model_request_node(node):
                    notes = recorder.notes()  # told once `model.started` is in
                    try:
                        await recorder.aappend("ModelRequestNode", [recorder.model_call()])
                    except WaitStop:
                        # Where the agent stood, for `adrive` to go on from once it may.
                        stood = [*run.all_messages(), node.request]
                        await recorder.off_loop(recorder.keep_wait, _dumped(stood))
                        raise
                    if notes:  # what the model has not read yet goes with this request
                        told = [UserPromptPart(note) for note in notes]
                        parts = [*node.request.parts, *told]
                        node.request = dataclasses.replace(node.request, parts=parts)
                    if self.on_event is not None:  # streaming is asked for only if wanted
                        async with node.stream(run.ctx) as request:
                            async for event in request:
                                await self._forward(event)
                elif Agent.is_call_tools_node(node):
                    await self._model_completed(node.model_response, _output_tools(run.ctx))
                    async with node.stream(run.ctx) as stream:
                        async for event in stream:
                            await self._tool_event(event, approval)
                            await self._forward(event)
            result = run.result
        assert result is not None  # the iteration ran to its End node
        output = result.output
        if isinstance(output, DeferredToolRequests):
            # A call that started waits on its subagent (`adelegate`), asked in its own run.
            actions = recorder.record.actions
            specs: list[Any] = [
                approval_asked(part.tool_call_id, part.tool_name, jsonable(part.args_as_dict()))
                for part in output.approvals
                if actions[part.tool_call_id].status != ActionStatus.STARTED
            ]
            record = await (
                recorder.aappend("DeferredToolRequests", specs)
                if specs
                else recorder.off_loop(recorder.waiting)
            )
            history = ModelMessagesTypeAdapter.dump_json(result.all_messages())
            await recorder.off_loop(recorder.save_state, STATE, history)
            return observed(
                recorder.store,
                record,
                sdk_result=result,
                state=history.decode(),
                pending_approvals=await recorder.off_loop(waiting_on, recorder.store, record),
            )
        record = await recorder.aappend("End", [Spec(m.RunCompleted, {})])
        await recorder.off_loop(recorder.forget_state, STATE)
        return observed(recorder.store, record, final_output=output, sdk_result=result)

    async def _model_completed(self, response: ModelResponse, output_tools: set[str]) -> None:
        parts = [p for p in response.parts if isinstance(p, ToolCallPart)]
        # A structured output comes as a call of an output tool: it is the final answer,
        # not an action (pydantic-ai never runs it as a tool).
        outputs = [p for p in parts if p.tool_name in output_tools]
        calls = [
            {
                "action_id": part.tool_call_id,
                "tool": part.tool_name,
                "arguments": jsonable(part.args_as_dict()),
            }
            for part in parts
            if part.tool_name not in output_tools
        ]
        usage = self.recorder.reported_usage(
            response.usage.input_tokens, response.usage.output_tokens, response.model_name
        )
        if outputs:
            # Function calls beside it run only with `end_strategy="exhaustive"`; they are
            # then recorded as they run (see `_tool_event`), after the final decision.
            self._last = jsonable(outputs[0].args_as_dict())
            fields: dict[str, Any] = {"decision": DecisionKind.FINAL, "output": self._last}
        elif calls:
            fields = {"decision": DecisionKind.TOOL_CALLS, "tool_calls": calls}
        else:
            text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
            fields = {"decision": DecisionKind.FINAL, "output": text}
            self._last = text
        record = self.recorder.record
        if record.model_call_open:
            requests, seen_in, seen_out = self._recorded
            self._recorded = (
                requests + 1,
                seen_in + (response.usage.input_tokens or 0),
                seen_out + (response.usage.output_tokens or 0),
            )
            await self.recorder.aappend(
                "CallToolsNode.model_response", [Spec(m.ModelCompleted, {**fields, "usage": usage})]
            )

    async def _refuse(self, ctx: RunContext[Any], /, *, call: ToolCallPart, **rest: Any) -> Any:
        """Hook `before_tool_validate`: a call of a refused response fails before it runs or
        is deferred for approval, the refusal's message what the model reads."""
        refusal = self.recorder.refusal(call.tool_call_id)
        if refusal is not None:
            raise ToolFailed(refusal.message)
        return rest["args"]

    async def _request(self, aid: str, part: ToolCallPart) -> None:
        """`tool.requested` + `tool.started`: the call is about to run."""
        args = jsonable(part.args_as_dict())
        await self.recorder.aappend(
            f"FunctionToolCallEvent (call '{aid}')", call_started(aid, part.tool_name, args)
        )

    async def _tool_event(self, event: Any, approval: set[str]) -> None:
        recorder = self.recorder
        if isinstance(event, FunctionToolCallEvent):
            part = event.part
            aid = part.tool_call_id
            record = recorder.record
            action = record.actions.get(aid)
            if event.args_valid is None:
                return  # not executed in this step (a denied call, or skipped by the output)
            if action is None and record.last_decision == DecisionKind.FINAL:
                # end_strategy="exhaustive": a call beside the output runs after the final
                # answer was decided; it is requested directly, as it was not proposed.
                await self._request(aid, part)
                return
            if action is None:
                return  # not a call of a response we recorded
            waiting = part.tool_name in approval and action.status != ActionStatus.APPROVED
            if waiting or action.status not in (ActionStatus.PROPOSED, ActionStatus.APPROVED):
                return  # deferred for approval: approval.requested comes with the output
            await self._request(aid, part)
        elif isinstance(event, FunctionToolResultEvent):
            result = event.part
            aid = result.tool_call_id
            action = recorder.record.actions.get(aid)
            if action is None or action.status != ActionStatus.STARTED:
                return  # a denied or deferred call: its decision is already recorded
            outcome = result.outcome
            signal = f"FunctionToolResultEvent (call '{aid}', {outcome})"
            if outcome == "success":
                self._last = jsonable(result.content)
                spec: Any = Spec(m.ToolCompleted, {"action_id": aid, "result": self._last})
            elif outcome == "interrupted":
                spec = Spec(m.ToolOutcomeUnknown, {"action_id": aid, "reason": "interrupted"})
            else:
                error = {"kind": outcome, "message": str(result.content)}
                spec = Spec(m.ToolFailed, {"action_id": aid, "error": error})
            await recorder.aappend(signal, [spec])


def _output_tools(ctx: Any) -> set[str]:
    """Names of the output tools (structured output) of the run step in `ctx`."""
    manager = ctx.deps.tool_manager
    if manager.tools is None:
        return set()
    return {d.name for d in manager.tool_defs if d.kind == "output"}


def _dumped(messages: Sequence[Any]) -> Any:
    """A message history as JSON data."""
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def _messages(kept: Any) -> list[Any]:
    """The message history kept as JSON data (`_dumped`)."""
    return ModelMessagesTypeAdapter.validate_python(kept)


def _last_response(messages: Sequence[Any]) -> ModelResponse:
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            return message
    raise ValueError("the message history holds no model response to resume from")
