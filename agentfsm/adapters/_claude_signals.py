"""The Claude Agent SDK's signals of one run leg, turned into our events as they come.

A leg is one connection of a `ClaudeSDKClient` (a run's start, or a resume). The CLI streams
the model's answers (`StreamEvent`s, with `include_partial_messages=True`, and the
`AssistantMessage`s built from them) and asks the SDK's callbacks over the control protocol
(hooks, `can_use_tool`). `Signals` hears both, in the order the CLI sent them:

- a model request our loopback gateway sees before it goes upstream (`request`, the
  default): `model.started`, judged by the guards; a request the CLI sends again after a
  failure (`failed`: an error status, an `error` event, a stream broken off) is a model call
  of its own, judged likewise (`agentfsm.adapters._attempts`); a whole answer (the CLI's
  request without streaming, after a broken stream) is heard there too (`answered`). The
  stream's events of an attempt that failed are not the call's: they are left out;
- without the gateway, `message_start` of a main-thread answer: `model.started`;
- its `message_stop`: `model.completed` with the answer's `ToolUseBlock`s as tool calls
  (`ToolUseBlock.id` is the action id) and its usage (`message_start`'s input tokens,
  `message_delta`'s output tokens); a final answer is recorded with the run's end, when the
  `ResultMessage` gives the SDK's own cost;
- hook `PreToolUse`: a call of an answer the run refused (more calls than
  `max_calls_per_decision`: recorded as `refused`) is denied with the refusal's message, the
  error the model reads, before it runs or waits for a person; a call that needs approval
  and is undecided is `approval.requested` and deferred (`permissionDecision: "defer"`: the
  CLI ends the leg keeping the call, and replays it on a drive); a rejected one is denied
  (never runs); otherwise `tool.requested` +
  `tool.started`. The CLI sends it while the answer still streams, so the hook waits for the
  answer's `model.completed` first;
- `can_use_tool`: the SDK's permission request, answered from our store's decision;
- hooks `PostToolUse` / `PostToolUseFailure`: `tool.completed` / `tool.failed`.

A guard's refusal or a cancel (`GuardStop` / `CancelStop`) is kept in `stop`, and the leg is
interrupted (`ClaudeSDKClient.interrupt()`): every later call is denied, nothing more is
recorded, and the adapter settles the run when the CLI's `ResultMessage` arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    PermissionResultAllow,
    PermissionResultDeny,
    StreamEvent,
    TextBlock,
    ToolPermissionContext,
    ToolUseBlock,
)

from agentfsm.adapters._attempts import Attempts, Step
from agentfsm.adapters._claude_gateway import Failure, Verdict
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop
from agentfsm.adapters._storable import jsonable
from agentfsm.errors import ApprovalMismatchError, LifecycleError
from agentfsm.events import models as m
from agentfsm.names import ActionStatus, DecisionKind, RunStatus
from agentfsm.record import call_digest
from agentfsm.runtime._writer import Spec, approval_asked, call_started, declined

__all__ = ["SDK", "Signals", "defer", "deny", "one_waiting_call", "tool_result"]

SDK = "claude-agent-sdk"

#: Whether a call needs a person's approval: `needs(tool_name, tool_input)`.
NeedsApproval = Callable[[str, dict[str, Any]], bool]
#: The SDK's permission callback, as `ClaudeAgentOptions.can_use_tool` takes it.
CanUseTool = Callable[[str, dict[str, Any], ToolPermissionContext], Awaitable[Any]]

#: Drives the subagent a started call asks (`fn(tool_use_id, tool_name, input)`): the
#: `PreToolUse` answer for the call, or None when the tool is no subagent's.
Delegate = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any] | None]]

#: A call's statuses while it runs (its tool's work under way).
_IN_FLIGHT = frozenset({ActionStatus.REQUESTED, ActionStatus.STARTED})

#: How long a `PreToolUse` hook waits for the streamed answer holding its call to end.
ANSWER_WAIT = 60.0


def tool_result(response: Any) -> Any:
    """A tool's response as our log keeps it: an SDK MCP tool's text blocks joined."""
    if isinstance(response, dict) and "content" in response and len(response) <= 2:
        response = response["content"]
    if (
        isinstance(response, list)
        and response
        and all(isinstance(b, dict) and b.get("type") == "text" for b in response)
    ):
        return "".join(str(b.get("text", "")) for b in response)
    return jsonable(response)


@dataclass
class _Answer:
    """One main-thread model answer as it streams."""

    message_id: str
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    text: list[str] = field(default_factory=list)
    calls: dict[str, ToolUseBlock] = field(default_factory=dict)


class Signals:
    """Turns one leg's SDK signals into our events (see the module docstring).

    Args:
        recorder: the run's recorder.
        needs_approval: which calls wait for a person.
        theirs: the application's own `can_use_tool`, asked after our decision allows a call.
        interrupt: interrupts the SDK run (`ClaudeSDKClient.interrupt`).
        delegate: drives the subagent a started call asks (see `_claude_subagents`).
    """

    def __init__(
        self,
        recorder: Recorder,
        needs_approval: NeedsApproval,
        theirs: CanUseTool | None,
        interrupt: Callable[[], Awaitable[None]],
        delegate: Delegate | None = None,
    ) -> None:
        self.recorder = recorder
        self.needs_approval = needs_approval
        self.theirs = theirs
        self._interrupt = interrupt
        self.delegate = delegate
        #: How many calls each call's answer asked for.
        self.batch: dict[str, int] = {}
        #: The call this leg deferred: the CLI keeps one deferred call per leg (a second
        #: `defer` drops the first from its conversation), so any other call needing approval
        #: in the leg is declined, saying why.
        self.deferred: str | None = None
        #: The deferred call's `approval.requested`, recorded when the leg ends (`flush`):
        #: the CLI runs the rest of the answer's calls first, and the table takes an approval
        #: request beside calls in flight, not calls after a run that already waits.
        self.held: list[Any] = []
        self._held_signal = ""
        #: The calls of this leg's refused answers, with the refusal's message. Kept here,
        #: not read off the record: a hook may come before the next answer's `model.started`.
        self.refused: dict[str, str] = {}
        self.stop: GuardStop | CancelStop | None = None
        self.mismatch: ApprovalMismatchError | None = None
        #: A move the table or the ledger refused (raised by the adapter after the leg).
        self.error: LifecycleError | None = None
        #: The last thing the model said or a tool returned (a stopped run's partial output).
        self.last: Any = None
        #: A final answer, recorded with the run's end (see `final_answer`).
        self.final: _Answer | None = None
        self._answer: _Answer | None = None
        self._completed = asyncio.Condition()
        self._interrupting: asyncio.Task[None] | None = None
        #: The CLI's session id, from the first message that names it (a leg the run's
        #: lifecycle made wait is resumed from that session).
        self.session_id: str | None = None
        #: Whether our gateway sees the model requests (it opens each call, `request`).
        self.gated = False
        #: The attempts of the run's model calls the gateway sees, and the ids of the
        #: answers whose attempt failed (their streamed events are not the call's).
        self.attempts = Attempts(recorder, source="claude gateway", retrier="CLI", opens=True)
        self._failed_ids: set[str] = set()
        #: Whether the gateway saw the open call's stream reach its `message_stop`.
        self._streamed = False

    # -- stopping ---------------------------------------------------------------------------

    @property
    def halted(self) -> bool:
        """Whether the leg is being stopped (a guard, a cancel, a changed call)."""
        return self.stop is not None or self.mismatch is not None or self.error is not None

    def stopped(self, stop: GuardStop | CancelStop) -> None:
        """Keep the first stop and interrupt the SDK run (once)."""
        if self.stop is None:
            self.stop = stop
        self.halt()

    def halt(self) -> None:
        """Interrupt the SDK run (once)."""
        if self._interrupting is None:
            self._interrupting = asyncio.ensure_future(self._interrupt_quietly())

    async def _wake(self) -> None:
        async with self._completed:
            self._completed.notify_all()  # hooks waiting for an answer: the run stops

    async def _interrupt_quietly(self) -> None:
        await self._wake()
        # The CLI may have ended the leg meanwhile; then there is nothing to interrupt.
        with contextlib.suppress(Exception):
            await self._interrupt()

    async def flush(self) -> bool:
        """Record the deferred call's `approval.requested` (the leg ended deferring it),
        named by the hook that deferred it."""
        held, self.held = self.held, []
        return not held or await self._append(self._held_signal, held)

    async def settle(self) -> None:
        """Wait for a requested interrupt to be sent."""
        if self._interrupting is not None:
            await asyncio.wait([self._interrupting])

    async def append(self, signal: str, specs: list[Any]) -> bool:
        """Append, or keep the stop and interrupt; False when the run is stopping."""
        return await self._append(signal, specs)

    async def _append(self, signal: str, specs: list[Any]) -> bool:
        """Append, or keep the stop and interrupt; False when the run is stopping."""
        if self.halted:
            return False
        try:
            await self.recorder.aappend(signal, specs)
        except (GuardStop, CancelStop) as stop:
            self.stopped(stop)
            return False
        except LifecycleError as exc:
            # Raised inside the SDK's callback, it would only reach the CLI: kept instead.
            self.error = exc
            self.halt()
            return False
        return True

    # -- the message stream -----------------------------------------------------------------

    async def message(self, message: Any) -> None:
        """Hear one message of the SDK's stream (`receive_messages`)."""
        if self.session_id is None:
            data = getattr(message, "data", None)
            named = getattr(message, "session_id", None) or (
                data.get("session_id") if isinstance(data, dict) else None
            )
            self.session_id = str(named) if named else None
        if self.halted or getattr(message, "parent_tool_use_id", None) is not None:
            return  # stopping (nothing more is recorded), or a subagent's message
        if isinstance(message, StreamEvent):
            await self._stream_event(message.event)
        elif isinstance(message, AssistantMessage):
            answer = self._answer
            named = getattr(message, "message_id", None)
            if answer is None or (named and answer.message_id and named != answer.message_id):
                return  # no streamed answer, or not this one's (a whole answer: `answered`)
            answer.model = message.model or answer.model
            for block in message.content:
                if isinstance(block, TextBlock):
                    answer.text.append(block.text)
                elif isinstance(block, ToolUseBlock):
                    answer.calls[block.id] = block

    async def _stream_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            usage = message.get("usage") or {}
            self._answer = _Answer(
                str(message.get("id") or ""),
                message.get("model"),
                int(usage.get("input_tokens") or 0),
                int(usage.get("output_tokens") or 0),
            )
            if self.recorder.record.model_call_open:
                pass  # the gateway recorded this call's `model.started` before sending it
            elif self.gated:
                # Under the gateway every call it sent is open until it ends: this is the
                # answer of an attempt already over (failed, or answered whole).
                self._answer = None
            elif not await self._append("StreamEvent message_start", [self.recorder.model_call()]):
                self._answer = None  # refused: what the model says now is not kept
        elif kind == "message_delta" and self._answer is not None:
            usage = event.get("usage") or {}
            if usage.get("input_tokens"):
                self._answer.input_tokens = int(usage["input_tokens"])
            self._answer.output_tokens = int(usage.get("output_tokens") or 0)
        elif kind == "message_stop" and self._answer is not None:
            answer, self._answer = self._answer, None
            if answer.message_id in self._failed_ids or not self.recorder.record.model_call_open:
                return  # the CLI ends a failed attempt's answer too: not the call's answer
            await self._answered(answer)

    # -- what the gateway sees (`_claude_gateway.Watch`) --------------------------------------

    async def request(self, body: dict[str, Any]) -> Verdict:
        """A model request about to be sent (our gateway sees it): `model.started`, judged
        by the guards, the CLI's retry of a failed one included (`_attempts`). Sent, and its
        outcome watched, unless a guard refuses it (the refusal's sentence)."""
        record = self.recorder.record
        if record.model_call_open and self.final is None and self._streamed:
            # The open call's answer came whole, yet the CLI asks again before the SDK's
            # stream brought it here (a call the CLI refused itself needs no hook of ours):
            # a next turn, not a resend; its answer is recorded first.
            await self._caught_up()
            record = self.recorder.record
        if self.halted:
            return Verdict(refusal=self._refusal())
        if any(a.status in _IN_FLIGHT for a in record.actions.values()):
            # A call of ours is running: this is a request of the CLI's own subagent (its
            # `Agent` tool), not a turn of this run (nor recorded as one, as its messages).
            return Verdict(watched=False)
        if record.model_call_open and self.final is not None:
            # After the final answer, recorded with the run's end: not a retry of it.
            return Verdict(watched=False)
        if await self._attempt(self.attempts.opening("/v1/messages")):
            self._streamed = False
            return Verdict()
        return Verdict(refusal=self._refusal())

    async def _caught_up(self) -> None:
        """Wait until the open call's streamed answer is recorded (or the run stops)."""

        def done() -> bool:
            record = self.recorder.record
            return self.halted or not record.model_call_open or self.final is not None

        async with self._completed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._completed.wait_for(done), ANSWER_WAIT)

    async def streamed(self, message_id: str | None) -> None:
        """The open call's stream reached its `message_stop` at the gateway."""
        self._streamed = True

    def _refusal(self) -> str:
        stop = self.stop
        why = str(stop.error.detail) if isinstance(stop, GuardStop) else "the run was stopped"
        return f"refused before it was sent: {why}"

    async def _attempt(self, steps: list[Step]) -> bool:
        """Append an attempt's events; False when the run stops (a guard, or what the
        attempt may have spent unreported under a budget)."""
        for step in steps:
            if not await self._append(step.signal, [step.spec]):
                return False
            over = self.attempts.after(step)
            if over is not None:
                self.stopped(over)
                return False
        return True

    async def failed(self, failure: Failure) -> None:
        """A request the gateway sent as the open call failed: `model.failed`, with the
        usage its stream reported, before the CLI hears of it (and retries)."""
        if self.halted or not self.recorder.record.model_call_open:
            return
        if failure.message_id is not None:
            self._failed_ids.add(failure.message_id)
        usage = self.recorder.reported_usage(
            failure.input_tokens, failure.output_tokens, failure.model
        )
        step = self.attempts.failure(
            "/v1/messages",
            failure.kind,
            failure.message,
            failure.retryable,
            failure.spent,
            usage,
        )
        await self._attempt([step])

    async def answered(self, message: dict[str, Any]) -> None:
        """A whole answer to the open call (a request without streaming, as the CLI sends
        after a broken stream): the CLI streams no events of it, so it is heard here."""
        if self.halted or not self.recorder.record.model_call_open:
            return
        usage = message.get("usage") or {}
        answer = _Answer(
            str(message.get("id") or ""),
            message.get("model"),
            int(usage.get("input_tokens") or 0),
            int(usage.get("output_tokens") or 0),
        )
        for block in message.get("content") or []:
            if block.get("type") == "text":
                answer.text.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                use = ToolUseBlock(
                    id=str(block["id"]), name=str(block["name"]), input=block.get("input") or {}
                )
                answer.calls[use.id] = use
        self._answer = None  # what a broken stream began is over
        await self._answered(answer)

    async def _answered(self, answer: _Answer) -> None:
        text = "".join(answer.text)
        if not answer.calls:
            self.final = answer  # recorded with the run's end, which brings the SDK's cost
            self.last = text
            async with self._completed:
                self._completed.notify_all()
            return
        calls = [
            {"action_id": b.id, "tool": b.name, "arguments": jsonable(b.input)}
            for b in answer.calls.values()
        ]
        self.batch.update(dict.fromkeys(answer.calls, len(calls)))
        # None when the stream reported no tokens: under a budget that stops the run
        # (`agentfsm.runtime._metering`), as in every adapter.
        usage = self.recorder.reported_usage(
            answer.input_tokens, answer.output_tokens, answer.model
        )
        fields = {"decision": DecisionKind.TOOL_CALLS, "tool_calls": calls, "usage": usage}
        if text:
            self.last = text
        recorded = await self._append(
            f"StreamEvent message_stop (message '{answer.message_id}')",
            [Spec(m.ModelCompleted, fields)],
        )
        refusal = self.recorder.record.last_refusal
        if recorded and refusal is not None:  # too many calls: each is denied, saying why
            self.refused.update(dict.fromkeys(answer.calls, refusal.message))
        async with self._completed:
            self._completed.notify_all()

    def cut_answer(self) -> list[Any]:
        """`model.completed` of a model call the stop cut off (sent, its answer unfinished),
        with what it streamed so far: every call that reached the API is in the log with
        its usage. Nothing when no call is open."""
        if not self.recorder.record.model_call_open:
            return []
        answer = self._answer or _Answer("")
        usage = self.recorder.usage(answer.input_tokens, answer.output_tokens, answer.model)
        fields = {"decision": DecisionKind.FINAL, "output": "".join(answer.text), "usage": usage}
        return [Spec(m.ModelCompleted, fields)]

    def final_answer(self, sdk_cost: float | None) -> list[Any]:
        """`model.completed` of the final answer, with the SDK's cost of the run so far.

        The CLI reports cost only with its `ResultMessage` (`total_cost_usd`, over the whole
        session, resumes included): what our record does not hold yet (the earlier legs' is
        in it, `usage.reported`) is this leg's, put on this answer, so a `max_cost` limit trips
        on the CLI's own number. With `pricing=`, ours is used instead.
        """
        answer = self.final
        if answer is None or not self.recorder.record.model_call_open:
            return []
        usage = self.recorder.reported_usage(
            answer.input_tokens, answer.output_tokens, answer.model
        )
        if self.recorder.options.pricing is None and sdk_cost is not None:
            usage = usage or {"input_tokens": 0, "output_tokens": 0}
            usage["cost"] = max(0.0, sdk_cost - self.recorder.record.usage.cost)
        output = "".join(answer.text)
        return [
            Spec(
                m.ModelCompleted, {"decision": DecisionKind.FINAL, "output": output, "usage": usage}
            )
        ]

    async def _proposed(self, tool_use_id: str) -> bool:
        """Wait until the answer holding the call is recorded; False if the run stops first."""

        def ready() -> bool:
            return (
                self.halted
                or tool_use_id in self.recorder.record.actions
                or tool_use_id in self.refused
            )

        async with self._completed:
            try:
                await asyncio.wait_for(self._completed.wait_for(ready), ANSWER_WAIT)
            except TimeoutError:
                return False
        return not self.halted

    # -- hooks ------------------------------------------------------------------------------

    async def pre_tool_use(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        """Hook `PreToolUse`: defer, deny or record the call before it runs."""
        if tool_use_id is None:
            return {}
        name, arguments = str(data.get("tool_name")), jsonable(data.get("tool_input") or {})
        if data.get("agent_id"):
            return self._inside_cli_subagent(name, arguments)
        if not await self._proposed(tool_use_id):
            return _deny("the run was stopped")
        if tool_use_id in self.refused:
            return _deny(self.refused[tool_use_id])
        action = self.recorder.record.actions[tool_use_id]
        if action.arguments_digest not in (None, call_digest(name, arguments)):
            # The SDK's call is not the one our log holds (a kept session changed): fail closed.
            self.mismatch = ApprovalMismatchError(
                run_id=self.recorder.run_id,
                action_id=tool_use_id,
                expected=action.arguments_digest,
                actual=call_digest(name, arguments),
            )
            self.halt()  # `mismatch` says why; nothing more is recorded
            return _deny("refused: the call is not the one approval was asked for")
        if action.status == ActionStatus.REJECTED:
            return _deny(action.reason or "rejected")
        if action.status == ActionStatus.PROPOSED and self.needs_approval(name, arguments):
            signal = f"hook PreToolUse (call '{tool_use_id}')"
            if self.deferred is None:
                self.deferred = tool_use_id
                self.held.append(approval_asked(tool_use_id, name, arguments))
                self._held_signal = signal
                return defer("waiting for approval")
            reason = one_waiting_call(self.deferred)
            if await self._append(signal, declined(tool_use_id, name, arguments, SDK, reason)):
                return _deny(reason)
            return _deny("the run was stopped")
        if action.status == ActionStatus.APPROVAL_PENDING:
            return _deny("waiting for approval")  # a resume replays it once it is decided
        if action.status in (ActionStatus.PROPOSED, ActionStatus.APPROVED):
            signal = f"hook PreToolUse (call '{tool_use_id}')"
            if not await self._append(signal, call_started(tool_use_id, name, arguments)):
                return _deny("the run was stopped")
        started = self.recorder.record.actions[tool_use_id].status == ActionStatus.STARTED
        if self.delegate is not None and started:
            done = await self.delegate(tool_use_id, name, arguments)
            if done is not None:
                return done
        return {}

    def _inside_cli_subagent(self, name: str, arguments: Any) -> dict[str, Any]:
        """A call of a subagent the CLI runs itself (its `Agent` tool): not one of our runs.

        One that needs approval is refused: the CLI cannot pause inside its subagents (a
        deferred call ends the subagent, and the caller goes on), so it would run unapproved.
        """
        if self.needs_approval(name, arguments):
            return _deny(CLI_SUBAGENT_APPROVAL)
        return {}

    async def can_use_tool(
        self, name: str, arguments: dict[str, Any], context: ToolPermissionContext
    ) -> Any:
        """The SDK's permission request: answered from our store's decision on the call."""
        aid = context.tool_use_id
        if self.halted:
            return PermissionResultDeny(message="the run was stopped", interrupt=True)
        if context.agent_id and self.needs_approval(name, jsonable(arguments)):
            return PermissionResultDeny(message=CLI_SUBAGENT_APPROVAL)
        if aid in self.refused:
            return PermissionResultDeny(message=self.refused[aid])
        action = self.recorder.record.actions.get(aid) if aid else None
        if context.agent_id or action is None:
            return await self._theirs(name, arguments, context)
        if action.status == ActionStatus.APPROVAL_PENDING:
            # Still undecided, yet the CLI asks to run it (no hook of ours deferred it):
            # refused, so it never runs without a decision.
            reason = "not run: the call waits for approval"
            specs = [Spec(m.ApprovalRejected, _rejected(aid or "", name, arguments, reason))]
            await self._append(f"can_use_tool (call '{aid}')", specs)
            return PermissionResultDeny(message=reason)
        if action.status == ActionStatus.REJECTED:
            return PermissionResultDeny(message=action.reason or "rejected")
        return await self._theirs(name, arguments, context)

    async def _theirs(
        self, name: str, arguments: dict[str, Any], context: ToolPermissionContext
    ) -> Any:
        if self.theirs is None:
            return PermissionResultAllow()
        return await self.theirs(name, arguments, context)

    async def post_tool_use(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        """Hook `PostToolUse`: `tool.completed` with the tool's response."""
        if self._started(tool_use_id, data):
            self.last = tool_result(data.get("tool_response"))
            spec = Spec(m.ToolCompleted, {"action_id": tool_use_id, "result": self.last})
            if await self._append(f"hook PostToolUse (call '{tool_use_id}')", [spec]):
                return self._after_outcome("PostToolUse")
        return {}

    async def post_tool_use_failure(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        """Hook `PostToolUseFailure`: `tool.failed` with the error the model reads."""
        if self._started(tool_use_id, data):
            if data.get("is_interrupt"):
                return {}  # cancelled while it ran: outcome unknown, settled with the run's end
            error = {"kind": "tool_error", "message": str(data.get("error") or "")}
            spec = Spec(m.ToolFailed, {"action_id": tool_use_id, "error": error})
            if await self._append(f"hook PostToolUseFailure (call '{tool_use_id}')", [spec]):
                return self._after_outcome("PostToolUseFailure")
        return {}

    def _after_outcome(self, hook: str) -> dict[str, Any]:
        """The answer of the hook whose call's outcome was just recorded.

        An outcome that resolved the batch may have the table refuse an event a call of it
        proposed (after the tools returned, so no tool could say it): the sentences go to
        the model with the results (`additionalContext`, which the CLI adds to its next
        request). And when the events the batch caused leave the run waiting in a state of
        its lifecycle (for a person, say), the CLI is told to end the leg here
        (`continue: false`), before it asks the model anything more.
        """
        out: dict[str, Any] = {}
        untold = self.recorder.refused_untold()
        if untold:
            for aid in untold:
                self.recorder.told(aid)
            context = " ".join(untold.values())
            out["hookSpecificOutput"] = {"hookEventName": hook, "additionalContext": context}
        record = self.recorder.record
        if self.recorder.store.reducer.table.stops_driving(record.status):
            out["continue_"] = False
            out["stopReason"] = f"the run waits in '{record.status}'"
        return out

    def _started(self, tool_use_id: str | None, data: Any) -> bool:
        if tool_use_id is None or data.get("agent_id") or self.halted:
            return False
        action = self.recorder.record.actions.get(tool_use_id)
        return action is not None and action.status == ActionStatus.STARTED

    async def stop_hook(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        """Hook `Stop`: the model answered; a cancel asked for meanwhile stops the run here."""
        if self.stop is None and data.get("agent_id") is None:
            with contextlib.suppress(Exception):
                info = await self.recorder.off_loop(
                    self.recorder.store.run_info, self.recorder.run_id
                )
                if info.status == RunStatus.CANCEL_REQUESTED:
                    self.stopped(CancelStop(self.recorder.record))
        return {}


def one_waiting_call(deferred: str) -> str:
    """Why a second call of a leg needing approval is declined (the model reads it)."""
    return (
        f"not run: this call needs approval and call '{deferred}' of this answer already "
        "waits for one; the CLI holds one waiting call at a time: ask for this one again "
        "once that one is decided"
    )


#: Why a call needing approval inside one of the CLI's own subagents is refused.
CLI_SUBAGENT_APPROVAL = (
    "refused: this call needs approval, and the CLI cannot pause inside its own subagents; "
    "ask this agent through ClaudeRun(subagents=...) instead"
)


def defer(reason: str) -> dict[str, Any]:
    """`PreToolUse`'s answer deferring the call: the CLI ends the leg keeping it."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "defer",
            "permissionDecisionReason": reason,
        }
    }


def deny(reason: str) -> dict[str, Any]:
    """`PreToolUse`'s answer refusing the call: it never runs; the model reads `reason`."""
    return _deny(reason)


def _deny(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def _rejected(aid: str, name: str, arguments: Any, reason: str) -> dict[str, Any]:
    return declined(aid, name, jsonable(arguments), SDK, reason)[1].fields
