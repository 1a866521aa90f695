"""A cap on the calls one model decision proposes: the wire, the guard, the fold, the checks.

An answer over the cap is refused as a decision, not as a run: `model.completed` with decision
`refused` and a bounded `refusal`, folded into `record.last_refusal`, with no batch left open.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agentfsm.cli import main as cli
from agentfsm.errors import EventFormatError, GuardRejectedError, IllegalTransitionError
from agentfsm.events import LogBuilder, dump_event, parse_event
from agentfsm.events.models import (
    REFUSAL_MESSAGE_CHARS,
    REFUSAL_NAME_CHARS,
    REFUSAL_TOOLS,
    Limits,
    Proposal,
    Refusal,
)
from agentfsm.fsm.default import DEFAULT_TABLE, EARLIER_DEFAULT_TABLES
from agentfsm.fsm.registry import lookup
from agentfsm.guards import (
    DEFAULT_MAX_CALLS_PER_DECISION,
    GuardContext,
    MaxCallsPerDecision,
    guards_from_limits,
    with_calls_cap,
)
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer, replay
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores import SQLiteEventStore, StoreOptions
from tests.guardlogs import T0, fold, new_run, value_error

#: The sentence a cap of 64 refuses 1,000 calls with.
OVER_64 = (
    "1,000 calls proposed in one decision; at most 64 are allowed: none of them ran, "
    "propose at most 64 at a time"
)


def calls(n: int, tool: str = "refund") -> list[dict[str, Any]]:
    """`n` proposed calls to `tool`, with distinct ids."""
    return [{"action_id": f"c{i}", "tool": tool, "arguments": {"i": i}} for i in range(n)]


def refusal_fields(n: int = 1000, message: str = OVER_64) -> dict[str, Any]:
    """A refused decision's fields: `n` calls to `refund` refused by the cap."""
    return {
        "decision": "refused",
        "refusal": {
            "kind": "max_calls_per_decision",
            "message": message,
            "proposed": {"decision": "tool_calls", "calls": n, "tools": {"refund": n}},
        },
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost": 0.0},
    }


def started(cap: int | None = 64) -> LogBuilder:
    """A run whose `run.started.limits` cap its decisions at `cap` calls (no limit: None)."""
    limits = {"max_calls_per_decision": cap} if cap is not None else {}
    log = new_run(limits=limits)
    log.add("model.started")
    return log


