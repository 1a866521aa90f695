"""The guard protocol: a limit check that may stop a run, and how guards compose.

A *condition* (`agentfsm.fsm.table.Condition`) chooses between the targets of one event; a
*guard* decides whether the run may go on at all. A guard looks at the run record before
the event, the proposed event and a `GuardContext` (the time, a shared budget) and returns
`None` (go on) or a `Verdict` (stop, for this reason, with this sentence).

Guards are attached to table edges by name: `Transition.guards` lists the names checked on
each edge, so diagrams can label them, and a `Reducer` runs the guards whose `name` the
edge taken lists (`attach_guard` labels more edges). Writing one takes a few lines::

    @attrs.frozen
    class NoRefunds:
        name: str = "no_refunds"

        def check(self, record, event, ctx):
            if getattr(event, "tool", None) == "refund":
                return Verdict(self.name, "policy", "refunds need a human")
            return None

`any_of` and `all_of` combine guards into one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

import attrs

from agentfsm.errors import GuardRejectedError, OverrunError
from agentfsm.events.models import RunTerminated, parse_timestamp
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import EventType

if TYPE_CHECKING:
    from agentfsm.events.models import Event
    from agentfsm.guards.budget import SharedBudget
    from agentfsm.record import RunRecord

__all__ = [
    "AllOf",
    "AnyOf",
    "Guard",
    "GuardContext",
    "Verdict",
    "all_of",
    "any_of",
    "attach_guard",
]

_E = TypeVar("_E", bound=GuardRejectedError)


@attrs.frozen
class Verdict:
    """A guard's decision to stop a run.

    Attributes:
        guard: the name of the guard that decided.
        stop_reason: what `run.terminated.stop_reason` will say (`max_turns`, `budget`, ...).
        detail: a sentence a person can read, e.g. `3 of 3 turns used`.
    """

    guard: str
    stop_reason: str
    detail: str

    def error(self, record: RunRecord, event: Event) -> GuardRejectedError:
        """The exception the reducer raises for this verdict on `event`."""
        return self._as(GuardRejectedError, record, event)

    def overrun(self, record: RunRecord, event: Event) -> OverrunError:
        """The error saying `event` (accepted on `record`) overran a budget, by this verdict."""
        return self._as(OverrunError, record, event)

    def _as(self, cls: type[_E], record: RunRecord, event: Event) -> _E:
        return cls(
            guard=self.guard,
            stop_reason=self.stop_reason,
            detail=self.detail,
            run_id=record.run_id,
            sequence=event.sequence,
            state=record.status,
            event=event.type,
        )

    @classmethod
    def of(cls, error: GuardRejectedError) -> Verdict:
        """The verdict a `GuardRejectedError` carries."""
        return cls(error.guard, error.stop_reason, error.detail)

    def terminated_event(self, record: RunRecord, occurred_at: datetime | str) -> RunTerminated:
        """The `run.terminated` event that records this stop, next in `record`'s log."""
        at = occurred_at.isoformat() if isinstance(occurred_at, datetime) else occurred_at
        return RunTerminated(
            run_id=record.run_id,
            sequence=record.version + 1,
            occurred_at=at,
            stop_reason=self.stop_reason,
            detail=self.detail,
        )


def _instant(value: str) -> datetime:
    # Timestamps were validated at the edge; the C parser takes them all but the rare
    # spellings (lower-case `t`/`z`) that `parse_timestamp` handles.
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return parse_timestamp(value)


class GuardContext:
    """What a guard sees besides the record and the event: the time and a shared budget.

    In the reducer (replay, audit) `now` is the event's `occurred_at`, parsed only if a guard
    asks for it; a runtime passes its own injected clock's reading.

    Args:
        now: an aware datetime.
        budget: the shared budget the run draws on, if it is part of one.
    """

    __slots__ = ("_at", "_budget", "_now")

    def __init__(self, now: datetime, *, budget: SharedBudget | None = None) -> None:
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError(f"a guard's clock must be aware (have an offset); got {now!r}")
        self._now: datetime | None = now
        self._at = ""
        self._budget = budget

    @classmethod
    def at_event(cls, event: Event, *, budget: SharedBudget | None = None) -> GuardContext:
        """The context of replaying `event`: its own `occurred_at` is the time."""
        ctx = cls.__new__(cls)
        ctx._now = None
        ctx._at = event.occurred_at
        ctx._budget = budget
        return ctx

    @property
    def now(self) -> datetime:
        """The current time (aware)."""
        if self._now is None:
            self._now = _instant(self._at)
        return self._now

    @property
    def budget(self) -> SharedBudget | None:
        """The shared budget the run draws on, or None."""
        return self._budget

    def __repr__(self) -> str:
        now = self._now.isoformat() if self._now is not None else self._at
        return f"GuardContext(now={now!r}, budget={self._budget!r})"


