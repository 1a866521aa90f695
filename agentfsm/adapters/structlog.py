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

from agentfsm._log import (
    GUARD_REJECTED,
    TRANSITION_APPLIED,
    TRANSITION_REJECTED,
    get_logger,
    log_applied,
    log_rejected,
)
from agentfsm.errors import LifecycleError
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import Guard, GuardContext
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = [
    "GUARD_REJECTED",
    "TRANSITION_APPLIED",
    "TRANSITION_REJECTED",
    "LoggingReducer",
]


class LoggingReducer(Reducer):
    """A `Reducer` that logs every applied event and every refusal through structlog.

    It folds exactly as `Reducer` does (same table, guards and errors); it only adds the
    log lines described in the module docstring.

    Args:
        table: the transition table (the default agent-run table unless given).
        guards: Python guard objects, as for `Reducer`.
        run_limits: check each run's own `run.started.limits` too.
        logger: a structlog logger (by default `agentfsm._log.get_logger()`: see there).
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
        self._log = logger if logger is not None else get_logger()

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
