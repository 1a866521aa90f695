"""What a writer appends, said as specs: an event's class and its own fields.

A spec leaves the envelope (run, sequence, time) to the writer, which stamps it when it
appends (`agentfsm.runtime.writer`). The specs the Runner and the SDK adapters both write
are built here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from agentfsm.events import models as m
from agentfsm.events.canonical import call_digest
from agentfsm.events.models import Event
from agentfsm.record import RunRecord

__all__ = [
    "Built",
    "Spec",
    "Then",
    "approval_asked",
    "built",
    "call_started",
    "declined",
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
