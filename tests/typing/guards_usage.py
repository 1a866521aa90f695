"""Typed usage of the guards API: mypy strict must accept this file as written."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs

from agentfsm import DEFAULT_TABLE, Event, GuardRejectedError, RunRecord, parse_event
from agentfsm.guards import (
    Budget,
    Deadline,
    Guard,
    GuardContext,
    LoopDetector,
    MaxTurns,
    SharedBudget,
    Verdict,
    any_of,
    attach_guard,
    cap_timeout,
)
from agentfsm.reducers import AuditReport, Reducer, audit


@attrs.frozen
class NoRefunds:
    name: str = "no_refunds"

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        if getattr(event, "tool", None) == "refund":
            return Verdict(self.name, "policy", "refunds need a human")
        return None


mine: Guard = NoRefunds()
table = attach_guard(DEFAULT_TABLE, "no_refunds", ["tool.requested"])
reducer = Reducer(
    table,
    [MaxTurns(3), Budget(max_tokens=1_000), LoopDetector(threshold=3), NoRefunds()],
)
now = datetime(2026, 9, 1, 10, tzinfo=UTC)
either: Guard = any_of(MaxTurns(5), Deadline(now), name="max_turns")
shared = SharedBudget("root", max_cost=2.0).spawn("child", parent="root")
ctx = GuardContext(now, budget=shared)
record = reducer.initial("root")
event = parse_event(
    '{"run_id": "root", "sequence": 1, "type": "run.started",'
    ' "occurred_at": "2026-09-01T10:00:00Z"}'
)
try:
    record = reducer.reduce(record, event, ctx)
except GuardRejectedError as exc:
    verdict: Verdict = Verdict.of(exc)
shared = shared.charge(record)
timeout: float | None = cap_timeout(10.0, reducer.guards.remaining(record, now))
report: AuditReport = audit([event], guards=[MaxTurns(1)])
ok: bool = report.ok
