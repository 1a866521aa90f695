"""Limits a run must keep: max turns, deadline, budget (shared by subagents), loops, attempts,
calls per decision.

A guard is a pure function of the run record, the incoming event and a context; a table's
edges name the guards that apply to them. `GuardSet` binds a table's guard names to guard
objects and to each run's own `run.started.limits`.
"""

from agentfsm.guards.base import (
    AllOf,
    AnyOf,
    Guard,
    GuardContext,
    Verdict,
    all_of,
    any_of,
    attach_guard,
)
from agentfsm.guards.budget import Charge, SharedBudget
from agentfsm.guards.guardset import GuardSet
from agentfsm.guards.limits import (
    DEFAULT_MAX_CALLS_PER_DECISION,
    DEFAULT_MAX_TURNS,
    Budget,
    Deadline,
    MaxAttempts,
    MaxCallsPerDecision,
    MaxTurns,
    RunLimits,
    cap_timeout,
    guards_from_limits,
    overrun,
    remaining,
    spends,
    with_calls_cap,
    with_caps,
)
from agentfsm.guards.loops import LoopDetector, fingerprint, fingerprints

__all__ = [
    "DEFAULT_MAX_CALLS_PER_DECISION",
    "DEFAULT_MAX_TURNS",
    "AllOf",
    "AnyOf",
    "Budget",
    "Charge",
    "Deadline",
    "Guard",
    "GuardContext",
    "GuardSet",
    "LoopDetector",
    "MaxAttempts",
    "MaxCallsPerDecision",
    "MaxTurns",
    "RunLimits",
    "SharedBudget",
    "Verdict",
    "all_of",
    "any_of",
    "attach_guard",
    "cap_timeout",
    "fingerprint",
    "fingerprints",
    "guards_from_limits",
    "overrun",
    "remaining",
    "spends",
    "with_calls_cap",
    "with_caps",
]
