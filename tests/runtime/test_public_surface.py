"""The runtime's public surface: sorted, resolving, documented; no global side effects."""

from __future__ import annotations

import subprocess
import sys

import agentfsm.runtime as runtime
from agentfsm.stores import leases


def test_all_is_sorted_unique_and_resolves() -> None:
    """One sorted `__all__`, constants first; every name exists and is public."""
    for module in (runtime, leases):
        names = list(module.__all__)
        assert len(names) == len(set(names))
        assert names == sorted(names, key=lambda n: (not n.isupper(), n))
        for name in names:
            assert not name.startswith("_")
            assert hasattr(module, name), name


def test_every_public_callable_has_a_one_line_summary() -> None:
    """A summary sentence on every exported class and function."""
    for name in runtime.__all__:
        obj = getattr(runtime, name)
        if callable(obj) and hasattr(obj, "__module__") and obj.__module__.startswith("agentfsm"):
            doc = (obj.__doc__ or "").strip()
            assert doc, name
            assert doc.splitlines()[0].endswith("."), name


def test_importing_the_runtime_configures_nothing() -> None:
    """No logging configuration, no warning filters changed by the import."""
    probe = (
        "import logging, warnings, structlog\n"
        "before = (list(warnings.filters), logging.root.handlers[:], structlog.is_configured())\n"
        "import agentfsm.runtime, agentfsm.stores.leases\n"
        "after = (list(warnings.filters), logging.root.handlers[:], structlog.is_configured())\n"
        "assert before == after, (before, after)\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_the_top_level_runtime_names_are_the_runtimes() -> None:
    """The Runner, its types and the steering verbs at `agentfsm.*` are `agentfsm.runtime`'s own."""
    import agentfsm

    names = [n for n in agentfsm.__all__ if agentfsm._LAZY[n] == "agentfsm.runtime"]
    assert names == [
        "Agent",
        "AsyncRunner",
        "Decision",
        "Emit",
        "ProposedCall",
        "RunResult",
        "Runner",
        "ScriptedModel",
        "Tool",
        "approve",
        "cancel",
        "pause",
        "reject",
        "resume",
        "submit",
    ]
    for name in names:
        assert getattr(agentfsm, name) is getattr(runtime, name), name
