"""Both result types satisfy `RunOutcome`: this file must pass mypy (strict)."""

from __future__ import annotations

from agentfsm.adapters._observed import ObservedRun
from agentfsm.names import StateKind
from agentfsm.record import RunRecord
from agentfsm.runtime import PendingApproval, RunOutcome, RunResult


def summary(outcome: RunOutcome) -> str:
    """Code that reads how a run ended takes either result."""
    said = outcome.final_output if outcome.status == "completed" else outcome.partial_output
    return f"{outcome.run_id}: {outcome.status} ({outcome.stop_reason}) {said!r}"


def to_review(outcome: RunOutcome) -> list[tuple[str, str, str]]:
    """Either result lists the calls waiting for a decision alike: where, which, and the
    digest a decision is bound to."""
    waiting: tuple[PendingApproval, ...] = outcome.pending_approvals
    return [(p.run_id, p.action_id, p.arguments_digest) for p in waiting]


record = RunRecord("r1", status="completed")
runner_line: str = summary(RunResult(record))
adapter_line: str = summary(ObservedRun("r1", record, kind=StateKind.TERMINAL))
runner_calls = to_review(RunResult(record))
adapter_calls = to_review(ObservedRun("r1", record, kind=StateKind.TERMINAL))
