"""Both result types satisfy `RunOutcome`: this file must pass mypy (strict)."""

from __future__ import annotations

from agentfsm.adapters._observed import ObservedRun
from agentfsm.record import RunRecord
from agentfsm.runtime import RunOutcome, RunResult


def summary(outcome: RunOutcome) -> str:
    """Code that reads how a run ended takes either result."""
    said = outcome.final_output if outcome.status == "completed" else outcome.partial_output
    return f"{outcome.run_id}: {outcome.status} ({outcome.stop_reason}) {said!r}"


record = RunRecord("r1", status="completed")
runner_line: str = summary(RunResult(record))
adapter_line: str = summary(ObservedRun("r1", record))
