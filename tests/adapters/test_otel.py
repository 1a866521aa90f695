"""OpenTelemetry spans for a run: run, turn and tool spans with GenAI attributes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentfsm.adapters.otel import RunSpans, trace_run
from agentfsm.events import LogBuilder


def exported(events: Any) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_run(provider.get_tracer("agentfsm"), events)
    return list(exporter.get_finished_spans())


def tool_run(end: str, **fields: Any) -> LogBuilder:
    log = LogBuilder("r1")
    log.add("run.started", agent="support")
    log.add("model.started")
    log.add(
        "model.completed",
        decision="tool_calls",
        tool_calls=[{"action_id": "a1", "tool": "search", "arguments": {"q": "x"}}],
        usage={"input_tokens": 900, "output_tokens": 80},
    )
    log.add("tool.requested", action_id="a1", tool="search", arguments={"q": "x"})
    log.add("tool.started", action_id="a1")
    log.add("tool.failed", action_id="a1", error={"kind": "timeout", "message": "took 30 s"})
    log.add("model.started")
    if end == "run.completed":
        log.add("model.completed", decision="final", output="none found")
    log.add(end, **fields)
    return log


def test_a_run_has_one_span_per_run_turn_and_tool_action() -> None:
    """Two turns and one tool call: a run span, two chat spans, one execute_tool span under turn 1."""
    spans = {
        s.name + str(s.attributes.get("agentfsm.turn", "")): s
        for s in exported(tool_run("run.completed").events)
    }
    assert sorted(spans) == ["chat1", "chat2", "execute_tool search", "invoke_agent support"]
    run, turn1 = spans["invoke_agent support"], spans["chat1"]
    tool = spans["execute_tool search"]
    assert turn1.parent is not None
    assert turn1.parent.span_id == run.context.span_id
    assert tool.parent is not None
    assert tool.parent.span_id == turn1.context.span_id
    assert dict(turn1.attributes) == {
        "gen_ai.operation.name": "chat",
        "agentfsm.turn": 1,
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 900,
        "gen_ai.usage.output_tokens": 80,
    }
    assert (tool.attributes["gen_ai.tool.name"], tool.attributes["gen_ai.tool.call.id"]) == (
        "search",
        "a1",
    )
    assert (tool.status.status_code, tool.status.description) == (StatusCode.ERROR, "took 30 s")
    assert tool.attributes["error.type"] == "timeout"
    assert run.status.status_code == StatusCode.OK
    assert (run.attributes["agentfsm.status"], run.attributes["agentfsm.turns"]) == ("completed", 2)
    assert run.attributes["gen_ai.conversation.id"] == "r1"


def test_a_failed_attempt_ends_its_chat_span_with_an_error_and_the_retry_is_the_next() -> None:
    """`model.failed` (an attempt the SDK's client retried) ends its turn's span with ERROR
    and `error.type`, at the failure's time; the retry's `model.started` is a span of its own."""
    log = LogBuilder("r1")
    log.add("run.started", agent="support")
    log.add("model.started")
    error = {"kind": "http_500", "message": "HTTP 500 from POST /v1/responses", "retryable": True}
    log.add("model.failed", error=error)
    log.add("model.started")
    log.add("model.completed", decision="final", output="ok")
    log.add("run.completed")
    spans = {s.name + str(s.attributes.get("agentfsm.turn", "")): s for s in exported(log.events)}
    failed, retry = spans["chat1"], spans["chat2"]
    assert (failed.status.status_code, failed.status.description) == (
        StatusCode.ERROR,
        "HTTP 500 from POST /v1/responses",
    )
    assert failed.attributes["error.type"] == "http_500"
    assert failed.end_time is not None
    assert retry.start_time is not None
    assert failed.end_time < retry.start_time  # the step clock: 1 s apart
    assert retry.status.status_code == StatusCode.UNSET
    assert spans["invoke_agent support"].attributes["agentfsm.turns"] == 2


def test_span_times_are_the_events_times() -> None:
    """The run span starts at run.started and ends at the terminal event (step clock: 1 s apart)."""
    log = tool_run("run.completed")
    run = next(s for s in exported(log.events) if s.name.startswith("invoke_agent"))
    assert run.end_time - run.start_time == 8 * 1_000_000_000


def test_a_guard_stop_puts_the_stop_reason_and_error_status_on_the_run_span() -> None:
    """run.terminated: status ERROR with 'budget: detail', agentfsm.stop_reason 'budget'."""
    log = tool_run(
        "run.terminated", stop_reason="budget", detail="spent 980 + reserved 600 > 1,500 tokens"
    )
    run = next(s for s in exported(log.events) if s.name.startswith("invoke_agent"))
    assert (run.status.status_code, run.status.description) == (
        StatusCode.ERROR,
        "budget: spent 980 + reserved 600 > 1,500 tokens",
    )
    assert (run.attributes["agentfsm.status"], run.attributes["agentfsm.stop_reason"]) == (
        "terminated",
        "budget",
    )


def test_handoffs_and_approvals_are_events_on_the_run_span() -> None:
    """A handoff is a span event with the new agent; nothing is left open after the run ends."""
    log = LogBuilder("r1")
    log.add("run.started", agent="triage")
    log.add("model.started")
    log.add("model.completed", decision="handoff")
    log.add("handoff", to_agent="billing")
    log.add("run.failed", error={"kind": "crash", "message": "boom"})
    run = next(s for s in exported(log.events) if s.name.startswith("invoke_agent"))
    assert [(e.name, dict(e.attributes)) for e in run.events] == [
        ("handoff", {"agentfsm.sequence": 4, "agentfsm.to_agent": "billing"})
    ]
    assert (run.status.status_code, run.status.description) == (StatusCode.ERROR, "boom")


def test_fed_live_a_span_is_exported_when_its_part_of_the_run_ends() -> None:
    """Fed one event at a time: the turn span is exported at the next turn, the run span at the end."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = RunSpans(provider.get_tracer("agentfsm"))
    log = tool_run("run.completed")
    names = []
    for event in log.events:
        spans.feed(event)
        names.append([s.name for s in exporter.get_finished_spans()])
    assert names[5] == ["execute_tool search"]
    assert names[6] == ["execute_tool search", "chat"]
    assert names[-1][-1] == "invoke_agent support"


def test_a_subagent_run_is_a_child_of_the_tool_span_that_started_it() -> None:
    """A stored log with the parent's run before its child's: one trace, child under the call."""
    parent = tool_run("run.completed")  # r1 calls `search` as action a1
    child = LogBuilder("r1/a1")
    child.add("run.started", agent="researcher")
    child.add("model.started")
    child.add("model.completed", decision="final", output="found")
    child.add("run.completed")
    spans = exported([*parent.events, *child.events])
    tool = next(s for s in spans if s.name == "execute_tool search")
    sub = next(s for s in spans if s.name == "invoke_agent researcher")
    assert sub.parent is not None
    assert (sub.parent.span_id, sub.context.trace_id) == (
        tool.context.span_id,
        tool.context.trace_id,
    )
    assert sub.attributes["agentfsm.parent_run_id"] == "r1"


def test_a_run_whose_parent_call_is_unknown_starts_its_own_trace() -> None:
    """A child whose parent was never fed: a root span, still naming its parent run."""
    child = LogBuilder("r9/a1")
    child.add("run.started", agent="researcher")
    child.add("run.cancelled")
    [span] = exported(child.events)
    assert (span.parent, span.attributes["agentfsm.parent_run_id"]) == (None, "r9")
