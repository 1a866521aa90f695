"""The shape of a run's transition log lines, for every place in agentfsm that logs them.

Three stable event names, each with the run's `run_id` bound:

- `transition.applied`: `sequence`, `event_type`, `from_state`, `to_state` (and
  `guard_verdict="passed"` when the edge taken is guarded);
- `transition.rejected`: the table or the ledger refused an event: `sequence`,
  `event_type`, `from_state`, `error_kind`, `reason`;
- `guard.rejected`: a guard refused an event: `sequence`, `event_type`, `from_state`,
  `guard`, `stop_reason`, `detail`.

The event's type is `event_type`, not `event`: structlog keeps `event` for the message. It
lives below the runtime and the reducers' users so that each of them logs the same shape;
`agentfsm.adapters.structlog` is the user-facing side (`LoggingReducer`).
"""

from __future__ import annotations

from typing import Any

from agentfsm.errors import GuardRejectedError, LifecycleError
from agentfsm.events.models import Event

__all__ = [
    "GUARD_REJECTED",
    "TRANSITION_APPLIED",
    "TRANSITION_REJECTED",
    "log_applied",
    "log_guard_rejected",
    "log_rejected",
]

TRANSITION_APPLIED = "transition.applied"
TRANSITION_REJECTED = "transition.rejected"
GUARD_REJECTED = "guard.rejected"


def log_applied(
    log: Any, event: Event, from_state: str, to_state: str, *, guarded: bool = False, **extra: Any
) -> None:
    """Log `transition.applied` for `event`, which moved the run `from_state` → `to_state`.

    Args:
        log: a structlog logger (bound to the run's `run_id` by the caller).
        event: the applied event.
        from_state: the run's status before it.
        to_state: the run's status after it.
        guarded: the edge taken lists guards (they passed): adds `guard_verdict="passed"`.
        **extra: more fields (e.g. `source="another process"`).
    """
    if guarded:
        extra["guard_verdict"] = "passed"
    log.info(
        TRANSITION_APPLIED,
        sequence=event.sequence,
        event_type=event.type,
        from_state=from_state,
        to_state=to_state,
        **extra,
    )


def log_guard_rejected(log: Any, event: Event, from_state: str, error: GuardRejectedError) -> None:
    """Log `guard.rejected` (a warning) for the event a guard refused."""
    log.warning(
        GUARD_REJECTED,
        sequence=event.sequence,
        event_type=event.type,
        from_state=from_state,
        guard=error.guard,
        stop_reason=error.stop_reason,
        detail=error.detail,
    )


def log_rejected(log: Any, event: Event, from_state: str, error: LifecycleError) -> None:
    """Log a refusal: `guard.rejected` for a guard's, else `transition.rejected` (an error)."""
    if isinstance(error, GuardRejectedError):
        log_guard_rejected(log, event, from_state, error)
        return
    log.error(
        TRANSITION_REJECTED,
        sequence=event.sequence,
        event_type=event.type,
        from_state=from_state,
        error_kind=error.kind,
        reason=error.reason,
    )
