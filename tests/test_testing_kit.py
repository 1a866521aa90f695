"""The testing kit as users see it: docs/testing.md runs as written; the plugin explains."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from hypothesis import settings

from agentfsm import LogBuilder, TransitionTable
from agentfsm.events import dump_event
from agentfsm.fsm.check import check_table
from agentfsm.testing import assert_edge_coverage, assert_legal_log, legal_runs, run_machine

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<out>.*?)```)?", re.DOTALL)


def _blocks() -> list[tuple[str, str | None]]:
    return [(m["code"], m["out"]) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_doc_has_its_six_examples() -> None:
    """Strategies, stateful, transitions model, edge coverage, promises, the agent's tools:
    the examples the issues ask for."""
    assert len(_blocks()) == 6


def test_the_tools_example_runs_and_passes() -> None:
    """Told the agent's tools and the sentiment tool's results, the walk takes every edge of
    the doc's table, `[angry]` (a condition on a tool's result) included; without the
    results that edge is missing, and the report says why."""
    namespace: dict[str, object] = {}
    # Not under this file's `from __future__ import annotations`: pydantic reads the types.
    exec(compile(_blocks()[5][0], str(DOC), "exec", dont_inherit=True), namespace)
    namespace["test_every_support_edge_with_the_agents_tools"]()  # type: ignore[operator]
    table = namespace["SUPPORT"]
    assert isinstance(table, TransitionTable)
    runs = legal_runs(table, tools=namespace["TOOLS"])
    with pytest.raises(AssertionError, match=r"but condition 'angry' never held"):
        assert_edge_coverage(table, runs, max_examples=3 * len(table.transitions))


def test_the_promises_example_runs_and_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ticket table keeps its promises, as the doc's test says."""
    monkeypatch.chdir(DOC.parent.parent)
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[4][0], str(DOC), "exec"), namespace)
    namespace["test_the_ticket_table_keeps_its_promises"]()  # type: ignore[operator]


def test_the_edge_coverage_example_runs_and_passes() -> None:
    """Both coverage tests of the doc pass on the ticket table."""
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[3][0], str(DOC), "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()  # type: ignore[operator]


def test_the_property_examples_run_and_pass() -> None:
    """The two @given tests of the doc are collected and pass."""
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[0][0], str(DOC), "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()  # type: ignore[operator]


def test_the_property_examples_table_is_one_a_runner_can_drive() -> None:
    """The doc's own table passes check-table: its `escalated` state, where a person takes
    the run over, is declared `waiting` (a bare `State("escalated")` was `active`, a state no
    Runner can leave)."""
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[0][0], str(DOC), "exec"), namespace)
    table = namespace["MY_TABLE"]
    assert isinstance(table, TransitionTable)
    assert (table.kind("escalated"), check_table(table).errors) == ("waiting", ())


def test_the_stateful_example_runs_and_passes() -> None:
    """The generated machine, bound to a transitions.Machine, agrees with the table."""
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[1][0], str(DOC), "exec"), namespace)
    case = namespace["TestMachineAgreesWithTable"]
    case.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)  # type: ignore[attr-defined]
    case("runTest").runTest()  # type: ignore[operator]


def test_the_transitions_model_example_prints_what_it_says() -> None:
    """The 10-line example of a team's existing transitions model."""
    code, expected = _blocks()[2]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue() == expected


def test_a_stateful_machine_catches_a_wrong_system() -> None:
    """A system under test that disagrees with the table is caught, not waved through."""

    class Wrong(run_machine()):
        def on_event(self, event, before, after):  # type: ignore[no-untyped-def]
            assert after.status != "running", "my service never starts a run"

    Wrong.TestCase.settings = settings(
        max_examples=60, stateful_step_count=20, deadline=None, derandomize=True, database=None
    )
    with pytest.raises(AssertionError, match="my service never starts a run"):
        Wrong.TestCase("runTest").runTest()


def test_assert_legal_log_shows_the_event_and_the_path() -> None:
    """The failure names the refused event, the reason, the moves before it and the event."""
    log = LogBuilder("r")
    log.add("run.started")
    log.add("model.started")
    log.add("run.completed")
    with pytest.raises(AssertionError) as info:
        assert_legal_log(log.events)
    assert str(info.value).splitlines() == [
        "log is not legal under table 'agent_run': event 3 of 3 is refused",
        "  run 'r' is 'running': event 'run.completed' (sequence 3) is not allowed: condition "
        "'final output recorded, nothing unresolved' does not hold; allowed: 'approval.requested', "
        "'handoff', 'model.completed', 'model.started', 'run.cancel_requested', 'run.completed', "
        "'run.failed', 'run.paused', 'run.terminated', 'tool.requested', 'tool.started'",
        "path so far:",
        "     1  run.started            created -> running",
        "     2  model.started          running -> running",
        "offending event:",
        f"  {dump_event(log.events[2])}",
    ]


def test_the_plugin_fixtures_are_registered(agent_run_table, agent_run_reducer) -> None:  # type: ignore[no-untyped-def]
    """Installing agentfsm gives every pytest session the fixtures."""
    assert agent_run_reducer.table is agent_run_table
