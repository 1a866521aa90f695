"""What a writer appends, said as specs: an event's class and its own fields.

A spec leaves the envelope (run, sequence, time) to the writer, which stamps it when it
appends (`agentfsm.runtime.writer`). The specs the Runner and the SDK adapters both write
are built here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from agentfsm.errors import GuardRejectedError, OverrunError
from agentfsm.events import models as m
from agentfsm.events.canonical import call_digest
from agentfsm.events.models import Event, Proposal, ProposedEvent, Refusal
from agentfsm.names import DecisionKind, EventType
from agentfsm.record import RunRecord

__all__ = [
    "Spec",
    "Then",
    "approval_asked",
    "built",
    "call_started",
    "declined",
    "emit_refused",
    "proposal",
    "refused",
    "refused_decision",
    "requested",
    "terminated",
]


@attrs.define  # not frozen: a turn builds several, and a frozen one costs twice as much
class Spec:
    """One event to append: its model and its own fields; the writer stamps the envelope.

    Attributes:
        cls: the event's model (a built-in one, or a lifecycle's own `CustomEvent`).
        fields: its own fields (a field that is None is left out).
        event: the event already built, and so validated, as the next of the record it
            follows (`built`): the writer takes it, restamped with its own sequence and
            time, instead of validating the same fields again.
    """

    cls: type[Any]
    fields: dict[str, Any]
    event: Event | None = None


def built(spec: Spec, record: RunRecord, at: str) -> Event:
    """`spec`'s event, built (and so validated) as the next event of `record` at `at`, and
    kept on the spec (`Spec.event`) for the writer to take."""
    event: Event = spec.cls(
        run_id=record.run_id,
        sequence=record.version + 1,
        occurred_at=at,
        **{k: v for k, v in spec.fields.items() if v is not None},
    )
    spec.event = event
    return event


#: What may ride along with a batch (`Writer.append`'s `then`): given the record after the
#: batch and the append's `now`, the specs of the step that would come next, or none.
Then = Callable[[RunRecord, datetime], Sequence[Spec]]


# The specs the Runner and the SDK adapters both write, built in one place.
def requested(action_id: str, tool: str, arguments: Any) -> Spec:
    """`tool.requested` for a call."""
    return Spec(m.ToolRequested, {"action_id": action_id, "tool": tool, "arguments": arguments})


def call_started(action_id: str, tool: str, arguments: Any) -> list[Spec]:
    """`tool.requested` + `tool.started`: a call that is about to run, as an SDK reports it."""
    return [requested(action_id, tool, arguments), Spec(m.ToolStarted, {"action_id": action_id})]


def approval_asked(
    action_id: str, tool: str, arguments: Any, expires_at: str | None = None
) -> Spec:
    """`approval.requested` for a call (valid until `expires_at`, if given)."""
    fields = {"action_id": action_id, "tool": tool, "arguments": arguments}
    return Spec(m.ApprovalRequested, {**fields, "expires_at": expires_at})


def declined(action_id: str, tool: str, arguments: Any, approver: str, reason: str) -> list[Spec]:
    """A call that will not run, recorded as asked and rejected by `approver` (a policy, an SDK)."""
    rejected = {
        "action_id": action_id,
        "approver": approver,
        "reason": reason,
        "arguments_digest": call_digest(tool, arguments),
    }
    return [approval_asked(action_id, tool, arguments), Spec(m.ApprovalRejected, rejected)]


def refused(spec: Spec, error: GuardRejectedError) -> Spec | None:
    """`model.completed` recording the decision `spec` records as refused by `error`'s guard,
    or None when `error` is no refusal of it (another event's, or a budget overrun).

    What the refused decision proposed is summed up (`Proposal`), never kept: an answer of
    1,000 calls is recorded in a few hundred bytes. Its usage and text stay (the call
    happened: budgets count it). The refusal's message is the guard's sentence.
    """
    if spec.cls is not m.ModelCompleted:
        return None
    if spec.fields["decision"] == DecisionKind.REFUSED:
        return None  # refused as a refusal: nothing is left to take back
    if error.event != EventType.MODEL_COMPLETED or isinstance(error, OverrunError):
        return None
    why = Refusal.of(error.guard, error.detail, proposal(spec.fields))
    return refused_decision(spec.fields, why)


def proposal(fields: dict[str, Any]) -> Proposal:
    """What the decision of `model.completed` fields proposed, summed up (`Proposal`)."""
    calls = fields.get("tool_calls") or ()
    emit = fields.get("emit")
    event = emit.type if isinstance(emit, ProposedEvent) else None
    return Proposal.of(fields["decision"], [call["tool"] for call in calls], event)


def refused_decision(fields: dict[str, Any], refusal: Refusal) -> Spec:
    """`model.completed` recording the decision of `fields` as refused, for `refusal`: the
    one way any refused decision is recorded (a guard's refusal, or the table's refusal of
    the event it proposed). Its usage and text stay: the call happened."""
    return Spec(
        m.ModelCompleted,
        {
            "decision": DecisionKind.REFUSED,
            "output": fields.get("output"),
            "usage": fields.get("usage"),
            "refusal": refusal,
        },
    )


def emit_refused(action_id: str, refusal: Refusal) -> Spec:
    """`emit.refused` for the event call `action_id` proposed (or tried to)."""
    return Spec(m.EmitRefused, {"action_id": action_id, "refusal": refusal})


def terminated(error: GuardRejectedError) -> Spec:
    """`run.terminated` recording the stop a guard's refusal calls for."""
    return Spec(m.RunTerminated, {"stop_reason": error.stop_reason, "detail": error.detail})
