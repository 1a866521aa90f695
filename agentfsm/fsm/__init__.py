"""States, transitions, the table, `step`, errors: the declaration of a lifecycle."""

from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.errors import (
    ActionError,
    AgentFSMError,
    ConcurrencyConflictError,
    CorruptLogError,
    EventFormatError,
    GuardRejectedError,
    IllegalTransitionError,
    InvalidTableError,
    LifecycleError,
    RunMismatchError,
    RunNotFoundError,
    SequenceError,
    StoreError,
)
from agentfsm.fsm.names import RESOLVED, ActionStatus, Decision, EventType, RunStatus, StopReason
from agentfsm.fsm.table import Condition, State, Transition, TransitionTable

__all__ = [
    "DEFAULT_TABLE",
    "RESOLVED",
    "ActionError",
    "ActionStatus",
    "AgentFSMError",
    "ConcurrencyConflictError",
    "Condition",
    "CorruptLogError",
    "Decision",
    "EventFormatError",
    "EventType",
    "GuardRejectedError",
    "IllegalTransitionError",
    "InvalidTableError",
    "LifecycleError",
    "RunMismatchError",
    "RunNotFoundError",
    "RunStatus",
    "SequenceError",
    "State",
    "StopReason",
    "StoreError",
    "Transition",
    "TransitionTable",
]
