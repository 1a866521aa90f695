"""Hypothesis strategies for the values inside events: ids, timestamps, payloads, events.

The pieces `legal_runs` dresses its logs with, offered for your own strategies too. Free
fields (results, usage, reasons) shrink to `None` or to small values, so a counterexample
reads like a plain run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from pydantic import JsonValue

from agentfsm.events.codec import make_event
from agentfsm.events.models import EVENT_CLASSES, Event
from agentfsm.names import DecisionKind, StopReason
from agentfsm.names import EventType as E
from agentfsm.testing._runs.candidates import (
    ACTION_EVENTS,
    EPOCH,
    EVENT_ORDER,
    Clock,
    render_timestamp,
)

__all__ = [
    "Calls",
    "Draw",
    "action_ids",
    "arguments",
    "as_strategy",
    "clocks",
    "error_infos",
    "events",
    "free_fields",
    "json_values",
    "payloads",
    "proposed_events",
    "refusals",
    "run_ids",
    "table_refs",
    "timestamps",
    "tool_calls",
    "usages",
]

# -- small values ---------------------------------------------------------------------------

_text = st.text(max_size=8)
_reasons = st.text(min_size=1, max_size=8)
_names = st.sampled_from(("lookup", "search", "get_order", "open_ticket", "send_email"))
_agents = st.sampled_from(("agent_a", "agent_b", "triage", "billing"))
_people = st.sampled_from(("alice@support", "bob@ops", "policy"))
_small_ints = st.integers(-1_000, 1_000)
_costs = st.floats(min_value=0, max_value=10, allow_nan=False, allow_infinity=False)


@functools.cache
def json_values(max_leaves: int = 4) -> st.SearchStrategy[JsonValue]:
    """Small JSON values (null, bools, ints, finite floats, text, lists, objects)."""
    leaves = (
        st.none()
        | st.booleans()
        | _small_ints
        | st.floats(allow_nan=False, allow_infinity=False, width=32)
        | _text
    )
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
        max_leaves=max_leaves,
    )


@functools.cache
def arguments() -> st.SearchStrategy[dict[str, JsonValue]]:
    """A tool call's arguments: a small JSON object."""
    return st.dictionaries(st.sampled_from(("id", "query", "limit", "to", "body")), json_values(3))


@functools.cache
def action_ids() -> st.SearchStrategy[str]:
    """Action ids like `act_1` (they shrink to `act_0`)."""
    return st.integers(0, 999).map(lambda n: f"act_{n}")


@functools.cache
def run_ids() -> st.SearchStrategy[str]:
    """Run ids like `run_1` (they shrink to `run_0`)."""
    return st.integers(0, 9_999).map(lambda n: f"run_{n}")


@functools.cache
def table_refs() -> st.SearchStrategy[dict[str, str]]:
    """`{name, digest}` as `run.started.table` and `run.migrated` record them (the digests
    shrink to all zeros)."""
    return st.fixed_dictionaries(
        {
            "name": st.sampled_from(("agent_run", "support_ticket")),
            "digest": st.text("0123456789abcdef", min_size=64, max_size=64).map(
                lambda hexes: f"sha256:{hexes}"
            ),
        }
    )


def tool_calls(max_calls: int = 3) -> st.SearchStrategy[list[dict[str, Any]]]:
    """A non-empty list of `{action_id, tool, arguments}` with distinct action ids."""

    @st.composite
    def calls(draw: st.DrawFn) -> list[dict[str, Any]]:
        ids = draw(st.lists(action_ids(), min_size=1, max_size=max_calls, unique=True))
        calls: Calls = {}
        return [_call(draw, aid, calls) for aid in ids]

    return calls()


