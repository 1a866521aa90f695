"""A table's guards, compiled: which guards run on which edge, in which order.

The table's edges list guard names (`Transition.guards`). A `GuardSet` binds those names to
guards once, when a `Reducer` is built, and reports every wiring mistake at once:

- a Python guard whose name no edge lists would never run: an error, not a silent no-op;
- an edge on `run.terminated` that lists a guard: the event that records a stop must never
  be refused.

On an edge, the Python guards are checked first (by the order of the names the edge lists,
then the order given), then the run's own limits the edge names (`RunLimits`: turns,
deadline, budget from `run.started.limits`, then a shared budget from the context). Every
limit is checked, so the stricter of a run's limit and a Python guard always stops the run
first; on an event where both trip, the Python guard is the one reported (it is what an
operator or an audit imposed). The first verdict wins.

`overrun` is the other half of a budget: after an event that records spending (a model
call's usage, a tool's cost) is accepted, it says whether the run is now past a limit, by
the `Budget` guards given (also inside `any_of`) and, with `run_limits`, the run's own
limits and shared budget, when some edge lists `budget`. Nothing is refused for it: the
event is a fact; whoever drives the run stops it, and audits report it.

The hot path stays flat: event types no edge guards cost one set lookup in the reducer; a
run without limits, under a reducer without Python guards, skips the guards on a second
attribute check; and `RunLimits` reads only the limits the run set, building no context.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from agentfsm.errors import InvalidTableError
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import AnyOf, Guard, GuardContext, Verdict
from agentfsm.guards.limits import Budget, RunLimits, overrun, remaining, spends
from agentfsm.names import EventType, StopReason

if TYPE_CHECKING:
    from agentfsm.events.models import Event
    from agentfsm.record import RunRecord

__all__ = ["GuardSet"]

# The Python guards of an edge, in order, and its run-limit check (None when it has none).
_Entry = tuple[tuple[Guard, ...], RunLimits | None]


class GuardSet:
    """The guards of one table, bound to its edges by name.

    Args:
        table: the table whose edges list guard names.
        guards: Python guard objects; each one's `name` must be listed on some edge.
        run_limits: also check each run's own `run.started.limits` (and a shared budget
            from the context). On by default.

    Raises:
        InvalidTableError: with every wiring problem (see the module docstring).
    """

    __slots__ = (
        "_budgets", "_limit_budget", "_plan", "always", "events", "guards", "run_limits", "table",
    )  # fmt: skip

    def __init__(
        self, table: TransitionTable, guards: Iterable[Guard] = (), *, run_limits: bool = True
    ) -> None:
        self.table = table
        self.guards: tuple[Guard, ...] = tuple(guards)
        self.run_limits = run_limits
        by_name: dict[str, list[Guard]] = {}
        for guard in self.guards:
            by_name.setdefault(guard.name, []).append(guard)
        _validate(table, by_name)
        # Two edges may share (source, event, target) under different conditions: merge.
        names_by_edge: dict[tuple[str, str, str], dict[str, None]] = {}
        for t in table.transitions:
            names_by_edge.setdefault((t.event, t.source, t.target), {}).update(
                dict.fromkeys(t.guards)
            )
        plan: dict[str, dict[str, dict[str, _Entry]]] = {}
        for (event, source, target), names in names_by_edge.items():
            chain = tuple(g for n in names for g in by_name.get(n, ()))
            limits = RunLimits(names) if run_limits else None
            if limits is not None and not limits:
                limits = None
            if chain or limits is not None:
                plan.setdefault(event, {}).setdefault(source, {})[target] = (chain, limits)
        self._plan = plan
        #: Event types some edge guards; the reducer skips the rest with one set lookup.
        self.events: frozenset[str] = frozenset(plan)
        #: Whether some Python guard is attached (then guards run even for runs without limits).
        self.always = bool(self.guards)
        self._budgets = tuple(_budgets(self.guards))
        # A run's own budget applies only where an edge checks `budget` (see `RunLimits`).
        self._limit_budget = run_limits and any(
            StopReason.BUDGET in t.guards for t in table.transitions
        )

    def overrun(
        self, record: RunRecord, event: Event, ctx: GuardContext | None = None
    ) -> Verdict | None:
        """The verdict when `event`, accepted into `record`, took the run's spending past a limit.

        Args:
            record: the run record *after* the event.
            event: the event just applied; only one that records spending is checked.
            ctx: the shared budget the run draws on, if any.
        """
        return self.overspent(record, ctx) if spends(event) else None

    def overspent(self, record: RunRecord, ctx: GuardContext | None = None) -> Verdict | None:
        """The verdict when `record` has spent past a budget, whatever event got it there."""
        for budget in self._budgets:
            verdict = budget.overrun(record)
            if verdict is not None:
                return verdict
        if self._limit_budget:
            return overrun(record, ctx)
        return None

    def check(
        self, record: RunRecord, event: Event, target: str, ctx: GuardContext | None = None
    ) -> Verdict | None:
        """The first verdict of the guards on the edge `record.status --event--> target`.

        Args:
            record: the run record before the event.
            event: the proposed event (already accepted by the table and the ledger).
            target: the state the table moves to.
            ctx: the time and shared budget; by default the event's `occurred_at`.
        """
        by_source = self._plan.get(event.type)
        if by_source is None:
            return None
        targets = by_source.get(record.status)
        if targets is None:
            return None
        entry = targets.get(target)
        if entry is None:
            return None
        chain, limits = entry
        if chain:
            if ctx is None:
                ctx = GuardContext.at_event(event)
            for guard in chain:
                verdict = guard.check(record, event, ctx)
                if verdict is not None:
                    return verdict
        if limits is not None:
            return limits.check(record, event, ctx)
        return None

    def remaining(self, record: RunRecord, now: datetime) -> float | None:
        """Seconds left before the earliest deadline of the run or of these guards, or None."""
        return remaining(record, now, self.guards, run_limits=self.run_limits)

    def __repr__(self) -> str:
        names = ", ".join(g.name for g in self.guards)
        table = self.table.name
        return f"GuardSet(table={table!r}, guards=[{names}], run_limits={self.run_limits})"


def _budgets(guards: Iterable[Guard]) -> Iterable[Budget]:
    # `any_of` stops when any member would; `all_of` only with its other members, which an
    # overrun alone cannot say, so its budgets are left to its own `check`.
    for guard in guards:
        if isinstance(guard, Budget):
            yield guard
        elif isinstance(guard, AnyOf):
            yield from _budgets(guard.members)


def _validate(table: TransitionTable, by_name: Mapping[str, list[Guard]]) -> None:
    problems = []
    labelled = {name for t in table.transitions for name in t.guards}
    for name in sorted(set(by_name) - labelled):
        problems.append(
            f"guard '{name}' is listed on no edge, so it would never run; list it on the edges "
            "it should check (attach_guard(table, name, events=[...]))"
        )
    for t in table.transitions:
        if t.event == EventType.RUN_TERMINATED and t.guards:
            problems.append(
                f"edge {t.source} --{t.event}--> {t.target} lists guards "
                f"{', '.join(repr(g) for g in t.guards)}: 'run.terminated' records a stop "
                "and must never be refused"
            )
    if problems:
        raise InvalidTableError(table.name, problems)
