"""What a writer appends, said as specs: an event's class and its own fields.

A spec leaves the envelope (run, sequence, time) to the writer, which stamps it when it
appends (`agentfsm.runtime.writer`). The specs the Runner and the SDK adapters both write
are built here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from agentfsm.errors import GuardRejectedError, OverrunError
from agentfsm.events import models as m
from agentfsm.events.canonical import call_digest
from agentfsm.events.models import Event, Proposal, Refusal
from agentfsm.names import DecisionKind, EventType
from agentfsm.record import RunRecord

__all__ = [
    "Built",
    "Spec",
    "Then",
    "approval_asked",
    "built",
    "call_started",
    "declined",
    "refused",
    "requested",
]

#: One event to append: its class and its own fields (None values are left out), or a
#: function of (record before it, occurred_at) that builds it (`Verdict.terminated_event`).
Spec = tuple[type[Any], dict[str, Any]] | Callable[[RunRecord, str], Event]


class Built(tuple[type[Any], dict[str, Any]]):
    """A spec whose event was already built, and so validated, on the record it follows
    (`built`): the writer takes that event, restamped with its own sequence and time, instead
    of validating the same fields again. Read as a spec, it is its `(class, fields)`."""

    event: Event


def built(spec: tuple[type[Any], dict[str, Any]], record: RunRecord, at: str) -> Built:
    """`spec`'s event, built (and validated) as the next event of `record` at `at`."""
    cls, fields = spec
    done = Built(spec)
    done.event = cls(
        run_id=record.run_id,
        sequence=record.version + 1,
        occurred_at=at,
        **{k: v for k, v in fields.items() if v is not None},
    )
    return done


#: What may ride along with a batch (`Writer.append`'s `then`): given the record after the
#: batch and the append's `now`, the specs of the step that would come next, or none.
Then = Callable[[RunRecord, datetime], Sequence[Spec]]


# The specs the Runner and the SDK adapters both write, built in one place.
def requested(action_id: str, tool: str, arguments: Any) -> Spec:
    """`tool.requested` for a call."""
    return (m.ToolRequested, {"action_id": action_id, "tool": tool, "arguments": arguments})


def call_started(action_id: str, tool: str, arguments: Any) -> list[Spec]:
    """`tool.requested` + `tool.started`: a call that is about to run, as an SDK reports it."""
    return [requested(action_id, tool, arguments), (m.ToolStarted, {"action_id": action_id})]


def approval_asked(
    action_id: str, tool: str, arguments: Any, expires_at: str | None = None
) -> Spec:
    """`approval.requested` for a call (valid until `expires_at`, if given)."""
    fields = {"action_id": action_id, "tool": tool, "arguments": arguments}
    return (m.ApprovalRequested, {**fields, "expires_at": expires_at})


def declined(action_id: str, tool: str, arguments: Any, approver: str, reason: str) -> list[Spec]:
    """A call that will not run, recorded as asked and rejected by `approver` (a policy, an SDK)."""
    rejected = {
        "action_id": action_id,
        "approver": approver,
        "reason": reason,
        "arguments_digest": call_digest(tool, arguments),
    }
    return [approval_asked(action_id, tool, arguments), (m.ApprovalRejected, rejected)]


def refused(spec: Spec, error: GuardRejectedError) -> Spec | None:
    """`model.completed` recording the decision `spec` records as refused by `error`'s guard,
    or None when `error` is no refusal of it (another event's, or a budget overrun).

    What the refused decision proposed is summed up (`Proposal`), never kept: an answer of
    1,000 calls is recorded in a few hundred bytes. Its usage and text stay (the call
    happened: budgets count it). The refusal's message is the guard's sentence.
    """
    if callable(spec) or spec[0] is not m.ModelCompleted:
        return None
    if spec[1]["decision"] == DecisionKind.REFUSED:
        return None  # refused as a refusal: nothing is left to take back
    if error.event != EventType.MODEL_COMPLETED or isinstance(error, OverrunError):
        return None
    fields = spec[1]
    calls = fields.get("tool_calls") or ()
    proposed = Proposal.of(fields["decision"], [call["tool"] for call in calls])
    refusal = Refusal.of(error.guard, error.detail, proposed)
    return (
        m.ModelCompleted,
        {
            "decision": DecisionKind.REFUSED,
            "output": fields.get("output"),
            "usage": fields.get("usage"),
            "refusal": refusal,
        },
    )
