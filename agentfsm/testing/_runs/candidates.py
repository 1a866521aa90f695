"""Candidate next events for a run record: what a run could do next, legal or not.

The strategies, the stateful machine and the differential tests all ask one question:
"from this record, which well-formed events could come next?" A candidate carries only the
*structural* fields that decide whether the reducer accepts it (which action, which attempt,
which decision); the strategies add the free fields (results, usage, reasons) afterwards.

Candidates do not consult the table: the reducer is the judge. That is what lets every
strategy work for derived tables too: whatever a table allows, the reducer accepts, and
whatever it forbids, the reducer refuses.

Only time is the table's: an event on a timed edge (`Transition(after=...)`) is legal once
the run has stood in its state that long, so such a candidate is also tried at the moment
the edge falls due (`times_for`), and the events after it follow from there (`Clock.next`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs

from agentfsm.errors import LifecycleError
from agentfsm.events.codec import parse_event
from agentfsm.events.models import EVENT_CLASSES, Event, parse_timestamp
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import RESOLVED
from agentfsm.names import ActionStatus as A
from agentfsm.names import EventType as E
from agentfsm.record import Action, RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.custom import variants
from agentfsm.testing._runs.tools import DEFAULT_TOOLS, Tools

#: Every optional behaviour a generated run may show. `legal_runs(features=...)` picks some.
FEATURES = frozenset(
    {
        "approvals",
        "batches",
        "cancellation",
        "direct_requests",
        "emits",
        "handoffs",
        "outcome_unknown",
        "pauses",
        "refusals",
        "retries",
        "run_failures",
        "terminations",
        "tool_failures",
        "tools",
    }
)

#: Event types from "simplest" to most involved. Candidates are offered in this order, and
#: Hypothesis shrinks a choice towards the first one, so counterexamples read like the
#: plain path of a run.
EVENT_ORDER: tuple[str, ...] = (
    E.RUN_STARTED,
    E.MODEL_STARTED,
    E.MODEL_COMPLETED,
    E.TOOL_REQUESTED,
    E.TOOL_STARTED,
    E.TOOL_COMPLETED,
    E.RUN_COMPLETED,
    E.APPROVAL_REQUESTED,
    E.APPROVAL_ACCEPTED,
    E.APPROVAL_REJECTED,
    E.TOOL_FAILED,
    E.TOOL_OUTCOME_UNKNOWN,
    E.HANDOFF,
    E.RUN_PAUSED,
    E.RUN_RESUMED,
    E.RUN_CANCEL_REQUESTED,
    E.RUN_CANCELLED,
    E.RUN_FAILED,
    E.RUN_TERMINATED,
    E.EMIT_REFUSED,
)

#: Event types whose payload names an action of the ledger.
ACTION_EVENTS = frozenset(
    {
        E.TOOL_REQUESTED,
        E.TOOL_STARTED,
        E.TOOL_COMPLETED,
        E.TOOL_FAILED,
        E.TOOL_OUTCOME_UNKNOWN,
        E.APPROVAL_REQUESTED,
        E.APPROVAL_ACCEPTED,
        E.APPROVAL_REJECTED,
    }
)

_RESULTS = (E.TOOL_COMPLETED, E.TOOL_FAILED, E.TOOL_OUTCOME_UNKNOWN)
_RESULT_FEATURE: dict[str, str] = {
    E.TOOL_FAILED: "tool_failures",
    E.TOOL_OUTCOME_UNKNOWN: "outcome_unknown",
}
_IN_FLIGHT = (A.REQUESTED, A.STARTED)
_NONE: frozenset[str] = frozenset()
_TOOL_ERROR = {"kind": "tool_error", "message": "the tool failed", "retryable": False}
_RETRYABLE_ERROR = {"kind": "timeout", "message": "the tool timed out", "retryable": True}
_RUN_ERROR = {"kind": "run_error", "message": "the run cannot go on"}


@attrs.frozen
class Candidate:
    """A possible next event: its type, its structural fields, and what enables it.

    Attributes:
        type: the event type.
        fields: the type's own fields that decide acceptance (no envelope).
        needs: the features that must be enabled for a legal run to contain it.
    """

    type: str
    fields: Mapping[str, Any]
    needs: frozenset[str] = _NONE

    def event(
        self,
        record: RunRecord,
        occurred_at: str,
        extra: Mapping[str, Any] | None = None,
        events: EventTypes = BUILTIN_EVENTS,
    ) -> Event:
        """The event this candidate stands for, as the next one of `record`'s run.

        `events` is the table's vocabulary, which knows its own event types.
        """
        return parse_event(
            {
                **(extra or {}),
                **self.fields,
                "type": self.type,
                "run_id": record.run_id,
                "sequence": record.version + 1,
                "occurred_at": occurred_at,
            },
            events=events,
        )


@attrs.frozen
class Next:
    """A candidate the reducer accepted, with the event built from it and the new record."""

    candidate: Candidate
    event: Event
    record: RunRecord


def fresh_ids(record: RunRecord, count: int) -> list[str]:
    """`count` action ids not yet in `record`'s ledger: `act_1`, `act_2`, ..."""
    ids: list[str] = []
    n = len(record.actions)
    while len(ids) < count:
        n += 1
        if f"act_{n}" not in record.actions:
            ids.append(f"act_{n}")
    return ids


