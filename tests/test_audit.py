"""Audit mode: where would configured guards have stopped a foreign log?"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from agentfsm import Event, dump_event, read_events
from agentfsm.events import Limits
from agentfsm.guards import LoopDetector
from agentfsm.reducers import AuditFinding, Auditor, AuditProblem, audit
from tests.conftest import load_log
from tests.guardlogs import T0, model_call, new_run, tool_call


def _runaway(run_id: str = "run_1", turns: int = 6) -> list[Event]:
    log = new_run(run_id)
    for _ in range(turns):
        model_call(log, tokens=400)
    log.add("run.completed")
    return log.events


def _lines(events: list[Event]) -> Iterator[str]:
    return (dump_event(e) for e in events)


class TestAudit:
    def test_the_first_event_past_a_limit_is_reported_with_its_line(self) -> None:
        """`max_turns=3` on a six-turn log: the fourth `model.started`, line 8."""
        report = audit(read_events(_lines(_runaway())), limits=Limits(max_turns=3))
        assert report.findings == (
            AuditFinding(
                run_id="run_1",
                sequence=8,
                event="model.started",
                state="running",
                guard="max_turns",
                stop_reason="max_turns",
                detail="3 of 3 turns used",
                line=8,
            ),
        )
        assert str(report.findings[0]) == (
            "line 8, run 'run_1', sequence 8 ('model.started' in 'running'): guard "
            "'max_turns' would have stopped the run (max_turns): 3 of 3 turns used"
        )
        assert (report.ok, report.runs, report.events) == (False, 1, 14)

    def test_a_log_that_stopped_where_the_guard_would_have_is_clean(self) -> None:
        """A log ending with `run.terminated` at the limit has nothing to report."""
        log = new_run()
        for _ in range(3):
            model_call(log)
        log.add("run.terminated", stop_reason="max_turns", detail="3 of 3 turns used")
        report = audit(log.events, limits=Limits(max_turns=3))
        assert report.ok
        assert report.to_json() == {
            "ok": True,
            "runs": 1,
            "events": 8,
            "findings": [],
            "problems": [],
        }

    def test_each_run_of_an_interleaved_log_is_audited_on_its_own(self) -> None:
        """Two runs mixed line by line: one finding each, in the order they happen."""
        a, b = _runaway("run_a", turns=4), _runaway("run_b", turns=6)
        mixed = [e for pair in zip(a, b, strict=False) for e in pair] + b[len(a) :]
        report = audit(mixed, limits=Limits(max_tokens=1000))
        over = "spent 1,200 > 1,000 tokens"  # the third call's usage crossed the limit
        assert [(f.run_id, f.sequence, f.detail) for f in report.findings] == [
            ("run_a", 7, over),
            ("run_b", 7, over),
        ]
        assert (report.runs, report.events) == (2, len(a) + len(b))

    def test_the_runs_own_limits_count_unless_turned_off(self) -> None:
        """A log that overran its own `run.started.limits` is reported; optionally not."""
        log = new_run(limits={"max_turns": 1})
        model_call(log)
        model_call(log)
        assert [f.detail for f in audit(log.events).findings] == ["1 of 1 turns used"]
        assert audit(log.events, run_limits=False).ok

    def test_a_deadline_is_judged_by_the_events_own_times(self) -> None:
        """Replaying needs no clock: each event's `occurred_at` is the time."""
        log = new_run(step=60.0)
        tool_call(log, "a1", result=1)
        deadline = Limits(deadline=(T0 + timedelta(minutes=2)).isoformat())
        finding = audit(log.events, limits=deadline).findings[0]
        assert (finding.sequence, finding.event) == (3, "tool.started")

    def test_a_loop_threshold_finds_the_repeated_request(self) -> None:
        """`LoopDetector(threshold=2)` reports the second identical failing request."""
        log = new_run()
        tool_call(log, "a1", "search", {"q": "x"}, fail=True)
        tool_call(log, "a2", "search", {"q": "x"}, fail=True)
        report = audit(log.events, guards=[LoopDetector(threshold=2)])
        assert [(f.sequence, f.guard) for f in report.findings] == [(5, "loop_detected")]

    def test_a_broken_log_is_a_problem_and_other_runs_go_on(self) -> None:
        """An illegal move is reported for its run; the other run is still audited."""
        bad = new_run("bad")
        bad.add("run.completed")  # no final output yet
        bad.add("model.started")
        report = audit([*bad.events, *_runaway("good")], limits=Limits(max_turns=2))
        assert report.problems == (
            AuditProblem(
                run_id="bad",
                sequence=2,
                kind="illegal_transition",
                message="run 'bad' is 'running': event 'run.completed' (sequence 2) is not "
                "allowed: condition 'final output recorded, nothing unresolved' does not hold; "
                "allowed: 'approval.requested', 'handoff', 'model.completed', 'model.started', "
                "'run.cancel_requested', 'run.completed', 'run.failed', 'run.paused', "
                "'run.terminated', 'tool.requested', 'tool.started'",
            ),
        )
        assert [f.run_id for f in report.findings] == ["good"]
        assert (report.runs, report.events) == (2, 17)

    def test_an_event_after_the_end_is_a_problem(self) -> None:
        """A log that goes on after `run.completed` breaks the lifecycle."""
        log = new_run()
        model_call(log)
        log.add("run.completed")
        log.add("model.started")
        (problem,) = audit(log.events).problems
        assert (problem.sequence, problem.kind) == (5, "illegal_transition")
        assert problem.message.startswith("run 'run_1' is 'completed' (terminal)")

    def test_the_bundled_examples_keep_their_own_limits(self) -> None:
        """The worked runs pass an audit under the limits they declare."""
        logs = (
            "order_ticket.jsonl",
            "cancel_order_approval.jsonl",
            "run_terminated_max_turns.jsonl",
        )
        for name in logs:
            assert audit(load_log(name)).ok, name

    def test_a_run_terminated_at_its_limit_is_found_under_a_stricter_one(self) -> None:
        """The bundled max-turns run stopped at 2 turns; under a limit of 1 it went on."""
        report = audit(load_log("run_terminated_max_turns.jsonl"), limits=Limits(max_turns=1))
        assert [(f.sequence, f.detail) for f in report.findings] == [(9, "1 of 1 turns used")]


class TestAuditor:
    def test_feed_reports_at_the_event_that_causes_it(self) -> None:
        """Streaming: `feed` returns the finding for the event that would be refused."""
        auditor = Auditor(limits=Limits(max_turns=1))
        results = [auditor.feed(e) for e in _runaway(turns=3)]
        assert [i for i, r in enumerate(results) if r is not None] == [3]
        assert auditor.report().findings == (results[3],)

    def test_events_after_a_finding_are_counted_but_not_judged(self) -> None:
        """Once a run has a finding, its later events are read and skipped."""
        auditor = Auditor(limits=Limits(max_turns=1))
        for event in _runaway(turns=3):
            auditor.feed(event)
        report = auditor.report()
        assert (len(report.findings), report.events) == (1, 8)
