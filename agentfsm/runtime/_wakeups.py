"""When a run must be driven next: the wake-ups an append causes, and the timers it sets.

Pure rules over the record an append leads to and the batch's event types, with no I/O, so
every driver reads the same ones (`agentfsm.runtime.procrastinate` enqueues them as jobs in
the append's own transaction):

- **Wake now** when a batch holds an event a driver does not append itself (a steering
  verb's: `run.started`, `approval.accepted`/`rejected`, `run.resumed`,
  `run.cancel_requested`, a lifecycle's own event a person appends) and leaves the run with
  work to do (a runnable state), or is in a subagent run (its parent's call is waiting on
  it). A lifecycle's own event that rides in a driver's batch (the event a call's outcome
  or a decision proposed) is the driver's.
  A subagent run is driven by its parent's call, so the wake-up goes to the root run.
- **Wake at a time** (a timer) when a batch sets a time something must happen by itself:
  the run's deadline (`run.started` with `limits.deadline`), an approval's expiry
  (`approval.requested` with `expires_at`), and the timeout of the state the batch leaves
  the run in (`RunRecord.timeout`: entering a state with a `Transition(after=...)`, or a
  migration to a table that times it out); the driver woken then settles what is overdue
  (`Planner.overdue`: `run.terminated` past the deadline, `approval.rejected` by `expiry`,
  the timeout's event). A run that left the state first finds no timeout due: the timer
  costs one load.

A wake-up that finds nothing to do costs one load: late and duplicate wake-ups are
harmless, a missing one is the bug these rules exist to prevent.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import attrs

from agentfsm.events.models import parse_timestamp
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import ActionStatus
from agentfsm.record import RunRecord
from agentfsm.stores.lease import root_of

__all__ = ["DRIVER_TYPES", "Wake", "next_due", "root_of", "wakeups"]

#: Event types only the driving Runner appends: on their own they never wake a run (the
#: driver is already at it). `run.resumed` is a steering verb's as well (`resume`), and
#: so wakes; a Runner's own `run.resumed` costs one idle wake-up.
DRIVER_TYPES = frozenset(
    {
        "model.started",
        "model.completed",
        "model.failed",
        "handoff",
        "approval.requested",
        "tool.requested",
        "tool.started",
        "tool.completed",
        "tool.failed",
        "tool.outcome_unknown",
        "run.completed",
        "run.failed",
        "run.terminated",
        "run.cancelled",
        "emit.refused",
        "usage.reported",
    }
)

#: Batches after which the record may hold a new time to act at.
_TIMED = frozenset({"run.started", "approval.requested"})


@attrs.frozen
class Wake:
    """Drive `run_id` (a root run) now, or at `at` (an aware datetime).

    With `resume` (a scheduled resume, `timers.pause_until`): at `at`, resume `run_id`
    if it is still in the pause made at version `resume`, then drive it.
    """

    run_id: str
    at: datetime | None = None
    resume: int | None = None


def next_due(record: RunRecord) -> datetime | None:
    """The earliest time the run's own clock acts on it: its deadline, an approval it waits
    for expiring, or its state's timeout; None for a terminal run or one with none."""
    times: list[datetime] = []
    if record.limits is not None and record.limits.deadline is not None:
        times.append(parse_timestamp(record.limits.deadline))
    if record.timeout is not None:
        times.append(parse_timestamp(record.timeout.at))
    pending = ActionStatus.APPROVAL_PENDING
    times.extend(
        parse_timestamp(a.expires_at)
        for a in record.actions.values()
        if a.status == pending and a.expires_at is not None
    )
    return min(times) if times else None


def wakeups(record: RunRecord, types: Iterable[str], table: TransitionTable) -> tuple[Wake, ...]:
    """The wake-ups (now, and timers) an append of `types` that led to `record` causes."""
    kinds = set(types)
    if record.status in table.terminal_states and "/" not in record.run_id:
        return ()
    steering = kinds - DRIVER_TYPES
    if "approval.requested" in kinds:
        # A policy's refusal is appended with its request, by the driver.
        steering.discard("approval.rejected")
    if steering and kinds & DRIVER_TYPES:
        # A lifecycle's own event in a driver's batch is one a call or a decision proposed
        # (appended with its outcome or the decision): the driver's own, not a person's.
        steering.difference_update(table.event_types.custom)
    root = root_of(record.run_id)
    out: list[Wake] = []
    if steering and (record.status in table.runnable_states or root != record.run_id):
        out.append(Wake(root))
    # Where a timeout waits, any batch may have set it (entering the state, or migrating
    # to a table that times it out): the same timer set again is one timer.
    timed = kinds & _TIMED or record.timeout is not None
    if timed and record.status not in table.terminal_states:
        due = next_due(record)
        if due is not None:
            out.append(Wake(root, due))
    return tuple(out)
