"""Hypothesis strategies built from a transition table, gathered in one place.

The implementation lives in modules of one concern each: `values` (ids, timestamps,
payloads, single events), `walk` (`legal_runs`), `illegal` (`illegal_steps`), `coverage`
(which edges examples took) and `paths` (deterministic logs that cover every edge). This
module re-exports their public names, so `from agentfsm.testing.strategies import ...`
keeps working.
"""

from __future__ import annotations

from agentfsm.testing.illegal import ILLEGAL_KINDS, IllegalStep, illegal_kind, illegal_steps
from agentfsm.testing.values import (
    arguments,
    error_infos,
    events,
    json_values,
    payloads,
    run_ids,
    timestamps,
    tool_calls,
    usages,
)
from agentfsm.testing.walk import FEATURES, legal_runs

__all__ = [
    "FEATURES",
    "ILLEGAL_KINDS",
    "IllegalStep",
    "arguments",
    "error_infos",
    "events",
    "illegal_kind",
    "illegal_steps",
    "json_values",
    "legal_runs",
    "payloads",
    "run_ids",
    "timestamps",
    "tool_calls",
    "usages",
]
