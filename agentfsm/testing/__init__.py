"""The testing kit: test your code against your table, and your store against the contract.

Everything a user imports is here, in `__all__`:

- Logs generated from a table (Hypothesis): `legal_runs` (whole legal logs, every edge
  reached by construction), `illegal_steps` (a legal prefix and one event the table or the
  ledger refuses), and the pieces for strategies of your own (`payloads`, `events`,
  `timestamps`, `run_ids`, `json_values`, ...).
- The stateful machine (Hypothesis): `run_machine(table)`, a `RunMachine` with a rule per
  event type; `record_problems` is the ledger check of its invariant.
- Edge coverage (Hypothesis): `EdgeCoverage`, `assert_edge_coverage`, and
  `edge_covering_paths` (the shortest log to every edge, for `pytest.mark.parametrize`).
- Assertions over logs you have (nothing beyond agentfsm): `assert_legal_log` (fails with
  the offending event and the path so far) and `assert_table_keeps_its_promises` (every
  declared cancel, failure and guard stop is possible where the table says).
- The store conformance kit: `StoreConformance` and `AsyncStoreConformance` (pytest test
  classes: subclass one with a `make_store` fixture, and a `Tamper` for the bad-data
  checks), `race_appends` and `crash_trials` (writers racing and killed, in real
  processes), and `scripted_run` (a legal run of tool turns to append).

Two modules are public beside this one: `agentfsm.testing.pytest_plugin`, which pytest loads
through its entry point (the `agent_run_table` and `agent_run_reducer` fixtures), and the
package `agentfsm.testing.fixtures`, what a test stands up to run against (a scripted
`claude` CLI, a throwaway PostgreSQL server). The implementation is private, by concern:
`_runs` (logs generated from a table), `_stores` (the store kits), `_assertions` and
`_promises`.

`import agentfsm.testing` imports neither pytest nor Hypothesis. A name that needs one is
loaded when first asked for (PEP 562), and says what to install when it is missing: the
strategies, the machine and the coverage need Hypothesis (the `testing` extra), the
conformance suites pytest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentfsm.testing._assertions import IllegalLogError, Step, assert_legal_log, render_path
from agentfsm.testing._promises import assert_table_keeps_its_promises, stop_problems

if TYPE_CHECKING:
    # Type checkers and IDEs read these; at run time `__getattr__` below loads the same names
    # from `_LAZY` (tests/test_public_api.py keeps the two in step).
    from agentfsm.testing._runs.coverage import EdgeCoverage, assert_edge_coverage
    from agentfsm.testing._runs.illegal import ILLEGAL_KINDS, IllegalStep, illegal_steps
    from agentfsm.testing._runs.paths import edge_covering_paths, edge_ids
    from agentfsm.testing._runs.stateful import RunMachine, record_problems, run_machine
    from agentfsm.testing._runs.values import (
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
    from agentfsm.testing._runs.walk import FEATURES, legal_runs
    from agentfsm.testing._stores.conformance import AsyncStoreConformance, StoreConformance
    from agentfsm.testing._stores.process_checks import (
        CrashReport,
        RaceReport,
        StoreFactory,
        crash_trials,
        race_appends,
    )
    from agentfsm.testing._stores.scripted import scripted_run
    from agentfsm.testing._stores.tamper import Tamper

__all__ = [
    "FEATURES",
    "ILLEGAL_KINDS",
    "AsyncStoreConformance",
    "CrashReport",
    "EdgeCoverage",
    "IllegalLogError",
    "IllegalStep",
    "RaceReport",
    "RunMachine",
    "Step",
    "StoreConformance",
    "StoreFactory",
    "Tamper",
    "arguments",
    "assert_edge_coverage",
    "assert_legal_log",
    "assert_table_keeps_its_promises",
    "crash_trials",
    "edge_covering_paths",
    "edge_ids",
    "error_infos",
    "events",
    "illegal_steps",
    "json_values",
    "legal_runs",
    "payloads",
    "race_appends",
    "record_problems",
    "render_path",
    "run_ids",
    "run_machine",
    "scripted_run",
    "stop_problems",
    "timestamps",
    "tool_calls",
    "usages",
]

#: Each name loaded on first use -> the module it lives in.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("EdgeCoverage", "assert_edge_coverage"), "agentfsm.testing._runs.coverage"),
    **dict.fromkeys(
        ("ILLEGAL_KINDS", "IllegalStep", "illegal_steps"), "agentfsm.testing._runs.illegal"
    ),
    **dict.fromkeys(("edge_covering_paths", "edge_ids"), "agentfsm.testing._runs.paths"),
    **dict.fromkeys(
        ("RunMachine", "record_problems", "run_machine"), "agentfsm.testing._runs.stateful"
    ),
    **dict.fromkeys(
        (
            "arguments",
            "error_infos",
            "events",
            "json_values",
            "payloads",
            "run_ids",
            "timestamps",
            "tool_calls",
            "usages",
        ),
        "agentfsm.testing._runs.values",
    ),
    **dict.fromkeys(("FEATURES", "legal_runs"), "agentfsm.testing._runs.walk"),
    **dict.fromkeys(
        ("AsyncStoreConformance", "StoreConformance"), "agentfsm.testing._stores.conformance"
    ),
    **dict.fromkeys(
        ("CrashReport", "RaceReport", "StoreFactory", "crash_trials", "race_appends"),
        "agentfsm.testing._stores.process_checks",
    ),
    "scripted_run": "agentfsm.testing._stores.scripted",
    "Tamper": "agentfsm.testing._stores.tamper",
}

#: A package a lazy name may need -> how to say so: its name and how to install it.
_NEEDS = {
    "hypothesis": ("Hypothesis", "pip install 'agentfsm[testing]'"),
    "pytest": ("pytest", "pip install pytest"),
}


def __getattr__(name: str) -> Any:
    """Load an exported name from its module on first use, then keep it here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentfsm.testing' has no attribute {name!r}")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name not in _NEEDS:
            raise
        package, install = _NEEDS[exc.name]
        raise ImportError(f"agentfsm.testing.{name} needs {package}: {install}") from exc
    value = getattr(loaded, name)
    # Cached as a module global, so `__getattr__` runs once per name.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's own attributes and every exported name, loaded or not."""
    return sorted(set(globals()) | set(__all__))
