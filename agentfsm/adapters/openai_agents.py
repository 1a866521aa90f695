"""Run an OpenAI Agents SDK agent under our lifecycle: validated, guarded, stored, logged.

`AgentsRun(store, run_id, guards=[...]).arun(agent, input)` (or, without an event loop,
`.run(agent, input)`) calls the SDK's own
`Runner.run` with `RunHooks` that turn each SDK signal into our events, appended through the
store *before* the SDK goes on (a hook is awaited before the model or tool call it announces):

- before `Runner.run`: `run.started`;
- `on_llm_start`: `model.started` (turn guards: max turns, budget, deadline); each HTTP
  attempt the `openai` client (or the SDK's runner) retries behind it: `model.failed` for the
  attempt that failed, then `model.started` for the retry, judged before it is sent
  (`agentfsm.adapters._attempts`);
- `on_llm_end`: `model.completed` with the response's usage; each `function_call` is a tool
  call whose `action_id` is the SDK's `call_id`; a handoff tool's call makes it `handoff`; a
  response with more calls than `max_calls_per_decision` is `refused`, and each of its calls
  is rejected in the run context with the refusal's message (`RunContextWrapper.reject_tool`)
  before it runs or waits for approval: the model reads why in its next input;
- `on_tool_start`: `tool.requested` + `tool.started` (loop, budget and deadline guards);
- `on_tool_end`: `tool.completed`; a tool's exception (`RunConfig.tool_error_formatter`,
  or `tool_failure` from a tool's own `failure_error_function`): `tool.failed`;
- `on_handoff`: `handoff`;
- `result.interruptions` (`needs_approval` tools): one `approval.requested` per call;
- a final output: `run.completed`; `MaxTurnsExceeded`: `run.terminated` (`max_turns`);
  any other exception: `run.failed`.

A guard's refusal is raised from the hook, which stops the SDK run; the adapter then records
`run.terminated` with the verdict and returns the partial output. A cancel requested from
another process (`agentfsm.runtime.cancel`) stops the run at its next signal the same way,
ending in `run.cancelled`. An SDK move the table refuses raises `IllegalTransitionError`
naming the signal (`SignalIllegalTransitionError`) after recording `run.failed`.

Approvals: a paused run returns `status == "waiting_approval"`; the SDK's `RunState` JSON
is kept in our store (attachment `openai-agents/run_state`, bound to the run's version) and
returned in `.state`. Decide with `agentfsm.runtime.approve`/`reject` from any process, then
`adrive(agent)` — in any process — applies the stored decisions to the kept state (or to a
`state` you pass). Each decision is bound to the call id *and* the digest of the tool name
and arguments: if the state's call differs from the one approved, `ApprovalMismatchError`
and nothing runs; a kept state the run has moved on from is refused (`SavedStateError`).
A response mixing calls that need approval with calls that do not runs the others first,
as the SDK does, then waits (the table allows `approval.requested` beside running calls).
Subagents: `agent_tool(agent)` is `agent.as_tool()` with the child a run of its own that
draws on this run's token and cost limits; a child waiting for approval pauses this run too
(`pending_approvals` names the child's run and call, decided there).

Turns: our `max_turns` counts model calls (`model.started`) over the whole run. The SDK's
`max_turns` counts the iterations of its loop, one model call each, and carries its count in
`RunState` across an approval and the drive after it; so within one run the two agree, and
the stricter limit stops first. They differ when a conversation is continued with a new
`Runner.run` (the SDK's count restarts at 0; ours is a new run too), and in how a stop
reads: our guard stops *before* the call (`detail` "3 of 3 turns used"), the SDK raises
`MaxTurnsExceeded` ("Max turns (3) exceeded"); both end as `run.terminated` with
`stop_reason` `max_turns`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable
from typing import Any

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    from agents import (
        Agent,
        ItemHelpers,
        MaxTurnsExceeded,
        ModelSettings,
        RunConfig,
        Runner,
        RunState,
    )
    from agents.result import RunResult, RunResultStreaming
    from agents.run import DEFAULT_MAX_TURNS
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as exc:
    raise missing_extra("AgentsRun", "openai-agents", exc) from exc

from agentfsm.adapters._attempts import watching
from agentfsm.adapters._observed import ObservedRun, observed
from agentfsm.adapters._openai_agents_hooks import (
    _CURRENT,
    _NESTED,
    SDK,
    _Hooks,
    _recording_failures,
    _Stopped,
    _telling,
    partial_output,
    record_failure,
    tool_failure,
)
from agentfsm.adapters._openai_agents_tools import drive_agent_tool
from agentfsm.adapters._pricing import Pricing, per_million_tokens, price_table
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._sdk_run import SdkRun, aleased
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop, WaitStop
from agentfsm.adapters._storable import jsonable, parse_arguments
from agentfsm.adapters._subagents import (
    approved_call,
    pending_in,
    subagent_records,
    waiting_on,
)
from agentfsm.adapters._sync import run_blocking
from agentfsm.errors import (
    ApprovalMismatchError,
    SavedStateError,
    SignalIllegalTransitionError,
    UnknownModelError,
)
from agentfsm.events import models as m
from agentfsm.events.models import Limits
from agentfsm.names import ActionStatus, DecisionKind
from agentfsm.runtime._writer import Spec, approval_asked

__all__ = [
    "AgentsRun",
    "ApprovalMismatchError",
    "ObservedRun",
    "Pricing",
    "SavedStateError",
    "SignalIllegalTransitionError",
    "UnknownModelError",
    "per_million_tokens",
    "price_table",
    "tool_failure",
]

#: The attachment our store keeps a paused run's `RunState` JSON under.
STATE = "openai-agents/run_state"

#: Called with each SDK stream event of a streamed run (`StreamEvent`).
StreamCallback = Callable[[Any], Any]


def _check_tool_use(agent: Agent[Any]) -> None:
    """Refuse, before anything runs, agents whose run would end on a tool's result.

    With `tool_use_behavior` other than "run_llm_again" the SDK ends the run with a tool's
    output; our lifecycle completes a run only on the model's final answer, so the end would
    be refused *after* the tools had acted. Better said now.

    Raises:
        ValueError: `agent`, or an agent it can hand off to, ends runs on tool results.
    """
    seen: set[int] = set()
    todo = [agent]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.tool_use_behavior != "run_llm_again":
            raise ValueError(
                f"agent '{current.name}' has tool_use_behavior="
                f"{current.tool_use_behavior!r}: its runs would end on a tool's result, and "
                "agentfsm completes a run only on the model's final answer; use the default "
                "'run_llm_again' (or have the model answer with the tool's result)"
            )
        todo.extend(h for h in current.handoffs if isinstance(h, Agent))


class AgentsRun(SdkRun):
    """One of our runs, driven by the OpenAI Agents SDK's `Runner` (see the module docstring).

    Args:
        store: any of our `EventStore`s (memory, SQLite, PostgreSQL).
        run_id: our id for the run.
        guards: Python guards checked on every SDK signal (`MaxTurns`, `Budget`, ...).
        clock: stamps events and is the guards' `now` (UTC wall clock by default).
        logger: a structlog logger for the transition log lines.
        listeners: called with each stored event, in order (`RunSpans(tracer).feed`).
        reserve_tokens: tokens each model call reserves before it is made (see `SdkRun`).
        reserve_cost: cost each model call reserves before it is made.
        pricing: the cost of a model call from its tokens (see `SdkRun`).
        max_calls_per_decision: the calls one model answer may propose (64 by default; see
            `SdkRun`): the calls of an answer with more are refused, the model reads why.
        max_turns: the model calls a run may make (100 by default; see `SdkRun`).
    """

    sdk = SDK

    def _attach(self) -> None:
        self.hooks = _Hooks(self.recorder)

    def agent_tool(
        self,
        agent: Agent[Any],
        *,
        tool_name: str | None = None,
        tool_description: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        **as_tool_kwargs: Any,
    ) -> FunctionTool:
        """`agent.as_tool(...)` with each call a subagent run of its own.

        Use it where you would use `agent.as_tool(...)`: it *is* the SDK's agent tool, each
        call recorded through its own `AgentsRun` (`subagent(call_id)`: id
        `<run_id>/<call_id>`, same store, guards and clock, this run's token and cost limits
        shared by both). It returns the child's final output; a child that a guard stopped
        returns a line saying so and its partial output, which the calling model reads.

        A child that calls a `needs_approval` tool pauses this run too, as the SDK's nested
        approvals do: the child records `approval.requested` for its call and waits in
        `waiting_approval`; this run waits in `waiting_tool` on the agent tool's call, its
        `pending_approvals` naming the child's run and call. Decide in the child's run
        (`approve(store, "<run_id>/<call_id>", child_call_id)`); `adrive` then carries the
        decision into the kept state, and the child and this run go on.

        Args:
            agent: the agent to run as a tool.
            tool_name: the tool's name (default: the agent's name in snake case).
            tool_description: what the calling model reads about the tool.
            max_turns: the SDK's limit for each child run.
            **as_tool_kwargs: passed to `agent.as_tool` (`run_config`, `parameters`,
                `custom_output_extractor`, `needs_approval`, ...), except `hooks` and
                `failure_error_function`, which the adapter sets.
        """
        for taken in ("hooks", "failure_error_function"):
            if taken in as_tool_kwargs:
                raise TypeError(
                    f"agent_tool sets {taken}= itself (it records the child's run through "
                    "it); pass your own RunHooks to run(..., hooks=) instead"
                )
        _check_tool_use(agent)
        tool = agent.as_tool(
            tool_name or agent.name.lower().replace(" ", "_"),
            tool_description or f"Ask the agent '{agent.name}'.",
            max_turns=max_turns,
            hooks=_NESTED,
            failure_error_function=None,  # the child's stops and failures reach `drive_agent_tool`
            **as_tool_kwargs,
        )
        run_nested = tool.on_invoke_tool

        async def invoke(ctx: ToolContext[Any], input_json: str) -> Any:
            child = self.subagent(ctx.tool_call_id)
            return await drive_agent_tool(
                child.recorder, child.hooks, agent, run_nested, ctx, input_json
            )

        # The SDK's own invoker stays inside: it runs (and on a drive, continues) the
        # nested run; ours records it as the child's.
        tool.on_invoke_tool = invoke
        return tool

    @aleased
    async def arun(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        limits: Limits | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        on_stream_event: StreamCallback | None = None,
        **runner_kwargs: Any,
    ) -> ObservedRun:
        """Start the run and drive `Runner.run(agent, input)` under our lifecycle.

        Args:
            agent: the SDK agent.
            input: the SDK input (text becomes the run's `objective`).
            limits: the run's own limits, recorded on `run.started` and enforced.
            max_turns: the SDK's own limit (its `MaxTurnsExceeded` ends as `max_turns`).
            on_stream_event: given, the run is streamed (`Runner.run_streamed`) and this is
                called with each of the SDK's stream events (`await`ed if it returns one).
            **runner_kwargs: passed to `Runner.run` (`context`, `run_config`, ...).
        """
        _check_tool_use(agent)
        objective = input if isinstance(input, str) else None
        recorder = self.recorder
        await recorder.off_loop(
            recorder.start, objective=objective, agent=agent.name, limits=limits
        )
        return await self._leg(agent, input, max_turns, on_stream_event, runner_kwargs)

    def run(self, agent: Agent[Any], input: str | list[Any], **kwargs: Any) -> ObservedRun:
        """`arun` for code without an event loop, as the SDK's `Runner.run_sync` (same
        arguments).

        It runs on an event loop this thread keeps, so an async client shared across
        `run` and `drive` calls (`AsyncOpenAI`) keeps working; called while a loop runs, it
        raises `RuntimeError` saying to `await arun()`.
        """
        return run_blocking(self.arun(agent, input, **kwargs), "run")

    def drive(
        self, agent: Agent[Any], state: dict[str, Any] | None = None, **kwargs: Any
    ) -> ObservedRun:
        """`adrive` for code without an event loop (same arguments), on the loop `run` uses."""
        return run_blocking(self.adrive(agent, state, **kwargs), "drive")

    @aleased
    async def adrive(
        self,
        agent: Agent[Any],
        state: dict[str, Any] | None = None,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        on_stream_event: StreamCallback | None = None,
        **runner_kwargs: Any,
    ) -> ObservedRun:
        """Continue a run paused for approval, from the SDK's `RunState` JSON (`.state`), or
        one an event of its lifecycle made wait, once a person's event let it go on.

        The decisions come from our store (`approve`/`reject` from any process). Calls
        still undecided leave the run waiting (nothing runs). After a wait in a state of
        the run's lifecycle (a tool's `emit`), the SDK goes on from the conversation our
        store kept when it stopped, and the model's next input says which events were
        appended meanwhile (`loan.documents_received` and its fields); a run still waiting
        there is returned as it is.
        A run asked to cancel while it waited ends cancelled here, and nothing runs; a run
        that already ended is returned as it is (as `Runner.drive` does).

        Args:
            agent: the SDK agent, as this process builds it.
            state: the `RunState` JSON the pause returned; by default the one our store kept
                when the run paused (so a new process needs only the store and the run id).

        Raises:
            ApprovalMismatchError: the state's call is not the call approval was asked for.
            SavedStateError: no state is given and the store keeps none, the run went on
                since it was saved, or it does not load (corrupt, or another agent's).
        """
        recorder = self.recorder
        record = await recorder.off_loop(recorder.load)
        settled = await recorder.off_loop(self._settle_without_driving, record, STATE)
        if settled is not None:
            return settled
        if state is None:
            conversation = await recorder.off_loop(recorder.kept_wait)
            if conversation is not None:
                return await self._go_on(
                    agent, conversation, max_turns, on_stream_event, runner_kwargs
                )
        owners = await recorder.off_loop(subagent_records, recorder.store, record)
        if state is None:
            raw = await recorder.off_loop(recorder.saved_state, STATE)
            try:
                run_state = await RunState.from_json(agent, json.loads(raw))
            except Exception as exc:
                raise SavedStateError.unreadable(record.run_id, STATE, exc) from exc
        else:
            run_state = await RunState.from_json(agent, state)
        # A subagent's call (an `agent_tool`'s nested approval) is decided in its own run.
        for item in run_state.get_interruptions():
            arguments = parse_arguments(item.arguments)
            action = approved_call(owners, str(item.call_id), str(item.name), arguments)
            if action.status == ActionStatus.APPROVED:
                run_state.approve(item)
            elif action.status == ActionStatus.REJECTED:
                run_state.reject(item, rejection_message=action.reason or "rejected")
        undecided = pending_in(owners)
        if undecided:
            return observed(recorder.store, record, state=state, pending_approvals=undecided)
        return await self._leg(agent, run_state, max_turns, on_stream_event, runner_kwargs)

    async def _go_on(
        self,
        agent: Agent[Any],
        conversation: list[Any],
        max_turns: int,
        on_stream_event: StreamCallback | None,
        kwargs: dict[str, Any],
    ) -> ObservedRun:
        """Continue the SDK from the conversation kept when the run waited in a state of its
        lifecycle, once the run may go on; a run that still waits is returned as it is."""
        recorder = self.recorder
        record = recorder.record
        if recorder.store.reducer.table.stops_driving(record.status):
            return observed(recorder.store, record)
        await recorder.off_loop(recorder.forget_wait)  # the SDK goes on from it now
        return await self._leg(agent, conversation, max_turns, on_stream_event, kwargs)

    async def _leg(
        self,
        agent: Agent[Any],
        input: Any,
        max_turns: int,
        on_stream_event: StreamCallback | None,
        kwargs: dict[str, Any],
    ) -> ObservedRun:
        token = _CURRENT.set(self.recorder)
        try:
            with watching(self.hooks.attempts):
                done = await self._drive_sdk(agent, input, max_turns, on_stream_event, kwargs)
            if not done.pending_approvals:
                await self.recorder.off_loop(self.recorder.forget_state, STATE)
            return done
        except BaseException as exc:
            await record_failure(self.recorder, exc)
            raise
        finally:
            _CURRENT.reset(token)

    async def _drive_sdk(
        self,
        agent: Agent[Any],
        input: Any,
        max_turns: int,
        on_stream_event: StreamCallback | None,
        kwargs: dict[str, Any],
    ) -> ObservedRun:
        recorder = self.recorder
        config = _asking_for_usage(
            recorder, agent, _telling(_recording_failures(kwargs.get("run_config")))
        )
        kwargs = {**kwargs, "run_config": config}
        self.hooks.theirs = kwargs.pop("hooks", None)  # called after ours
        self.hooks.model = config.model
        result: RunResult | RunResultStreaming
        try:
            if on_stream_event is None:
                result = await Runner.run(
                    agent, input, hooks=self.hooks, max_turns=max_turns, **kwargs
                )
            else:
                streamed = Runner.run_streamed(
                    agent, input, hooks=self.hooks, max_turns=max_turns, **kwargs
                )
                async for event in streamed.stream_events():
                    done = on_stream_event(event)
                    if inspect.isawaitable(done):
                        await done
                result = streamed
        except _Stopped as stopped:
            items = list(stopped.run_data.new_items) if stopped.run_data else []
            record = await recorder.off_loop(recorder.stopped, stopped.stop)
            if isinstance(stopped.stop, WaitStop) and stopped.run_data is not None:
                # Where the SDK stood, for `adrive` to go on from once the run may.
                said = ItemHelpers.input_to_new_input_list(stopped.run_data.input)
                conversation = [*said, *(item.to_input_item() for item in items)]
                await recorder.off_loop(recorder.keep_wait, jsonable(conversation))
            # A stop right after an answer (it overran the budget) comes before the SDK made
            # an item of it: the answer is in our record.
            partial = (
                record.final_output
                if record.last_decision == DecisionKind.FINAL
                else partial_output(items)
            )
            return observed(recorder.store, record, partial_output=partial, items=items)
        except MaxTurnsExceeded as exc:
            items = list(exc.run_data.new_items) if exc.run_data else []
            record = await recorder.aappend(
                "MaxTurnsExceeded",
                [Spec(m.RunTerminated, {"stop_reason": "max_turns", "detail": exc.message})],
            )
            return observed(
                recorder.store, record, partial_output=partial_output(items), items=items
            )
        items = list(result.new_items)
        try:
            return await self._settle(result, items)
        except (GuardStop, CancelStop) as stop:  # e.g. a cancel asked while the SDK finished
            record = await recorder.off_loop(recorder.stopped, stop)
            if isinstance(stop, WaitStop):
                await recorder.off_loop(recorder.keep_wait, jsonable(result.to_input_list()))
            return observed(
                recorder.store, record, partial_output=partial_output(items), items=items
            )

    async def _settle(
        self, result: RunResult | RunResultStreaming, items: list[Any]
    ) -> ObservedRun:
        """Record how the SDK's run returned: waiting on its interruptions, or completed."""
        recorder = self.recorder
        if result.interruptions:
            # Our own calls; the others are an agent tool's subagent's, asked in its run.
            actions = recorder.record.actions
            specs = [
                approval_asked(str(item.call_id), str(item.name), parse_arguments(item.arguments))
                for item in result.interruptions
                if str(item.call_id) in actions
            ]
            record = await (
                recorder.aappend("RunResult.interruptions", specs)
                if specs
                else recorder.off_loop(recorder.waiting)
            )
            state = result.to_state().to_json()
            await recorder.off_loop(recorder.save_state, STATE, json.dumps(state).encode())
            return observed(
                recorder.store,
                record,
                items=items,
                sdk_result=result,
                state=state,
                pending_approvals=await recorder.off_loop(waiting_on, recorder.store, record),
            )
        record = await recorder.aappend("Runner.run returned", [Spec(m.RunCompleted, {})])
        return observed(
            recorder.store, record, final_output=result.final_output, items=items, sdk_result=result
        )


def _asking_for_usage(recorder: Recorder, agent: Agent[Any], config: RunConfig) -> RunConfig:
    """`config` asking the model for usage when the run is under a budget.

    A streamed Chat Completions answer carries usage only when the request asks for it
    (`stream_options.include_usage`), which the SDK sends by default only to OpenAI's own
    endpoint: elsewhere the record would say 0 tokens and no limit could trip. So a run
    under a budget gets `ModelSettings(include_usage=True)` in its `RunConfig`, logged as
    `usage.requested` — unless the run's or the agent's settings say `include_usage=False`,
    then a model answer without usage stops the run (`agentfsm.runtime._metering`).
    """
    under = recorder.budgeted()
    if under is None:
        return config
    settings = config.model_settings
    if (settings is not None and settings.include_usage is not None) or (
        agent.model_settings.include_usage is not None
    ):
        return config  # the user's own choice
    asked = ModelSettings(include_usage=True)
    merged = settings.resolve(asked) if settings is not None else asked
    recorder.note("usage.requested", setting="ModelSettings(include_usage=True)", budget=under)
    return dataclasses.replace(config, model_settings=merged)
