"""The run record: everything a run's events add up to, as one immutable value.

`RunRecord` and `Action` are frozen, slotted attrs classes: cheap to build (the reducer makes
one per event) and impossible to change by accident. Each keeps its slots in a private,
mutable base class so the reducer can fill a new instance with plain slot stores before
giving it its frozen class (see `_evolve.py`). Mappings inside them are never mutated
after construction; treat them as read-only.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from agentfsm.events._canonical import call_digest
from agentfsm.events.models import ErrorInfo, Limits, ProposedEvent, Refusal, TableRef
from agentfsm.ledger import ledger, unsettled
from agentfsm.names import ActionStatus, RunStatus

__all__ = ["Action", "RunRecord", "Timeout", "UsageTotals", "call_digest", "default_key"]


@attrs.frozen(slots=True)
class Timeout:
    """The timeout a run waits on where it stands: at `at`, the runtime appends `event`.

    Attributes:
        event: the event type of the state's timed edge that falls due first.
        at: when it falls due (RFC 3339): the run's `entered_at` plus the edge's `after`.
    """

    event: str
    at: str

    def to_json(self) -> dict[str, str]:
        """A JSON-able dict."""
        return {"event": self.event, "at": self.at}


@attrs.define(slots=True)
class _UsageTotalsSlots:
    """The storage of `UsageTotals`: the reducer fills it, then makes it a `UsageTotals`.

    Never handed out mutable; see `agentfsm/reducers/_evolve.py` for why it exists.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@attrs.frozen(slots=True)
