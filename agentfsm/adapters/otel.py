"""OpenTelemetry spans for a run's events: one per run, per turn and per tool action.

`RunSpans(tracer).feed(event)` turns events into spans as they are appended (live), and
`trace_run(tracer, events)` does it for a stored log. Span times are the events'
`occurred_at`, so a trace drawn from a replayed log has the run's own timing.

- **run** span `invoke_agent {agent}` (`gen_ai.operation.name="invoke_agent"`,
  `gen_ai.agent.name`, `gen_ai.conversation.id` = run id): from `run.started` to the
  terminal event. Its status is OK for `completed`, ERROR for `failed` (the error) and
  `terminated` (the guard's stop reason and detail), UNSET for `cancelled`; attributes
  `agentfsm.status` and `agentfsm.stop_reason` say which. Handoffs, approvals, pauses and
  cancel requests are span events on it.
- **turn** span `chat` (`gen_ai.operation.name="chat"`, `agentfsm.turn`): from
  `model.started` to the next `model.started` or the end, with `gen_ai.usage.input_tokens`
  / `output_tokens` and `gen_ai.response.finish_reasons` from `model.completed` (for a
  decision the run refused, the model's own reason, and `agentfsm.refusal.kind` /
  `agentfsm.refusal.message` saying why it was refused). A `model.failed` (an attempt the
  SDK's client retries) ends its turn span with ERROR and `error.type`; the retry's
  `model.started` is the next turn span.
- **tool** span `execute_tool {tool}` (`gen_ai.operation.name="execute_tool"`,
  `gen_ai.tool.name`, `gen_ai.tool.call.id` = action id), a child of the turn that proposed
  it: from `tool.started` to its result; ERROR with `error.type` for `tool.failed`.

A subagent's run (`<run_id>/<action_id>`, see `SdkRun.subagent` and the Runner's
`subagent`) is a child of the tool span of the call that started it, so parent and children
share one trace — fed live or from a stored log in any run order.

Inject the tracer (`provider.get_tracer("agentfsm")`): this module never sets the global
tracer provider.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, Status, StatusCode, Tracer
except ImportError as exc:
    raise missing_extra("trace_run", "otel", exc) from exc

from agentfsm.events import models as m
from agentfsm.events.models import Event, parse_timestamp

__all__ = ["RunSpans", "trace_run"]

_FINISH = {"final": "stop", "tool_calls": "tool_calls", "handoff": "handoff", "emit": "emit"}
_TERMINAL = (m.RunCompleted, m.RunFailed, m.RunTerminated, m.RunCancelled)
_KEPT_CALLS = 10_000  # tool spans a subagent run may still name as its parent


def _ns(event: Event) -> int:
    return int(parse_timestamp(event.occurred_at).timestamp() * 1_000_000_000)


@dataclass
class _Open:
    run: Span
    agent: str | None = None
    turn: Span | None = None
    turns: int = 0
    tools: dict[str, Span] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)


class RunSpans:
    """Builds spans from events as they come (see the module docstring).

    Args:
        tracer: the tracer to start spans with.
    """

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self._runs: dict[str, _Open] = {}
        # `run_id/action_id` -> its tool span's context, kept after the span ends: a stored
        # log may hold a parent's whole run before its subagent's. Bounded: oldest go first.
        self._calls: OrderedDict[str, SpanContext] = OrderedDict()

    def feed(self, event: Event) -> None:
        """Account for one event of a run (events of one run must come in order)."""
        at = _ns(event)
        if isinstance(event, m.RunStarted):
            agent = event.agent or "agent"
            attributes = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.conversation.id": event.run_id,
                "agentfsm.run_id": event.run_id,
            }
            context = None
            parent_id, _, _ = event.run_id.rpartition("/")
            if parent_id:
                attributes["agentfsm.parent_run_id"] = parent_id
                call = self._calls.get(event.run_id)
                if call is not None:
                    context = trace.set_span_in_context(NonRecordingSpan(call))
            span = self.tracer.start_span(
                f"invoke_agent {agent}", context=context, start_time=at, attributes=attributes
            )
            self._runs[event.run_id] = _Open(span, agent)
            return
        run = self._runs.get(event.run_id)
        if run is None:
            return  # a run started before this tracer saw it
        if isinstance(event, m.ModelStarted):
            self._end_turn(run, at)
            run.turns += 1
            run.turn = self.tracer.start_span(
                "chat",
                context=trace.set_span_in_context(run.run),
                start_time=at,
                attributes={"gen_ai.operation.name": "chat", "agentfsm.turn": run.turns},
            )
        elif isinstance(event, m.ModelCompleted) and run.turn is not None:
            refusal = event.refusal
            proposed = refusal.proposed.decision if refusal is not None else None
            decided = proposed or event.decision
            run.turn.set_attribute("gen_ai.response.finish_reasons", [_FINISH[decided]])
            if refusal is not None:
                run.turn.set_attribute("agentfsm.refusal.kind", refusal.kind)
                run.turn.set_attribute("agentfsm.refusal.message", refusal.message)
            if event.usage is not None:
                run.turn.set_attribute("gen_ai.usage.input_tokens", event.usage.input_tokens)
                run.turn.set_attribute("gen_ai.usage.output_tokens", event.usage.output_tokens)
        elif isinstance(event, m.ModelFailed):
            if run.turn is not None:  # the attempt ends here; a retry is a turn of its own
                run.turn.set_attribute("error.type", event.error.kind)
                run.turn.set_status(Status(StatusCode.ERROR, event.error.message))
                if event.usage is not None:
                    run.turn.set_attribute("gen_ai.usage.input_tokens", event.usage.input_tokens)
                    run.turn.set_attribute("gen_ai.usage.output_tokens", event.usage.output_tokens)
            self._end_turn(run, at)
        elif isinstance(event, m.ToolRequested):
            run.names[event.action_id] = event.tool
        elif isinstance(event, m.ToolStarted):
            self._start_tool(run, event, at)
        elif isinstance(event, m.ToolCompleted | m.ToolFailed | m.ToolOutcomeUnknown):
            self._end_tool(run, event, at)
        elif isinstance(event, _TERMINAL):
            self._end_run(run, event, at)
            del self._runs[event.run_id]
        else:
            run.run.add_event(event.type, _event_attributes(event), timestamp=at)

    def _start_tool(self, run: _Open, event: m.ToolStarted, at: int) -> None:
        parent = run.turn if run.turn is not None else run.run
        span = run.tools.get(event.action_id)
        if span is not None:  # a retry: the attempt before it has ended
            span.end(end_time=at)
        tool = run.names.get(event.action_id, "tool")
        run.tools[event.action_id] = span = self.tracer.start_span(
            f"execute_tool {tool}",
            context=trace.set_span_in_context(parent),
            start_time=at,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": event.action_id,
                "agentfsm.attempt": event.attempt,
            },
        )
        self._calls[f"{event.run_id}/{event.action_id}"] = span.get_span_context()
        if len(self._calls) > _KEPT_CALLS:
            self._calls.popitem(last=False)

    def _end_tool(self, run: _Open, event: Any, at: int) -> None:
        span = run.tools.pop(event.action_id, None)
        if span is None:
            return
        if isinstance(event, m.ToolFailed):
            span.set_attribute("error.type", event.error.kind)
            span.set_status(Status(StatusCode.ERROR, event.error.message))
        elif isinstance(event, m.ToolOutcomeUnknown):
            span.set_attribute("error.type", "outcome_unknown")
            span.set_status(Status(StatusCode.ERROR, event.reason or "outcome unknown"))
        span.end(end_time=at)

    def _end_turn(self, run: _Open, at: int) -> None:
        for span in run.tools.values():
            span.end(end_time=at)
        run.tools.clear()
        if run.turn is not None:
            run.turn.end(end_time=at)
            run.turn = None

    def _end_run(self, run: _Open, event: Event, at: int) -> None:
        self._end_turn(run, at)
        span = run.run
        span.set_attribute("agentfsm.turns", run.turns)
        if isinstance(event, m.RunCompleted):
            span.set_attribute("agentfsm.status", "completed")
            span.set_status(Status(StatusCode.OK))
        elif isinstance(event, m.RunFailed):
            span.set_attribute("agentfsm.status", "failed")
            span.set_attribute("error.type", event.error.kind)
            span.set_status(Status(StatusCode.ERROR, event.error.message))
        elif isinstance(event, m.RunTerminated):
            span.set_attribute("agentfsm.status", "terminated")
            span.set_attribute("agentfsm.stop_reason", event.stop_reason)
            span.set_attribute("error.type", event.stop_reason)
            detail = f"{event.stop_reason}: {event.detail}" if event.detail else event.stop_reason
            span.set_status(Status(StatusCode.ERROR, detail))
        else:
            span.set_attribute("agentfsm.status", "cancelled")
        span.end(end_time=at)


def _event_attributes(event: Event) -> dict[str, Any]:
    """The scalar fields of an event worth showing on a span event."""
    out: dict[str, Any] = {"agentfsm.sequence": event.sequence}
    for name in ("to_agent", "action_id", "tool", "approver", "reason", "requested_by"):
        value = getattr(event, name, None)
        if value is not None:
            out[f"agentfsm.{name}"] = value
    return out


def trace_run(tracer: Tracer, events: Iterable[Event]) -> None:
    """Spans for a whole stored log (one or several runs, each in order)."""
    spans = RunSpans(tracer)
    for event in events:
        spans.feed(event)
