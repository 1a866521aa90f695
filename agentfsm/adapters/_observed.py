"""`ObservedRun`: how an SDK run observed through an adapter ended, or paused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentfsm.names import ActionStatus, RunStatus
from agentfsm.record import Action, RunRecord

__all__ = ["WAITING_FOR_PERSON", "ObservedRun"]

#: Where a run waits for a person (a decision, or an answer to its `interrupt()`).
WAITING_FOR_PERSON = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.PAUSED})


@dataclass
class ObservedRun:
    """How an SDK run observed through an adapter ended (or paused); a `RunOutcome`.

    Attributes:
        run_id: our run id.
        record: the run's record after the last event appended.
        final_output: the SDK's final output (None unless `status == "completed"`).
        partial_output: the last thing the model said (or a tool returned) when the run
            stopped early: what a user gets back at max turns or a budget stop.
        items: the SDK's own items produced by this leg (also on a stop, when it has them).
        sdk_result: the SDK's own result object, when it returned one.
        state: the SDK's serialised state to resume from (pending approvals), if any.
        pending_approvals: the calls the run waits on a decision for, as `(run_id,
            action_id)`: its own, and its subagents' (`agent_tool`, `delegate`), which are
            decided in the subagent's run.
    """

    run_id: str
    record: RunRecord
    final_output: Any = None
    partial_output: Any = None
    items: list[Any] = field(default_factory=list)
    sdk_result: Any = None
    state: Any = None
    pending_approvals: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.pending_approvals:  # the run's own; an adapter adds its subagents'
            self.pending_approvals = [(self.run_id, a) for a in self.record.pending_approvals]

    @property
    def status(self) -> str:
        """The run's status (`completed`, `waiting_approval`, `terminated`, ...)."""
        return self.record.status

    @property
    def stop_reason(self) -> str | None:
        """Why a guard stopped the run (`max_turns`, `budget`, ...), else None."""
        return self.record.stop_reason

    @property
    def waiting(self) -> bool:
        """The run waits for a person (approval) or something else (paused)."""
        return self.record.status in WAITING_FOR_PERSON

    @property
    def unknown_outcomes(self) -> tuple[Action, ...]:
        """Calls whose effect nobody knows (crash, cancel, timeout): someone must look."""
        return tuple(a for a in self.record.actions.values() if a.status == ActionStatus.UNKNOWN)
