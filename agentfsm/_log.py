"""The helpers that log a run's transitions, for every place in agentfsm that logs them.

The lines' shape (three stable event names, `transition.applied`, `transition.rejected` and
`guard.rejected`, with their fields) is documented once, for users, in
`agentfsm.adapters.structlog`, the user-facing side (`LoggingReducer`). This module lives
below the runtime and the reducers' users so that each of them logs that same shape.

Where the lines go is the application's choice, never ours: every logger agentfsm makes for
itself comes from `get_logger`. While the application has not configured structlog
(`structlog.is_configured()` is False), the lines go to the standard library's `logging`
logger `agentfsm` (and its children), which is silent until the application configures
`logging`; structlog's own defaults would print them on stdout. Once the application has
configured structlog, its configuration is used, so `structlog.testing.capture_logs()` sees
them too. The library never calls `structlog.configure()`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

from agentfsm.errors import GuardRejectedError, LifecycleError
from agentfsm.events.models import Event

__all__ = [
    "GUARD_REJECTED",
    "TRANSITION_APPLIED",
    "TRANSITION_REJECTED",
    "AgentFSMLogger",
    "get_logger",
    "info_enabled",
    "log_applied",
    "log_guard_rejected",
    "log_rejected",
]

#: The standard library logger everything agentfsm logs goes under (when structlog is not
#: configured by the application).
ROOT_LOGGER = "agentfsm"

# The library convention (logging HOWTO, "Configuring Logging for a Library"): without a
# handler of its own, `logging` would print warnings (a guard's refusal) on stderr through its
# last-resort handler even though the application configured nothing. A NullHandler on our
# own logger only; the root logger is untouched. Checked first so a reload adds no second one.
_root = logging.getLogger(ROOT_LOGGER)
if not any(isinstance(h, logging.NullHandler) for h in _root.handlers):
    _root.addHandler(logging.NullHandler())


def _to_stdlib(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    """The last processor: one readable line for `logging`, the fields kept on the record.

    `transition.applied event_type='run.started' run_id='r1' ...` reads well under any
    formatter; the fields also go on the record as `record.agentfsm` (a dict, not one
    attribute each: a field named like a `LogRecord` attribute would make `logging` raise).
    """
    fields = dict(event_dict)
    event = fields.pop("event", "")
    text = " ".join([str(event), *(f"{key}={value!r}" for key, value in sorted(fields.items()))])
    return {"msg": text, "extra": {"agentfsm": fields}}


class AgentFSMLogger:
    """A structlog-style logger that picks, at each line, where the line goes.

    The choice is made when a line is logged, not when the logger is made or bound: a
    module-level logger exists before the application configures anything, and a Runner may
    be built before a test enters `capture_logs()`. Each route's bound logger is built once.
    """

    def __init__(self, name: str = ROOT_LOGGER, context: Mapping[str, Any] | None = None) -> None:
        """A logger named `name` (a `logging` name under `agentfsm`) with `context` bound."""
        self.name = name
        self._context = dict(context or {})
        self._configured: Any = None
        self._stdlib: Any = None

    def bind(self, **values: Any) -> AgentFSMLogger:
        """A new logger with `values` added to the context of every line."""
        return AgentFSMLogger(self.name, {**self._context, **values})

    def _route(self) -> Any:
        if structlog.is_configured():
            if self._configured is None:
                # The application's configuration: bound loggers share its processor list,
                # which `capture_logs()` edits in place, so captures see our lines.
                self._configured = structlog.get_logger(self.name).bind(**self._context)
            return self._configured
        if self._stdlib is None:
            self._stdlib = structlog.wrap_logger(
                logging.getLogger(self.name),
                processors=[structlog.stdlib.filter_by_level, _to_stdlib],
                wrapper_class=structlog.stdlib.BoundLogger,
                context_class=dict,
            ).bind(**self._context)
        return self._stdlib

    def is_enabled_for(self, level: int) -> bool:
        """Whether a line at `level` (a `logging` level) would go anywhere, decided as each
        line is: a caller with many lines to build skips them all when it would not."""
        route = self._route()
        check = getattr(route, "is_enabled_for", None)
        if check is not None:
            return bool(check(level))
        if route is self._stdlib:
            return logging.getLogger(self.name).isEnabledFor(level)
        return True

    def debug(self, event: str, **fields: Any) -> None:
        """Log `event` at debug level."""
        self._route().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log `event` at info level."""
        self._route().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log `event` at warning level."""
        self._route().warning(event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log `event` at error level."""
        self._route().error(event, **fields)


def get_logger(name: str = ROOT_LOGGER) -> AgentFSMLogger:
    """The logger agentfsm uses when the caller passed none (see the module docstring)."""
    return AgentFSMLogger(name)


def info_enabled(log: Any) -> bool:
    """Whether `log` would take an info line (True when it cannot say: any logger)."""
    check = getattr(log, "is_enabled_for", None)
    return True if check is None else bool(check(logging.INFO))


#: The log event of a transition the table allowed and the store recorded.
TRANSITION_APPLIED = "transition.applied"
#: The log event of an event the table refused (the error says what was legal).
TRANSITION_REJECTED = "transition.rejected"
#: The log event of a guard stopping a run (its reason: max_turns, deadline, budget, ...).
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
