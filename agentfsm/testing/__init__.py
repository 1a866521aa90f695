"""Property-based testing kit: Hypothesis strategies and a state machine built from any table.

`agentfsm.testing` imports neither pytest nor Hypothesis by itself. The strategies and the
state machine need Hypothesis (the `testing` extra) and load it when first used; the
assertions need nothing more than agentfsm. The pytest plugin lives in
`agentfsm.testing.pytest_plugin` and pytest loads it through its entry point.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentfsm.testing.assertions import IllegalLogError, Step, assert_legal_log, render_path
from agentfsm.testing.promises import assert_table_keeps_its_promises, stop_problems

if TYPE_CHECKING:
    from agentfsm.testing.coverage import EdgeCoverage, assert_edge_coverage
    from agentfsm.testing.paths import edge_covering_paths, edge_ids
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
    "EdgeCoverage",
    "IllegalLogError",
    "IllegalStep",
    "RunMachine",
    "Step",
    "arguments",
    "assert_edge_coverage",
    "assert_legal_log",
    "assert_table_keeps_its_promises",
    "edge_covering_paths",
    "edge_ids",
    "error_infos",
    "events",
    "illegal_steps",
    "json_values",
    "legal_runs",
    "payloads",
    "record_problems",
    "render_path",
    "run_ids",
    "run_machine",
    "stop_problems",
    "timestamps",
    "tool_calls",
    "usages",
]

# Names that need Hypothesis, and the module each lives in. They are imported when first
# asked for (PEP 562), so the assertions and the pytest plugin work without Hypothesis.
_NEEDS_HYPOTHESIS = {
    **dict.fromkeys(("RunMachine", "record_problems", "run_machine"), "stateful"),
    **dict.fromkeys(("EdgeCoverage", "assert_edge_coverage"), "coverage"),
    **dict.fromkeys(("edge_covering_paths", "edge_ids"), "paths"),
    **dict.fromkeys(
        (
            "FEATURES",
            "ILLEGAL_KINDS",
            "IllegalStep",
            "arguments",
            "error_infos",
            "events",
            "illegal_steps",
            "json_values",
            "legal_runs",
            "payloads",
            "run_ids",
            "timestamps",
            "tool_calls",
            "usages",
        ),
        "strategies",
    ),
}


def __getattr__(name: str) -> Any:
    module = _NEEDS_HYPOTHESIS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentfsm.testing' has no attribute '{name}'")
    try:
        loaded = importlib.import_module(f"agentfsm.testing.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != "hypothesis":
            raise
        raise ImportError(
            f"agentfsm.testing.{name} needs Hypothesis: pip install 'agentfsm[testing]'"
        ) from exc
    return getattr(loaded, name)