class Guard(Protocol):
    """A limit check: `check` returns `None` to let the event through, or a `Verdict`.

    `name` is what table edges list (`Transition.guards`) and diagrams show. A guard must
    be pure: the same record, event and context give the same answer.
    """

    @property
    def name(self) -> str:
        """The name edges use to attach this guard."""
        ...

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """`None` to go on, or the `Verdict` that stops the run."""
        ...


@attrs.frozen
class AnyOf:
    """Stops the run when any member would: the first member's verdict, in order.

    Attributes:
        name: the name edges use for the combination.
        members: the guards, checked in order.
    """

    name: str
    members: tuple[Guard, ...]

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """The first member's verdict, or None when no member trips."""
        for guard in self.members:
            verdict = guard.check(record, event, ctx)
            if verdict is not None:
                return verdict
        return None


@attrs.frozen
class AllOf:
    """Stops the run only when every member would (e.g. "late *and* over 10 turns").

    The verdict names the combination, takes the first member's stop reason and joins
    every member's detail with "; ".

    Attributes:
        name: the name edges use for the combination.
        members: the guards; checking stops at the first that passes.
    """

    name: str
    members: tuple[Guard, ...]

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """A combined verdict when every member trips, else None."""
        verdicts = []
        for guard in self.members:
            verdict = guard.check(record, event, ctx)
            if verdict is None:
                return None
            verdicts.append(verdict)
        return Verdict(self.name, verdicts[0].stop_reason, "; ".join(v.detail for v in verdicts))


def _combined_name(kind: str, guards: tuple[Guard, ...], name: str | None) -> str:
    if not guards:
        raise ValueError(f"{kind}() needs at least one guard")
    if name is not None:
        return name
    names = sorted({g.name for g in guards})
    if len(names) > 1:
        raise ValueError(
            f"{kind}() members have different names ({', '.join(repr(n) for n in names)}): "
            "pass name= to say which table edges check the combination"
        )
    return names[0]


def any_of(*guards: Guard, name: str | None = None) -> AnyOf:
    """A guard that trips when any of `guards` trips.

    Args:
        guards: at least one guard.
        name: the name edges use; may be left out when all members share one name.
    """
    return AnyOf(_combined_name("any_of", guards, name), guards)


def all_of(*guards: Guard, name: str | None = None) -> AllOf:
    """A guard that trips only when all of `guards` trip.

    Args:
        guards: at least one guard.
        name: the name edges use; may be left out when all members share one name.
    """
    return AllOf(_combined_name("all_of", guards, name), guards)


def attach_guard(
    table: TransitionTable,
    name: str,
    events: Iterable[str],
    *,
    sources: Iterable[str] | None = None,
) -> TransitionTable:
    """A copy of `table` whose edges on `events` (from `sources`, or any state) list `name`.

    This is how a guard of your own gets checked, and labelled on the diagrams.

    Raises:
        ValueError: an event type no edge of the table has, or `run.terminated` (the event
            that records a stop must never be refused).
    """
    wanted = set(events)
    known = set(table.events)
    problems = [f"no edge of table '{table.name}' has event '{e}'" for e in sorted(wanted - known)]
    if EventType.RUN_TERMINATED in wanted:
        problems.append("'run.terminated' records a stop and must never be refused by a guard")
    if problems:
        raise ValueError("; ".join(problems))
    where = set(sources) if sources is not None else None
    transitions = [
        attrs.evolve(t, guards=(*t.guards, name))
        if t.event in wanted and (where is None or t.source in where) and name not in t.guards
        else t
        for t in table.transitions
    ]
    return TransitionTable(
        name=table.name, states=table.states, initial=table.initial, transitions=transitions
    )
