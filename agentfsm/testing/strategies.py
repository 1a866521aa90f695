"""Hypothesis strategies built from a transition table: legal runs, illegal steps, payloads.

`legal_runs(table)` walks the table one event at a time. At each step it builds the
well-formed events that could come next from the current run record (the next model call,
a result for each action in flight, a decision for each pending approval, ...), keeps the
ones the reducer accepts, and lets Hypothesis choose. The reducer is the judge, so the same
strategy serves the default table and any table derived from it.

Shrinking is part of the design: the length is drawn first (it shrinks towards
`min_events`), candidates are offered in a fixed "simplest first" order, and the free fields
(results, usage, reasons) shrink to `None` or to small values. A failing property is
reported with a short log that reads like a plain run.

Example:
    >>> from hypothesis import given
    >>> from agentfsm.reducers import DEFAULT_REDUCER
    >>> @given(legal_runs())
    ... def test_replay_accepts(events):
    ...     DEFAULT_REDUCER.replay(events)
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs
from hypothesis import reject
from hypothesis import strategies as st
from pydantic import JsonValue

from agentfsm.errors import (
    IllegalTransitionError,
    LifecycleError,
    RunMismatchError,
    SequenceError,
)
from agentfsm.events.codec import make_event
from agentfsm.events.models import EVENT_CLASSES, Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import DecisionKind, StopReason
from agentfsm.names import EventType as E
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._candidates import (
    ACTION_EVENTS,
    EPOCH,
    EVENT_ORDER,
    FEATURES,
    Candidate,
    Clock,
    Next,
    accepted,
    fresh_ids,
    plausible,
    render_timestamp,
    rule_breaking,
    try_next,
)

__all__ = [
    "FEATURES",
    "ILLEGAL_KINDS",
    "IllegalStep",
    "arguments",
    "error_infos",
    "events",
    "illegal_steps",
    "json_values",
    "legal_runs",
    "payloads",
    "run_ids",
    "timestamps",
    "tool_calls",
    "usages",
]

#: The kinds of illegal step `illegal_steps` can produce.
#: `table`: the table has no edge for the event in the reached state;
#: `rule`: the table has an edge but a condition or a ledger rule refuses the event;
#: `envelope`: a wrong sequence number or run id.
ILLEGAL_KINDS = frozenset({"table", "rule", "envelope"})

TableLike = TransitionTable | Reducer

# -- small values ---------------------------------------------------------------------------

_text = st.text(max_size=8)
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
        clock = draw(_clocks(start))
        gaps = draw(st.lists(st.integers(0, gap), min_size=n, max_size=n))
        moments, now = [], clock.start
        for g in gaps:
            now += timedelta(seconds=g)
            moments.append(render_timestamp(now, clock.offset, clock.zulu, clock.fraction))
        return moments

    return series()


_OFFSETS = (timedelta(0), timedelta(hours=8), timedelta(hours=-5, minutes=-30))


def _clocks(start: datetime = EPOCH) -> st.SearchStrategy[Clock]:
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


def _call(draw: Draw, action_id: str, calls: Calls) -> dict[str, Any]:
    """The call for `action_id`: the one drawn before for it, or a new one."""
    if action_id not in calls:
        calls[action_id] = (draw(_names), draw(arguments()))
    tool, args = calls[action_id]
    return {"action_id": action_id, "tool": tool, "arguments": args}


def _free_fields(
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
            f["tool_calls"] = [_call(draw, c["action_id"], calls) for c in f["tool_calls"]]
        elif f["decision"] == DecisionKind.FINAL:
            f["output"] = draw(json_values())
        f["usage"] = _opt(draw, usages())
    elif t == E.HANDOFF:
        f["to_agent"] = draw(_agents)
    elif t in (E.TOOL_REQUESTED, E.APPROVAL_REQUESTED):
        f.update(_call(draw, f["action_id"], calls))
    elif t == E.TOOL_COMPLETED:
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
        if event_type in ACTION_EVENTS:
            base["action_id"] = draw(action_ids())
        if event_type == E.TOOL_STARTED:
            base["attempt"] = draw(st.integers(1, 3))
        if event_type == E.MODEL_COMPLETED:
            base["decision"] = draw(st.sampled_from(tuple(DecisionKind)))
            if base["decision"] == DecisionKind.TOOL_CALLS:
                ids = draw(st.lists(action_ids(), min_size=1, max_size=max_calls, unique=True))
                base["tool_calls"] = [{"action_id": i} for i in ids]
        return _free_fields(draw, event_type, base, {})

    return fields()


def events(
    event_type: str | None = None,
    *,
    run_id: str | st.SearchStrategy[str] | None = None,
    sequence: int | st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[Event]:
    """Single valid events of `event_type` (or of any type), out of context."""
    types = st.sampled_from(EVENT_ORDER) if event_type is None else st.just(event_type)
    runs = _as_strategy(run_id, run_ids())
    sequences = _as_strategy(sequence, st.integers(1, 1_000))

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


def _as_strategy(value: Any, default: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    if value is None:
        return default
    if isinstance(value, st.SearchStrategy):
        return value
    return st.just(value)


# -- legal runs -----------------------------------------------------------------------------

#: Events a feature *starts*. With the feature off, no candidate of the type is offered
#: (follow-ups such as `run.resumed` or `approval.accepted` stay on, or a run could be stuck).
_INITIATED_BY: dict[str, str] = {
    E.HANDOFF: "handoffs",
    E.RUN_PAUSED: "pauses",
    E.RUN_CANCEL_REQUESTED: "cancellation",
    E.RUN_FAILED: "run_failures",
    E.RUN_TERMINATED: "terminations",
    E.APPROVAL_REQUESTED: "approvals",
    E.TOOL_FAILED: "tool_failures",
    E.TOOL_OUTCOME_UNKNOWN: "outcome_unknown",
}

#: How often the walk picks each kind of event when several are possible (default 32). The
#: everyday path (model calls, tool calls, results, completing after a final answer) comes
#: up more often than the detours; failures, terminations and cancellations, which end the
#: interesting part of a run, come up rarely.
_WEIGHT: dict[str, int] = {
    E.MODEL_STARTED: 128,
    E.MODEL_COMPLETED: 128,
    E.TOOL_REQUESTED: 96,
    E.TOOL_STARTED: 96,
    E.TOOL_COMPLETED: 96,
    E.RUN_RESUMED: 96,
    E.RUN_COMPLETED: 96,
    E.RUN_CANCELLED: 96,
    E.APPROVAL_ACCEPTED: 64,
    E.APPROVAL_REQUESTED: 48,
    E.APPROVAL_REJECTED: 48,
    E.TOOL_FAILED: 48,
    E.HANDOFF: 24,
    E.RUN_PAUSED: 16,
    E.RUN_CANCEL_REQUESTED: 4,
    E.RUN_FAILED: 2,
    E.RUN_TERMINATED: 2,
    E.TOOL_REQUESTED + " (direct)": 16,
    E.APPROVAL_REQUESTED + " (direct)": 16,
}

#: When ending a run, how much each event type moves it towards the end (lower first):
#: settle what is in flight, decide what waits, then let the model give its final answer.
_ENDING_RANK: dict[str, int] = {
    E.TOOL_COMPLETED: 0,
    E.APPROVAL_REJECTED: 1,
    E.TOOL_REQUESTED: 2,
    E.RUN_RESUMED: 3,
    E.MODEL_COMPLETED: 4,
    E.MODEL_STARTED: 5,
    E.TOOL_STARTED: 6,
    E.APPROVAL_ACCEPTED: 7,
    E.TOOL_FAILED: 8,
    E.TOOL_OUTCOME_UNKNOWN: 9,
}
_ABRUPT = (E.RUN_FAILED, E.RUN_TERMINATED)

#: Whether the walk goes on: 0 stops it (the simplest choice, so shrinking shortens logs);
#: otherwise it goes on 31 times in 32.
_GO_ON = st.integers(0, 31)
#: Which candidate of the chosen kind, and how many tool calls a decision makes.
_PICK = st.integers(0, 255)
_CALLS = st.integers(0, 7)


#: How `_finish` ends a run: (gracefully?, which ending).
_ENDING = st.tuples(st.booleans(), st.integers(0, 255))


@attrs.frozen
class _Walk:
    """What one `legal_runs` strategy needs, computed once when the strategy is built."""

    reducer: Reducer
    features: frozenset[str]
    max_calls: int
    distance: Mapping[str, int]  # fewest edges from each state to a terminal one
    graceful_distance: Mapping[str, int]  # the same without run.failed / run.terminated

    @property
    def table(self) -> TransitionTable:
        return self.reducer.table

    def options(self, record: RunRecord, clock: Clock) -> list[Next]:
        return accepted(self.reducer, record, clock.at(record.version + 1), self.features)


@attrs.frozen
class _Run:
    run_id: str
    clock: Clock
    events: tuple[Event, ...]
    record: RunRecord


def _distances(table: TransitionTable, features: frozenset[str]) -> dict[str, int]:
    """Fewest edges from each state to a terminal state, using only enabled event types."""
    off = {t for t, feature in _INITIATED_BY.items() if feature not in features}
    preds: dict[str, set[str]] = {s: set() for s in table.state_names}
    for t in table.transitions:
        if t.event not in off:
            preds[t.target].add(t.source)
    distance = dict.fromkeys(table.terminal_states, 0)
    queue = deque(table.terminal_states)
    while queue:
        state = queue.popleft()
        for p in preds[state]:
            if p not in distance:
                distance[p] = distance[state] + 1
                queue.append(p)
    return distance


def _resolve(table: TableLike) -> Reducer:
    return table if isinstance(table, Reducer) else Reducer(table)


def _make_walk(table: TableLike, features: Iterable[str] | None, max_calls: int) -> _Walk:
    reducer = _resolve(table)
    enabled = FEATURES if features is None else frozenset(features)
    unknown = sorted(enabled - FEATURES)
    if unknown:
        raise ValueError(f"unknown features {unknown}; known: {sorted(FEATURES)}")
    graceful = enabled - {"run_failures", "terminations"}
    return _Walk(
        reducer,
        enabled,
        max_calls if "batches" in enabled else 1,
        _distances(reducer.table, enabled),
        _distances(reducer.table, graceful),
    )


def _skeleton(
    draw: st.DrawFn,
    walk: _Walk,
    run_id: st.SearchStrategy[str],
    min_events: int,
    max_events: int,
    finished: bool | None,
) -> _Run:
    """A legal log with only the structural fields: which events, in which order.

    Each step is the same few choices (go on?, which kind, which candidate, how many
    calls), kinds are named by a stable place (see `_KINDS`), and the free fields are drawn
    afterwards (`_dress`): so the shrinker can delete whole steps without garbling the
    choices of the steps after them.
    """
    table = walk.table
    rid = draw(run_id)
    clock = draw(_clocks())
    record = walk.reducer.initial(rid)
    log: list[Event] = []
    while len(log) < max_events and not table.is_terminal(record.status):
        if draw(_GO_ON) == 0 and len(log) >= min_events:
            break
        may_end = finished is not False and len(log) + 1 >= min_events
        groups = _Groups(walk, record, clock, log, may_end)
        if not groups.any():
            break  # nothing worth doing is possible: the walk is over
        group = groups.of(_draw_kind(draw, groups))
        chosen = group[draw(_PICK) % len(group)]
        chosen = _widen(walk, record, chosen, 1 + draw(_CALLS) % walk.max_calls)
        log.append(chosen.event)
        record = chosen.record
    if finished and not table.is_terminal(record.status):
        graceful, which = draw(_ENDING)
        record = _finish(walk, clock, record, log, graceful, which)
    if len(log) < min_events:
        reject()  # the walk got stuck early: rare, and only with few features enabled
    return _Run(rid, clock, tuple(log), record)


#: Every kind of event the walk can choose, each repeated by its weight. A kind is drawn by
#: its place in this list, retried while the kind is not possible in the state: Hypothesis records
#: the place, so when the shrinker deletes a step the later steps keep meaning what they
#: meant (this is how its stateful testing chooses rules under preconditions). Calls the
#: model never proposed (direct requests) are a kind of their own.
_KINDS: tuple[str, ...] = (
    *EVENT_ORDER,
    E.TOOL_REQUESTED + " (direct)",
    E.APPROVAL_REQUESTED + " (direct)",
)
_KIND = st.sampled_from([k for k in _KINDS for _ in range(_WEIGHT.get(k, 32))])


class _Groups:
    """The accepted candidates of each kind in one state, built when first asked for.

    Events that end the run are candidates only if `may_end`. The walk asks for
    cancellation at most once: asking again is legal but adds nothing.
    """

    def __init__(
        self, walk: _Walk, record: RunRecord, clock: Clock, log: list[Event], may_end: bool
    ) -> None:
        self._walk, self._record, self._clock, self._may_end = walk, record, clock, may_end
        self._cancelled = any(e.type == "run.cancel_requested" for e in log)
        self._groups: dict[str, list[Next]] = {}

    def of(self, kind: str) -> list[Next]:
        if kind not in self._groups:
            self._groups[kind] = self._build(kind)
        return self._groups[kind]

    def has(self, kind: str) -> bool:
        return bool(self.of(kind))

    def any(self) -> bool:
        return any(self.has(k) for k in _KINDS)

    def _build(self, kind: str) -> list[Next]:
        event_type, _, direct = kind.partition(" ")
        if event_type == E.RUN_CANCEL_REQUESTED and self._cancelled:
            return []
        walk, record = self._walk, self._record
        at = self._clock.at(record.version + 1)
        return [
            n
            for n in accepted(walk.reducer, record, at, walk.features, (event_type,))
            if ("direct_requests" in n.candidate.needs) == bool(direct)
            and (self._may_end or not walk.table.is_terminal(n.record.status))
        ]


def _draw_kind(draw: st.DrawFn, groups: _Groups) -> str:
    """A kind of event possible in the state, by weight.

    Like Hypothesis' own filtered `sampled_from`: a few draws from all kinds (each names a
    kind by its place, which keeps steps stable under shrinking), then one weighted draw
    among the possible kinds, so a state where little is possible stays cheap.
    """
    for _ in range(3):
        kind = draw(_KIND)
        if groups.has(kind):
            return kind
    possible = [k for k in _KINDS if groups.has(k)]
    ticket = draw(st.integers(0, sum(_WEIGHT.get(k, 32) for k in possible) - 1))
    for kind in possible:
        ticket -= _WEIGHT.get(kind, 32)
        if ticket < 0:
            return kind
    raise AssertionError("unreachable: the ticket is below the total weight")


def _widen(walk: _Walk, record: RunRecord, chosen: Next, calls: int) -> Next:
    """A tool-call decision with `calls` calls instead of one, if the reducer agrees."""
    fields = chosen.candidate.fields
    if calls == 1 or not fields.get("tool_calls"):
        return chosen
    ids = fresh_ids(record, calls)
    cand = attrs.evolve(
        chosen.candidate,
        fields={**fields, "tool_calls": [{**fields["tool_calls"][0], "action_id": i} for i in ids]},
    )
    event = cand.event(record, chosen.event.occurred_at)
    after = try_next(walk.reducer, record, event)
    return Next(cand, event, after) if isinstance(after, RunRecord) else chosen


def _finish(
    walk: _Walk, clock: Clock, record: RunRecord, log: list[Event], graceful: bool, which: int
) -> RunRecord:
    """Append events until the run is in a terminal state, by the shortest route in sight.

    An abrupt ending takes any ending at hand, a failure or a guard's termination
    included; a graceful one settles what is in flight and ends without `run.failed` or
    `run.terminated` (e.g. by completing), unless the table or the features leave no other
    way. `which` picks among the endings available at the last step.
    """
    table = walk.table
    for _ in range(12 + 4 * len(record.actions)):
        options = [
            n
            for n in walk.options(record, clock)
            if "direct_requests" not in n.candidate.needs
            and n.candidate.fields.get("decision", DecisionKind.FINAL) == DecisionKind.FINAL
        ]
        if graceful and any(n.candidate.type not in _ABRUPT for n in options):
            options = [n for n in options if n.candidate.type not in _ABRUPT]
        ending = [n for n in options if table.is_terminal(n.record.status)]
        if ending:
            nxt = ending[which % len(ending)]
        elif options:
            distance = walk.graceful_distance if graceful else walk.distance
            far = len(table.states) + 1
            nxt = min(
                options,
                key=lambda n: (
                    distance.get(n.record.status, far),
                    _ENDING_RANK.get(n.candidate.type, 99),
                ),
            )
        else:
            break
        log.append(nxt.event)
        record = nxt.record
        if table.is_terminal(record.status):
            return record
    return reject()  # no way to a terminal state with the enabled features


def _dress(draw: st.DrawFn, walk: _Walk, run: _Run) -> _Run:
    """The skeleton with its free fields drawn: results, usage, reasons, the calls' tools.

    Each dressed event is kept only if the reducer still accepts it (a user's condition may
    read a free field); if neither the dressed nor the plain event fits, the plain log is
    returned as it is.
    """
    calls: Calls = {}
    record = walk.reducer.initial(run.run_id)
    out: list[Event] = []
    for plain in run.events:
        base = {
            k: v
            for k, v in plain.model_dump(exclude_none=True).items()
            if k not in ("run_id", "sequence", "type", "occurred_at")
        }
        fields = _free_fields(draw, plain.type, base, calls)
        event = make_event(
            plain.type,
            run_id=plain.run_id,
            sequence=plain.sequence,
            occurred_at=plain.occurred_at,
            **fields,
        )
        for candidate in (event, plain):
            after = try_next(walk.reducer, record, candidate)
            if isinstance(after, RunRecord):
                out.append(candidate)
                record = after
                break
        else:
            return run
    return _Run(run.run_id, run.clock, tuple(out), record)


def legal_runs(
    table: TableLike = DEFAULT_TABLE,
    *,
    run_id: str | st.SearchStrategy[str] | None = None,
    min_events: int = 1,
    max_events: int = 30,
    features: Iterable[str] | None = None,
    finished: bool | None = None,
    max_calls: int = 3,
) -> st.SearchStrategy[list[Event]]:
    """Whole event logs of one run that `Reducer(table).replay` accepts.

    Logs have contiguous sequences from 1, one run id, timestamps one second apart (in a
    drawn UTC offset), action ids that the ledger knows (`act_1`, `act_2`, ...), batches of
    several tool calls, approvals accepted and rejected, retries after retryable failures,
    outcomes unknown, pauses, handoffs, cancellations with late results, and endings by
    completion, failure, cancellation or a guard's termination.

    Args:
        table: the transition table, or a `Reducer` (to use its table and its checks).
        run_id: a fixed run id or a strategy of them (default: `run_0`, `run_1`, ...).
        min_events: the fewest events the walk takes (at least 1).
        max_events: the most events the walk takes; when the run is then ended (see
            `finished`), the few events that settle and end it come on top.
        features: which of `FEATURES` may appear (default: all). Turning one off removes
            the events that *start* it; e.g. without `"approvals"` no `approval.requested`.
        finished: `True`: every log ends in a terminal state; `False`: none does;
            `None`: either.
        max_calls: the most tool calls in one model decision (with the `batches` feature).
    """
    if min_events < 1:
        raise ValueError(f"min_events must be at least 1, got {min_events}")
    if max_events < min_events:
        raise ValueError(f"max_events ({max_events}) is less than min_events ({min_events})")
    if max_calls < 1:
        raise ValueError(f"max_calls must be at least 1, got {max_calls}")
    walk = _make_walk(table, features, max_calls)
    runs = _as_strategy(run_id, run_ids())

    @st.composite
    def logs(draw: st.DrawFn) -> list[Event]:
        skeleton = _skeleton(draw, walk, runs, min_events, max_events, finished)
        return list(_dress(draw, walk, skeleton).events)

    return logs()


# -- illegal steps --------------------------------------------------------------------------


@attrs.frozen(eq=False)
class IllegalStep:
    """A legal prefix and one well-formed event that the reducer refuses after it.

    Attributes:
        prefix: the legal events before the illegal one (possibly none).
        event: the refused event, numbered as the next event of the run.
        record: the record the prefix folds to (the run's initial record if it is empty).
        error: what the reducer raised for `event`.
        kind: one of `ILLEGAL_KINDS`.
    """

    prefix: tuple[Event, ...]
    event: Event
    record: RunRecord
    error: LifecycleError
    kind: str

    @property
    def events(self) -> list[Event]:
        """The prefix followed by the illegal event: a whole log that must be refused."""
        return [*self.prefix, self.event]


def illegal_kind(error: LifecycleError) -> str:
    """Classify a refusal as one of `ILLEGAL_KINDS`."""
    if isinstance(error, SequenceError | RunMismatchError):
        return "envelope"
    if isinstance(error, IllegalTransitionError) and not error.failed_conditions:
        return "table"
    return "rule"


def illegal_steps(
    table: TableLike = DEFAULT_TABLE,
    *,
    run_id: str | st.SearchStrategy[str] | None = None,
    max_prefix: int = 20,
    features: Iterable[str] | None = None,
    kinds: Iterable[str] = ("table", "rule"),
) -> st.SearchStrategy[IllegalStep]:
    """A legal prefix plus one well-formed event that the reducer refuses in the reached state.

    Use it to check that *your* code refuses what the table forbids: events the table has
    no edge for (`table`), and events it has an edge for but a condition or a ledger rule
    refuses — an unknown action id, a changed call, an attempt out of order, a result for
    an action not in flight (`rule`). Add `"envelope"` to `kinds` for sequence gaps,
    repeats and foreign run ids.

    Args:
        table: the transition table, or a `Reducer`.
        run_id: a fixed run id or a strategy of them.
        max_prefix: the most events in the legal prefix.
        features: which of `FEATURES` the prefix may show.
        kinds: which of `ILLEGAL_KINDS` to produce.
    """
    wanted = frozenset(kinds)
    unknown = sorted(wanted - ILLEGAL_KINDS)
    if unknown or not wanted:
        raise ValueError(f"kinds must be a non-empty subset of {sorted(ILLEGAL_KINDS)}")
    walk = _make_walk(table, features, 3)
    runs = _as_strategy(run_id, run_ids())

    @st.composite
    def step(draw: st.DrawFn) -> IllegalStep:
        run = _dress(draw, walk, _skeleton(draw, walk, runs, 0, max_prefix, None))
        options = _refused(walk.reducer, run.record, run.clock.at(run.record.version + 1), wanted)
        if not options:
            reject()  # nothing of the wanted kinds is refused here (possible in odd tables)
        by_kind: dict[str, list[tuple[Event, LifecycleError]]] = {}
        for option in options:
            by_kind.setdefault(illegal_kind(option[1]), []).append(option)
        kind = draw(st.sampled_from(sorted(by_kind)))
        event, error = draw(st.sampled_from(by_kind[kind]))
        return IllegalStep(run.events, event, run.record, error, kind)

    return step()


def _refused(
    reducer: Reducer, record: RunRecord, occurred_at: str, kinds: frozenset[str]
) -> list[tuple[Event, LifecycleError]]:
    """Every candidate event the reducer refuses with an error of one of `kinds`."""
    seen: set[str] = set()
    out: list[tuple[Event, LifecycleError]] = []
    for t in EVENT_ORDER:
        cands: list[Candidate] = plausible(record, t) + rule_breaking(record, t)
        for cand in cands:
            event = cand.event(record, occurred_at)
            variants = [event]
            if "envelope" in kinds:
                variants += _envelope_variants(event, record)
            for ev in variants:
                key = ev.model_dump_json()
                if key in seen:
                    continue
                seen.add(key)
                result = try_next(reducer, record, ev)
                if isinstance(result, LifecycleError) and illegal_kind(result) in kinds:
                    out.append((ev, result))
    return out


def _envelope_variants(event: Event, record: RunRecord) -> list[Event]:
    gap = event.model_copy(update={"sequence": record.version + 2})
    other = event.model_copy(update={"run_id": record.run_id + "_other"})
    out = [gap, other]
    if record.version:
        out.append(event.model_copy(update={"sequence": record.version}))
    return out
