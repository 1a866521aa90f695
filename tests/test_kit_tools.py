"""The testing kit reaches every edge a real log can take (issue 26, item 4).

Edges caused by the agent's tools (which tool ran, what it returned), by the events a call or
the model's decision proposes, and by timeouts are generated; the kit calls the user's tools
(from an `Agent`, `Tool`s or names), `payloads=` apply to built-in events, and the coverage
report says why an edge was missed. The table is `TOOL_LOAN_TABLE` (65 edges) of
`tests/fixtures/emit_loan.py`.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from agentfsm import DEFAULT_TABLE
from agentfsm.events import Event
from agentfsm.events.codec import parse_event
from agentfsm.reducers import Reducer
from agentfsm.runtime import Agent, ScriptedModel
from agentfsm.testing import (
    EdgeCoverage,
    assert_edge_coverage,
    assert_table_keeps_its_promises,
    edge_covering_paths,
    legal_runs,
    run_machine,
)
from agentfsm.testing._runs.candidates import Clock, accepted
from agentfsm.testing._runs.tools import tool_set
from tests._cli_helpers import run_main
from tests.fixtures.emit_loan import TOOL_LOAN_TABLE, credit_results, loan_tools

EDGES = len(TOOL_LOAN_TABLE.transitions)
CLOCK = Clock()
RESULTS = {"check_credit": credit_results()}
#: The edges only the agent's tools reach: a call's proposal, a result read from the facts,
#: a result read off `tool.completed`.
TOOL_EDGES = [
    "running --loan.documents_requested--> documents_requested [asked by a call]",
    "running --loan.sent_to_underwriting--> approved [good credit]",
    "waiting_tool --tool.completed--> underwriting [poor credit]",
]


@functools.cache
def _with_tools() -> tuple[EdgeCoverage, int, Counter[str]]:
    """`3 * EDGES` examples of `legal_runs` told the agent's tools and the credit check's
    results, drawn as `assert_edge_coverage` draws them (derandomized, no database): their
    coverage, how many examples it took to take every edge (-1: never), and what they hold
    (event types, and events proposed by a call or by a decision)."""
    coverage = EdgeCoverage(TOOL_LOAN_TABLE)
    full: list[int] = []
    seen: Counter[str] = Counter()

    @settings(
        max_examples=3 * EDGES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(legal_runs(TOOL_LOAN_TABLE, tools=loan_tools(), results=RESULTS))
    def collect(events: list[Event]) -> None:
        coverage.record(events)
        if not full and coverage.ratio == 1.0:
            full.append(coverage.logs)
        for e in events:
            by = getattr(e, "emitted_by", None)
            if by is not None:
                seen["by a call" if by.action_id else "by a decision"] += 1
            seen[e.type] += 1
            if e.type in ("tool.requested", "approval.requested"):
                seen["tool " + str(e.tool)] += 1

    collect()
    return coverage, (full[0] if full else -1), seen


def test_the_tool_driven_loan_table_is_covered_within_three_examples_per_edge() -> None:
    """All 65 edges, the tool-dependent ones and the timeout included, within 195 examples."""
    assert EDGES == 65
    assert [t for t in TOOL_LOAN_TABLE.transitions if t.after is not None]
    coverage, reached, _ = _with_tools()
    assert coverage.ratio == 1.0, coverage.report()
    assert 0 < reached <= 3 * EDGES
    print(f"TOOL_LOAN_TABLE: {EDGES} of {EDGES} edges after {reached} examples")


def test_logs_hold_proposals_and_call_the_agents_tools() -> None:
    """Among the examples: events a call proposed (`[asked by a call]` needs one); every
    call is to one of the agent's tools, never the kit's own `lookup`."""
    _, _, seen = _with_tools()
    assert seen["by a call"]
    tools = {k for k in seen if k.startswith("tool ")}
    assert tools == {"tool check_credit", "tool request_documents"}


def test_without_the_tools_the_report_names_the_tool_edges_and_why() -> None:
    """Told nothing of the tools, the kit misses exactly the edges they cause (and those past
    `documents_requested`, which only a call reaches), and says why for each."""
    with pytest.raises(AssertionError) as info:
        assert_edge_coverage(TOOL_LOAN_TABLE, legal_runs(TOOL_LOAN_TABLE), max_examples=3 * EDGES)
    report = str(info.value)
    for edge in TOOL_EDGES:
        assert f"missing: {edge}: " in report
    assert "'loan.documents_requested' never came in 'running' (visited" in report
    assert "one of them declaring Tool(emits=['loan.documents_requested'])" in report
    assert "but condition 'poor credit' never held (taken instead: " in report
    assert "but condition 'good credit' never held" in report
    assert "missing: documents_requested --loan.documents_expired--> declined after 7 d: " in (
        report
    )
    assert "'documents_requested' was never visited (no log took an edge into it: " in report


def _tool_names(tools: Any) -> set[str]:
    return set(tool_set(tools, None, TOOL_LOAN_TABLE.event_types).names)


def test_tools_come_from_an_agent_a_tool_list_or_names() -> None:
    """An `Agent`'s tools, `Tool`s (with the events they declare), names, or names with
    the events each may propose."""
    agent = Agent("loan_reviewer", ScriptedModel([]), tools=loan_tools())
    both = {"check_credit", "request_documents"}
    assert _tool_names(agent) == both
    assert _tool_names(loan_tools()) == both
    assert _tool_names(["check_credit"]) == {"check_credit"}
    kit = tool_set(
        {"request_documents": ["loan.documents_requested"]}, None, TOOL_LOAN_TABLE.event_types
    )
    assert kit.emits_of("request_documents") == ("loan.documents_requested",)
    assert tool_set(agent, None, TOOL_LOAN_TABLE.event_types).emits_of("request_documents") == (
        "loan.documents_requested",
    )


def test_a_proposal_the_table_refuses_is_settled_by_emit_refused() -> None:
    """A call that ends after a cancel was asked proposes `loan.documents_requested`, which
    `cancel_requested` does not take: the kit's next events settle it with `emit.refused`
    (the runtime's way), never the refused event itself."""
    reducer = Reducer(TOOL_LOAN_TABLE)
    call = {"action_id": "act_1", "tool": "request_documents", "arguments": {}}
    proposal = {"type": "loan.documents_requested", "fields": {"documents": ["id"]}}
    log = [
        ("run.started", {}),
        ("model.started", {}),
        ("model.completed", {"decision": "tool_calls", "tool_calls": [call]}),
        ("tool.requested", call),
        ("tool.started", {"action_id": "act_1"}),
        ("run.cancel_requested", {}),
        ("tool.completed", {"action_id": "act_1", "emit": proposal}),
    ]
    record = reducer.initial("run_1")
    for n, (kind, fields) in enumerate(log, start=1):
        event = parse_event(
            {"type": kind, "run_id": "run_1", "sequence": n, "occurred_at": CLOCK.at(n), **fields},
            events=TOOL_LOAN_TABLE.event_types,
        )
        record = reducer.reduce(record, event)
    kit = tool_set(loan_tools(), None, TOOL_LOAN_TABLE.event_types)
    offered = [n.event.type for n in accepted(reducer, record, CLOCK.at(8), tools=kit)]
    assert "emit.refused" in offered
    assert "loan.documents_requested" not in offered


def test_a_decision_proposes_the_events_the_table_takes_next() -> None:
    """At a model call the kit offers decisions proposing the table's own events, only those
    the table then takes; after one, the proposed event itself, `emitted_by` its turn."""
    reducer = Reducer(TOOL_LOAN_TABLE)
    record = reducer.initial("run_1")
    for n, kind in enumerate(("run.started", "model.started"), start=1):
        fields = {"type": kind, "run_id": "run_1", "sequence": n, "occurred_at": CLOCK.at(n)}
        record = reducer.reduce(record, parse_event(fields))
    kit = tool_set(loan_tools(), None, TOOL_LOAN_TABLE.event_types)
    decisions = [
        n
        for n in accepted(reducer, record, CLOCK.at(3), tools=kit)
        if getattr(n.event, "decision", None) == "emit"
    ]
    proposed = sorted(n.event.emit.type for n in decisions)
    # Not `loan.documents_requested`: `[asked by a call]` refuses a decision's; nor the
    # events `running` does not take.
    assert proposed == ["loan.sent_to_underwriting"]
    after = accepted(reducer, decisions[0].record, CLOCK.at(4), tools=kit)
    emitted = [n.event for n in after if n.event.type == "loan.sent_to_underwriting"]
    assert [e.emitted_by.turn for e in emitted] == [1]


def test_payloads_apply_to_built_in_events() -> None:
    """A `tool.completed` payload strategy gives results the table's conditions read: with
    a poor score drawn, `[poor credit]` is reached without `results=`."""
    poor = st.fixed_dictionaries({"result": st.just({"score": 480})})
    logs = edge_covering_paths(
        TOOL_LOAN_TABLE, tools=loan_tools(), payloads={"tool.completed": poor}
    )
    coverage = EdgeCoverage(TOOL_LOAN_TABLE)
    for log in logs:
        coverage.record(log)
    names = [f"{e.source} --{e.event}--> {e.target}" for e in coverage.taken]
    assert "waiting_tool --tool.completed--> underwriting" in names
    plain = EdgeCoverage(TOOL_LOAN_TABLE)
    for log in edge_covering_paths(TOOL_LOAN_TABLE, tools=loan_tools()):
        plain.record(log)
    assert "waiting_tool --tool.completed--> underwriting" not in [
        f"{e.source} --{e.event}--> {e.target}" for e in plain.taken
    ]


def test_a_tool_proposing_what_the_table_lacks_is_named() -> None:
    with pytest.raises(ValueError, match=r"tool 'escalate' proposes \['ticket.escalated'\]"):
        legal_runs(TOOL_LOAN_TABLE, tools={"escalate": ["ticket.escalated"]})
    with pytest.raises(ValueError, match=r"results= for tools \['lookup'\]"):
        legal_runs(TOOL_LOAN_TABLE, tools=loan_tools(), results={"lookup": st.none()})
    with pytest.raises(TypeError, match="tools= wants an Agent"):
        legal_runs(TOOL_LOAN_TABLE, tools="check_credit")


def test_promises_fail_for_a_state_no_log_visits() -> None:
    """Without the tools no log reaches `documents_requested`: its promises are unchecked,
    and the assertion says so; with them every state is visited and every promise kept."""
    with pytest.raises(AssertionError) as info:
        assert_table_keeps_its_promises(TOOL_LOAN_TABLE, edge_covering_paths(TOOL_LOAN_TABLE))
    assert "  'documents_requested' was never visited" in str(info.value)
    assert_table_keeps_its_promises(
        TOOL_LOAN_TABLE, edge_covering_paths(TOOL_LOAN_TABLE, tools=loan_tools(), results=RESULTS)
    )


def test_the_state_machine_calls_the_agents_tools() -> None:
    run_state_machine_as_test(
        run_machine(TOOL_LOAN_TABLE, tools=loan_tools()),
        settings=settings(max_examples=15, stateful_step_count=15, deadline=None),
    )


def _counterexample(table: Any, **options: Any) -> str:
    """The JSON Lines log Hypothesis notes for a property over `legal_runs(table)` that
    fails once the model is called (as a user copies it out of the failure)."""

    @settings(max_examples=50, database=None, deadline=None, derandomize=True)
    @given(legal_runs(table, **options))
    def never_calls_the_model(events: list[Event]) -> None:
        assert "model.started" not in [e.type for e in events]

    with pytest.raises(AssertionError) as info:
        never_calls_the_model()
    [log] = [n for n in getattr(info.value, "__notes__", []) if n.startswith("legal_runs log")]
    head, _, lines = log.partition("\n")
    assert head.startswith(f"legal_runs log of table '{table.name}' (JSON Lines; ")
    return lines + "\n"


def test_a_counterexample_names_its_table_and_validate_uses_it(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The noted log's `run.started` carries its table's reference: `validate` without
    `--table` refuses it, naming the table, rather than checking it against the default
    table; with the table it is valid; a default table's counterexample needs no --table."""
    cex = tmp_path / "cex.jsonl"
    cex.write_text(_counterexample(TOOL_LOAN_TABLE, tools=loan_tools()), encoding="utf-8")
    first = json.loads(cex.read_text(encoding="utf-8").splitlines()[0])
    assert first["type"] == "run.started"
    assert first["table"] == TOOL_LOAN_TABLE.ref.model_dump()
    code, out, err = run_main(capsys, "validate", str(cex))
    assert code == 2
    assert out == ""
    assert f"table 'loan_application' ({TOOL_LOAN_TABLE.digest})" in err
    assert "Traceback" not in err
    code, out, err = run_main(
        capsys, "validate", str(cex), "--table", "tests.fixtures.emit_loan:TOOL_LOAN_TABLE"
    )
    assert (code, err) == (0, ""), err
    plain = tmp_path / "plain.jsonl"
    plain.write_text(_counterexample(DEFAULT_TABLE), encoding="utf-8")
    code, out, err = run_main(capsys, "validate", str(plain))
    assert (code, err) == (0, ""), err


def test_payloads_of_built_in_events_reach_the_logs() -> None:
    """`payloads=` for `model.completed`, `tool.requested` and `tool.completed` give the
    walks their values (they had no effect before), the ledger's fields kept."""
    strategies = {
        "model.completed": st.fixed_dictionaries({"output": st.just("approve it")}),
        "tool.requested": st.fixed_dictionaries({"idempotency_key": st.just("key-7")}),
        "tool.completed": st.fixed_dictionaries({"result": st.just({"score": 480})}),
    }
    seen: Counter[str] = Counter()

    @settings(max_examples=120, derandomize=True, database=None, deadline=None)
    @given(legal_runs(DEFAULT_TABLE, payloads=strategies))
    def collect(events: list[Event]) -> None:
        Reducer(DEFAULT_TABLE).replay(events)
        for e in events:
            seen["output"] += getattr(e, "output", None) == "approve it"
            seen["key"] += getattr(e, "idempotency_key", None) == "key-7"
            seen["result"] += getattr(e, "result", None) == {"score": 480}

    collect()
    assert seen["output"], seen
    assert seen["key"], seen
    assert seen["result"], seen
