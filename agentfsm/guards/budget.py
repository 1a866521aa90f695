"""A budget shared by a root run and the child runs (subagents) it spawns.

Each run folds its own log into its own record, so a child's usage is not in its parent's
record. `SharedBudget` is the explicit link: an immutable value holding, for every run of
the tree, what it has spent and what it holds in reserve, and the root's limits. Whoever
drives the runs threads it along, as pure as the records themselves::

    shared = SharedBudget("root", max_tokens=10_000).spawn("child", parent="root")
    ctx = GuardContext(now, budget=shared)
    child = reducer.reduce(child, event, ctx)   # refused when the *tree* would overspend
    shared = shared.charge(child)               # after every accepted event of any run

The `budget` guard of every run in the tree checks the tree's totals (its own record's live
figures plus everyone else's last charge) against the root's limits, so when a child is
refused for `budget` the parent's next model or tool call is refused for `budget` too.
Handoffs stay within one run and one record: nothing to link.

The shared budget is checked by the same `budget` check as a run's own `limits` (see
`RunLimits`), so a reducer built with `run_limits=False` ignores it too. It is a
value for one process; several workers sharing a root budget need a store that serialises
the charges (not part of this module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from agentfsm.record import RunRecord

__all__ = ["Charge", "SharedBudget"]


@attrs.frozen
class Charge:
    """One run's share: what it spent and what its open model call holds in reserve.

    Attributes:
        tokens: input plus output tokens spent.
        cost: cost spent (model usage and tool costs).
        reserved_tokens: tokens reserved by the model call in flight.
        reserved_cost: cost reserved by the model call in flight.
    """

    tokens: int = 0
    cost: float = 0.0
    reserved_tokens: int = 0
    reserved_cost: float = 0.0

    @classmethod
    def of(cls, record: RunRecord) -> Charge:
        """What `record` has spent and reserved."""
        usage = record.usage
        return cls(
            usage.input_tokens + usage.output_tokens,
            usage.cost,
            record.reserved_tokens,
            record.reserved_cost,
        )


# Copies, so a caller's dict changed later cannot change a budget.
def _parents(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _charges(value: Mapping[str, Charge]) -> dict[str, Charge]:
    return dict(value)


@attrs.frozen
class SharedBudget:
    """The root run's token and cost limits, drawn on by every run of its tree.

    Build it with `SharedBudget(root, max_tokens=..., max_cost=...)`, add children with
    `spawn`, and after each accepted event of any run of the tree replace it with
    `charge(record)`. Every method returns a new value.

    Attributes:
        root: the root run's id.
        max_tokens: the tree's token limit, or None.
        max_cost: the tree's cost limit, or None.
        parents: child run id -> the run it was spawned by.
        charges: run id -> its last charge (runs not charged yet count as zero).
    """

    root: str
    max_tokens: int | None = None
    max_cost: float | None = None
    parents: Mapping[str, str] = attrs.field(factory=dict, converter=_parents)
    charges: Mapping[str, Charge] = attrs.field(factory=dict, converter=_charges)

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is None and self.max_cost is None:
            raise ValueError("a shared budget needs max_tokens, max_cost or both")
        for value, what in ((self.max_tokens, "max_tokens"), (self.max_cost, "max_cost")):
            if value is not None and value < 0:
                raise ValueError(f"{what} must not be negative, got {value!r}")

    def covers(self, run_id: str) -> bool:
        """Whether `run_id` is the root or one of its descendants."""
        return run_id == self.root or run_id in self.parents

    @property
    def runs(self) -> tuple[str, ...]:
        """The root and every child, in the order they joined."""
        return (self.root, *self.parents)

    def spawn(self, child: str, *, parent: str) -> SharedBudget:
        """The budget with `child` added, charged to `parent` (and so to the root).

        Raises:
            ValueError: `parent` is not in the tree, or `child` already is.
        """
        if not self.covers(parent):
            raise ValueError(
                f"cannot spawn '{child}' from '{parent}': '{parent}' is not part of the "
                f"budget of root '{self.root}'"
            )
        if self.covers(child):
            raise ValueError(f"run '{child}' is already part of the budget of root '{self.root}'")
        return attrs.evolve(self, parents={**self.parents, child: parent})

    def charge(self, record: RunRecord) -> SharedBudget:
        """The budget with `record`'s current spending and reservation as its run's charge.

        Raises:
            ValueError: the record's run is not in the tree.
        """
        if not self.covers(record.run_id):
            raise ValueError(
                f"run '{record.run_id}' is not part of the budget of root '{self.root}'; "
                "spawn it first"
            )
        return attrs.evolve(self, charges={**self.charges, record.run_id: Charge.of(record)})

    def total(self, *, excluding: str | None = None) -> Charge:
        """The sum of every run's charge, optionally leaving one run out."""
        tokens = reserved_tokens = 0
        cost = reserved_cost = 0.0
        for run_id, c in self.charges.items():
            if run_id != excluding:
                tokens += c.tokens
                cost += c.cost
                reserved_tokens += c.reserved_tokens
                reserved_cost += c.reserved_cost
        return Charge(tokens, cost, reserved_tokens, reserved_cost)