@functools.cache
def error_infos(retryable: bool | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """`{kind, message, retryable}`; `retryable` is drawn unless fixed."""
    flag = st.booleans() if retryable is None else st.just(retryable)
    return st.fixed_dictionaries(
        {
            "kind": st.sampled_from(("timeout", "rate_limited", "bad_request", "tool_error")),
            "message": _text,
            "retryable": flag,
        }
    )


@functools.cache
def usages() -> st.SearchStrategy[dict[str, Any]]:
    """`{input_tokens, output_tokens, cost}` of one model call."""
    return st.fixed_dictionaries(
        {
            "input_tokens": st.integers(0, 10_000),
            "output_tokens": st.integers(0, 2_000),
            "cost": _costs,
        }
    )


@functools.cache
def proposed_events() -> st.SearchStrategy[dict[str, Any]]:
    """`{type, fields}`: an event of a lifecycle's own a call or a decision proposes."""
    return st.fixed_dictionaries(
        {
            "type": st.sampled_from(("ticket.escalated", "loan.documents_requested")),
            "fields": st.dictionaries(st.sampled_from(("to", "documents", "note")), json_values(3)),
        }
    )


@functools.cache
def refusals() -> st.SearchStrategy[dict[str, Any]]:
    """`{kind, message, proposed}` of a refused decision: too many calls, summed up."""

    @st.composite
    def refusal(draw: st.DrawFn) -> dict[str, Any]:
        tools = draw(st.dictionaries(_names, st.integers(1, 1_000), max_size=3))
        calls = sum(tools.values()) + draw(st.integers(0, 1_000))
        return {
            "kind": StopReason.MAX_CALLS_PER_DECISION.value,
            "message": draw(_reasons),
            "proposed": {"decision": DecisionKind.TOOL_CALLS.value, "calls": calls, "tools": tools},
        }

    return refusal()


def timestamps(
    count: int | None = None,
    *,
    start: datetime = EPOCH,
    max_gap: timedelta = timedelta(minutes=5),
) -> st.SearchStrategy[list[str]]:
    """Non-decreasing RFC 3339 timestamps, `count` of them (or 1 to 20), in a drawn offset.

    Gaps between neighbours are whole seconds up to `max_gap` and shrink to zero.
    """
    sizes = st.just(count) if count is not None else st.integers(1, 20)
    gap = int(max_gap.total_seconds())

    @st.composite
    def series(draw: st.DrawFn) -> list[str]:
        n = draw(sizes)
        clock = draw(clocks(start))
        gaps = draw(st.lists(st.integers(0, gap), min_size=n, max_size=n))
        moments, now = [], clock.start
        for g in gaps:
            now += timedelta(seconds=g)
            moments.append(render_timestamp(now, clock.offset, clock.zulu, clock.fraction))
        return moments

    return series()


_OFFSETS = (timedelta(0), timedelta(hours=8), timedelta(hours=-5, minutes=-30))


def clocks(start: datetime = EPOCH) -> st.SearchStrategy[Clock]:
    """Clocks from `start`, each writing its timestamps in one of a few offsets and forms."""
    return st.builds(
        Clock,
        start=st.just(start),
        offset=st.sampled_from(_OFFSETS),
        zulu=st.booleans().map(lambda b: not b),
        fraction=st.booleans(),
    )


def _opt(draw: Draw, strategy: st.SearchStrategy[Any]) -> Any:
    return draw(_optional(strategy))


@functools.cache
def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Cached: building a strategy costs more than drawing from it.
    return st.none() | strategy


# -- the free fields of each event type ----------------------------------------------------

#: The call (tool, arguments) each action id stands for, as drawn so far in one log.
Calls = dict[str, tuple[str, dict[str, Any]]]


#: A draw function: `st.DrawFn` in a composite, or `DataObject.draw` in a state machine.
Draw = Callable[[st.SearchStrategy[Any]], Any]


def _call(draw: Draw, action_id: str, calls: Calls, tool: str | None = None) -> dict[str, Any]:
    """The call for `action_id`: the one drawn before for it, or a new one (of `tool`, the
    agent's tool the walk chose, when given; its arguments drawn)."""
    if action_id not in calls:
        calls[action_id] = (tool or draw(_names), draw(arguments()))
    tool, args = calls[action_id]
    return {"action_id": action_id, "tool": tool, "arguments": args}


def free_fields(
    draw: Draw, event_type: str, base: Mapping[str, Any], calls: Calls
) -> dict[str, Any]:
    """`base` (the structural fields) plus drawn values for every field that is free.

    Calls are drawn once per action id and reused, so a request names exactly the call
    the model proposed (approvals are bound to it).
    """
    t = event_type
    f = dict(base)
    if t == E.RUN_STARTED:
        f["objective"] = _opt(draw, _text)
        f["agent"] = _opt(draw, _agents)
    elif t == E.MODEL_STARTED:
        f["reserved_tokens"] = _opt(draw, st.integers(0, 4_000))
    elif t == E.MODEL_COMPLETED:
        if f.get("tool_calls"):
            f["tool_calls"] = [
                _call(draw, c["action_id"], calls, c.get("tool")) for c in f["tool_calls"]
            ]
        elif f["decision"] == DecisionKind.FINAL:
            f["output"] = draw(json_values())
        elif f["decision"] == DecisionKind.REFUSED and "refusal" not in f:
            f["refusal"] = draw(refusals())
        elif f["decision"] == DecisionKind.EMIT and "emit" not in f:
            f["emit"] = draw(proposed_events())
        f["usage"] = _opt(draw, usages())
    elif t == E.MODEL_FAILED:
        f["error"] = draw(error_infos())
        f["usage"] = _opt(draw, usages())
    elif t == E.HANDOFF:
        f["to_agent"] = draw(_agents)
    elif t in (E.TOOL_REQUESTED, E.APPROVAL_REQUESTED):
        f.update(_call(draw, f["action_id"], calls, f.get("tool")))
    elif t == E.TOOL_COMPLETED:
        if f.get("result") is None:  # a tool's example result (`results=`) stays
            f["result"] = draw(json_values())
        f["cost"] = _opt(draw, _costs)
    elif t == E.TOOL_FAILED:
        f["error"] = draw(error_infos(f["error"]["retryable"] if "error" in f else None))
    elif t in (E.TOOL_OUTCOME_UNKNOWN, E.RUN_CANCEL_REQUESTED, E.APPROVAL_REJECTED):
        f["reason"] = _opt(draw, _text)
        if t == E.APPROVAL_REJECTED:
            f["approver"] = _opt(draw, _people)
        if t == E.RUN_CANCEL_REQUESTED:
            f["requested_by"] = _opt(draw, _people)
    elif t == E.APPROVAL_ACCEPTED:
        f["approver"] = _opt(draw, _people)
    elif t == E.RUN_PAUSED:
        f["reason"] = draw(_text)
    elif t == E.RUN_FAILED:
        f["error"] = draw(error_infos())
    elif t == E.RUN_MIGRATED:
        # Out of a run's context any two references will do; in one, the caller gives them.
        f.setdefault("from_table", draw(table_refs()))
        f.setdefault("to_table", draw(table_refs()))
        f["by"] = draw(_people)
        f["reason"] = draw(_reasons)
    elif t == E.EMIT_REFUSED:
        f["refusal"] = draw(refusals())
    elif t == E.USAGE_REPORTED:
        f["usage"] = draw(usages())
        f["source"] = _opt(draw, _text)
    elif t == E.RUN_FORKED:
        f["from_run"] = draw(run_ids())
        f["from_sequence"] = draw(st.integers(1, 10_000))
        f["by"] = _opt(draw, _people)
        f["reason"] = _opt(draw, _reasons)
    elif t == E.RUN_TERMINATED:
        f["stop_reason"] = draw(st.sampled_from(tuple(StopReason)))
        f["detail"] = _opt(draw, _text)
    return {k: v for k, v in f.items() if v is not None}


def payloads(event_type: str, *, max_calls: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    """The type's own fields (no envelope) of a valid `event_type` event, out of context.

    Action ids are arbitrary here; inside a run, `legal_runs` makes them consistent.
    """
    if event_type not in EVENT_CLASSES:
        known = ", ".join(f"'{t}'" for t in sorted(EVENT_CLASSES))
        raise ValueError(f"unknown event type {event_type!r}; expected one of {known}")

    @st.composite
    def fields(draw: st.DrawFn) -> dict[str, Any]:
        base: dict[str, Any] = {}
        if event_type in ACTION_EVENTS or event_type == E.EMIT_REFUSED:
            base["action_id"] = draw(action_ids())
        if event_type == E.TOOL_STARTED:
            base["attempt"] = draw(st.integers(1, 3))
        if event_type == E.MODEL_COMPLETED:
            base["decision"] = draw(st.sampled_from(tuple(DecisionKind)))
            if base["decision"] == DecisionKind.TOOL_CALLS:
                ids = draw(st.lists(action_ids(), min_size=1, max_size=max_calls, unique=True))
                base["tool_calls"] = [{"action_id": i} for i in ids]
        return free_fields(draw, event_type, base, {})

    return fields()


def events(
    event_type: str | None = None,
    *,
    run_id: str | st.SearchStrategy[str] | None = None,
    sequence: int | st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[Event]:
    """Single valid events of `event_type` (or of any type), out of context."""
    types = st.sampled_from(EVENT_ORDER) if event_type is None else st.just(event_type)
    runs = as_strategy(run_id, run_ids())
    sequences = as_strategy(sequence, st.integers(1, 1_000))

    @st.composite
    def one(draw: st.DrawFn) -> Event:
        t = draw(types)
        return make_event(
            t,
            run_id=draw(runs),
            sequence=draw(sequences),
            occurred_at=draw(timestamps(1))[0],
            **draw(payloads(t)),
        )

    return one()


def as_strategy(value: Any, default: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A knob given as a value or a strategy, as a strategy: `default` when it is None."""
    if value is None:
        return default
    if isinstance(value, st.SearchStrategy):
        return value
    return st.just(value)
