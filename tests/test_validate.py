"""Streaming validation of logs with many interleaved runs."""

from __future__ import annotations

from agentfsm import DEFAULT_TABLE, LogBuilder, dump_event
from agentfsm.reducers.validate import Finding, RunSummary, validate_lines
from tests.conftest import EXAMPLES


def two_runs() -> list[str]:
    """Two short runs, interleaved line by line."""
    a, b = LogBuilder("a"), LogBuilder("b")
    for log in (a, b):
        log.add("run.started")
        log.add("run.paused", reason="input")
        log.add("run.resumed")
    b.add("run.cancel_requested")
    b.add("run.cancelled")
    lines = [dump_event(e) for pair in zip(a.events, b.events, strict=False) for e in pair]
    return lines + [dump_event(e) for e in b.events[3:]]


def test_interleaved_runs_are_each_folded() -> None:
    """Every run gets its own summary, in order of first appearance."""
    report = validate_lines(two_runs())
    assert report.ok
    assert report.exit_code == 0
    assert report.runs == (
        RunSummary("a", "running", None, 3),
        RunSummary("b", "cancelled", None, 5),
    )
    assert (report.events, report.lines) == (8, 8)


def test_bundled_logs_are_legal() -> None:
    """The examples validate, with their final status."""
    for name, status in (
        ("order_ticket.jsonl", "completed"),
        ("cancel_order_approval.jsonl", "completed"),
    ):
        report = validate_lines((EXAMPLES / name).read_text(encoding="utf-8").splitlines())
        assert [r.status for r in report.runs] == [status]


def test_a_lifecycle_error_names_line_state_event_and_allowed() -> None:
    """An illegal event stops validation with exit 1 and everything needed to fix it."""
    lines = two_runs()
    lines.append(lines[-1].replace('"sequence":5', '"sequence":6'))  # b is cancelled already
    report = validate_lines(lines)
    assert report.exit_code == 1
    (finding,) = report.findings
    assert finding == Finding(
        "illegal_transition", 9,
        "run 'b' is 'cancelled' (terminal): event 'run.cancelled' (sequence 6) is not allowed; "
        "allowed: none",
        lines[-1], run_id="b", sequence=6, state="cancelled", event="run.cancelled", allowed=(),
    )  # fmt: skip
    assert finding.to_json()["kind"] == "illegal_transition"


def test_a_format_error_is_exit_two_and_names_the_line() -> None:
    """A line that is not an event at all is a different kind of problem."""
    lines = two_runs()
    lines.insert(2, '{"run_id": "a", "sequence": "x"}')
    report = validate_lines(lines)
    assert report.exit_code == 2
    assert report.findings[0].kind == "format"
    assert report.findings[0].line == 3
    assert report.findings[0].message.startswith("line 3, run 'a': not a valid event:")


def test_keep_going_reports_each_runs_first_error() -> None:
    """With keep_going, later lines of a broken run are skipped, other runs go on."""
    lines = two_runs()
    lines[2] = lines[2].replace('"sequence":2', '"sequence":3')  # a: gap
    lines[5] = lines[5].replace('"type":"run.resumed"', '"type":"run.completed"')  # b: illegal
    report = validate_lines(lines, keep_going=True)
    assert [(f.kind, f.run_id, f.line) for f in report.findings] == [
        ("sequence", "a", 3),
        ("illegal_transition", "b", 6),
    ]
    assert report.findings[0].allowed == DEFAULT_TABLE.allowed("running")
    assert report.runs == (RunSummary("a", "running", None, 1), RunSummary("b", "paused", None, 2))


def test_only_one_run() -> None:
    """run_id limits the check to one run."""
    report = validate_lines(two_runs(), run_id="b")
    assert [r.run_id for r in report.runs] == ["b"]