class TestWire:
    """`model.completed` `refused` carries a `refusal`, and only it does."""

    def test_a_refused_decision_needs_a_refusal(self) -> None:
        """Without one nobody would know why nothing of the decision happened."""
        with pytest.raises(EventFormatError) as info:
            parse_event({**_envelope(), "decision": "refused"})
        assert info.value.problems == ("decision 'refused' needs a 'refusal'",)

    def test_only_a_refused_decision_carries_a_refusal(self) -> None:
        """A final answer with a refusal would say two things at once."""
        fields = {**refusal_fields(), "decision": "final"}
        with pytest.raises(EventFormatError) as info:
            parse_event({**_envelope(), **fields})
        assert info.value.problems == ("decision 'final' cannot carry a 'refusal'",)

    def test_a_refused_decision_carries_no_calls(self) -> None:
        """The calls are what was refused: they are summed up, never kept."""
        fields = {**refusal_fields(), "tool_calls": calls(1)}
        with pytest.raises(EventFormatError) as info:
            parse_event({**_envelope(), **fields})
        assert info.value.problems == ("decision 'refused' cannot carry 'tool_calls'",)

    def test_a_refusal_round_trips(self) -> None:
        """Read back byte for byte, like every event."""
        event = parse_event({**_envelope(), **refusal_fields()})
        assert parse_event(dump_event(event)) == event
        assert event.refusal == Refusal(
            kind="max_calls_per_decision",
            message=OVER_64,
            proposed=Proposal(decision="tool_calls", calls=1000, tools={"refund": 1000}),
        )

    def test_a_summary_cannot_count_more_calls_than_it_has(self) -> None:
        """`tools` counts some of the `calls`; more would be a lie."""
        with pytest.raises(ValidationError) as info:
            Proposal.model_validate({"decision": "tool_calls", "calls": 2, "tools": {"a": 3}})
        assert [e["msg"] for e in info.value.errors()] == [
            "Value error, 'tools' counts 3 calls, more than 'calls' (2)"
        ]

    def test_the_summary_names_the_most_proposed_tools_only(self) -> None:
        """The 16 most proposed tools (ties by name), names cut at 128 characters; the rest
        count in `calls` only."""
        long = "x" * 300
        tools = ["a"] * 5 + ["b"] * 5 + [long] * 4 + [f"t{i:02}" for i in range(30)]
        proposal = Proposal.of("tool_calls", tools)
        assert proposal.calls == 44
        assert list(proposal.tools.items()) == [
            ("a", 5),
            ("b", 5),
            ("x" * (REFUSAL_NAME_CHARS - 1) + "\u2026", 4),
            *((f"t{i:02}", 1) for i in range(REFUSAL_TOOLS - 3)),
        ]

    def test_kind_and_message_are_cut_to_their_bounds(self) -> None:
        """A guard's sentence of any length fits: it is cut, and the cut is marked."""
        refusal = Refusal.of("k" * 100, "m" * 5000, Proposal.of("final", []))
        assert (len(refusal.kind), refusal.kind[-1]) == (64, "\u2026")
        assert (len(refusal.message), refusal.message[-1]) == (REFUSAL_MESSAGE_CHARS, "\u2026")

    @given(st.lists(st.text(min_size=1, max_size=400), max_size=300))
    def test_a_refusal_is_bounded_whatever_was_proposed(self, tools: list[str]) -> None:
        """Any names, any number: the refusal's JSON stays under 4 KiB of characters."""
        refusal = Refusal.of("max_calls_per_decision", "m" * 5000, Proposal.of("tool_calls", tools))
        assert len(refusal.model_dump_json()) < 4 * REFUSAL_MESSAGE_CHARS


class TestGuard:
    """`MaxCallsPerDecision` and the run's `limits.max_calls_per_decision`."""

    def test_the_cap_refuses_one_call_too_many(self) -> None:
        """64 calls pass, 65 are refused, naming both numbers and what to do."""
        guard = MaxCallsPerDecision(64)
        log = started(cap=None)
        record = fold(Reducer(), log.events)
        ctx = GuardContext(T0)
        ok = log.add("model.completed", decision="tool_calls", tool_calls=calls(64))
        assert guard.check(record, ok, ctx) is None
        over = LogBuilder("run_1", start=3).add(
            "model.completed", decision="tool_calls", tool_calls=calls(65)
        )
        verdict = guard.check(record, over, ctx)
        assert verdict is not None
        assert (verdict.guard, verdict.stop_reason, verdict.detail) == (
            "max_calls_per_decision",
            "max_calls_per_decision",
            "65 calls proposed in one decision; at most 64 are allowed: none of them ran, "
            "propose at most 64 at a time",
        )

    def test_the_cap_is_an_integer_of_at_least_one(self) -> None:
        """Zero calls per decision would refuse every tool call: say so at once."""
        with value_error("limit must be an integer >= 1, got 0"):
            MaxCallsPerDecision(0)

    def test_the_runs_own_limit_is_checked_by_the_reducer(self) -> None:
        """A log stating a cap of 64 cannot record a decision of 65 calls."""
        log = started(cap=64)
        log.add("model.completed", decision="tool_calls", tool_calls=calls(65))
        record = fold(Reducer(), log.events[:-1])
        with pytest.raises(GuardRejectedError) as info:
            Reducer().reduce(record, log.events[-1])
        assert str(info.value) == (
            "run 'run_1' is 'running': event 'model.completed' (sequence 3) is refused by guard "
            "'max_calls_per_decision' (max_calls_per_decision): 65 calls proposed in one "
            "decision; at most 64 are allowed: none of them ran, propose at most 64 at a time"
        )

    def test_a_guard_object_checks_logs_that_state_no_cap(self) -> None:
        """`Reducer(guards=[MaxCallsPerDecision(2)])` audits a foreign log."""
        log = started(cap=None)
        log.add("model.completed", decision="tool_calls", tool_calls=calls(3))
        reducer = Reducer(guards=[MaxCallsPerDecision(2)])
        with pytest.raises(GuardRejectedError) as info:
            reducer.reduce(fold(reducer, log.events[:-1]), log.events[-1])
        assert (info.value.guard, info.value.event) == ("max_calls_per_decision", "model.completed")
        assert replay(log.events).batch == ("c0", "c1", "c2")  # no cap stated: no check

    def test_limits_give_the_guard(self) -> None:
        """Audits impose the cap from outside the log as the other limits."""
        assert guards_from_limits({"max_calls_per_decision": 5}) == (MaxCallsPerDecision(5),)

    def test_a_refused_decision_passes_the_cap(self) -> None:
        """It proposes nothing any more: recorded under any cap."""
        log = started(cap=1)
        log.add("model.completed", **refusal_fields())
        assert fold(Reducer(), log.events).last_decision == "refused"