#: What a generated run's refused decision says: the cap refused two calls to `lookup`.
_REFUSAL = {
    "kind": "max_calls_per_decision",
    "message": "2 calls proposed in one decision; at most 1 is allowed",
    "proposed": {"decision": "tool_calls", "calls": 2, "tools": {"lookup": 2}},
}


def _call(action_id: str, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {"action_id": action_id, "tool": tool, "arguments": dict(arguments)}


def event_order(table: TransitionTable) -> tuple[str, ...]:
    """`EVENT_ORDER`, then the table's own event types (sorted): the order candidates come in."""
    return EVENT_ORDER + table.event_types.custom


def plausible(
    record: RunRecord,
    event_type: str,
    events: EventTypes = BUILTIN_EVENTS,
    tools: Tools = DEFAULT_TOOLS,
) -> list[Candidate]:
    """Candidates of one type that fit `record`'s ledger; the reducer still decides.

    A type of the table's own (in `events`, not built in) gets the event a call or the
    model's decision proposed and is now due (`emitted_by` set), then the fixed payloads its
    model's annotations allow (see `agentfsm.testing._runs.custom.variants`). Calls name `tools`,
    results are `tools`' examples, and a call of a tool that may propose events proposes
    each of them (feature `emits`); so does a decision.
    """
    if event_type not in EVENT_CLASSES:
        if event_type not in events:
            return []
        due = _due_proposals(record, event_type)
        return due + [Candidate(event_type, v) for v in variants(events.classes[event_type])]
    actions = list(record.actions.values())
    t = event_type
    if t == E.MODEL_COMPLETED:
        [fresh] = fresh_ids(record, 1)
        out = [Candidate(t, {"decision": "final", "output": "done"})]
        out += [
            Candidate(
                t,
                {"decision": "tool_calls", "tool_calls": [_call(fresh, name, {})]},
                frozenset({"tools"}),
            )
            for name in tools.names
        ]
        out += [
            Candidate(t, {"decision": "handoff"}, frozenset({"handoffs"})),
            Candidate(t, {"decision": "refused", "refusal": _REFUSAL}, frozenset({"refusals"})),
        ]
        out += [
            Candidate(t, {"decision": "emit", "emit": proposal}, frozenset({"emits"}))
            for proposal in _proposals(events, events.custom)
        ]
        return out
    if t == E.TOOL_REQUESTED:
        out = [
            Candidate(t, _call(a.action_id, a.tool, a.arguments))
            for a in actions
            if a.status in (A.PROPOSED, A.APPROVED)
        ]
        [fresh] = fresh_ids(record, 1)
        direct = frozenset({"tools", "direct_requests"})
        out += [Candidate(t, _call(fresh, name, {}), direct) for name in tools.names]
        return out
    if t == E.APPROVAL_REQUESTED:
        out = [
            Candidate(t, _call(a.action_id, a.tool, a.arguments), frozenset({"approvals"}))
            for a in actions
            if a.status == A.PROPOSED
        ]
        [fresh] = fresh_ids(record, 1)
        out.append(
            Candidate(
                t,
                _call(fresh, tools.names[0], {}),
                frozenset({"tools", "approvals", "direct_requests"}),
            )
        )
        return out
    if t == E.TOOL_STARTED:
        return [
            Candidate(
                t,
                {"action_id": a.action_id, "attempt": a.attempts + 1},
                frozenset({"retries"}) if a.attempts else _NONE,
            )
            for a in actions
            if a.status == A.REQUESTED or (a.status == A.FAILED and a.error and a.error.retryable)
        ]
    if t == E.TOOL_COMPLETED:
        out = []
        for a in actions:
            if a.status not in _IN_FLIGHT:
                continue
            out.append(Candidate(t, {"action_id": a.action_id}))
            out += [
                Candidate(t, {"action_id": a.action_id, "result": r})
                for r in tools.results_of(a.tool)
            ]
            out += [
                Candidate(t, {"action_id": a.action_id, "emit": p}, frozenset({"emits"}))
                for p in _proposals(events, tools.emits_of(a.tool))
            ]
        return out
    if t == E.EMIT_REFUSED:
        first = _first_due_call(record)
        if first is None or first.emit is None:
            return []
        refusal = {
            "kind": "not_allowed",
            "message": f"the table does not take '{first.emit.type}' here",
            "proposed": {"event": first.emit.type},
        }
        return [Candidate(t, {"action_id": first.action_id, "refusal": refusal})]
    if t in _RESULTS:
        needs = frozenset({_RESULT_FEATURE[t]}) if t in _RESULT_FEATURE else _NONE
        out = []
        for a in actions:
            if a.status not in _IN_FLIGHT:
                continue
            if t != E.TOOL_FAILED:
                out.append(Candidate(t, {"action_id": a.action_id}, needs))
                continue
            # Whether a failure is retryable decides what may follow, so it is structural.
            out.append(Candidate(t, {"action_id": a.action_id, "error": _TOOL_ERROR}, needs))
            out.append(
                Candidate(
                    t,
                    {"action_id": a.action_id, "error": _RETRYABLE_ERROR},
                    needs | {"retries"},
                )
            )
        return out
    if t in (E.APPROVAL_ACCEPTED, E.APPROVAL_REJECTED):
        return [
            Candidate(t, {"action_id": a.action_id})
            for a in actions
            if a.status == A.APPROVAL_PENDING
        ]
    return [_SIMPLE[t]] if t in _SIMPLE else []


def _proposals(events: EventTypes, types: Iterable[str]) -> list[dict[str, Any]]:
    """`{type, fields}` of each fixed payload of each of `types` (the table's own)."""
    return [
        {"type": t, "fields": v}
        for t in types
        if t in events.custom
        for v in variants(events.classes[t])
    ]


def _first_due_call(record: RunRecord) -> Action | None:
    """The call whose proposed event is judged next, once its batch is resolved; else None."""
    pending = record.pending_emits
    if not pending:
        return None
    if any(record.actions[aid].status not in RESOLVED for aid in record.batch):
        return None
    return pending[0]


def _due_proposals(record: RunRecord, event_type: str) -> list[Candidate]:
    """The proposed event of type `event_type` due now, as a call's or a decision's."""
    out: list[Candidate] = []
    decided = record.decided_emit
    if decided is not None and decided.type == event_type and not record.model_call_open:
        out.append(Candidate(event_type, {**decided.fields, "emitted_by": {"turn": record.turn}}))
    first = _first_due_call(record)
    if first is not None and first.emit is not None and first.emit.type == event_type:
        by = {"action_id": first.action_id}
        out.append(Candidate(event_type, {**first.emit.fields, "emitted_by": by}))
    return out


_SIMPLE: dict[str, Candidate] = {
    E.RUN_STARTED: Candidate(E.RUN_STARTED, {}),
    E.MODEL_STARTED: Candidate(E.MODEL_STARTED, {}),
    E.HANDOFF: Candidate(E.HANDOFF, {"to_agent": "agent_b"}, frozenset({"handoffs"})),
    E.RUN_PAUSED: Candidate(E.RUN_PAUSED, {"reason": "waiting for input"}, frozenset({"pauses"})),
    E.RUN_RESUMED: Candidate(E.RUN_RESUMED, {}),
    E.RUN_CANCEL_REQUESTED: Candidate(E.RUN_CANCEL_REQUESTED, {}, frozenset({"cancellation"})),
    E.RUN_CANCELLED: Candidate(E.RUN_CANCELLED, {}),
    E.RUN_COMPLETED: Candidate(E.RUN_COMPLETED, {}),
    E.RUN_FAILED: Candidate(E.RUN_FAILED, {"error": _RUN_ERROR}, frozenset({"run_failures"})),
    E.RUN_TERMINATED: Candidate(
        E.RUN_TERMINATED, {"stop_reason": "max_turns"}, frozenset({"terminations"})
    ),
}


def rule_breaking(record: RunRecord, event_type: str) -> list[Candidate]:
    """Candidates of one type that break a ledger rule on purpose (for illegal steps).

    An unknown action id, a call that differs from the proposed one, a reused action id, an
    attempt out of order, a result or decision for an action in the wrong status.
    """
    t = event_type
    out: list[Candidate] = []
    actions = list(record.actions.values())[-4:]  # the newest few keep this cheap on long runs
    [unknown] = fresh_ids(record, 1)
    if t in ACTION_EVENTS:
        fields: dict[str, Any] = {"action_id": unknown}
        if t in (E.TOOL_REQUESTED, E.APPROVAL_REQUESTED):
            fields = _call(unknown, "lookup", {})
        if t == E.TOOL_FAILED:
            fields["error"] = _TOOL_ERROR
        if t != E.TOOL_REQUESTED and t != E.APPROVAL_REQUESTED:
            out.append(Candidate(t, fields))
    for a in actions:
        if t in (E.TOOL_REQUESTED, E.APPROVAL_REQUESTED):
            out.append(Candidate(t, _call(a.action_id, a.tool, a.arguments)))
            out.append(Candidate(t, _call(a.action_id, a.tool, {**a.arguments, "changed": True})))
            out.append(Candidate(t, _call(a.action_id, a.tool + "_other", a.arguments)))
        elif t == E.TOOL_STARTED:
            out.append(Candidate(t, {"action_id": a.action_id, "attempt": a.attempts + 1}))
            out.append(Candidate(t, {"action_id": a.action_id, "attempt": a.attempts + 2}))
        elif t in _RESULTS:
            extra = {"error": _TOOL_ERROR} if t == E.TOOL_FAILED else {}
            out.append(Candidate(t, {"action_id": a.action_id, **extra}))
        elif t in (E.APPROVAL_ACCEPTED, E.APPROVAL_REJECTED):
            out.append(Candidate(t, {"action_id": a.action_id}))
        elif t == E.MODEL_COMPLETED:
            reused = _call(a.action_id, "lookup", {})
            out.append(Candidate(t, {"decision": "tool_calls", "tool_calls": [reused]}))
    return out


def try_next(reducer: Reducer, record: RunRecord, event: Event) -> RunRecord | LifecycleError:
    """The record after `event`, or the `LifecycleError` the reducer refused it with."""
    try:
        return reducer.reduce(record, event)
    except LifecycleError as exc:
        return exc


def accepted(
    reducer: Reducer,
    record: RunRecord,
    occurred_at: str,
    features: Iterable[str] = FEATURES,
    types: Iterable[str] | None = None,
    tools: Tools = DEFAULT_TOOLS,
) -> list[Next]:
    """The enabled plausible candidates the reducer accepts, in `EVENT_ORDER`.

    Only event types the table allows in the record's state are tried at all (and
    `emit.refused`, on no table's edge): the others would be refused anyway, and skipping
    them keeps generation cheap. A decision proposing an event is kept only if the table
    then takes that event (the runtime records any other as a refused decision).
    """
    enabled = frozenset(features)
    table = reducer.table
    allowed = set(table.allowed(record.status))
    if not table.is_terminal(record.status):
        allowed.add(E.EMIT_REFUSED)
    order = event_order(table)
    wanted = order if types is None else [t for t in order if t in set(types)]
    out: list[Next] = []
    for t in wanted:
        if t not in allowed:
            continue
        times = times_for(table, record, t, occurred_at)
        for cand in plausible(record, t, table.event_types, tools):
            if not cand.needs <= enabled:
                continue
            for at in times:
                event = cand.event(record, at, events=table.event_types)
                after = try_next(reducer, record, event)
                if isinstance(after, RunRecord) and _decision_applies(reducer, after, at):
                    out.append(Next(cand, event, after))
    return out


def _decision_applies(reducer: Reducer, record: RunRecord, at: str) -> bool:
    """Whether the event a decision just proposed (if any) is one the table takes next."""
    decided = record.decided_emit
    if decided is None:
        return True
    table = reducer.table
    if decided.type not in table.allowed(record.status):
        return False
    [cand] = [c for c in _due_proposals(record, decided.type) if "turn" in c.fields["emitted_by"]]
    for when in times_for(table, record, decided.type, at):
        try:
            event = cand.event(record, when, events=table.event_types)
        except ValueError:
            return False
        if isinstance(try_next(reducer, record, event), RunRecord):
            return True
    return False


def times_for(
    table: TransitionTable, record: RunRecord, event_type: str, occurred_at: str
) -> tuple[str, ...]:
    """When a candidate of `event_type` is tried as `record`'s next event: at `occurred_at`,
    and at the moment each of the state's timed edges on that event falls due, where that is
    later (written like `occurred_at`). So a timeout is taken, and an edge tried before it
    (a fallback without `after`) at the time the run would otherwise have."""
    timed = [t for t in table.timeouts(record.status) if t.event == event_type]
    if not timed or record.entered_at is None:
        return (occurred_at,)
    now = parse_timestamp(occurred_at)
    entered = parse_timestamp(record.entered_at)
    due = [entered + t.after for t in timed if t.after is not None]
    return (occurred_at, *(_written_like(occurred_at, d) for d in due if d > now))


def _written_like(text: str, moment: datetime) -> str:
    """`moment` in the offset and precision of the timestamp `text`, never before it (a
    precision that cannot say it rounds up)."""
    fraction = "." in text
    step = timedelta(milliseconds=1) if fraction else timedelta(seconds=1)
    late = (moment - datetime.min.replace(tzinfo=moment.tzinfo)) % step
    if late:
        moment += step - late
    offset = parse_timestamp(text).utcoffset() or timedelta(0)
    return render_timestamp(moment, offset, text[-1] in "Zz", fraction)


#: When generated runs start, unless told otherwise.
EPOCH = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)


