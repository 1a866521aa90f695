"""Run a Claude Agent SDK agent under our lifecycle: validated, guarded, stored, logged.

`ClaudeRun(store, run_id, guards=[...]).arun(prompt, options)` (sync: `.run`) drives a
`ClaudeSDKClient` with your `ClaudeAgentOptions`, to which it adds its hooks (before yours),
its `can_use_tool` (which asks yours once our store allows a call) and
`include_partial_messages=True`, and appends our events before the CLI goes on (see
`_claude_signals` for each signal):

- before the run: `run.started`;
- a model request, seen by our loopback gateway before it goes upstream (`gateway=True`, the
  default; `_claude_gateway`): `model.started`, judged by the guards, a refused call never
  sent (without the gateway: at the answer's `message_start`); a request that failed (an
  error status, an `error` event, a stream broken off) is `model.failed` there, before the
  CLI hears of it, and the CLI's retry a model call of its own, judged likewise
  (`agentfsm.adapters._attempts`; docs/adapters.md, "Retries");
- an answer's `message_stop`: `model.completed` (its
  `ToolUseBlock`s as tool calls, `ToolUseBlock.id` the action id; usage per answer); an
  answer with more calls than `max_calls_per_decision` is `refused`, and `PreToolUse` and
  `can_use_tool` deny each of its calls with the refusal's message, the model's to read;
- hooks `PreToolUse`, `PostToolUse`, `PostToolUseFailure`: `tool.requested` +
  `tool.started`, `tool.completed`, `tool.failed`; `Stop`: a cancel asked meanwhile stops;
- the `ResultMessage`: the leg's end, and the CLI's own figures of the session's spending
  (`total_cost_usd`, `modelUsage`), in the record at once (`_claude_usage`): at a pause, a
  stop or a cancel as a `usage.reported` of what they hold beyond the record; at the run's
  end on the final answer's `model.completed` (its cost) — `run.completed` after it;
  `error_max_turns` and `error_max_budget_usd` are `run.terminated` (`max_turns`,
  `budget`); another error result is `run.failed`.

Approvals: a call `needs_approval` names (tool names as the SDK reports them, e.g.
`mcp__shop__refund`, or a predicate) is `approval.requested` and deferred by our `PreToolUse`
hook: the CLI runs the answer's other calls, ends the leg keeping the deferred call in its
session, and the run waits in `waiting_approval`. The CLI keeps one deferred call per leg (a
second `defer` drops the first from its conversation), so a second call needing approval in
the same answer is declined, saying why (the model may ask again). The session id and the
deferred call are kept in our store (attachment `claude-agent-sdk/session`). Decide with
`approve` / `reject` (or `agentfsm approve`) in any process; `adrive(options)` checks the kept
call against the ledger (tool_use id and arguments digest, else `ApprovalMismatchError`,
nothing runs), resumes the SDK session, and answers the replayed call from the decision: an
approved call runs, a rejected one is denied with the reason (it never runs; the model reads
why). The replayed call is checked again when the CLI asks (`PreToolUse`, `can_use_tool`): a
session changed meanwhile fails closed the same way.

The CLI's transcript of the session (its `.jsonl` under `CLAUDE_CONFIG_DIR`) is kept as
the attachment `claude-agent-sdk/transcript` and written back before a drive where this
process's CLI looks for it: a run is driven on on another machine with only the store in common
(see `_claude_sessions`).

Lifecycle events: a tool that proposes an event of the run's table (`emit`, the call named
by `call_id`) has it appended with its outcome. An event that leaves the run waiting in a
state of its lifecycle (for a person, say) ends the leg at that call's `PostToolUse`
(`continue: false`: the CLI asks the model nothing more); the CLI's session id is kept
(`Recorder.keep_wait`, attachment `claude-agent-sdk/lifecycle_wait`) with its transcript
(`claude-agent-sdk/transcript`). Once a person's event lets the run go on, `adrive(options)`
resumes that session with what the model has not read (`Recorder.notes`: the events
appended meanwhile) as the new prompt. A proposal the table refuses once the batch resolved
reaches the model with the results (`PostToolUse`'s `additionalContext`).

Guards and cancel: a refusal stops the SDK run with `ClaudeSDKClient.interrupt()`; the run is
`run.terminated` with the verdict and the partial output. A cancel asked from another
process (`agentfsm cancel`) is seen at the next signal, or by polling the store while a tool
runs (`cancel_poll`), and interrupts the run likewise: `run.cancelled`. A call the interrupt
cancelled while it ran is `tool.outcome_unknown`, never failed.

Subagents: `ClaudeRun(..., subagents={"refunds": Subagent(description, agent)})` offers the
model a tool `mcp__subagents__refunds(prompt)` (an in-process SDK MCP server the adapter adds
to your options); each call is a child run of its own, `<run_id>/<tool_use_id>`, driven by
its own `ClaudeRun` and SDK session, drawing on this run's token and cost limits
(`SdkRun.subagent`). Its answer is the tool's result; a child a guard stopped returns a line
saying so. A child waiting for approval pauses this run too: the call waiting on it is
deferred (unless another call of the leg already is: the CLI keeps one), this run waits in
`waiting_tool`, and `pending_approvals` names the child's run and call, decided there; a
drive drives the child on, then this run. The CLI's own subagents are refused up front:
options with `agents=` raise `ValueError` naming `subagents=` (an `AgentDefinition` works
there as it is). The CLI's built-in `Agent` tool (its general-purpose agent, when your
`tools` offer it) runs inside the CLI, unrecorded, and a call of its subagent that needs
approval is refused: the CLI cannot pause inside them (see `_claude_subagents`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, Unpack

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    from claude_agent_sdk import (
        AgentDefinition,
        ClaudeAgentOptions,
        ClaudeSDKClient,
        HookMatcher,
        ResultMessage,
        StreamEvent,
    )
    from claude_agent_sdk import Transport as _Transport
except ImportError as exc:
    raise missing_extra("ClaudeRun", "claude", exc) from exc

from agentfsm.adapters._claude_gateway import Gateway
from agentfsm.adapters._claude_sessions import TRANSCRIPT, restore, transcript
from agentfsm.adapters._claude_signals import (
    SDK,
    NeedsApproval,
    Signals,
    defer,
    deny,
    one_waiting_call,
)
from agentfsm.adapters._claude_subagents import (
    HOOK_TIMEOUT,
    SERVER,
    Answers,
    Subagent,
    child_options,
    objective,
    server,
)
from agentfsm.adapters._claude_usage import reported
from agentfsm.adapters._observed import ObservedRun, observed
from agentfsm.adapters._pricing import Pricing, per_million_tokens
from agentfsm.adapters._sdk_run import RunOptions, SdkRun, aleased
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop, WaitStop
from agentfsm.adapters._storable import jsonable
from agentfsm.adapters._subagents import approved_call, stopped_line, waiting_on
from agentfsm.errors import (
    ApprovalMismatchError,
    LifecycleError,
    SavedStateError,
    SignalIllegalTransitionError,
)
from agentfsm.events import models as m
from agentfsm.events._canonical import same_json
from agentfsm.events.models import Limits
from agentfsm.names import ActionStatus, DecisionKind, RunStatus
from agentfsm.record import RunRecord
from agentfsm.runtime._writer import Spec

__all__ = [
    "ApprovalMismatchError",
    "ClaudeRun",
    "ObservedRun",
    "Pricing",
    "SavedStateError",
    "SignalIllegalTransitionError",
    "Subagent",
    "per_million_tokens",
]

#: The attachment our store keeps a paused run's SDK session under (JSON: `session_id`, the
#: deferred call `deferred` {id, name, input}, and the SDK's cost so far `total_cost_usd`).
STATE = "claude-agent-sdk/session"
#: The attachment our store keeps the CLI session id of a run its lifecycle made wait under
#: (`Recorder.keep_wait`; JSON `{"waited_in", "state": {"session_id"}}`).
WAIT = f"{SDK}/lifecycle_wait"

#: Hook events the adapter listens to, with the `Signals` method that hears each.
_HOOKS = {
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "PostToolUseFailure": "post_tool_use_failure",
    "Stop": "stop_hook",
}


def _needs(needs_approval: Collection[str] | NeedsApproval) -> NeedsApproval:
    if callable(needs_approval):
        return needs_approval
    names = frozenset(needs_approval)
    return lambda name, _arguments: name in names


class ClaudeRun(SdkRun):
    """One of our runs, driven by the Claude Agent SDK's client (see the module docstring).

    Args:
        store: any of our `EventStore`s.
        run_id: our id for the run.
        needs_approval: the calls that wait for a person: tool names as the SDK reports them
            (`mcp__<server>__<tool>` for MCP tools, `Bash`, ...) or `fn(tool_name, input)`.
        on_message: called (and awaited, if it returns an awaitable) with every message of
            the SDK's stream; `StreamEvent`s only when your options ask for them.
        on_text: called (and awaited, likewise) with each piece of text the model's answers
            stream (the `text_delta`s of the main thread, not of subagents), as it comes.
        gateway: put our loopback gateway between the CLI and the API (`_claude_gateway`),
            so the guards judge each model call before it is sent (default); False: they
            judge it when its answer starts streaming, after it was sent and paid for.
        cancel_poll: seconds between looks at the store for a cancel asked from another
            process while the CLI works (a slow tool); the signals look at every step anyway.
        subagents: the subagents the model may ask, by tool name (`Subagent`, or an
            `AgentDefinition` with the caller's options): each call a child run.

    `guards`, `clock`, `logger`, `listeners`, `reserve_tokens`, `reserve_cost`, `pricing`,
    `max_calls_per_decision` and `max_turns` are as every adapter takes them (see `SdkRun`);
    without `pricing` the cost is the CLI's own, recorded at the end of each leg (a pause,
    a stop, the end: see `_claude_usage`).
    """

    sdk = SDK

    def __init__(
        self,
        store: Any,
        run_id: str,
        *,
        needs_approval: Collection[str] | NeedsApproval = (),
        on_message: Callable[[Any], Any] | None = None,
        on_text: Callable[[str], Any] | None = None,
        gateway: bool = True,
        cancel_poll: float = 0.25,
        subagents: Mapping[str, Subagent | AgentDefinition] | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(store, run_id, **options)
        self.needs_approval = _needs(needs_approval)
        self.on_message: Callable[[Any], Any] | None = on_message
        self.on_text: Callable[[str], Any] | None = on_text
        self.gateway = gateway
        self.cancel_poll = cancel_poll
        self.subagents: dict[str, Subagent] = {
            name: s if isinstance(s, Subagent) else Subagent(s.description, s)
            for name, s in (subagents or {}).items()
        }

    def call_id(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """The id of this run's running call of tool `tool` with `arguments`.

        The Claude Agent SDK gives an in-process tool (an SDK MCP server's) its arguments
        and nothing else, no call id: a tool that proposes an event (`emit`) names itself
        (`refund`, or as the SDK reports it, `mcp__shop__refund`) and the arguments it got.

        Raises:
            ValueError: no call of `tool` with `arguments` is running, or several are.
        """
        record = self.recorder.record
        found = [
            a.action_id
            for a in record.actions.values()
            if a.status == ActionStatus.STARTED
            and (a.tool == tool or a.tool.endswith(f"__{tool}"))
            and same_json(a.arguments, jsonable(dict(arguments)))
        ]
        if len(found) != 1:
            what = "no call" if not found else f"{len(found)} calls"
            raise ValueError(
                f"{what} of '{tool}' with these arguments {'is' if not found else 'are'} "
                f"running in run '{self.run_id}'"
            )
        return found[0]

    def _attach(self) -> None:
        # A subagent's run (`subagent`) is built without `__init__`: these are its defaults.
        self.needs_approval = _needs(())
        self.on_message = None
        self.on_text = None
        self.gateway = True
        self.cancel_poll = 0.25
        self.subagents = {}
        self._answers = Answers()

    @aleased
    async def arun(
        self,
        prompt: str,
        options: ClaudeAgentOptions | None = None,
        *,
        limits: Limits | None = None,
        agent: str | None = None,
        transport: _Transport | Callable[[ClaudeAgentOptions], _Transport] | None = None,
    ) -> ObservedRun:
        """Start the run: `prompt` to a `ClaudeSDKClient(options)`, under our lifecycle.

        Args:
            prompt: the user's prompt (the run's `objective`).
            options: your `ClaudeAgentOptions` (the adapter adds its hooks and callbacks).
            limits: the run's own limits, recorded on `run.started` and enforced.
            agent: the agent's name in our log (default: the options' `model`, if any).
            transport: a `Transport` to use instead of the CLI subprocess (the SDK's own
                `transport=` parameter), or `fn(options)` returning one: options that are
                CLI flags (`adrive` on a drive, `model`, ...) never reach a custom transport,
                so one that plays the CLI may read them from the options it is built with.
        """
        options = options if options is not None else ClaudeAgentOptions()
        _refuse_cli_agents(options)
        recorder = self.recorder
        name = agent if agent is not None else options.model
        await recorder.off_loop(recorder.start, objective=prompt, agent=name, limits=limits)
        return await self._leg(options, prompt, transport)

    def run(self, prompt: str, options: ClaudeAgentOptions | None = None, **kw: Any) -> ObservedRun:
        """`arun` for code without an event loop (same arguments)."""
        return asyncio.run(self.arun(prompt, options, **kw))

    def drive(self, options: ClaudeAgentOptions | None = None, **kw: Any) -> ObservedRun:
        """`adrive` for code without an event loop (same arguments)."""
        return asyncio.run(self.adrive(options, **kw))

    @aleased
    async def adrive(
        self,
        options: ClaudeAgentOptions | None = None,
        state: str | bytes | None = None,
        *,
        transport: _Transport | Callable[[ClaudeAgentOptions], _Transport] | None = None,
    ) -> ObservedRun:
        """Continue a run waiting for approval: resume its SDK session, deciding the call;
        or a run an event of its lifecycle made wait, once it may go on: resume the session
        with the events appended meanwhile as the new prompt (a run that still waits is
        returned as it is).

        A run asked to cancel while it waited ends cancelled here and nothing runs; a run
        that already ended is returned as it is (as `Runner.drive` does).

        Args:
            options: your `ClaudeAgentOptions`, as this process builds them (`adrive` is set
                to the kept session id).
            state: the session JSON the pause returned (`.state`); by default the one our
                store kept.
            transport: as for `run`.

        Raises:
            ApprovalMismatchError: the kept call is not the call approval was asked for.
            SavedStateError: no state is given and the store keeps none, the run went on
                since it was saved, or it does not load.
        """
        recorder = self.recorder
        record = await recorder.off_loop(recorder.load)
        settled = await recorder.off_loop(self._settle_without_driving, record, STATE)
        if settled is not None:
            await recorder.off_loop(self._forget)  # cancelled while it waited: nothing resumes
            return settled
        if state is None:
            waited = await recorder.off_loop(recorder.kept_wait)
            if waited is not None:
                return await self._go_on(record, waited, options, transport)
        raw = state if state is not None else await recorder.off_loop(recorder.saved_state, STATE)
        try:
            kept = json.loads(raw)
            session, deferred = str(kept["session_id"]), kept["deferred"]
            call = (str(deferred["id"]), str(deferred["name"]), jsonable(deferred["input"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SavedStateError.unreadable(record.run_id, STATE, exc) from exc
        approved_call([record], *call)  # the kept call must be the one asked about
        waiting = await recorder.off_loop(waiting_on, recorder.store, record)
        if waiting:
            text = raw if isinstance(raw, str) else raw.decode()
            return observed(recorder.store, record, state=text, pending_approvals=waiting)
        options = options if options is not None else ClaudeAgentOptions()
        _refuse_cli_agents(options)
        try:  # the CLI's transcript, for a CLI that never saw this session (another machine)
            kept_transcript = await recorder.off_loop(recorder.saved_state, TRANSCRIPT)
        except SavedStateError:
            kept_transcript = None  # none kept (a scripted CLI, an earlier version): as before
        if kept_transcript is not None:
            await recorder.off_loop(restore, options, session, kept_transcript)
        return await self._leg(replace(options, resume=session), None, transport)

    async def _go_on(
        self,
        record: RunRecord,
        waited: Any,
        options: ClaudeAgentOptions | None,
        transport: _Transport | Callable[[ClaudeAgentOptions], _Transport] | None,
    ) -> ObservedRun:
        """Continue the CLI session kept when the run waited in a state of its lifecycle,
        once the run may go on: the model's next prompt is what it has not read yet (the
        events appended meanwhile, `Recorder.notes`). A run that still waits is returned
        as it is, and nothing runs."""
        recorder = self.recorder
        if recorder.store.reducer.table.stops_driving(record.status):
            return observed(recorder.store, record)
        try:
            session = str(waited["session_id"])
        except (KeyError, TypeError) as exc:
            raise SavedStateError.unreadable(record.run_id, WAIT, exc) from exc
        options = options if options is not None else ClaudeAgentOptions()
        _refuse_cli_agents(options)
        # Kept with the wait (bound to it: the person's events since do not make it stale).
        kept = await recorder.off_loop(_attachment, recorder, TRANSCRIPT)
        if kept is not None:
            await recorder.off_loop(restore, options, session, kept)
        prompt = "\n\n".join(recorder.notes())
        await recorder.off_loop(recorder.forget_wait)  # the CLI goes on from it now
        return await self._leg(replace(options, resume=session), prompt, transport)

    async def _leg(
        self,
        options: ClaudeAgentOptions,
        prompt: str | None,
        transport: _Transport | Callable[[ClaudeAgentOptions], _Transport] | None,
    ) -> ObservedRun:
        recorder = self.recorder
        client: ClaudeSDKClient | None = None

        async def interrupt() -> None:
            if client is not None:
                await client.interrupt()

        signals = Signals(recorder, self.needs_approval, options.can_use_tool, interrupt)
        if self.subagents:
            signals.delegate = functools.partial(self._delegate, signals, options)
        ours = self._options(options, signals)
        gateway = None
        if self.gateway and transport is None:
            upstream, env = _upstream(options)
            gateway = Gateway(upstream, signals, env)
            signals.gated = True
            ours = replace(ours, env=_through(ours.env, await gateway.__aenter__()))
        if callable(transport):
            transport = transport(ours)
        client = ClaudeSDKClient(ours, transport=transport)
        streamed = options.include_partial_messages
        result: ResultMessage | None = None
        watcher = asyncio.ensure_future(self._watch_cancel(signals))
        try:
            await client.connect()
            if prompt is not None:
                await client.query(prompt)
            async for message in client.receive_response():
                await signals.message(message)
                if isinstance(message, ResultMessage):
                    result = message
                if self.on_text is not None and (text := _streamed_text(message)):
                    await _call(self.on_text, text)
                if self.on_message is not None and (
                    streamed or not isinstance(message, StreamEvent)
                ):
                    await _call(self.on_message, message)
        except BaseException as exc:
            watcher.cancel()
            await recorder.off_loop(recorder.failed, exc)
            raise
        finally:
            watcher.cancel()
            await signals.settle()
            with contextlib.suppress(Exception):
                await client.disconnect()
            if gateway is not None:
                await gateway.__aexit__(None, None, None)
        return await self._settle(signals, result, options)

    def _options(self, options: ClaudeAgentOptions, signals: Signals) -> ClaudeAgentOptions:
        """Your options with our hooks first, our `can_use_tool`, and the answers streamed."""
        hooks: dict[Any, list[HookMatcher]] = {}
        for event, method in _HOOKS.items():
            # `PreToolUse` drives a subagent to its end: the CLI waits for it.
            timeout = HOOK_TIMEOUT if self.subagents and event == "PreToolUse" else None
            hooks[event] = [HookMatcher(hooks=[getattr(signals, method)], timeout=timeout)]
        for event, matchers in (options.hooks or {}).items():
            hooks.setdefault(event, []).extend(matchers)
        servers = options.mcp_servers
        if self.subagents:
            if not isinstance(servers, dict):
                raise TypeError("subagents= needs mcp_servers as a dict (or none), not a path")
            servers = {**servers, SERVER: server(self.subagents, self._answers)}
        # Under `bypassPermissions` the CLI never asks `can_use_tool` (the SDK warns that it
        # is shadowed): ours is left out unless you set your own, and our `PreToolUse`
        # decides every call anyway (defer, deny), which the CLI honours in that mode too.
        bypassed = options.permission_mode == "bypassPermissions" and options.can_use_tool is None
        return replace(
            options,
            hooks=hooks,
            can_use_tool=None if bypassed else signals.can_use_tool,
            include_partial_messages=True,
            mcp_servers=servers,
        )

    def _child(self, action_id: str, spec: Subagent) -> ClaudeRun:
        """The `ClaudeRun` of the subagent run call `action_id` starts (or continues)."""
        child = self.subagent(action_id)
        child.cancel_poll = self.cancel_poll
        child.gateway = self.gateway
        if spec.needs_approval is not None:
            child.needs_approval = _needs(spec.needs_approval)
        else:
            child.needs_approval = self.needs_approval
        return child

    async def _delegate(
        self,
        signals: Signals,
        caller: ClaudeAgentOptions,
        action_id: str,
        tool: str,
        arguments: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Drive the subagent call `action_id` asks (from `PreToolUse`): its hook answer."""
        prefix = f"mcp__{SERVER}__"
        name = tool[len(prefix) :] if tool.startswith(prefix) else None
        spec = self.subagents.get(name) if name is not None else None
        if name is None or spec is None:
            return None
        agent = spec.name or name
        child = self._child(action_id, spec)
        options = child_options(spec, caller)
        try:
            if await child.recorder.off_loop(child.recorder.stored):
                done = await child.adrive(options, transport=spec.transport)
            else:
                done = await child.arun(
                    objective(arguments), options, agent=agent, transport=spec.transport
                )
        except ApprovalMismatchError as exc:
            signals.mismatch = exc  # a kept call changed: the whole tree fails closed
            signals.halt()
            return deny("refused: the subagent's call is not the one approval was asked for")
        except Exception as exc:  # noqa: BLE001  (the child recorded it; the model reads why)
            return await self._subagent_failed(signals, action_id, f"{type(exc).__name__}: {exc}")
        if done.pending_approvals:
            if signals.deferred is None:
                signals.deferred = action_id
                return defer(f"waiting on the subagent run '{child.run_id}'")
            why = f"its caller could not wait: {one_waiting_call(signals.deferred)}"
            await child.recorder.off_loop(_cancel_waiting, child.recorder, why)
            return await self._subagent_failed(signals, action_id, f"cancelled: {why}")
        record = done.record
        if record.status == RunStatus.COMPLETED:
            text = str(done.final_output)
        elif record.status in (RunStatus.TERMINATED, RunStatus.CANCELLED):
            text = stopped_line(agent, record, done.partial_output)
        else:
            error = record.error.message if record.error is not None else record.status
            return await self._subagent_failed(signals, action_id, error)
        self._answers.put(name, arguments, text)
        return {}

    async def _subagent_failed(self, signals: Signals, action_id: str, why: str) -> dict[str, Any]:
        """`tool.failed` for a subagent call that will not run; the model reads why."""
        error = {"kind": "subagent_failed", "message": why}
        spec = Spec(m.ToolFailed, {"action_id": action_id, "error": error})
        await signals.append(f"subagent run of call '{action_id}'", [spec])
        return deny(why)

    async def _watch_cancel(self, signals: Signals) -> None:
        """Interrupt the SDK run once another process asks to cancel it (two-phase cancel)."""
        recorder = self.recorder
        while not signals.halted:
            await asyncio.sleep(self.cancel_poll)
            info = await asyncio.to_thread(recorder.store.run_info, recorder.run_id)
            if info.status == RunStatus.CANCEL_REQUESTED and not signals.halted:
                signals.stopped(CancelStop(recorder.record))

    async def _settle(
        self, signals: Signals, result: ResultMessage | None, options: ClaudeAgentOptions
    ) -> ObservedRun:
        """Record how the leg ended, from the stop we asked for or the SDK's result."""
        recorder = self.recorder
        deferred = result is not None and (
            result.deferred_tool_use is not None or result.stop_reason == "tool_deferred"
        )
        if deferred:
            await signals.flush()
        if signals.mismatch is not None:
            raise signals.mismatch
        if signals.error is not None:
            await recorder.off_loop(recorder.failed, signals.error)
            raise signals.error
        if signals.stop is not None:
            return await self._stopped(signals, signals.stop, options, result)
        if result is None:
            record = await recorder.off_loop(
                recorder.fail, "no_result", "the SDK's stream ended without a result"
            )
            return observed(recorder.store, record, partial_output=signals.last)
        try:
            if result.deferred_tool_use is not None or result.stop_reason == "tool_deferred":
                return await self._paused(signals, result, options)
            return await self._ended(signals, result, options)
        except (GuardStop, CancelStop) as stop:  # e.g. a cancel asked as the leg paused
            return await self._stopped(signals, stop, options, result)

    async def _ended(
        self, signals: Signals, result: ResultMessage, options: ClaudeAgentOptions
    ) -> ObservedRun:
        recorder = self.recorder
        specs = signals.final_answer(result.total_cost_usd)
        # What the CLI's figures hold beyond the log's calls (and the final answer's cost).
        specs += reported(result, recorder.record.usage, specs, priced=self._priced)
        signal = f"ResultMessage ({result.subtype})"
        if result.subtype == "success" and not result.is_error:
            specs.append(Spec(m.RunCompleted, {}))
        elif result.subtype in ("error_max_turns", "error_max_budget_usd"):
            reason = "max_turns" if result.subtype == "error_max_turns" else "budget"
            detail = _sdk_stop(result, options, recorder.record.turn)
            end: Any = Spec(m.RunTerminated, {"stop_reason": reason, "detail": detail})
            specs += [*self._unknown("the SDK stopped the run"), end]
        else:
            message = "; ".join(result.errors or []) or result.result or result.subtype
            end = Spec(m.RunFailed, {"error": {"kind": result.subtype, "message": message}})
            specs += [*self._unknown("the SDK run ended in an error"), end]
        record = await recorder.aappend(signal, specs)
        await recorder.off_loop(self._forget)
        final = record.final_output if record.status == RunStatus.COMPLETED else None
        return observed(
            recorder.store,
            record,
            final_output=final,
            partial_output=signals.last,
            sdk_result=result,
        )

    def _forget(self) -> None:
        """Drop what a drive would need: the run ended."""
        self.recorder.forget_state(STATE)
        self.recorder.forget_state(TRANSCRIPT)
        self.recorder.forget_wait()

    def _unknown(self, reason: str) -> list[Any]:
        """`tool.outcome_unknown` for the calls left running: nobody knows their effect."""
        return [
            Spec(m.ToolOutcomeUnknown, {"action_id": a.action_id, "reason": reason})
            for a in self.recorder.record.actions.values()
            if a.status in (ActionStatus.REQUESTED, ActionStatus.STARTED)
        ]

    async def _stopped(
        self,
        signals: Signals,
        stop: GuardStop | CancelStop,
        options: ClaudeAgentOptions,
        result: ResultMessage | None = None,
    ) -> ObservedRun:
        recorder = self.recorder
        cut = signals.cut_answer()
        if cut and not isinstance(stop, WaitStop):
            with contextlib.suppress(GuardStop, CancelStop, LifecycleError):
                await recorder.aappend("interrupt (the answer was cut off)", cut)
        if isinstance(stop, WaitStop):
            # An event a call caused made the run wait: it stays where its table put it,
            # and the CLI's session is kept for `adrive` to go on from once it may.
            record = recorder.stopped(stop)
            if record.status not in recorder.store.reducer.table.terminal_states:
                try:
                    record = await self._report(result, waiting=True)
                except GuardStop as over:  # the CLI's figure is past a budget: it stops
                    return await self._stopped(signals, over, options)
                await self._keep_wait(signals, options)
                return observed(
                    recorder.store, record, partial_output=signals.last, sdk_result=result
                )
        elif isinstance(stop, CancelStop):
            with contextlib.suppress(GuardStop, CancelStop):  # it ends cancelled anyway
                await self._report(result)
            record = await recorder.off_loop(self._cancel)
        else:
            with contextlib.suppress(GuardStop, CancelStop):  # it ends terminated anyway
                await self._report(result)
            unknown = self._unknown("interrupted when a guard stopped the run")
            if unknown:
                with contextlib.suppress(GuardStop, CancelStop):
                    await recorder.aappend("interrupt", unknown)
            record = await recorder.off_loop(recorder.terminate, stop)
        await recorder.off_loop(self._forget)
        partial = (
            record.final_output if record.last_decision == DecisionKind.FINAL else signals.last
        )
        return observed(recorder.store, record, partial_output=partial, sdk_result=result)

    @property
    def _priced(self) -> bool:
        """Whether the run prices its calls itself (`pricing=`): then the CLI's cost is not
        recorded (its tokens are)."""
        return self.recorder.options.pricing is not None

    async def _report(self, result: ResultMessage | None, *, waiting: bool = False) -> RunRecord:
        """Append what the CLI's figures (its `ResultMessage`) hold beyond the record, as
        the leg ends short of the run's end (see `_claude_usage`); the record after it.

        Raises:
            GuardStop: the figure took the run past a budget (it is appended all the same).
            CancelStop: as any append.
        """
        recorder = self.recorder
        if result is None:
            return recorder.record  # the CLI reported nothing (its stream ended early)
        specs = reported(result, recorder.record.usage, priced=self._priced)
        if not specs:
            return recorder.record
        signal = f"ResultMessage ({result.subtype})"
        if waiting:
            return await recorder.off_loop(recorder.report, signal, specs)
        return await recorder.aappend(signal, specs)

    async def _keep_wait(self, signals: Signals, options: ClaudeAgentOptions) -> None:
        """Keep the CLI session of a run its lifecycle made wait: its id (`Recorder.keep_wait`)
        and the CLI's transcript of it (`TRANSCRIPT`, so any machine resumes it)."""
        recorder = self.recorder
        if signals.session_id is None:
            return  # the CLI named no session (nothing ran): a drive has nothing to go on
        await recorder.off_loop(recorder.keep_wait, {"session_id": signals.session_id})
        kept = await recorder.off_loop(transcript, options, signals.session_id)
        if kept is not None:
            await recorder.off_loop(recorder.save_state, TRANSCRIPT, kept)

    def _cancel(self) -> RunRecord:
        """`run.cancelled`, the cancel folded in first when it came by polling the store."""
        recorder = self.recorder
        if recorder.record.status != RunStatus.CANCEL_REQUESTED:
            recorder.load()
        return recorder.cancelled()

    async def _paused(
        self, signals: Signals, result: ResultMessage, options: ClaudeAgentOptions
    ) -> ObservedRun:
        """The CLI deferred a call waiting for approval: keep the session (and the CLI's
        transcript of it, so any machine resumes it), wait."""
        recorder = self.recorder
        deferred = result.deferred_tool_use
        record = recorder.record
        if deferred is None:
            record = await recorder.off_loop(
                recorder.fail, "no_deferred_call", "the SDK deferred no call"
            )
            return observed(recorder.store, record)
        kept = {
            "session_id": result.session_id,
            "deferred": {"id": deferred.id, "name": deferred.name, "input": deferred.input},
            "total_cost_usd": result.total_cost_usd,
        }
        data = json.dumps(kept, sort_keys=True)
        await recorder.off_loop(recorder.waiting)  # a cancel asked meanwhile ends it instead
        # The CLI's cost of the leg, in the record while the run waits (a budget it took
        # the run past stops it here: `GuardStop`, settled by the caller).
        record = await self._report(result)
        await recorder.off_loop(recorder.save_state, STATE, data.encode())
        kept_transcript = await recorder.off_loop(transcript, options, result.session_id)
        if kept_transcript is not None:
            await recorder.off_loop(recorder.save_state, TRANSCRIPT, kept_transcript)
        return observed(
            recorder.store,
            record,
            sdk_result=result,
            state=data,
            partial_output=signals.last,
            pending_approvals=await recorder.off_loop(waiting_on, recorder.store, record),
        )


