"""Validate a JSON Lines log of one or many interleaved runs in one streaming pass.

Memory grows with the number of runs still open, not with the file: a run that reaches a
terminal state keeps only its summary (status, stop reason, version), since any later event
for it is illegal whatever it says. The fold is the one `audit` uses too (`_fold.py`).

An event that records spending past a budget (the run's own `limits`, or the reducer's
`Budget` guards) is accepted by the reducer, since the usage is a fact, but it is reported
here as a `guard` finding at that event (`OverrunError`): an overrun is never silent.

Every problem becomes a `Finding` carrying data (line, run, sequence, state, event, what
was allowed), so the CLI, tests and other tools can act on it without parsing a message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs

from agentfsm.errors import (
    ActionError,
    EventFormatError,
    GuardRejectedError,
    IllegalTransitionError,
    LifecycleError,
    MigrationError,
    RunMismatchError,
    SequenceError,
    TableMismatchError,
)
from agentfsm.events._bounds import MAX_EVENT_BYTES
from agentfsm.events._lines import is_blank, lines_of
from agentfsm.events.codec import parse_event
from agentfsm.record import RunRecord
from agentfsm.reducers._fold import InterleavedFold
from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer

__all__ = ["Finding", "RunSummary", "ValidationReport", "validate_lines"]

FindingKind = Literal[
    "format", "illegal_transition", "sequence", "run_mismatch", "action", "guard", "lifecycle"
]
_SHORT = 120


@attrs.frozen
class Finding:
    """One problem in a log.

    Attributes:
        kind: `format` for input that is not a valid event (exit 2); every other kind is a
            well-formed event the lifecycle refuses (exit 1).
        line: the 1-based input line.
        message: the whole sentence.
        text: the offending line, shortened for display.
        run_id: the run, when it could be read.
        sequence: the event's sequence, when it could be read.
        state: the run's state when the event arrived (lifecycle findings).
        event: the event type (lifecycle findings).
        allowed: the event types the table allowed in `state` (none for a run under another
            table: its events are not this table's to allow).
        guard: the guard that refused it (guard findings), with `detail`.
        detail: the guard's sentence.
    """

    kind: FindingKind
    line: int
    message: str
    text: str = ""
    run_id: str | None = None
    sequence: int | None = None
    state: str | None = None
    event: str | None = None
    allowed: tuple[str, ...] = ()
    guard: str | None = None
    detail: str | None = None

    @property
    def is_format(self) -> bool:
        """Whether the line was not a valid event at all."""
        return self.kind == "format"

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON error object."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "line": self.line,
            "run_id": self.run_id,
            "sequence": self.sequence,
            "state": self.state,
            "event": self.event,
            "allowed": list(self.allowed),
            "message": self.message,
        }
        if self.guard is not None:
            out["guard"] = self.guard
            out["detail"] = self.detail
        return out


@attrs.frozen
class RunSummary:
    """Where a run stands at the end of the log (or at its first error)."""

    run_id: str
    status: str
    stop_reason: str | None
    version: int

    @classmethod
    def of(cls, record: RunRecord) -> RunSummary:
        """The summary of a folded record."""
        return cls(record.run_id, record.status, record.stop_reason, record.version)

    def to_json(self) -> dict[str, Any]:
        """`{"run_id", "status", "stop_reason", "version"}`."""
        return attrs.asdict(self)


@attrs.frozen
class ValidationReport:
    """What a validation pass found.

    Attributes:
        runs: every run seen, in order of first appearance.
        findings: problems in input order (at most one per run; one in all unless
            `keep_going`).
        events: how many events were applied.
        lines: how many lines were read.
        records: the folded record of every run, when asked for (`keep_records`).
    """

    runs: tuple[RunSummary, ...]
    findings: tuple[Finding, ...]
    events: int
    lines: int
    records: Mapping[str, RunRecord] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every event was legal."""
        return not self.findings

    @property
    def exit_code(self) -> int:
        """0 all legal, 1 a lifecycle problem, 2 a line that is not a valid event."""
        if any(f.is_format for f in self.findings):
            return 2
        return 1 if self.findings else 0


def _kind(err: LifecycleError) -> FindingKind:
    for cls, kind in _KINDS:
        if isinstance(err, cls):
            return kind
    return "lifecycle"


_KINDS: tuple[tuple[type[LifecycleError], FindingKind], ...] = (
    (IllegalTransitionError, "illegal_transition"),
    (SequenceError, "sequence"),
    (RunMismatchError, "run_mismatch"),
    (ActionError, "action"),
    (GuardRejectedError, "guard"),
)


def _shorten(raw: str | bytes) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.strip()
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def validate_lines(
    lines: Iterable[str | bytes],
    *,
    reducer: Reducer = DEFAULT_REDUCER,
    keep_going: bool = False,
    run_id: str | None = None,
    on_line: Callable[[int], None] | None = None,
    keep_records: bool = False,
) -> ValidationReport:
    """Check every line against the wire format and every run against the reducer.

    Args:
        lines: JSON Lines (or an open file, read one bounded line at a time); blank lines
            are skipped.
        reducer: the table (and guards) to check against.
        keep_going: report each run's first problem and go on (the CLI's `--all`);
            otherwise stop at the first problem.
        run_id: check only this run (other runs' lines are still parsed).
        on_line: called with each line number (progress reporting).
        keep_records: keep every run's folded record (for replay); memory then grows with
            the number of runs, finished ones included.

    Raises:
        EventFormatError: a line of a file is too long or not UTF-8: the lines after it
            cannot be read, so there is no report to give.
    """
    fold = InterleavedFold(reducer, keep_records=keep_records)
    findings: list[Finding] = []
    entered: dict[str, tuple[int, str]] = {}
    applied = 0
    number = 0
    types = reducer.table.event_types
    for number, raw in enumerate(lines_of(lines), start=1):
        if on_line is not None:
            on_line(number)
        if is_blank(raw):
            continue
        try:
            # A run before its migration to the reducer's table reads its own table's types.
            here = fold.event_types(_run_id(raw)) if fold.elsewhere else types
            event = parse_event(raw, line=number, events=here)
        except EventFormatError as err:
            findings.append(
                Finding(
                    "format", number, str(err), _shorten(raw),
                    run_id=err.run_id, sequence=err.sequence,
                )
            )  # fmt: skip
            if not keep_going:
                break
            continue
        if run_id is not None and event.run_id != run_id:
            continue
        step = fold.feed(event)
        if step is None:
            continue  # only a run's first problem is reported; the rest would cascade
        if fold.elsewhere and event.run_id in fold.elsewhere and event.run_id not in entered:
            # Where the run came under another table: a mismatch at the end is reported here
            # (with the line as a finding shows it: one long line per run is not kept).
            entered[event.run_id] = (number, _shorten(raw))
        if step.accepted:
            applied += 1
        if step.problem is not None:
            findings.append(_lifecycle_finding(step.problem, number, raw, reducer))
            if not keep_going:
                break
    else:
        # A run folded to its end under another table never came under the reducer's
        # (a log folded with v2 may hold a run that migrates to v2 at its last line, so
        # this is known only now): reported where it came under that table.
        for mismatch in fold.mismatches():
            if findings and not keep_going:
                break
            line, raw = entered[mismatch.run_id]
            findings.append(_lifecycle_finding(mismatch, line, raw, reducer))
    runs = tuple(RunSummary.of(record) for record in fold.records.values())
    kept = fold.records if keep_records else {}
    return ValidationReport(runs, tuple(findings), applied, number, kept)


def _run_id(raw: str | bytes) -> str:
    """The run a line names, read without checking the rest (the parse that follows does)."""
    if len(raw) > MAX_EVENT_BYTES:  # refused by the parse that follows, before it loads
        return ""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    run_id = value.get("run_id") if isinstance(value, dict) else None
    return run_id if isinstance(run_id, str) else ""


def _lifecycle_finding(
    err: LifecycleError, line: int, raw: str | bytes, reducer: Reducer
) -> Finding:
    guard = err.guard if isinstance(err, GuardRejectedError) else None
    detail = err.detail if isinstance(err, GuardRejectedError) else None
    # A run under another table is refused whatever its event: what this table allows
    # (`run.started` at the start, listed while refused) says nothing about it.
    foreign = isinstance(err, TableMismatchError | MigrationError)
    allowed = () if foreign else reducer.table.allowed(err.state)
    return Finding(
        _kind(err), line, str(err), _shorten(raw),
        run_id=err.run_id, sequence=err.sequence, state=err.state, event=err.event,
        allowed=allowed, guard=guard, detail=detail,
    )  # fmt: skip
