"""Crash recovery: what a run left in flight, and putting a subagent tree's budget back.

Recovery needs no special mode: `Runner.drive(run_id)` decides every step from the stored
record, so it continues a crashed run exactly where the log ends (see `agentfsm.runtime.runner`
for the rules on calls left in flight). This module holds the pieces around it:

- `in_flight(record)`: the calls a dead worker left requested or started, and what driving
  it on will do with each (`start`, `reexecute`, `outcome_unknown`) — to show before;
- `unknown_outcomes(record)`: the calls whose effect nobody knows, for a person to check;
- `rebuild_tree(...)`: the shared budget of a root run and its subagent runs, from the store
  (a `SharedBudget` lives in memory; the runs' usage is in their logs);
- `runs_to_drive(store)`: the runs a restarted process should drive.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Literal

import attrs

from agentfsm.errors import RunNotFoundError
from agentfsm.names import ActionStatus, RunStatus
from agentfsm.record import Action, RunRecord
from agentfsm.runtime._effects import Load
from agentfsm.runtime._writer import BudgetTree
from agentfsm.runtime.tools import ToolRegistry
from agentfsm.stores.base import EventStore
from agentfsm.stores.runs import RunInfo

__all__ = ["RUNNABLE", "InFlight", "in_flight", "rebuild_tree", "runs_to_drive", "unknown_outcomes"]

#: Statuses in which a run has work a Runner can do without a person.
RUNNABLE = frozenset({RunStatus.RUNNING, RunStatus.WAITING_TOOL, RunStatus.CANCEL_REQUESTED})


@attrs.frozen
class InFlight:
    """A call a run left in flight, and what driving the run on will do with it.

    Attributes:
        action: the ledger entry.
        plan: `start` (requested, never started: it cannot have run), `reexecute` (started;
            its tool is safe to repeat, called again with the same idempotency key), or
            `outcome_unknown` (started; not safe to repeat: recorded, surfaced, not run).
    """

    action: Action
    plan: Literal["start", "reexecute", "outcome_unknown"]


def in_flight(record: RunRecord, tools: ToolRegistry) -> tuple[InFlight, ...]:
    """The run's calls in flight and how `Runner.drive` will settle each."""
    out = []
    for action in record.actions.values():
        if action.status == ActionStatus.REQUESTED:
            out.append(InFlight(action, "start"))
        elif action.status == ActionStatus.STARTED:
            tool = tools.get(action.tool)
            safe = tool is not None and tool.safe_to_repeat
            out.append(InFlight(action, "reexecute" if safe else "outcome_unknown"))
    return tuple(out)


def unknown_outcomes(record: RunRecord) -> tuple[Action, ...]:
    """The calls whose effect is unknown (each has a `reason`)."""
    return tuple(a for a in record.actions.values() if a.status == ActionStatus.UNKNOWN)


def rebuild_tree(
    store: EventStore,
    record: RunRecord,
    tree: BudgetTree | None,
    is_subagent: Callable[[str], bool] | None = None,
) -> BudgetTree | None:
    """Add the subagent runs under `record` (and theirs) to `tree`, charged from the store.

    Child runs are `<parent>/<action id>`; only actions whose tool `is_subagent` names (every
    executed action when not given) are looked up.
    """
    steps = rebuild_steps(record, tree, is_subagent)
    loaded: RunRecord | None = None
    while True:
        try:
            load = steps.send(loaded)
        except StopIteration as done:
            result: BudgetTree | None = done.value
            return result
        try:
            loaded = store.load(load.run_id)
        except RunNotFoundError:
            loaded = None


def rebuild_steps(
    record: RunRecord,
    tree: BudgetTree | None,
    is_subagent: Callable[[str], bool] | None = None,
) -> Generator[Load, RunRecord | None, BudgetTree | None]:
    """`rebuild_tree` without I/O: yields a `Load` per child run, is sent its record or None.

    The one implementation both runners (and `rebuild_tree`) use. A call still proposed or
    waiting for approval never ran, so a run that merely bears its child id is not its child.
    """
    if tree is None:
        return None
    for action in record.actions.values():
        if action.status in (ActionStatus.PROPOSED, ActionStatus.APPROVAL_PENDING):
            continue
        if is_subagent is not None and not is_subagent(action.tool):
            continue
        child_id = f"{record.run_id}/{action.action_id}"
        child = yield Load(child_id)
        if child is None:
            continue
        tree.spawn(child_id, parent=record.run_id)
        tree.charge(child)
        yield from rebuild_steps(child, tree, is_subagent)
    return tree


def runs_to_drive(store: EventStore) -> list[RunInfo]:
    """Top-level runs with work to do (subagent runs, `a/b`, are driven by their parent)."""
    return [info for info in store.runs(RUNNABLE) if "/" not in info.run_id]