def _attachment(recorder: Any, name: str) -> bytes | None:
    """The attachment `name` of the recorder's run, or None (none kept, or no store for it)."""
    try:
        kept = recorder.store.attachment(recorder.run_id, name)
    except NotImplementedError:
        return None
    return None if kept is None else bytes(kept.data)


def _upstream(options: ClaudeAgentOptions) -> tuple[str, dict[str, str]]:
    """Where the CLI would send its requests, and the environment it would reach it with."""
    env = {**os.environ, **(options.env or {})}
    return env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com", env


def _through(env: Mapping[str, str] | None, url: str) -> dict[str, str]:
    """The CLI's environment sending its requests to our gateway at `url`, directly."""
    out = dict(env or {})
    out["ANTHROPIC_BASE_URL"] = url
    no_proxy = out.get("NO_PROXY") or os.environ.get("NO_PROXY") or ""
    out["NO_PROXY"] = ",".join(p for p in (no_proxy, "127.0.0.1") if p)
    return out


async def _call(fn: Callable[[Any], Any], value: Any) -> None:
    """Call your callback, awaiting what it returns if that is awaitable."""
    done = fn(value)
    if asyncio.iscoroutine(done) or isinstance(done, asyncio.Future):
        await done


def _streamed_text(message: Any) -> str | None:
    """The text a main-thread answer streams in this message (a `text_delta`), if any."""
    if not isinstance(message, StreamEvent) or message.parent_tool_use_id is not None:
        return None
    event = message.event
    delta = event.get("delta") or {}
    if event.get("type") != "content_block_delta" or delta.get("type") != "text_delta":
        return None
    return str(delta.get("text") or "") or None


