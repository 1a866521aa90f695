"""`ObservedRun`: how an SDK run observed through an adapter ended, or paused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from agentfsm.names import ActionStatus, StateKind
from agentfsm.record import Action, RunRecord
from agentfsm.runtime.agent import PendingApproval
from agentfsm.stores.base import EventStore

__all__ = ["ObservedFields", "ObservedRun", "observed"]


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
        pending_approvals: the calls the run waits on a decision for: its own, and its
            subagents' (`agent_tool`, `delegate`), which are decided in the subagent's run
            (the run's own when none are given).
        kind: the kind of the run's state in its table (see `agentfsm.names.StateKind`),
            given by the adapter, which knows the table: a state of your own declared
            `waiting` waits like `waiting_approval`.
    """

    run_id: str
    record: RunRecord
    final_output: Any = None
    partial_output: Any = None
    items: list[Any] = field(default_factory=list)
    sdk_result: Any = None
    state: Any = None
    pending_approvals: tuple[PendingApproval, ...] = ()
    kind: StateKind = field(kw_only=True)

    def __post_init__(self) -> None:
        if not self.pending_approvals:  # the run's own; an adapter adds its subagents'
            self.pending_approvals = PendingApproval.all_in(self.record)

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
        """The run waits for a person (approval) or something else (paused), by the kind its
        table declares for its state."""
        return self.kind in (StateKind.WAITING, StateKind.PAUSED)

    @property
    def unknown_outcomes(self) -> tuple[Action, ...]:
        """Calls whose effect nobody knows (crash, cancel, timeout): someone must look."""
        return tuple(a for a in self.record.actions.values() if a.status == ActionStatus.UNKNOWN)


class ObservedFields(TypedDict, total=False):
    """What an adapter says of a run beside its record and kind (see `ObservedRun`)."""

    final_output: Any
    partial_output: Any
    items: list[Any]
    sdk_result: Any
    state: Any
    pending_approvals: tuple[PendingApproval, ...]


def observed(store: EventStore, record: RunRecord, **fields: Unpack[ObservedFields]) -> ObservedRun:
    """The `ObservedRun` of `record`'s run, its state's kind read from `store`'s table.

    Every adapter builds its results here, so none can leave the kind out and judge
    `waiting` by the default table's names.
    """
    kind = store.reducer.table.kind(record.status)
    return ObservedRun(record.run_id, record, kind=kind, **fields)
