"""The reducer: `reduce(record, event) -> record`, pure and deterministic.

Each event is checked in a fixed order, and the first failure is raised with the record
untouched (it is immutable; a refusal simply returns nothing new):

1. the envelope: the event names this run and the next sequence;
2. the table: some edge leaves the current state on this event type;
3. the ledger and the rules DESIGN.md adds beyond the table (action ids, exact-call binding,
   open model calls, unresolved batches);
4. the edge's condition chooses the target state (or none holds: illegal);
5. the limit guards listed on the edge taken (`agentfsm.guards.guardset`): the run's own
   `run.started.limits`, a shared budget from the context, and the reducer's Python guards.
   A verdict raises `GuardRejectedError`; `run.terminated` is never refused.

A `run.migrated` is on no table's edges: the reducer applies it in any state that has not
ended, and the run is folded under the new table from then on (`_versions.py`). So are an
`emit.refused` (why a call's proposed event is not applied) and a `run.forked` (where a
forked run's first events came from): the run stays where it is.
A run under another table than the reducer's is folded with that one, as long as it can be
found.

Then the event's effect is folded in. The per-event work is a handful of dict lookups and
one record construction: no validation, no hashing, no `attrs.evolve`. (Steps 3 and 4 run
inside each event's handler together with the fold, in `_handlers.py`; the guards see the
record *before* the event and the target state, and on a verdict the folded record is simply
dropped.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agentfsm.errors import (
    IllegalTransitionError,
    OverrunError,
    RunMismatchError,
    SequenceError,
)
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import IN_PLACE, TransitionTable
from agentfsm.guards.base import Guard, GuardContext
from agentfsm.guards.guardset import GuardSet
from agentfsm.guards.limits import SPENDING_TYPES
from agentfsm.record import RunRecord
from agentfsm.reducers import _versions
from agentfsm.reducers._changes import entered
from agentfsm.reducers._handlers import HANDLERS, Handler, custom_event
from agentfsm.reducers.snapshot import Snapshot

if TYPE_CHECKING:
    from agentfsm.events.models import TableRef
    from agentfsm.events.vocabulary import EventTypes

__all__ = ["DEFAULT_REDUCER", "Reducer", "reduce", "replay"]


class Reducer:
    """Folds events into run records under one table, checking its guards.

    Args:
        table: the transition table (the default agent-run table unless given).
        guards: Python guard objects (`MaxTurns(3)`, `LoopDetector()`, your own), each run
            on the table edges that list its name.
        run_limits: check each run's own `run.started.limits` too (the stricter limit wins).
        tables: older versions runs may have been under before a `run.migrated` moved them
            to `table`: the events before a migration are folded with the version they were
            written under. Any version not given is looked up in the registry
            (`agentfsm.fsm.registry`).

    Raises:
        InvalidTableError: a guard no edge lists, or a guard listed on `run.terminated`.
    """

    __slots__ = (
        "_allowed", "_always", "_digest", "_guarded", "_handlers", "_moves", "_ref",
        "_terminal", "_timeouts", "_versions", "guards", "table",
    )  # fmt: skip

    def __init__(
        self,
        table: TransitionTable = DEFAULT_TABLE,
        guards: Iterable[Guard] = (),
        *,
        run_limits: bool = True,
        tables: Iterable[TransitionTable] = (),
    ) -> None:
        self.table = table
        self._moves = table._moves  # the precomputed (state -> event -> move) map
        self._allowed = table._allowed
        self._terminal = table.terminal_states
        self._timeouts = table._first_timeout
        self._handlers: dict[str, Handler] = dict(HANDLERS)
        self._handlers["run.started"] = _versions.run_started
        for name in table.event_types.custom:
            self._handlers[name] = custom_event
        #: The guards bound to the table's edges (see `agentfsm.guards.guardset`).
        self.guards = GuardSet(table, guards, run_limits=run_limits)
        self._guarded = self.guards.events
        self._always = self.guards.always
        # The one reference a run under this table carries (see `_versions.run_started`).
        self._ref = table.ref
        self._digest = table.digest
        self._versions = _versions.Versions(
            type(self), self.guards.guards, run_limits, tuple(tables)
        )

    def initial(self, run_id: str) -> RunRecord:
        """The record of a run before its first event."""
        return RunRecord(run_id=run_id, status=self.table.initial)

    def reduce(self, record: RunRecord, event: Event, ctx: GuardContext | None = None) -> RunRecord:
        """The record after `event`, or a `LifecycleError` with `record` unchanged.

        Args:
            record: the run's record before the event.
            event: the event to apply.
            ctx: what guards see as the time and shared budget; by default the time is the
                event's `occurred_at` (so replays and audits are deterministic).

        Raises:
            GuardRejectedError: a guard's verdict (the run should be terminated with its
                `stop_reason`); it is a `LifecycleError`, apart from `IllegalTransitionError`.
        """
        if event.sequence != record.version + 1 or event.run_id != record.run_id:
            _envelope_error(record, event)
        under = record.table
        if under is not self._ref and (under is not None or record.version == 0):
            other = _versions.route(self, record, event)
            if other is not None:  # the run is under another version of the table
                if event.type == "run.migrated":
                    return _versions.migrate(self, record, event, other)
                return other.reduce(record, event, ctx)
        move = self._moves[record.status].get(event.type)
        if move is None:
            if event.type == "run.migrated":
                return _versions.migrate(self, record, event, self)
            state = record.status  # the refusal path is hot too: validators probe with it
            if event.type not in IN_PLACE or state in self._terminal:
                raise IllegalTransitionError.quick(
                    record.run_id, event.sequence, state, event.type,
                    self._allowed.get(state, ()), state in self._terminal, (),
                )  # fmt: skip
            move = state  # on no edge: applied in every state that has not ended, in place
        new = self._handlers[event.type](self, record, event, move)
        if new.status != record.status:
            # Entering a state: its timed edges count from now (staying in one does not).
            entered(new, event.occurred_at, self._timeouts.get(new.status))
        if event.type in self._guarded and (
            self._always or record.limits is not None or ctx is not None
        ):
            verdict = self.guards.check(record, event, new.status, ctx)
            if verdict is not None:
                raise verdict.error(record, event)
        return new

    def admit(self, record: RunRecord, event: Event, after: RunRecord) -> RunRecord:
        """`reduce(record, event)` when `after` is what a reducer of this very table made of
        it: the event is judged again (envelope, edge, the guards on the edge) but the
        handler's work, which is all a fold costs, is not done twice.

        For a store handed the fold its writer already made (`EventStore.append(folded=)`):
        the record after an event depends only on the table, never on the guards, so a
        reducer of the same table and class makes the same one. `after` is trusted to be
        that fold, not checked: the ledger rules the handler applies are not run again. A
        run under another version of the table, or an `after` that cannot be this event's
        record, is folded again, plainly.
        """
        under = record.table
        if (
            under is not self._ref
            and (under.digest != self._digest if under is not None else record.version == 0)
        ) or (
            after.table is not under
            or after.version != event.sequence
            or event.run_id != record.run_id
            or event.sequence != record.version + 1
        ):
            return self.reduce(record, event)  # another version's rules, or not its fold
        move = self._moves[record.status].get(event.type)
        if move is None:
            return self.reduce(record, event)  # refused, in reduce's words
        if event.type in self._guarded and (self._always or record.limits is not None):
            verdict = self.guards.check(record, event, after.status, None)
            if verdict is not None:
                raise verdict.error(record, event)
        return after

    def overrun(
        self, before: RunRecord, event: Event, after: RunRecord, ctx: GuardContext | None = None
    ) -> OverrunError | None:
        """The `OverrunError` when `event`, accepted (`before` -> `after`), overran a budget.

        `reduce` accepts such an event: the usage it records is a fact. This says whether it
        took the run past a limit (see `GuardSet.overrun`), for those who must then stop
        the run (the runtime, the adapters) or report it (audits, validation).
        """
        if event.type not in SPENDING_TYPES:
            return None  # most events spend nothing: one set lookup instead of the guards'
        under = before.table
        if under is not self._ref and under is not None and under.digest != self._digest:
            other = self._versions.reducer(under)
            if other is not None:  # folded under another version: its budgets apply
                return other.overrun(before, event, after, ctx)
        verdict = self.guards.overrun(after, event, ctx)
        return verdict.overrun(before, event) if verdict is not None else None

    def replay(self, events: Iterable[Event], snapshot: Snapshot | None = None) -> RunRecord:
        """Fold `events` from the start of the run, or after `snapshot`.

        Raises:
            ValueError: no events and no snapshot (there is no run to speak of).
            TableMismatchError: the run is not under this reducer's table at its end (see
                `check_table`).
        """
        it = iter(events)
        if snapshot is not None:
            record = snapshot.record
        else:
            first = next(it, None)
            if first is None:
                raise ValueError("replay needs at least one event or a snapshot")
            record = self.reduce(self.initial(first.run_id), first)
        reduce = self.reduce
        for event in it:
            record = reduce(record, event)
        self.check_table(record)
        return record

    def check_table(self, record: RunRecord, *, after_append: bool = False) -> None:
        """Refuse a whole run that is not under this reducer's table.

        Folding a run started under another table is left to its end (the run may be
        migrated to this table later on); whoever folds a whole run (`replay`, the stores'
        `load`, `verify`) asks here at its end.

        Args:
            record: the run's record after its last event.
            after_append: accept a run whose last event moved it from this table to another
                (a store of the old version records the migration).

        Raises:
            TableMismatchError: naming both tables.
        """
        if record.table is not self._ref and record.table is not None:
            _versions.check_table(self, record, after_append=after_append)

    def is_own(self, record: RunRecord) -> bool:
        """Whether the run is under this reducer's table (or its `run.started` names none)."""
        under = record.table
        return under is self._ref or under is None or under.digest == self._digest

    def event_types_for(self, record: RunRecord) -> EventTypes:
        """The event types of the table `record`'s run is under: this reducer's, or the
        version the run was folded with before it was migrated here."""
        return self.event_types_of(record.table)

    def event_types_of(self, ref: TableRef | None) -> EventTypes:
        """The event types of the table `ref` names, when this reducer can find it (its own
        otherwise: the events of an unknown table are refused when they are folded)."""
        table = self.table_of(ref) if ref is not None else None
        return table.event_types if table is not None else self.table.event_types

    def table_of(self, ref: TableRef) -> TransitionTable | None:
        """The table `ref` names, when this reducer can fold runs under it: its own, one of
        `tables`, or a registered one; None otherwise."""
        if ref is self._ref or ref.digest == self._digest:
            return self.table
        return self._versions.table(ref)

    @property
    def tables(self) -> tuple[TransitionTable, ...]:
        """The other versions this reducer was given (`tables=`); the registry is asked for
        any other."""
        return self._versions.given


def _envelope_error(record: RunRecord, event: Event) -> None:
    if event.run_id != record.run_id:
        raise RunMismatchError(
            run_id=record.run_id,
            event_run_id=event.run_id,
            sequence=event.sequence,
            state=record.status,
            event=event.type,
        )
    raise SequenceError(
        run_id=record.run_id,
        sequence=event.sequence,
        expected=record.version + 1,
        state=record.status,
        event=event.type,
    )


#: The reducer of the default agent-run table.
DEFAULT_REDUCER = Reducer()


def reduce(record: RunRecord, event: Event) -> RunRecord:
    """Fold one event into a record under the default table (see `Reducer.reduce`)."""
    return DEFAULT_REDUCER.reduce(record, event)


def replay(events: Iterable[Event], snapshot: Snapshot | None = None) -> RunRecord:
    """Fold a run's events (after `snapshot`, if given) under the default table."""
    return DEFAULT_REDUCER.replay(events, snapshot)
