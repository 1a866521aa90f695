"""Queries over a run's subagent tree: the runs its calls wait on, and what they wait for.

A subagent run is `<run_id>/<action_id>` (`SdkRun.subagent`), started by a call of its
parent that stays `started` until the subagent finishes. A decision is taken in the run
that asked for it, so a paused parent waits on its subagents' pending calls too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from agentfsm.errors import ApprovalMismatchError, RunNotFoundError
from agentfsm.names import ActionStatus, StateKind
from agentfsm.record import Action, RunRecord, call_digest
from agentfsm.runtime.agent import PendingApproval
from agentfsm.stores.base import EventStore

__all__ = [
    "approved_call",
    "pending_in",
    "stopped_line",
    "subagent_records",
    "subagents",
    "waiting_on",
    "waits_for_person",
]


def subagents(store: EventStore, record: RunRecord) -> list[RunRecord]:
    """The records of the subagent runs that `record`'s running calls wait on.

    A subagent run is `<run_id>/<action_id>` (`SdkRun.subagent`); a call that waits on one is
    `started`, its outcome to come when the subagent finishes.
    """
    found = []
    for action in record.actions.values():
        if action.status == ActionStatus.STARTED:
            with contextlib.suppress(RunNotFoundError):
                found.append(store.load(f"{record.run_id}/{action.action_id}"))
    return found


def subagent_records(store: EventStore, record: RunRecord) -> list[RunRecord]:
    """`record`, then the records of the subagent runs its running calls wait on, deeper down."""
    found = [record]
    for child in subagents(store, record):
        found.extend(subagent_records(store, child))
    return found


def approved_call(
    records: Sequence[RunRecord], action_id: str, tool: str, arguments: Any
) -> Action:
    """The ledger entry of call `action_id`, from the first of `records` that holds it.

    `records` is the run and the subagent runs it waits on (`subagent_records`): a call is
    decided in the run that asked for it. The entry must be the call approval was asked for:
    the same tool name and arguments digest.

    Raises:
        ApprovalMismatchError: no run holds the call, or the SDK's call differs from it.
    """
    owner = next((r for r in records if action_id in r.actions), records[0])
    action = owner.actions.get(action_id)
    actual = call_digest(tool, arguments)
    expected = action.arguments_digest if action is not None else None
    if action is None or expected != actual:
        raise ApprovalMismatchError(
            run_id=owner.run_id, action_id=action_id, expected=expected, actual=actual
        )
    return action


def stopped_line(agent: str | None, record: RunRecord, partial: Any) -> str:
    """What a calling model reads of a subagent that a guard or a cancel stopped."""
    why = f"{record.status}, {record.stop_reason}" if record.stop_reason else record.status
    return f"the subagent '{agent}' stopped ({why}): {partial}"


def pending_in(records: Sequence[RunRecord]) -> tuple[PendingApproval, ...]:
    """The calls waiting for a decision in `records`, each in its run, in order."""
    return tuple(p for r in records for p in PendingApproval.all_in(r))


def waiting_on(store: EventStore, record: RunRecord) -> tuple[PendingApproval, ...]:
    """The calls a run waits on a decision for: its own, then its subagents', deeper down."""
    return pending_in(subagent_records(store, record))


def waits_for_person(store: EventStore, record: RunRecord) -> bool:
    """Whether the run, or a subagent run below it, waits for a person (or is paused): by
    the kinds the store's table declares, so a waiting state of a table's own counts."""
    kind = store.reducer.table.kind
    waiting = (StateKind.WAITING, StateKind.PAUSED)
    return any(kind(r.status) in waiting for r in subagent_records(store, record))