@attrs.frozen
class Clock:
    """Sequential RFC 3339 timestamps: the n-th event of a run happens n seconds after start.

    Attributes:
        start: the moment before the first event (aware).
        offset: the UTC offset events are written in, e.g. `timedelta(hours=8)`.
        zulu: write UTC as `Z` rather than `+00:00`.
        fraction: also write milliseconds.
    """

    start: datetime = EPOCH
    offset: timedelta = timedelta(0)
    zulu: bool = True
    fraction: bool = False

    def at(self, sequence: int) -> str:
        """The timestamp of the event with this sequence."""
        return render_timestamp(
            self.start + timedelta(seconds=sequence), self.offset, self.zulu, self.fraction
        )

    def next(self, record: RunRecord) -> str:
        """The timestamp of `record`'s next event: `at` its sequence, or a second after its
        last event where that came later (an event at a timeout jumps the clock ahead)."""
        moment = self.start + timedelta(seconds=record.version + 1)
        if record.updated_at is not None:
            moment = max(moment, parse_timestamp(record.updated_at) + timedelta(seconds=1))
        return render_timestamp(moment, self.offset, self.zulu, self.fraction)


def render_timestamp(
    moment: datetime, offset: timedelta, zulu: bool = True, fraction: bool = False
) -> str:
    """`moment` as RFC 3339 text in the given UTC offset."""
    local = moment.astimezone(timezone(offset))
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if fraction:
        text += f".{local.microsecond // 1000:03d}"
    if offset == timedelta(0) and zulu:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"{text}{sign}{hours:02d}:{mins:02d}"
