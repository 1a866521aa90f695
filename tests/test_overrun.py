"""Budgets never overrun silently: the event that records spending past a limit is reported.

The reducer accepts that event (the call happened, its usage is a fact); audits and
validation report it at that event, and spending after it is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import Event, GuardRejectedError, dump_event
from agentfsm.cli import main
from agentfsm.errors import OverrunError
from agentfsm.events import Limits
from agentfsm.guards import Budget, SharedBudget, any_of
from agentfsm.reducers import AuditFinding, Reducer, audit
from agentfsm.reducers.validate import Finding, validate_lines
from tests.guardlogs import model_call, new_run, tool_call


def _one_big_call(tokens: int = 2_200, **started: object) -> list[Event]:
    """A run whose single model call spent `tokens`, then completed."""
    log = new_run(**started)
    model_call(log, tokens=tokens)
    log.add("run.completed")
    return log.events


def _write(tmp_path: Path, events: list[Event]) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(dump_event(e) + "\n" for e in events), encoding="utf-8")
    return path


RUNNING_ALLOWS = (
    *("approval.requested", "handoff", "model.completed", "model.started"),
    *("run.cancel_requested", "run.completed", "run.failed", "run.paused", "run.terminated"),
    *("tool.requested", "tool.started"),
)
CROSSING = (
    "run 'run_1' is 'running': event 'model.completed' (sequence 3) overran the limit of "
    "guard 'budget' (budget): spent 2,200 > 1,500 tokens"
)


class TestValidateCommand:
    def test_one_call_past_max_tokens_exits_one(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`validate --max-tokens 1500` on a 2,200-token call: error at the crossing event."""
        monkeypatch.setenv("NO_COLOR", "1")
        events = _one_big_call()
        code = main(["validate", str(_write(tmp_path, events)), "--max-tokens", "1500", "-q"])
        assert code == 1
        assert capsys.readouterr().out.splitlines() == [
            "run_1  running  version 3",
            f"error (guard) at line 3: {CROSSING}",
            f"  line 3: {dump_event(events[2])[:119]}…",
            "  state: running   event: model.completed",
            f"  allowed: {', '.join(RUNNING_ALLOWS)}",
            "  guard: budget: spent 2,200 > 1,500 tokens",
            "1 error(s): 3 events in 1 run(s), 3 lines",
        ]

    def test_max_cost_is_checked_the_same_way(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--max-cost 0.5` on a call that cost 0.75: a `guard` error in the JSON report."""
        log = new_run()
        model_call(log, tokens=10, cost=0.75)
        log.add("run.completed")
        path = str(_write(tmp_path, log.events))
        code = main(["validate", path, "--max-cost", "0.5", "-q", "--format", "json"])
        error = json.loads(capsys.readouterr().out)["error"]
        assert code == 1
        assert error == {
            "kind": "guard",
            "line": 3,
            "run_id": "run_1",
            "sequence": 3,
            "state": "running",
            "event": "model.completed",
            "allowed": list(RUNNING_ALLOWS),
            "message": "run 'run_1' is 'running': event 'model.completed' (sequence 3) "
            "overran the limit of guard 'budget' (budget): spent 0.75 > max cost 0.5",
            "guard": "budget",
            "detail": "spent 0.75 > max cost 0.5",
        }


class TestValidateLines:
    def test_the_runs_own_limits_are_overrun_too(self) -> None:
        """`run.started.limits.max_tokens=1500` and one 2,200-token call: a finding, not ok."""
        events = _one_big_call(limits={"max_tokens": 1500})
        report = validate_lines(dump_event(e) for e in events)
        assert report.findings == (
            Finding(
                "guard", 3, CROSSING, dump_event(events[2])[:119] + "…",
                run_id="run_1", sequence=3, state="running", event="model.completed",
                allowed=RUNNING_ALLOWS, guard="budget",
                detail="spent 2,200 > 1,500 tokens",
            ),
        )  # fmt: skip
        assert (report.exit_code, report.events) == (1, 3)

    def test_a_run_stopped_right_after_its_crossing_is_still_reported(self) -> None:
        """Even a log that ends `run.terminated(budget)` at once has overrun: exit 1."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, tokens=2_200)
        log.add("run.terminated", stop_reason="budget", detail="spent 2,200 > 1,500 tokens")
        report = validate_lines(dump_event(e) for e in log.events)
        assert [(f.kind, f.line, f.message) for f in report.findings] == [("guard", 3, CROSSING)]

    def test_spending_up_to_the_limit_is_no_overrun(self) -> None:
        """1,500 of 1,500 tokens is the whole budget, not past it."""
        report = validate_lines(
            dump_event(e) for e in _one_big_call(1_500, limits={"max_tokens": 1500})
        )
        assert report.ok

    def test_a_tool_cost_can_overrun(self) -> None:
        """A costed tool result that takes the run past `max_cost` is the crossing event."""
        log = new_run(limits={"max_cost": 1.0})
        model_call(log, {"action_id": "a1", "tool": "search", "arguments": {}}, cost=0.5)
        tool_call(log, "a1", cost=0.75)
        report = validate_lines(dump_event(e) for e in log.events)
        assert [(f.line, f.event, f.detail) for f in report.findings] == [
            (6, "tool.completed", "spent 1.25 > max cost 1")
        ]

    def test_usage_an_sdk_reported_can_overrun(self) -> None:
        """A `usage.reported` (an SDK's cost for a stretch of the run, beyond the log's
        calls) that takes the run past `max_cost` is the crossing event."""
        log = new_run(limits={"max_cost": 1.0})
        model_call(log, {"action_id": "a1", "tool": "search", "arguments": {}}, cost=0.5)
        tool_call(log, "a1")
        usage = {"input_tokens": 0, "output_tokens": 0, "cost": 0.75}
        log.add("usage.reported", usage=usage, source="claude-agent-sdk")
        report = validate_lines(dump_event(e) for e in log.events)
        assert [(f.line, f.event, f.detail) for f in report.findings] == [
            (7, "usage.reported", "spent 1.25 > max cost 1")
        ]


class TestAudit:
    def test_the_audit_reports_the_overrun_at_the_crossing_event(self) -> None:
        """`audit(limits=max_tokens 1500)`: one finding, flagged `overrun`, at sequence 3."""
        report = audit(_one_big_call(), limits=Limits(max_tokens=1500))
        assert report.findings == (
            AuditFinding(
                run_id="run_1", sequence=3, event="model.completed", state="running",
                guard="budget", stop_reason="budget", detail="spent 2,200 > 1,500 tokens",
                overrun=True,
            ),
        )  # fmt: skip
        assert str(report.findings[0]) == (
            "run 'run_1', sequence 3 ('model.completed' in 'running'): overran the limit of "
            "guard 'budget' (budget): spent 2,200 > 1,500 tokens"
        )
        assert not report.ok

    def test_a_budget_guard_inside_any_of_counts(self) -> None:
        """`any_of(Budget(...))` stops on any member, so its budget can be overrun."""
        report = audit(_one_big_call(), guards=[any_of(Budget(max_tokens=1500))])
        assert [(f.sequence, f.detail, f.overrun) for f in report.findings] == [
            (3, "spent 2,200 > 1,500 tokens", True)
        ]

    def test_a_shared_budget_is_overrun_by_the_tree_total(self) -> None:
        """Parent 1,000 + child 700 > the root's 1,500: the child's call is the crossing."""
        parent = new_run("root", limits={"max_tokens": 1500})
        model_call(parent, tokens=1_000)
        child = new_run("root/a1")
        model_call(child, tokens=700)
        budget = SharedBudget("root", max_tokens=1500).spawn("root/a1", parent="root")
        report = audit([*parent.events, *child.events], budget=budget)
        assert [(f.run_id, f.sequence, f.detail) for f in report.findings] == [
            ("root/a1", 3, "root 'root' (2 runs): spent 1,700 > 1,500 tokens")
        ]


class TestAfterACrossing:
    def test_the_crossing_event_is_accepted_and_spending_after_it_refused(self) -> None:
        """The reducer takes the crossing `model.completed`; the next `model.started` is not."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, tokens=2_200)
        model_call(log, tokens=1)
        reducer = Reducer()
        record = reducer.replay(log.events[:3])
        assert record.usage.total_tokens == 2_200
        with pytest.raises(GuardRejectedError) as refused:
            reducer.reduce(record, log.events[3])
        assert refused.value.detail == "spent 2,200 + reserved 0 > 1,500 tokens"
        assert not isinstance(refused.value, OverrunError)

    @pytest.mark.parametrize(
        "end",
        [
            ("run.terminated", {"stop_reason": "budget"}),
            ("run.failed", {"error": {"kind": "x", "message": "y"}}),
            ("run.cancel_requested", {}),
        ],
    )
    def test_stopping_stays_legal(self, end: tuple[str, dict[str, object]]) -> None:
        """After a crossing, a run may still be terminated, failed or cancelled."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, tokens=2_200)
        log.add(end[0], **end[1])
        Reducer().replay(log.events)

    def test_results_of_calls_in_flight_settle(self) -> None:
        """A call already running when the model overran may still report its result."""
        log = new_run(limits={"max_cost": 1.0})
        model_call(log, {"action_id": "a1", "tool": "search", "arguments": {}}, cost=0.5)
        log.add("tool.requested", action_id="a1", tool="search", arguments={})
        log.add("tool.started", action_id="a1")
        log.add("tool.completed", action_id="a1", result=1, cost=0.75)
        log.add("run.terminated", stop_reason="budget")
        assert Reducer().replay(log.events).status == "terminated"

    def test_the_overrun_error_carries_its_data(self) -> None:
        """`Reducer.overrun` gives the crossing's error: guard, reason, detail, event."""
        events = _one_big_call(limits={"max_tokens": 1500})
        reducer = Reducer()
        before = reducer.replay(events[:2])
        after = reducer.reduce(before, events[2])
        error = reducer.overrun(before, events[2], after)
        assert isinstance(error, OverrunError)
        assert (error.guard, error.stop_reason, error.detail, error.sequence, error.state) == (
            "budget",
            "budget",
            "spent 2,200 > 1,500 tokens",
            3,
            "running",
        )
        assert str(error) == CROSSING


@given(
    usages=st.lists(st.integers(min_value=0, max_value=2_000), min_size=1, max_size=6),
    limit=st.integers(min_value=0, max_value=5_000),
)
def test_audit_reports_an_overrun_iff_recorded_usage_exceeds_the_limit(
    usages: list[int], limit: int
) -> None:
    """For any calls and token limit, the audit's one finding is the first call refused (no
    room left) or the first call whose recorded total passes the limit, whichever is first;
    an overrun is reported exactly when the recorded total passes the limit."""
    log = new_run()
    for tokens in usages:
        model_call(log, tokens=tokens)
    report = audit(log.events, guards=[Budget(max_tokens=limit)], run_limits=False)
    expected: list[tuple[int, str, bool]] = []
    spent = 0
    for i, tokens in enumerate(usages):
        if spent >= limit:  # a call with no estimate needs something left
            expected.append((2 + 2 * i, "model.started", False))
            break
        spent += tokens
        if spent > limit:
            expected.append((3 + 2 * i, "model.completed", True))
            break
    assert [(f.sequence, f.event, f.overrun) for f in report.findings] == expected


def test_only_the_spending_types_can_spend() -> None:
    """`SPENDING_TYPES` names every event class `spends` can say yes to (the reducer asks no
    guard about an overrun for any other type)."""
    from agentfsm.events.models import (
        EVENT_CLASSES,
        ModelCompleted,
        ToolCompleted,
        UsageReported,
    )
    from agentfsm.guards.limits import SPENDING_TYPES

    spending = ModelCompleted | ToolCompleted | UsageReported
    can = {n for n, c in EVENT_CLASSES.items() if issubclass(c, spending)}
    assert can == SPENDING_TYPES
