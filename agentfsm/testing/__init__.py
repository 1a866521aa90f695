"""Property-based testing kit: Hypothesis strategies built from any transition table.

Importing this package needs `hypothesis` (the `testing` extra) but never `pytest`; the
pytest plugin lives in `agentfsm.testing.pytest_plugin` and is loaded by pytest itself.
"""

from agentfsm.testing.stateful import RunMachine, record_problems, run_machine
from agentfsm.testing.strategies import (
    FEATURES,
    ILLEGAL_KINDS,
    IllegalStep,
    arguments,
    error_infos,
    events,
    illegal_steps,
    json_values,
    legal_runs,
    payloads,
    run_ids,
    timestamps,
    tool_calls,
    usages,
)

__all__ = [
    "FEATURES",
    "ILLEGAL_KINDS",
    "IllegalStep",
    "RunMachine",
    "arguments",
    "error_infos",
    "events",
    "illegal_steps",
    "json_values",
    "legal_runs",
    "payloads",
    "record_problems",
    "run_ids",
    "run_machine",
    "timestamps",
    "tool_calls",
    "usages",
]