class TestWithCallsCap:
    """What the Runner and the adapters write into a new run's limits."""

    def test_the_cap_joins_the_runs_limits(self) -> None:
        """Other limits stay as given."""
        assert with_calls_cap(Limits(max_turns=3), 64) == Limits(
            max_turns=3, max_calls_per_decision=64
        )
        assert with_calls_cap(None, 64) == Limits(max_calls_per_decision=64)

    def test_the_runs_own_setting_wins(self) -> None:
        """A number of its own, or None to lift the cap for that run."""
        assert with_calls_cap(Limits(max_calls_per_decision=5), 64) == Limits(
            max_calls_per_decision=5
        )
        lifted = Limits(max_turns=3, max_calls_per_decision=None)
        assert with_calls_cap(lifted, 64) is lifted

    def test_no_cap_adds_nothing(self) -> None:
        """`max_calls_per_decision=None` on the Runner or an adapter lifts it for every run."""
        assert with_calls_cap(None, None) is None
        assert DEFAULT_MAX_CALLS_PER_DECISION == 64


class TestFold:
    """A refused decision in the record: the model sees it; nothing is left open."""

    def test_the_record_keeps_the_refusal_and_no_batch(self) -> None:
        """`last_refusal` says why; the usage counts; nothing joins the ledger."""
        log = started()
        log.add("model.completed", **refusal_fields())
        record = fold(Reducer(), log.events)
        assert (record.last_decision, record.batch, dict(record.actions)) == ("refused", (), {})
        assert record.last_refusal is not None
        assert record.last_refusal.message == OVER_64
        assert (record.usage.input_tokens, record.usage.output_tokens) == (10, 5)
        assert (record.model_call_open, record.final_output) == (False, None)

    def test_the_next_model_call_is_legal_and_a_decision_clears_the_refusal(self) -> None:
        """The run goes on: a new turn, whose decision replaces the refusal."""
        log = started()
        log.add("model.completed", **refusal_fields())
        log.add("model.started")
        assert fold(Reducer(), log.events).last_refusal is not None  # still what it sees
        log.add("model.completed", decision="tool_calls", tool_calls=calls(2))
        record = fold(Reducer(), log.events)
        assert (record.turn, record.last_refusal, record.batch) == (2, None, ("c0", "c1"))

    def test_a_run_cannot_complete_on_a_refused_decision(self) -> None:
        """Only a final answer is acceptance's to judge."""
        log = started()
        log.add("model.completed", **refusal_fields())
        record = fold(Reducer(), log.events)
        log.add("run.completed")
        with pytest.raises(IllegalTransitionError) as info:
            Reducer().reduce(record, log.events[-1])
        assert str(info.value).startswith(
            "run 'run_1' is 'running': event 'run.completed' (sequence 4) is not allowed: "
            "condition 'final output recorded, nothing unresolved' does not hold; allowed: "
        )

    def test_the_refusal_survives_a_snapshot(self) -> None:
        """Written and read back with the record, like every field."""
        log = started()
        log.add("model.completed", **refusal_fields())
        record = fold(Reducer(), log.events)
        again = Snapshot.loads(Snapshot(record).dumps()).record
        assert again == record
        assert RunRecord.loads(record.dumps()).last_refusal == record.last_refusal


