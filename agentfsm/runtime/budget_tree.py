"""The shared budget of a subagent tree, as the writers of its runs hold it."""

from __future__ import annotations

import threading

from agentfsm.guards.budget import SharedBudget
from agentfsm.record import RunRecord

__all__ = ["BudgetTree"]


class BudgetTree:
    """The shared budget of a root run and its subagent runs, updated as they append.

    `SharedBudget` is an immutable value; this holder is what the writers of one tree share
    (they may run on several threads), each replacing it with its run's latest charge.

    Args:
        budget: the root's limits (and any children already known).
    """

    def __init__(self, budget: SharedBudget) -> None:
        self._budget = budget
        self._lock = threading.Lock()

    @property
    def current(self) -> SharedBudget:
        """The budget as of the last append of any run of the tree."""
        return self._budget

    def charge(self, record: RunRecord) -> None:
        """Record `record`'s spending as its run's share."""
        with self._lock:
            if self._budget.covers(record.run_id):
                self._budget = self._budget.charge(record)

    def spawn(self, child: str, *, parent: str) -> None:
        """Add `child` to the tree under `parent` (no-op when it is already there)."""
        with self._lock:
            if not self._budget.covers(child):
                self._budget = self._budget.spawn(child, parent=parent)
