"""Names of the default table's states and events, and of action statuses.

They are `StrEnum`s, so a member *is* its string: `RunStatus.RUNNING == "running"`, and
records, events and derived tables can use plain strings wherever these appear.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "RESOLVED",
    "ActionStatus",
    "DecisionKind",
    "EventType",
    "RunStatus",
    "StateKind",
    "StopReason",
]


class StateKind(StrEnum):
    """What a run in a state is doing, declared on each `State` of a table.

    The runtime, workers, steering verbs, adapters and the command line read kinds, never
    state names, to decide what to do with a run: so a table of your own (an `escalated`
    state where a person owns a ticket, say) is driven like the default one.
    """

    #: The run's driver has work to do: call the model, decide, go on.
    ACTIVE = "active"
    #: Calls are running or being settled; the driver waits for their results.
    IN_FLIGHT = "in_flight"
    #: A person must act (approve, reject, answer) before the run goes on.
    WAITING = "waiting"
    #: Stopped on purpose until someone resumes it (input, a callback, a timer).
    PAUSED = "paused"
    #: The run ended; no event leaves the state.
    TERMINAL = "terminal"


class RunStatus(StrEnum):
    """The states of the default agent-run table."""

    CREATED = "created"
    RUNNING = "running"
    WAITING_TOOL = "waiting_tool"
    WAITING_APPROVAL = "waiting_approval"
    PAUSED = "paused"
    CANCEL_REQUESTED = "cancel_requested"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"


class EventType(StrEnum):
    """Every event type of the wire format."""

    RUN_STARTED = "run.started"
    MODEL_STARTED = "model.started"
    MODEL_COMPLETED = "model.completed"
    MODEL_FAILED = "model.failed"
    HANDOFF = "handoff"
    TOOL_REQUESTED = "tool.requested"
    TOOL_STARTED = "tool.started"
    TOOL_COMPLETED = "tool.completed"
    TOOL_FAILED = "tool.failed"
    TOOL_OUTCOME_UNKNOWN = "tool.outcome_unknown"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_ACCEPTED = "approval.accepted"
    APPROVAL_REJECTED = "approval.rejected"
    RUN_PAUSED = "run.paused"
    RUN_RESUMED = "run.resumed"
    RUN_CANCEL_REQUESTED = "run.cancel_requested"
    RUN_CANCELLED = "run.cancelled"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_TERMINATED = "run.terminated"
    EMIT_REFUSED = "emit.refused"
    RUN_MIGRATED = "run.migrated"
    RUN_FORKED = "run.forked"
    USAGE_REPORTED = "usage.reported"


class ActionStatus(StrEnum):
    """Where an action stands in the ledger."""

    PROPOSED = "proposed"
    APPROVAL_PENDING = "approval_pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    REQUESTED = "requested"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"


class DecisionKind(StrEnum):
    """What a model call decided (`model.completed.decision`).

    `emit` proposes one event of the run's own lifecycle (`model.completed.emit`): the table
    decides, and the event follows in the same append when it allows it.

    `refused` is a decision the run did not take: a guard on `model.completed` refused what
    the model proposed (`max_calls_per_decision`: too many calls at once), or the table
    refused the event it proposed. It carries a `refusal` saying why and summing up what was
    proposed; nothing of it runs, and the model sees the refusal on its next turn.
    """

    FINAL = "final"
    TOOL_CALLS = "tool_calls"
    HANDOFF = "handoff"
    EMIT = "emit"
    REFUSED = "refused"


class StopReason(StrEnum):
    """The stop reasons of the built-in guards (`run.terminated.stop_reason`).

    Each built-in guard's name is its stop reason; table edges list these names.
    `max_calls_per_decision` is the one that refuses a decision instead of stopping the
    run (its verdict is recorded as a `refused` decision, and the run goes on); it is a
    stop reason only for a log whose writer stopped the run on it.
    """

    MAX_TURNS = "max_turns"
    DEADLINE = "deadline"
    BUDGET = "budget"
    LOOP_DETECTED = "loop_detected"
    MAX_ATTEMPTS = "max_attempts"
    MAX_CALLS_PER_DECISION = "max_calls_per_decision"


#: Statuses after which nothing more will happen to an action (a failed one may be retried,
#: which starts a new attempt of the same action).
RESOLVED = frozenset(
    {ActionStatus.SUCCEEDED, ActionStatus.FAILED, ActionStatus.REJECTED, ActionStatus.UNKNOWN}
)
