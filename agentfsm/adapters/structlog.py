"""structlog logging of a run's transitions: one shape for every place that logs them.

Three stable event names, each with the run's `run_id` bound:

- `transition.applied`: `sequence`, `event_type`, `from_state`, `to_state` (and
  `guard_verdict="passed"` when the edge taken is guarded);
- `transition.rejected`: the table or the ledger refused an event: `sequence`,
  `event_type`, `from_state`, `error_kind`, `reason`;
- `guard.rejected`: a guard refused an event: `sequence`, `event_type`, `from_state`,
  `guard`, `stop_reason`, `detail`.

The event's type is `event_type`, not `event`: structlog keeps `event` for the message.

`LoggingReducer` is a `Reducer` that logs as it folds. The plain `Reducer` stays as it was (no
per-event cost when nothing is logged); use the logging one where you want the logs, e.g.
`StoreOptions(reducer=LoggingReducer(...))` or as the reducer of an SDK adapter. The library
never calls `structlog.configure()`: the application decides where the lines go.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog

from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.errors import GuardRejectedError, LifecycleError
from agentfsm.fsm.guards import Guard, GuardContext
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = [
    "GUARD_REJECTED",
    "TRANSITION_APPLIED",
    "TRANSITION_REJECTED",
    "LoggingReducer",
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


class LoggingReducer(Reducer):
    """A `Reducer` that logs every applied event and every refusal through structlog.

    It folds exactly as `Reducer` does (same table, guards and errors); it only adds the
    log lines described in the module docstring.

    Args:
        table: the transition table (the default agent-run table unless given).
        guards: Python guard objects, as for `Reducer`.
        run_limits: check each run's own `run.started.limits` too.
        logger: a structlog logger (`structlog.get_logger("agentfsm")` by default).
    """

    __slots__ = ("_log",)

    def __init__(
        self,
        table: TransitionTable = DEFAULT_TABLE,
        guards: Iterable[Guard] = (),
        *,
        run_limits: bool = True,
        logger: Any = None,
    ) -> None:
        super().__init__(table, guards, run_limits=run_limits)
        self._log = logger if logger is not None else structlog.get_logger("agentfsm")

    def reduce(self, record: RunRecord, event: Event, ctx: GuardContext | None = None) -> RunRecord:
        """Fold `event` as `Reducer.reduce` does, logging the transition or the refusal."""
        log = self._log.bind(run_id=record.run_id)
        try:
            new = super().reduce(record, event, ctx)
        except LifecycleError as exc:
            log_rejected(log, event, record.status, exc)
            raise
        log_applied(log, event, record.status, new.status, guarded=event.type in self._guarded)
        return new
