"""Queries over a run's subagent tree: the runs its calls wait on, and what they wait for.

A subagent run is `<run_id>/<action_id>` (`SdkRun.subagent`), started by a call of its
parent that stays `started` until the subagent finishes. A decision is taken in the run
that asked for it, so a paused parent waits on its subagents' pending calls too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from agentfsm.adapters._observed import WAITING_FOR_PERSON
from agentfsm.adapters._sdk_errors import ApprovalMismatchError
from agentfsm.errors import RunNotFoundError
from agentfsm.names import ActionStatus
from agentfsm.record import Action, RunRecord, call_digest
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


def pending_in(records: Sequence[RunRecord]) -> list[tuple[str, str]]:
    """The calls waiting for a decision in `records`, as `(run_id, action_id)`."""
    return [(r.run_id, aid) for r in records for aid in r.pending_approvals]


def waiting_on(store: EventStore, record: RunRecord) -> list[tuple[str, str]]:
    """The calls a run waits on a decision for, as `(run_id, action_id)`: its subagents' too."""
    return pending_in(subagent_records(store, record))


def waits_for_person(store: EventStore, record: RunRecord) -> bool:
    """Whether the run, or a subagent run below it, waits for a person."""
    return any(r.status in WAITING_FOR_PERSON for r in subagent_records(store, record))
