"""The public surface: a small pinned top level, loaded lazily, documented, nothing private."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import agentfsm

PACKAGE = Path(agentfsm.__file__).resolve().parent

#: The top level, pinned: adding a name here is a decision, not a side effect of a new module.
TOP_LEVEL = [
    "DEFAULT_TABLE",
    "Agent",
    "AgentFSMError",
    "AsyncRunner",
    "Budget",
    "Condition",
    "Deadline",
    "Decision",
    "Emit",
    "Event",
    "EventFormatError",
    "GuardRejectedError",
    "IllegalTransitionError",
    "LifecycleError",
    "LogBuilder",
    "LoopDetector",
    "MaxTurns",
    "MemoryEventStore",
    "ProposedCall",
    "Reducer",
    "RunRecord",
    "RunResult",
    "Runner",
    "SQLiteEventStore",
    "ScriptedModel",
    "State",
    "StoreError",
    "StoreOptions",
    "Tool",
    "Transition",
    "TransitionTable",
    "approve",
    "cancel",
    "dump_event",
    "parse_event",
    "pause",
    "read_events",
    "reduce",
    "reject",
    "replay",
    "resume",
    "submit",
]

SUBPACKAGES = [
    "agentfsm.errors",
    "agentfsm.events",
    "agentfsm.fsm",
    "agentfsm.guards",
    "agentfsm.reducers",
    "agentfsm.runtime",
    "agentfsm.stores",
    "agentfsm.testing",
]


def _fresh(code: str) -> None:
    """Run `code` in a new interpreter, so nothing this test session imported counts."""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_top_level_is_the_pinned_list() -> None:
    """`agentfsm.__all__` is exactly the list above: growing it means editing this test."""
    assert list(agentfsm.__all__) == TOP_LEVEL


def test_all_is_sorted_and_unique() -> None:
    """A deliberate surface: one sorted `__all__`, constants first."""
    names = list(agentfsm.__all__)
    assert len(names) == len(set(names))
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))


def test_the_lazy_table_and_the_type_checking_imports_agree_with_all() -> None:
    """What mypy sees (`if TYPE_CHECKING:` imports) is what `__getattr__` serves, name for name."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                assert imp.module is not None
                typed |= {alias.asname or alias.name: imp.module for alias in imp.names}
    assert typed == agentfsm._LAZY
    assert sorted(typed) == sorted(agentfsm.__all__)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_every_exported_name_resolves_to_its_namespace_export(name: str) -> None:
    """Each top-level name is the very object its namespace exports under the same name."""
    namespace = importlib.import_module(agentfsm._LAZY[name])
    assert name in namespace.__all__
    assert getattr(agentfsm, name) is getattr(namespace, name)


@pytest.mark.parametrize("module", ["agentfsm", *SUBPACKAGES])
def test_every_exported_name_is_public(module: str) -> None:
    """Each name in a namespace's `__all__` exists, and none starts with an underscore."""
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert not name.startswith("_"), name
        assert hasattr(mod, name), f"{module}.{name} does not resolve"


def _comment_above(name: str, namespace: str) -> str:
    """The `#:` comment right above `name = ...` in one of the namespace's modules."""
    root = PACKAGE / namespace.removeprefix("agentfsm.").replace(".", "/")
    assignment = re.compile(rf"^{re.escape(name)}(: [^=]+)? = ")
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if assignment.match(line) and i and lines[i - 1].startswith("#: "):
                return lines[i - 1].removeprefix("#: ")
    return ""


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_every_exported_name_has_a_one_line_summary(name: str) -> None:
    """Classes and functions carry their own docstring; values a `#:` comment; both a sentence."""
    obj = getattr(agentfsm, name)
    if inspect.isclass(obj) or inspect.isroutine(obj):
        doc = (obj.__doc__ or "").strip()
        summary = doc.splitlines()[0] if doc else ""
    else:
        summary = _comment_above(name, agentfsm._LAZY[name])
    assert summary, f"{name} has no summary"
    assert summary.endswith("."), f"{name}: summary line must be a sentence: {summary!r}"


