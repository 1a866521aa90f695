"""Static verification of tables, and `agentfsm check-table`."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from agentfsm import DEFAULT_TABLE
from agentfsm.events.vocabulary import BUILTIN_EVENTS
from agentfsm.fsm.check import check_parts, check_table, table_from_spec, transition_matrix
from agentfsm.fsm.table import State, Transition
from tests.fixtures.tables import NO_PAUSE

AGENTFSM = Path(sys.executable).parent / "agentfsm"
ROOT = Path(__file__).resolve().parent.parent


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AGENTFSM), "check-table", *args], capture_output=True, text=True,
                          check=False, cwd=ROOT, env={**os.environ, "NO_COLOR": "1"})  # fmt: skip


def test_the_default_table_is_clean() -> None:
    """No errors or warnings; the conditional-only pairs are listed as notes."""
    report = check_table(DEFAULT_TABLE)
    assert (report.ok, report.errors, report.warnings) == (True, (), ())
    assert len(report.notes) == 4
    assert (report.states, report.terminal, report.legal_pairs) == (10, 4, 44)


def test_events_no_edge_uses_are_warned_about() -> None:
    """Dropping `paused` leaves `run.paused` and `run.resumed` unable to fire."""
    assert check_table(NO_PAUSE).warnings == (
        "event 'run.paused' can never fire: no edge uses it",
        "event 'run.resumed' can never fire: no edge uses it",
    )


def test_the_matrix_covers_every_pair() -> None:
    """Every (state, event type) pair, with its ordered moves or none."""
    matrix = transition_matrix(DEFAULT_TABLE)
    assert len(matrix) == 10 * 19
    assert matrix[("waiting_tool", "tool.completed")] == (
        ("batch resolved", "running"), ("calls left", "waiting_tool"),
        ("only decisions left", "waiting_approval"),
    )  # fmt: skip
    assert matrix[("completed", "model.started")] == ()


def test_a_spec_round_trips_and_broken_specs_report_every_problem() -> None:
    """A table's description checks like the table; a broken one lists all its problems."""
    spec = json.loads(json.dumps(DEFAULT_TABLE.describe()))
    assert check_parts(*table_from_spec(spec)).errors == ()
    spec["transitions"].append({"source": "completed", "event": "run.resumed", "target": "running"})
    assert check_parts(*table_from_spec(spec)).errors == (
        "edge completed --run.resumed--> running leaves terminal state 'completed'",
    )


def test_cli_on_the_default_table() -> None:
    """Exit 0 and the report, which lists every limit guard and the events it checks."""
    result = check()
    assert result.returncode == 0
    assert result.stdout.splitlines()[:7] == [
        "table 'agent_run': 10 states (4 terminal), 53 edges, 44 legal (state, event) pairs",
        "guard: 'budget' on 'model.started', 'tool.started'",
        "guard: 'deadline' on 'model.started', 'tool.started'",
        "guard: 'loop_detected' on 'tool.requested'",
        "guard: 'max_attempts' on 'tool.started'",
        "guard: 'max_calls_per_decision' on 'model.completed'",
        "guard: 'max_turns' on 'model.started'",
    ]
    assert result.stdout.splitlines()[-1] == "ok: 0 error(s), 0 warning(s)"
    doc = json.loads(check("--format", "json").stdout)
    assert doc["guards"]["max_calls_per_decision"] == ["model.completed"]


def test_cli_on_a_deliberately_broken_table() -> None:
    """A builder that cannot build: every problem printed, exit 1."""
    result = check("--table", "tests.fixtures.tables:broken")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "table 'broken' could not be built",
        "error: edge done --run.resumed--> busy leaves terminal state 'done'",
        "error: state 'lost' is unreachable from the initial state 'new'",
        "error: state 'done' is unreachable from the initial state 'new'",
        "error: state 'new' cannot reach any terminal state (a trap)",
        "error: state 'busy' cannot reach any terminal state (a trap)",
        "error: state 'lost' cannot reach any terminal state (a trap)",
        "invalid: 6 error(s), 0 warning(s)",
    ]


def test_cli_json_with_the_matrix(tmp_path: Path) -> None:
    """JSON output carries the report and, asked for, every move."""
    doc = json.loads(
        check("--table", "tests.fixtures.tables:NO_PAUSE", "--format", "json", "--matrix").stdout
    )
    assert (doc["ok"], len(doc["warnings"]), doc["name"]) == (True, 2, "no_pause")
    assert {"state": "running", "event": "run.paused", "moves": []} in doc["matrix"]


class _CountedEdges(list[Transition]):
    """A table's edges that count how often they are read through."""

    reads = 0

    def __iter__(self) -> Iterator[Transition]:
        self.reads += 1
        return super().__iter__()


def test_the_check_reads_the_edges_a_fixed_number_of_times() -> None:
    """A chain of states is checked reading its edges the same few times whatever its
    length, not once per state (which made `check-table` on a large spec cost states x
    edges). Each waits for a person (a Runner starts the run and stops there)."""

    def reads(n: int) -> int:
        states = [State("s0"), *(State(f"s{i}", kind="waiting") for i in range(1, n))]
        states.append(State("done", terminal=True))
        names = [s.name for s in states]
        edges = _CountedEdges(
            Transition(a, "step" if a != "s0" else "run.started", b)
            for a, b in itertools.pairwise(names)
        )
        report = check_parts("chain", states, "s0", edges, BUILTIN_EVENTS.extend("step"))
        assert (report.errors, report.states, report.edges) == ((), n + 1, n)
        return edges.reads

    assert reads(200) == reads(20) <= 8, (reads(20), reads(200))