def _refuse_cli_agents(options: ClaudeAgentOptions) -> None:
    """Refuse the CLI's own subagents up front: they would run inside the CLI, unrecorded,
    and a call of theirs that needs approval cannot pause there."""
    if options.agents:
        names = ", ".join(sorted(options.agents))
        raise ValueError(
            f"ClaudeAgentOptions(agents=...) ({names}) runs subagents inside the CLI, outside "
            "our log, where a call cannot wait for approval: give them to "
            "ClaudeRun(subagents={name: Subagent(description, agent)}) instead (an "
            "AgentDefinition works as the agent), each call a child run of its own"
        )


def _sdk_stop(result: ResultMessage, options: ClaudeAgentOptions, model_calls: int) -> str:
    """The detail of a run the SDK's own limit stopped, in the log's terms (its model calls:
    the CLI's `num_turns` counts otherwise, e.g. a deferred call's leg as two)."""
    calls = f"{model_calls} model call{'s' if model_calls != 1 else ''} in the log"
    if result.subtype == "error_max_turns":
        return f"the SDK's max_turns={options.max_turns} stopped the run after {calls}"
    cost = f"${result.total_cost_usd:.6f} spent" if result.total_cost_usd is not None else ""
    limit = f"max_budget_usd={options.max_budget_usd}"
    return f"the SDK's {limit} stopped the run after {calls}" + (f" ({cost})" if cost else "")


def _cancel_waiting(recorder: Any, why: str) -> RunRecord:
    """End a subagent run left waiting for approval that its caller cannot wait on."""
    recorder.append("the calling run could not wait", [Spec(m.RunCancelRequested, {"reason": why})])
    return recorder.cancelled()  # type: ignore[no-any-return]