class UsageTotals(_UsageTotalsSlots):
    """Tokens and cost summed over the run."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": self.cost,
        }


@attrs.define(slots=True)
class _ActionSlots:
    """The storage of `Action`: the reducer fills it, then makes it a `Action`.

    Never handed out mutable; see `agentfsm/reducers/_evolve.py` for why it exists.
    """

    action_id: str
    tool: str
    arguments: Mapping[str, Any]
    status: str
    attempts: int = 0
    idempotency_key: str | None = None
    result: Any = None
    error: ErrorInfo | None = None
    cost: float | None = None
    approver: str | None = None
    reason: str | None = None
    expires_at: str | None = None
    emit: ProposedEvent | None = None
    emitted: int | None = None
    refusal: Refusal | None = None


@attrs.frozen(slots=True)
class Action(_ActionSlots):
    """One entry of the action ledger: a tool call from proposal to outcome.

    Attributes:
        action_id: the id every event about this call names.
        tool: the tool's name.
        arguments: the call's arguments (JSON object).
        status: one of `ActionStatus`.
        attempts: how many `tool.started` events this action has had.
        idempotency_key: what the tool is called with (`default_key` unless the call's
            `tool.requested` names one).
        result: the tool's result, once succeeded.
        error: the last failure, once failed.
        cost: the cost the tool reported, once succeeded.
        approver: who accepted or rejected it, when someone did.
        reason: why it was approved or rejected (as the approver said), or why its outcome
            is unknown.
        expires_at: when its approval stops being valid, if it has one.
        emit: the event of the run's lifecycle its call proposed (`tool.completed.emit`).
        emitted: the sequence of that event once applied (it names this call in
            `emitted_by`).
        refusal: why the event its call proposed is not applied (`emit.refused`, or the
            run ended first).
    """

    @property
    def emit_pending(self) -> bool:
        """Its call proposed an event that is neither applied nor refused yet."""
        return self.emit is not None and self.emitted is None and self.refusal is None

    @property
    def arguments_digest(self) -> str:
        """The digest approvals are bound to: tool name and canonical arguments.

        Computed on demand: the reducer compares calls with `same_json`, which is cheaper
        than hashing every call on the hot path.
        """
        return call_digest(self.tool, self.arguments)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the ledger entry of the record's JSON)."""
        return {
            "action_id": self.action_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "arguments_digest": self.arguments_digest,
            "status": self.status,
            "attempts": self.attempts,
            "idempotency_key": self.idempotency_key,
            "result": self.result,
            "error": self.error.model_dump(mode="json") if self.error else None,
            "cost": self.cost,
            "approver": self.approver,
            "reason": self.reason,
            "expires_at": self.expires_at,
            "emit": _model_json(self.emit),
            "emitted": self.emitted,
            "refusal": _model_json(self.refusal),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        """The inverse of `to_json`; raises `ValueError` naming what is wrong."""
        _expect_keys("action", data, _ACTION_KEYS | {"arguments_digest"})
        status = data["status"]
        if status not in _ACTION_STATUSES:
            raise ValueError(f"action status {status!r} is not one of {sorted(_ACTION_STATUSES)}")
        fields = {k: v for k, v in data.items() if k != "arguments_digest"}
        fields["error"] = ErrorInfo.model_validate(data["error"]) if data["error"] else None
        fields["emit"] = _model_of(ProposedEvent, data["emit"])
        fields["refusal"] = _model_of(Refusal, data["refusal"])
        action = cls(**fields)
        if action.arguments_digest != data["arguments_digest"]:
            raise ValueError(
                f"action {action.action_id!r}: arguments_digest {data['arguments_digest']!r} "
                f"does not match its tool and arguments ({action.arguments_digest})"
            )
        return action


def default_key(run_id: str, action_id: str) -> str:
    """The idempotency key of a call whose `tool.requested` names none: `run_id:action_id`,
    the same on every attempt, in every process that drives the run."""
    return f"{run_id}:{action_id}"


_ACTION_KEYS = frozenset(attrs.fields_dict(Action))
_ACTION_STATUSES = frozenset(ActionStatus)


@attrs.define(slots=True)
class _RunRecordSlots:
    """The storage of `RunRecord`: the reducer fills it, then makes it a `RunRecord`.

    Never handed out mutable; see `agentfsm/reducers/_evolve.py` for why it exists.
    """

    run_id: str
    status: str = RunStatus.CREATED
    version: int = 0
    turn: int = 0
    stop_reason: str | None = None
    stop_detail: str | None = None
    current_agent: str | None = None
    objective: str | None = None
    limits: Limits | None = None
    final_output: Any = None
    last_decision: str | None = None
    last_refusal: Refusal | None = None
    decided_emit: ProposedEvent | None = None
    model_call_open: bool = False
    actions: Mapping[str, Action] = attrs.field(factory=dict)
    batch: tuple[str, ...] = ()
    usage: UsageTotals = UsageTotals()
    reserved_tokens: int = 0
    reserved_cost: float = 0.0
    facts: Mapping[str, Any] = attrs.field(factory=dict)
    pause_reason: str | None = None
    cancel_reason: str | None = None
    cancel_requested_by: str | None = None
    error: ErrorInfo | None = None
    started_at: str | None = None
    updated_at: str | None = None
    custom: Mapping[str, Any] = attrs.field(factory=dict)
    table: TableRef | None = None
    migrated_from: TableRef | None = None
    migrated_at: int | None = None
    forked_from: str | None = None
    forked_at: int | None = None
    entered_at: str | None = None
    timeout: Timeout | None = None


@attrs.frozen(slots=True)
class RunRecord(_RunRecordSlots):
    """The folded state of one run. `reduce(record, event)` returns the next one.

    Attributes:
        run_id: the run.
        status: the table state the run is in.
        version: the last applied sequence (0 before any event).
        turn: how many `model.started` events the run has had.
        stop_reason: why a guard stopped it (`run.terminated`), else None.
        stop_detail: the guard's sentence, e.g. `3 of 3 turns used`.
        current_agent: the agent in charge (set by `run.started.agent` and `handoff`).
        objective: what the run was started for.
        limits: the limits given on `run.started`.
        final_output: the latest final answer the model proposed.
        last_decision: the latest model decision (`final`, `tool_calls`, `handoff`,
            `refused`).
        last_refusal: why the latest decision was refused, when it was (`refused`): what the
            model sees on its next turn; None once a decision is taken.
        decided_emit: the event the latest decision proposed (`emit`), until it is applied
            (in the same append, unless the run ended first).
        model_call_open: a `model.started` has no `model.completed` yet.
        actions: the action ledger, keyed by action id, in the order actions appeared.
        batch: the action ids of the current batch (since the last model decision).
        usage: tokens and cost so far.
        reserved_tokens: tokens reserved by the model call in flight.
        reserved_cost: cost reserved by the model call in flight.
        facts: observable results, by tool name (the latest success of each tool).
        pause_reason: why the run is paused, while it is.
        cancel_reason: the reason given with `run.cancel_requested`.
        cancel_requested_by: who asked for the cancellation.
        error: what `run.failed` reported.
        started_at: `occurred_at` of `run.started`.
        updated_at: `occurred_at` of the last applied event.
        custom: what the lifecycle's own events recorded (their `CustomEvent.fold`), e.g.
            `{"escalated_to": "tier-2"}`; empty under the default table.
        table: the table the run is under: the one its `run.started` names, or the one the
            latest `run.migrated` moved it to (None when its `run.started` names none).
        migrated_from: the table the latest `run.migrated` moved the run from (None: it was
            never migrated).
        migrated_at: the sequence of that `run.migrated`.
        forked_from: the run this one was forked from (the latest `run.forked`), else None.
        forked_at: the sequence of `forked_from` the fork was taken at: the events before
            the `run.forked` are that run's first `forked_at`.
        entered_at: `occurred_at` of the event that entered `status` from another state (an
            event that stays in the state leaves it be); None before the first event. The
            time a timed edge counts from.
        timeout: when the run times out where it stands, and with which event: the table's
            timed edge out of `status` that falls due first (as the table the run is under
            says, also after a migration); None where no edge waits.
    """

    @property
    def pending_approvals(self) -> tuple[str, ...]:
        """Action ids waiting for a human decision, in the order they were requested."""
        waiting = ActionStatus.APPROVAL_PENDING
        return tuple(a.action_id for a in unsettled(self.actions) if a.status == waiting)

    @property
    def pending_emits(self) -> tuple[Action, ...]:
        """The calls of the current batch whose proposed event waits to be judged, in batch
        order (the order the model proposed them: the order they are judged in)."""
        # A plain loop: the planner asks on every step, and the usual answer is none.
        actions = self.actions
        found: list[Action] = []
        for aid in self.batch:
            action = actions[aid]
            if action.emit is not None and action.emitted is None and action.refusal is None:
                found.append(action)
        return tuple(found)

    @property
    def in_flight(self) -> tuple[str, ...]:
        """Action ids requested or started and not yet resolved."""
        return tuple(
            a.action_id
            for a in unsettled(self.actions)
            if a.status in (ActionStatus.REQUESTED, ActionStatus.STARTED)
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict with DESIGN.md's fields (plus derived `pending_approvals`)."""
        return self._json({k: a.to_json() for k, a in self.actions.items()})

    def _json(self, actions: Any) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "version": self.version,
            "turn": self.turn,
            "stop_reason": self.stop_reason,
            "stop_detail": self.stop_detail,
            "current_agent": self.current_agent,
            "objective": self.objective,
            "limits": self.limits.model_dump(mode="json", exclude_none=True)
            if self.limits
            else None,
            "final_output": self.final_output,
            "last_decision": self.last_decision,
            "last_refusal": _model_json(self.last_refusal),
            "decided_emit": _model_json(self.decided_emit),
            "model_call_open": self.model_call_open,
            "actions": actions,
            "batch": list(self.batch),
            "usage": self.usage.to_json(),
            "reserved_tokens": self.reserved_tokens,
            "reserved_cost": self.reserved_cost,
            "facts": dict(self.facts),
            "pending_approvals": list(self.pending_approvals),
            "pause_reason": self.pause_reason,
            "cancel_reason": self.cancel_reason,
            "cancel_requested_by": self.cancel_requested_by,
            "error": self.error.model_dump(mode="json") if self.error else None,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "custom": dict(self.custom),
            "table": _ref_json(self.table),
            "migrated_from": _ref_json(self.migrated_from),
            "migrated_at": self.migrated_at,
            "forked_from": self.forked_from,
            "forked_at": self.forked_at,
            "entered_at": self.entered_at,
            "timeout": self.timeout.to_json() if self.timeout is not None else None,
        }

    def dumps(self) -> str:
        """Deterministic JSON text: same record, same bytes. Keys are sorted, except the
        ledger's: `actions` keeps the order actions joined the run, which
        `pending_approvals` and `in_flight` follow (sorted ids would put 'act_10' before
        'act_9', and a reloaded record would list its pending approvals in another order).
        """
        rest = self._json(None)
        del rest["actions"]
        ledger = ",".join(map(_action_text, self.actions.values()))
        text = _dump(rest)
        # "actions" sorts before every other field of a record, so it opens the object.
        return '{"actions":{' + ledger + "}" + ("," + text[1:] if text != "{}" else "}")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """The inverse of `to_json`; raises `ValueError` naming what is wrong.

        The derived `pending_approvals` must agree with the ledger, so a hand-edited
        record cannot contradict itself.
        """
        _expect_keys("run record", data, _RECORD_KEYS | {"pending_approvals"})
        fields = {k: v for k, v in data.items() if k != "pending_approvals"}
        fields["limits"] = Limits.model_validate(data["limits"]) if data["limits"] else None
        actions = {k: Action.from_json(a) for k, a in data["actions"].items()}
        for key, action in actions.items():
            if action.action_id != key:
                raise ValueError(f"action keyed {key!r} names action_id {action.action_id!r}")
        fields["actions"] = ledger(actions)
        fields["batch"] = tuple(data["batch"])
        fields["usage"] = UsageTotals(**data["usage"])
        fields["error"] = ErrorInfo.model_validate(data["error"]) if data["error"] else None
        fields["last_refusal"] = _model_of(Refusal, data["last_refusal"])
        fields["decided_emit"] = _model_of(ProposedEvent, data["decided_emit"])
        for key in ("table", "migrated_from"):
            fields[key] = TableRef.model_validate(data[key]) if data[key] is not None else None
        timeout = data["timeout"]
        if timeout is not None:
            _expect_keys("timeout", timeout, frozenset({"event", "at"}))
            fields["timeout"] = Timeout(str(timeout["event"]), str(timeout["at"]))
        record = cls(**fields)
        if list(record.pending_approvals) != list(data["pending_approvals"]):
            raise ValueError(
                f"pending_approvals {data['pending_approvals']!r} disagrees with the ledger "
                f"{list(record.pending_approvals)!r}"
            )
        return record

    @classmethod
    def loads(cls, text: str | bytes) -> RunRecord:
        """Read a record from `dumps` output."""
        return cls.from_json(json.loads(text))


_RECORD_KEYS = frozenset(attrs.fields_dict(RunRecord))

# One encoder, made once: `json.dumps` with these arguments builds a new one per call,
# which was a third of a snapshot's cost (two calls per action of the ledger).
_dump = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_dump_key: Callable[[str], str] = json.encoder.encode_basestring  # `_dump` of a str, in C


# The ledger's JSON text, per action object, for the snapshots. An action never changes
# (a change makes a new one) and most of a long run's ledger is settled, so a snapshot after
# the first dumps only the actions that changed since: a snapshot of a run of 400 calls
# went from 2.7 ms to 0.09 ms once cached. Keyed by identity (an action with a dict inside
# is not hashable) and dropped with the action: it holds no more than live records do.
_action_texts: dict[int, tuple[weakref.ref[Action], str]] = {}


def _action_text(action: Action) -> str:
    key = id(action)
    known = _action_texts.get(key)
    if known is not None and known[0]() is action:
        return known[1]
    text = f"{_dump_key(action.action_id)}:{_dump(action.to_json())}"
    _action_texts[key] = (weakref.ref(action, functools.partial(_forget, key)), text)
    return text


def _forget(key: int, ref: weakref.ref[Action]) -> None:
    known = _action_texts.get(key)
    if known is not None and known[0] is ref:  # not a newer action's, under a reused id
        del _action_texts[key]


def _model_json(part: ProposedEvent | Refusal | None) -> dict[str, Any] | None:
    return part.model_dump(mode="json") if part is not None else None


_P = TypeVar("_P", ProposedEvent, Refusal)


def _model_of(cls: type[_P], data: Any) -> _P | None:
    return cls.model_validate(data) if data is not None else None


def _ref_json(ref: TableRef | None) -> dict[str, str] | None:
    return ref.model_dump() if ref is not None else None


def _expect_keys(what: str, data: Mapping[str, Any], keys: frozenset[str]) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")
    missing = sorted(keys - data.keys())
    extra = sorted(data.keys() - keys)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(extra)}")
        raise ValueError(f"{what}: {'; '.join(parts)}")
