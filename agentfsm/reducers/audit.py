"""Audit mode: replay a foreign log under limits it was not run with.

"Would my guards have stopped this?" For each run of the log, the auditor folds the events
with the configured guards (and, unless told otherwise, the run's own `run.started.limits`)
and reports the *first* event a guard would have refused: the run id, the sequence, the
guard, its stop reason and detail. That the event is in the log at all means the log went
on past the point where the run should have stopped; a log that ends with `run.terminated`
at that point has no finding, since `run.terminated` is never refused.

A budget is also reported where it was *overrun*: the event that recorded spending past a
limit (a model call's usage, a tool's cost) is a finding with `overrun=True`, whatever
follows it. Such usage is never silent, even when the run stopped right after it.

It streams: feed events one at a time (`Auditor.feed`), in file order, runs interleaved or
not. It keeps one record per open run and a small stub per finished one, never the events
(the fold `validate` uses too, `_fold.py`).
A log that breaks its lifecycle (an illegal move, a sequence gap) is reported as a problem
for that run, whose later events are then skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from agentfsm.errors import GuardRejectedError, OverrunError
from agentfsm.events.models import Event, Limits
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import Guard, GuardContext
from agentfsm.guards.budget import SharedBudget
from agentfsm.guards.limits import guards_from_limits
from agentfsm.reducers._fold import InterleavedFold
from agentfsm.reducers.reduce import Reducer

__all__ = ["AuditFinding", "AuditProblem", "AuditReport", "Auditor", "audit"]


@attrs.frozen
class AuditFinding:
    """The first event of a run that a configured guard would have refused, or that overran.

    Attributes:
        run_id: the run.
        sequence: the refused event's sequence.
        event: the refused event's type.
        state: the run's state when the event came.
        guard: the guard that would have stopped the run.
        stop_reason: the stop reason it would have given.
        detail: its sentence, e.g. `3 of 3 turns used`.
        line: the event's line in the input, when known.
        overrun: the event was not refused but recorded spending past a budget (the run
            should have stopped right after it).
    """

    run_id: str
    sequence: int
    event: str
    state: str
    guard: str
    stop_reason: str
    detail: str
    line: int | None = None
    overrun: bool = False

    def __str__(self) -> str:
        at = f"line {self.line}, " if self.line is not None else ""
        what = (
            f"overran the limit of guard '{self.guard}'"
            if self.overrun
            else f"guard '{self.guard}' would have stopped the run"
        )
        return (
            f"{at}run '{self.run_id}', sequence {self.sequence} ('{self.event}' in "
            f"'{self.state}'): {what} ({self.stop_reason}): {self.detail}"
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return attrs.asdict(self)


@attrs.frozen
class AuditProblem:
    """A run whose log breaks its lifecycle: it could not be audited past this event.

    Attributes:
        run_id: the run.
        sequence: the event's sequence.
        kind: the error's kind (`illegal_transition`, `sequence`, `action`, ...).
        message: the error's message.
        line: the event's line in the input, when known.
    """

    run_id: str
    sequence: int
    kind: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        at = f"line {self.line}: " if self.line is not None else ""
        return f"{at}{self.message}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return attrs.asdict(self)


@attrs.frozen
class AuditReport:
    """What an audit found.

    Attributes:
        findings: at most one per run: where a guard would have stopped it, or where it
            overran a budget.
        problems: runs whose log is not a valid lifecycle.
        runs: how many runs the log holds.
        events: how many events were read.
    """

    findings: tuple[AuditFinding, ...]
    problems: tuple[AuditProblem, ...]
    runs: int
    events: int

    @property
    def ok(self) -> bool:
        """No finding and no problem."""
        return not self.findings and not self.problems

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "ok": self.ok,
            "runs": self.runs,
            "events": self.events,
            "findings": [f.to_json() for f in self.findings],
            "problems": [p.to_json() for p in self.problems],
        }


class Auditor:
    """Replays events one at a time under extra limits and guards; see the module docstring.

    Args:
        guards: guard objects to impose (`LoopDetector(threshold=3)`, `MaxTurns(5)`, ...).
        limits: limits to impose, as on `run.started` (turned into guards).
        table: the table the log follows.
        run_limits: also hold each run to its own `run.started.limits`.
        budget: a shared budget the runs of one tree draw on; it is charged as events are
            read, so the log must be in the order things happened.
    """

    def __init__(
        self,
        *,
        guards: Iterable[Guard] = (),
        limits: Limits | None = None,
        table: TransitionTable = DEFAULT_TABLE,
        run_limits: bool = True,
        budget: SharedBudget | None = None,
    ) -> None:
        imposed = (*guards, *(guards_from_limits(limits) if limits is not None else ()))
        self._fold = InterleavedFold(Reducer(table, imposed, run_limits=run_limits))
        self._budget = budget
        self.findings: list[AuditFinding] = []
        self.problems: list[AuditProblem] = []
        self.events = 0

    def feed(self, event: Event, line: int | None = None) -> AuditFinding | AuditProblem | None:
        """Apply one event; returns the finding or problem it causes, if any."""
        self.events += 1
        budget = self._budget
        shared = budget is not None and budget.covers(event.run_id)
        ctx = GuardContext.at_event(event, budget=budget) if shared else None
        step = self._fold.feed(event, ctx)
        if step is None:
            return None  # the run already stopped at its finding or problem
        if shared and budget is not None and step.after is not None:
            self._budget = budget.charge(step.after)  # spent is spent, overrun or not
        problem = step.problem
        if problem is None:
            return None
        if isinstance(problem, GuardRejectedError):  # a refusal, or an overrun (applied)
            finding = AuditFinding(
                event.run_id, event.sequence, event.type, step.before.status,
                problem.guard, problem.stop_reason, problem.detail, line,
                overrun=isinstance(problem, OverrunError),
            )  # fmt: skip
            self.findings.append(finding)
            return finding
        item = AuditProblem(event.run_id, event.sequence, problem.kind, str(problem), line)
        self.problems.append(item)
        return item

    def report(self) -> AuditReport:
        """Everything found so far."""
        return AuditReport(
            tuple(self.findings), tuple(self.problems), len(self._fold.records), self.events
        )


def audit(
    events: Iterable[Event] | Iterable[tuple[int, Event]],
    *,
    guards: Iterable[Guard] = (),
    limits: Limits | None = None,
    table: TransitionTable = DEFAULT_TABLE,
    run_limits: bool = True,
    budget: SharedBudget | None = None,
) -> AuditReport:
    """Audit a log (events, or `(line, event)` pairs as `read_events` yields them).

    See `Auditor` for the arguments. It reads `events` once, lazily.
    """
    auditor = Auditor(
        guards=guards, limits=limits, table=table, run_limits=run_limits, budget=budget
    )
    for item in events:
        if isinstance(item, tuple):
            auditor.feed(item[1], item[0])
        else:
            auditor.feed(item)
    return auditor.report()
