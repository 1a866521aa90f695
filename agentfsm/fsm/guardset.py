"""A table's guards, compiled: which guards run on which edge, in which order.

The table's edges list guard names (`Transition.guards`). A `GuardSet` binds those names to
guards once, when a `Reducer` is built, and reports every wiring mistake at once:

- a Python guard whose name no edge lists would never run: an error, not a silent no-op;
- an edge on `run.terminated` that lists a guard: the event that records a stop must never
  be refused.

On an edge, for each name it lists in order, the Python guards of that name are checked
in the order given, then the run's own limits (`run.started.limits` and a shared budget;
see `RUN_LIMIT_GUARDS`). Every limit is checked, so the stricter of a run's limit and a
Python guard always stops the run first; on an event where both trip, the Python guard is
the one reported (it is what an operator or an audit imposed). The first verdict wins.

The hot path stays flat: event types no edge guards cost one set lookup in the reducer, and
an edge with only run-limit guards is skipped without a call (and without a context) when
no shared budget is given and none of the limit fields those guards read is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from agentfsm.fsm.errors import InvalidTableError
from agentfsm.fsm.guards import Guard, GuardContext, Verdict
from agentfsm.fsm.limits import RUN_LIMIT_GUARDS, remaining
from agentfsm.fsm.names import EventType
from agentfsm.fsm.table import TransitionTable

if TYPE_CHECKING:
    from agentfsm.events.models import Event
    from agentfsm.reducers.record import RunRecord

__all__ = ["GuardSet"]

# (guards in order, whether they are all run-limit guards, the `Limits` fields those read)
_Chain = tuple[tuple[Guard, ...], bool, tuple[str, ...]]

#: The `Limits` fields each run-limit guard reads: with all of them unset it cannot trip.
_READS = {
    "max_turns": ("max_turns",),
    "deadline": ("deadline",),
    "budget": ("max_tokens", "max_cost"),
}


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

    __slots__ = ("_plan", "always", "events", "guards", "run_limits", "table")

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
        limit_guards: Mapping[str, Guard] = RUN_LIMIT_GUARDS if run_limits else {}
        plan: dict[str, dict[str, dict[str, _Chain]]] = {}
        for t in table.transitions:
            chain: list[Guard] = []
            only_limits = True
            reads: list[str] = []
            for name in t.guards:
                if name in by_name:
                    chain.extend(by_name[name])
                    only_limits = False
                if name in limit_guards:
                    chain.append(limit_guards[name])
                    reads.extend(_READS.get(name, ()))
            if not chain:
                continue
            targets = plan.setdefault(t.event, {}).setdefault(t.source, {})
            if t.target in targets:  # two conditions lead to one target: check both lists
                known, known_only, known_reads = targets[t.target]
                chain = [*known, *(g for g in chain if g not in known)]
                only_limits = only_limits and known_only
                reads = [*known_reads, *(r for r in reads if r not in known_reads)]
            targets[t.target] = (tuple(chain), only_limits, tuple(dict.fromkeys(reads)))
        self._plan = plan
        #: Event types some edge guards; the reducer skips the rest with one set lookup.
        self.events: frozenset[str] = frozenset(plan)
        #: Whether some Python guard is attached (then guards run even for runs without limits).
        self.always = bool(self.guards)

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
        chain, only_limits, reads = entry
        if only_limits and (ctx is None or ctx.budget is None):
            # Only the run's own limits apply here: skip them all when none they read is set.
            limits = record.limits
            if limits is None:
                return None
            for field in reads:
                if getattr(limits, field) is not None:
                    break
            else:
                return None
        if ctx is None:
            ctx = GuardContext.at_event(event)
        for guard in chain:
            verdict = guard.check(record, event, ctx)
            if verdict is not None:
                return verdict
        return None

    def remaining(self, record: RunRecord, now: datetime) -> float | None:
        """Seconds left before the earliest deadline of the run or of these guards, or None."""
        return remaining(record, now, self.guards, run_limits=self.run_limits)

    def __repr__(self) -> str:
        names = ", ".join(g.name for g in self.guards)
        table = self.table.name
        return f"GuardSet(table={table!r}, guards=[{names}], run_limits={self.run_limits})"


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