class TestTables:
    """The cap is on the default table's edges; runs of the table before it still load."""

    def test_runs_of_the_table_before_the_cap_load_and_can_be_migrated(
        self, tmp_path: Path, capsys: Any
    ) -> None:
        """A run started before the cap is under the earlier default table, which the registry
        knows: a store of that table loads it under its own rules (no cap on its decisions),
        and `agentfsm migrate` moves it to today's table, whose store then loads it."""
        earlier = EARLIER_DEFAULT_TABLES[0]
        assert lookup(earlier.ref) is earlier
        assert earlier.digest != DEFAULT_TABLE.digest
        log = new_run(limits={"max_calls_per_decision": 2}, table=earlier.ref.model_dump())
        log.add("model.started")
        log.add("model.completed", decision="tool_calls", tool_calls=calls(3))
        db = tmp_path / "runs.db"
        old = SQLiteEventStore(db, options=StoreOptions(reducer=Reducer(earlier)))
        old.append("run_1", log.events, expected_version=0)
        assert old.load("run_1").batch == ("c0", "c1", "c2")
        to = "agentfsm.fsm.default:DEFAULT_TABLE"
        argv = ["migrate", "run_1", "--to", to, "--by", "ann", "--reason", "the cap"]
        assert cli([*argv, "--store", str(db)]) == 0
        assert capsys.readouterr().out.splitlines()[1] == (
            "  its moves changed: 'model.completed' changed"
        )
        assert SQLiteEventStore(db).load("run_1").table == DEFAULT_TABLE.ref


class TestValidate:
    """`agentfsm validate` reports a decision over the cap a log states, or a flag imposes."""

    def test_a_log_over_its_own_cap_is_reported(self, tmp_path: Path, capsys: Any) -> None:
        """Exit 1, the guard finding at the decision."""
        log = started(cap=2)
        log.add("model.completed", decision="tool_calls", tool_calls=calls(3))
        path = tmp_path / "run.jsonl"
        path.write_text("".join(dump_event(e) + "\n" for e in log.events))
        assert cli(["validate", "--quiet", "--format", "json", str(path)]) == 1
        error = json.loads(capsys.readouterr().out)["error"]
        assert (error["kind"], error["guard"], error["line"], error["detail"]) == (
            "guard",
            "max_calls_per_decision",
            3,
            "3 calls proposed in one decision; at most 2 are allowed: none of them ran, "
            "propose at most 2 at a time",
        )

    def test_a_flag_audits_a_log_without_a_cap(self, tmp_path: Path, capsys: Any) -> None:
        """`--max-calls-per-decision N`, like `--max-turns N`."""
        log = started(cap=None)
        log.add("model.completed", decision="tool_calls", tool_calls=calls(3))
        path = tmp_path / "run.jsonl"
        path.write_text("".join(dump_event(e) + "\n" for e in log.events))
        assert cli(["validate", "--quiet", str(path)]) == 0
        assert cli(["validate", "--quiet", "--max-calls-per-decision", "2", str(path)]) == 1
        assert cli(["validate", "--quiet", "--max-calls-per-decision", "0", str(path)]) == 2
        err = capsys.readouterr().err.splitlines()[-1]
        assert err == (
            "agentfsm validate: --max-calls-per-decision: Input should be greater than or "
            "equal to 1"
        )


@given(n=st.integers(0, 400), cap=st.integers(1, 200))
def test_a_decision_is_admitted_iff_it_is_within_the_cap(n: int, cap: int) -> None:
    """For any number of calls and any cap: the reducer takes the decision exactly when
    n <= cap."""
    log = started(cap=cap)
    fields: dict[str, Any] = (
        {"decision": "tool_calls", "tool_calls": calls(n)} if n else {"decision": "final"}
    )
    log.add("model.completed", **fields)
    record = fold(Reducer(), log.events[:-1])
    if n > cap:
        with pytest.raises(GuardRejectedError) as info:
            Reducer().reduce(record, log.events[-1])
        assert info.value.guard == "max_calls_per_decision"
    else:
        assert len(Reducer().reduce(record, log.events[-1]).batch) == n


def _envelope() -> dict[str, Any]:
    return {
        "type": "model.completed",
        "run_id": "run_1",
        "sequence": 3,
        "occurred_at": T0.isoformat(),
    }