def test_dir_lists_every_name_before_it_is_loaded() -> None:
    """`dir(agentfsm)` (completion in a REPL) shows the whole surface, loaded or not."""
    _fresh(
        "import agentfsm\n"
        f"assert set({TOP_LEVEL!r}) <= set(dir(agentfsm))\n"
        "assert '__version__' in dir(agentfsm)\n"
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name that is not exported (here, one that moved to its namespace) says so plainly."""
    with pytest.raises(AttributeError) as info:
        _ = agentfsm.make_event  # type: ignore[attr-defined]
    assert str(info.value) == "module 'agentfsm' has no attribute 'make_event'"


def test_importing_agentfsm_imports_nothing_heavy() -> None:
    """`import agentfsm` loads no namespace: not the runtime, diagrams, stores, nor pydantic."""
    _fresh(
        "import sys\n"
        "import agentfsm\n"
        "heavy = ('agentfsm.runtime', 'agentfsm.diagrams', 'agentfsm.stores', 'agentfsm.events',\n"
        "         'sqlite3', 'pydantic', 'structlog')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "assert loaded == [], loaded\n"
        "assert [m for m in sys.modules if m.startswith('agentfsm')] == ['agentfsm']\n"
    )


def test_the_core_names_do_not_pull_the_runtime_or_sqlite() -> None:
    """Folding logs (table, events, reducer, guards) needs no runtime, diagrams, stores, sqlite3."""
    _fresh(
        "import sys\n"
        "from agentfsm import (DEFAULT_TABLE, Event, LogBuilder, MaxTurns, Reducer, RunRecord,\n"
        "                      TransitionTable, parse_event, read_events, reduce, replay)\n"
        "heavy = ('agentfsm.runtime', 'agentfsm.diagrams', 'agentfsm.stores', 'agentfsm.adapters',\n"
        "         'sqlite3', 'structlog')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "assert loaded == [], loaded\n"
    )


def test_catching_an_error_needs_no_pydantic() -> None:
    """The errors are plain classes: importing one loads no models."""
    _fresh(
        "import sys\n"
        "from agentfsm import AgentFSMError, LifecycleError, StoreError\n"
        "assert 'pydantic' not in sys.modules\n"
    )


def test_the_package_is_typed() -> None:
    """`py.typed` ships, so type checkers use our annotations."""
    from importlib.resources import files

    assert files("agentfsm").joinpath("py.typed").is_file()


def test_importing_has_no_global_side_effects() -> None:
    """Importing agentfsm (and every top-level name) configures no logging and no warnings."""
    _fresh(
        "import logging, warnings, structlog\n"
        "before = (list(warnings.filters), logging.root.handlers[:], structlog.is_configured())\n"
        "import agentfsm\n"
        "for name in agentfsm.__all__:\n"
        "    getattr(agentfsm, name)\n"
        "after = (list(warnings.filters), logging.root.handlers[:], structlog.is_configured())\n"
        "assert before == after, (before, after)\n"
    )


#: What `agentfsm.testing` exports, pinned like the top level: strategies, the stateful
#: machine, coverage, the assertions and promises, the store conformance kit.
TESTING = [
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

#: The testing kit's public modules: the front door, the module pytest loads by its entry
#: point, and what tests stand up to run against. Everything else is under an underscore.
TESTING_MODULES = [
    "agentfsm.testing",
    "agentfsm.testing.fixtures",
    "agentfsm.testing.fixtures.claude_transport",
    "agentfsm.testing.fixtures.postgres_server",
    "agentfsm.testing.pytest_plugin",
]


def test_the_testing_kit_exports_the_pinned_list() -> None:
    """`agentfsm.testing.__all__` is exactly the list above, sorted as the top level is."""
    import agentfsm.testing

    assert list(agentfsm.testing.__all__) == TESTING
    assert sorted(TESTING, key=lambda n: (not n.isupper(), n)) == TESTING


def test_the_testing_kit_has_only_its_public_modules() -> None:
    """A new module of the kit is private unless it is made public on purpose."""
    root = PACKAGE / "testing"
    public = sorted(
        ".".join(
            ["agentfsm", "testing", *path.relative_to(root).with_suffix("").parts]
        ).removesuffix(".__init__")
        for path in root.rglob("*.py")
        if not any(part.startswith("_") for part in path.relative_to(root).parts[:-1])
        and (path.name == "__init__.py" or not path.name.startswith("_"))
    )
    assert public == TESTING_MODULES


def test_the_testing_kits_lazy_table_agrees_with_its_type_checking_imports() -> None:
    """What mypy sees of `agentfsm.testing` is what its `__getattr__` serves; the rest of
    `__all__` is imported eagerly and needs neither pytest nor Hypothesis."""
    import agentfsm.testing

    tree = ast.parse((PACKAGE / "testing" / "__init__.py").read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                assert imp.module is not None
                typed |= {alias.asname or alias.name: imp.module for alias in imp.names}
    assert typed == agentfsm.testing._LAZY
    eager = sorted(set(TESTING) - set(typed))
    assert eager == [
        "IllegalLogError",
        "Step",
        "assert_legal_log",
        "assert_table_keeps_its_promises",
        "render_path",
        "stop_problems",
    ]


@pytest.mark.parametrize("name", TESTING)
def test_every_testing_name_is_its_modules_export(name: str) -> None:
    """Each name the kit exports is listed in the `__all__` of the module it comes from."""
    import agentfsm.testing

    value = getattr(agentfsm.testing, name)
    # The eager names are classes and functions: their module is where they are defined.
    module = importlib.import_module(agentfsm.testing._LAZY.get(name) or value.__module__)
    assert name in module.__all__
    assert getattr(module, name) is value


#: Modules without an underscore that hold names their package does not export, and that no
#: page imports from by path: each is yet to be made public (its names exported, documented)
#: or private (an underscore). Drop the entry with the decision; a new module is not added.
UNDECIDED_MODULES: set[str] = set()

#: The packages whose modules are public or private by the rule below (the CLI's modules are
#: its commands; the testing kit has its own pinned list above).
RULED_PACKAGES = ["runtime", "stores", "events", "fsm", "guards", "reducers", "diagrams", "ui"]


def _modules_without_underscore() -> list[str]:
    found = []
    for package in RULED_PACKAGES:
        for path in sorted((PACKAGE / package).glob("*.py")):
            if not path.name.startswith("_"):
                found.append(f"agentfsm.{package}.{path.stem}")
    return found


def test_every_module_is_public_or_private_on_purpose() -> None:
    """A module without an underscore holds only names its package exports, or has a page of
    the API reference (its own names are then public, documented and checked by `make
    docs`); one that holds the library's internals has an underscore. Being imported from
    in the README or docs/ is not enough: a public name the reference leaves out is one a
    user can find only by reading the source."""
    from docsite.reference import NAMESPACES

    hidden = {}
    for name in _modules_without_underscore():
        module = importlib.import_module(name)
        package = importlib.import_module(name.rsplit(".", 1)[0])
        internals = sorted(set(module.__all__) - set(package.__all__))
        if internals and name not in NAMESPACES:
            hidden[name] = internals
    assert sorted(set(hidden) - UNDECIDED_MODULES) == []
    assert sorted(UNDECIDED_MODULES - set(hidden)) == [], "decided: drop it from the list"
