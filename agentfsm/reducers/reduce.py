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
ended, and the run is folded under the new table from then on (see "Versions" below). So
are an `emit.refused` (why a call's proposed event is not applied) and a `run.forked` (where
a forked run's first events came from): the run stays where it is.

Then the event's effect is folded in. The per-event work is a handful of dict lookups and
one record construction: no validation, no hashing, no `attrs.evolve`. (Steps 3 and 4 run
inside each event's handler together with the fold, in `_handlers.py`; the guards see the
record *before* the event and the target state, and on a verdict the folded record is simply
dropped.)

Versions. A run is under the table its `run.started` names until a `run.migrated` moves it
to another (`RunRecord.table`). Every event is folded under the rules of the table the run
is under at that point. So a `Reducer` of the new version folds the part of a run before its
migration with the old version, which it finds among the tables it was given
(`Reducer(tables=...)`) or in the registry (`agentfsm.fsm.registry`); and a `Reducer` of the
old version folds up to the migration and refuses what follows, naming the new version.

Whether a whole run belongs to a reducer is known only at its end (a log folded with v2 may
still migrate to v2 later on), so whoever folds a whole run asks `check_run_table` there:
`Reducer.replay`, the stores' `load` and `append`, `verify`, validation. The hot path pays
one identity check for this: a run under the reducer's own table carries the table's own
`TableRef` object (`TransitionTable.ref`, the reducer's `_ref`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentfsm.errors import (
    IllegalTransitionError,
    MigrationError,
    OverrunError,
    RunMismatchError,
    SequenceError,
    TableMismatchError,
    UnknownTableError,
)
from agentfsm.events import models as m
from agentfsm.events.models import Event, TableRef
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.registry import lookup
from agentfsm.fsm.table import IN_PLACE, TransitionTable
from agentfsm.guards.base import Guard, GuardContext
from agentfsm.guards.guardset import GuardSet
from agentfsm.guards.limits import SPENDING_TYPES
from agentfsm.record import RunRecord, Timeout
from agentfsm.reducers._changes import entered, fill_entered_at, set_fresh, timeout_of
from agentfsm.reducers._evolve import evolves
from agentfsm.reducers._handlers import HANDLERS, Handler, custom_event
from agentfsm.reducers.snapshot import Snapshot

if TYPE_CHECKING:
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
        "_allowed", "_always", "_blank", "_digest", "_guarded", "_handlers", "_moves", "_ref",
        "_terminal", "_timed", "_timeouts", "_versions", "guards", "table",
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
        self._blank = RunRecord(run_id="", status=table.initial)  # what `initial` copies
        self._timed = bool(self._timeouts)  # most tables time out nowhere: one test per move
        self._handlers: dict[str, Handler] = dict(HANDLERS)
        for name in table.event_types.custom:
            self._handlers[name] = custom_event
        #: The guards bound to the table's edges (see `agentfsm.guards.guardset`).
        self.guards = GuardSet(table, guards, run_limits=run_limits)
        self._guarded = self.guards.events
        self._always = self.guards.always
        # The one reference a run under this table carries (`run.started` records it).
        self._ref = table.ref
        self._digest = table.digest
        self._versions = _Versions(type(self), self.guards.guards, run_limits, tuple(tables))

    def initial(self, run_id: str) -> RunRecord:
        """The record of a run before its first event."""
        # A copy of a blank record, not `RunRecord(...)`: the frozen class's `__init__` sets
        # its 34 fields one `object.__setattr__` at a time, 3.3 µs against 0.65 µs (a tenth
        # of folding a run of twenty events). Its mappings are the run's own, as
        # `attrs.field(factory=dict)` would make them.
        return set_fresh(self._blank, run_id=run_id, actions={}, facts={}, custom={})

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
        # An event's fields are read through pydantic's `__getattr__` hook (no specialised
        # attribute load), so the hot path reads each one once.
        kind = event.type
        if event.sequence != record.version + 1 or event.run_id != record.run_id:
            _envelope_error(record, event)
        under = record.table
        if under is not self._ref and (under is not None or record.version == 0):
            other = _route(self, record, event)
            if other is not None:  # the run is under another version of the table
                if event.type == "run.migrated":  # (read again: mypy narrows the event)
                    return _migrate(self, record, event, other)
                return other.reduce(record, event, ctx)
        state = record.status
        move = self._moves[state].get(kind)
        if move is None:
            if event.type == "run.migrated":
                return _migrate(self, record, event, self)
            # The refusal path is hot too: validators probe with it.
            if kind not in IN_PLACE or state in self._terminal:
                raise IllegalTransitionError.quick(
                    record.run_id, event.sequence, state, kind,
                    self._allowed.get(state, ()), state in self._terminal, (),
                )  # fmt: skip
            move = state  # on no edge: applied in every state that has not ended, in place
        new = self._handlers[kind](self.table, record, event, move)
        target = new.status
        if target != state:
            # Entering a state: its timed edges count from now (staying in one does not).
            if self._timed or new.timeout is not None:
                entered(new, event.occurred_at, self._timeouts.get(target))
            else:  # no edge of the table waits, and the run waited on none: only the time,
                # the event's, which every change records as `updated_at` (a slot: no hook)
                fill_entered_at(new, new.updated_at)
        if kind in self._guarded and (self._always or record.limits is not None or ctx is not None):
            verdict = self.guards.check(record, event, target, ctx)
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
                `check_run_table`).
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
        self.check_run_table(record)
        return record

    def check_run_table(self, record: RunRecord, *, after_append: bool = False) -> None:
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
            _check_run_table(self, record, after_append=after_append)

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


# -- versions ----------------------------------------------------------------------------

_HOW = "(`--table`, or the registry of `agentfsm.fsm.registry`)"


def _named(ref: TableRef) -> str:
    """How errors name a table: `'name' (digest)`."""
    return f"'{ref.name}' ({ref.digest})"


# The stub's body is never run (`evolves` replaces it).
@evolves(RunRecord)
def _set_migrated(  # type: ignore[empty-body]
    r: RunRecord, /, *, version: int, updated_at: str | None, table: TableRef | None,
    migrated_from: TableRef | None, migrated_at: int | None, timeout: Timeout | None,
) -> RunRecord: ...  # fmt: skip


class _Versions:
    """The other tables a reducer can fold runs under, and a reducer for each (cached).

    Args:
        make: makes a reducer of another table (the top reducer's class).
        guards: the top reducer's Python guards; each other table gets those its edges list.
        run_limits: whether runs' own limits are checked.
        tables: tables given explicitly; the registry is asked for any other.
    """

    __slots__ = ("_given", "_make", "_reducers", "guards", "run_limits")

    def __init__(
        self,
        make: type[Reducer],
        guards: tuple[Guard, ...],
        run_limits: bool,
        tables: tuple[TransitionTable, ...],
    ) -> None:
        self._make = make
        self.guards = guards
        self.run_limits = run_limits
        self._given = {t.digest: t for t in tables}
        self._reducers: dict[str, Reducer] = {}

    @property
    def given(self) -> tuple[TransitionTable, ...]:
        """The tables given explicitly."""
        return tuple(self._given.values())

    def table(self, ref: TableRef) -> TransitionTable | None:
        """The table `ref` names: a given one, else a registered one; None when unknown."""
        found = self._given.get(ref.digest)
        if found is not None:
            return found
        try:
            return lookup(ref)
        except UnknownTableError:
            return None

    def reducer(self, ref: TableRef) -> Reducer | None:
        """A reducer of the table `ref` names (None when it is unknown)."""
        found = self._reducers.get(ref.digest)
        if found is not None:
            return found
        table = self.table(ref)
        if table is None:
            return None
        listed = {name for t in table.transitions for name in t.guards}
        found = self._make(
            table,
            [g for g in self.guards if g.name in listed],
            run_limits=self.run_limits,
        )
        found._versions = self  # one set of tables for the whole fold
        self._reducers[ref.digest] = found
        return found


def _route(r: Reducer, record: RunRecord, event: Any) -> Reducer | None:
    """The reducer whose rules `event` is folded under, when the run is not under `r`'s
    table (None: it is, or names none).

    Raises:
        TableMismatchError: the run left `r`'s table before this event, or it is under a
            table that is not known.
    """
    under = record.table
    if under is None:
        # A run's first event names its table; a run whose run.started names none is
        # folded with whichever table folds it (logs written before tables were recorded).
        if event.type != "run.started" or event.table is None:
            return None
        if event.table.digest == r._digest:
            return None
        other = r._versions.reducer(event.table)
        if other is None:
            raise _unknown_start(r, record, event)
        return other
    if under.digest == r._digest:
        return None
    left = record.migrated_from
    if left is not None and left.digest == r._digest and event.type != "run.migrated":
        raise TableMismatchError(
            run_id=record.run_id, sequence=event.sequence, state=record.status,
            event=event.type, started_under=_named(under), folded_with=_named(r._ref),
            reason=f"follows the run's migration to table {_named(under)} at sequence "
            f"{record.migrated_at}: fold the run with that table, not {_named(r._ref)} {_HOW}",
        )  # fmt: skip
    other = r._versions.reducer(under)
    if other is None:  # only a snapshot taken elsewhere can name a table never resolved here
        raise TableMismatchError(
            run_id=record.run_id, sequence=event.sequence, state=record.status,
            event=event.type, started_under=_named(under), folded_with=_named(r._ref),
            reason=f"comes while the run is under table {_named(under)}, which is not known: "
            f"fold the run with that table, not {_named(r._ref)} {_HOW}",
        )  # fmt: skip
    return other


def _unknown_start(r: Reducer, record: RunRecord, event: m.RunStarted) -> TableMismatchError:
    started = _named(event.table) if event.table is not None else "?"
    return TableMismatchError(
        run_id=record.run_id, sequence=event.sequence, started_under=started,
        folded_with=_named(r._ref),
        reason=f"was started under table {started}, not {_named(r._ref)}: fold it with the "
        f"table it started with {_HOW}; if it was migrated to {_named(r._ref)} since, the "
        "table it started with must be known too (`register()` it, or pass it in "
        "`Reducer(tables=...)`)",
    )  # fmt: skip


def _migrate(r: Reducer, record: RunRecord, event: m.RunMigrated, under: Reducer) -> RunRecord:
    """The record after `event`, a `run.migrated` of a run under `under`'s table.

    Raises:
        IllegalTransitionError: the run has ended, or not started.
        MigrationError: `from_table` is not the run's table, `to_table` is, the run names
            no table, or the run's state is not in `to_table` or ends the run there.
        TableMismatchError: `to_table` is not known.
    """
    state = record.status
    table = under.table
    if record.version == 0 or table.is_terminal(state):
        raise IllegalTransitionError.quick(
            record.run_id, event.sequence, state, event.type,
            table.allowed(state), table.is_terminal(state), (),
        )  # fmt: skip
    current = record.table
    to = event.to_table

    def refused(problem: str) -> MigrationError:
        return MigrationError(
            run_id=record.run_id, sequence=event.sequence, state=state,
            from_table=_named(event.from_table), to_table=_named(to), problems=[problem],
        )  # fmt: skip

    if current is None:
        # Such a run is folded with whichever table folds it: it has no version to leave.
        raise refused("its run.started names no table, so any table folds it already")
    if event.from_table.digest != current.digest:
        raise refused(f"the run is under table {_named(current)}")
    if to.digest == current.digest:
        raise refused("the run is under that table already")
    new = r.table if to.digest == r._digest else r._versions.table(to)
    if new is None:
        raise TableMismatchError(
            run_id=record.run_id, sequence=event.sequence, state=state, event=event.type,
            started_under=_named(to), folded_with=_named(r._ref),
            reason=f"moves the run to table {_named(to)}, which is not known: fold the run with "
            f"that table, not {_named(r._ref)} {_HOW}",
        )  # fmt: skip
    if state not in new.state_names:
        raise refused(f"state '{state}' is not in the new table")
    if new.is_terminal(state):
        raise refused(
            f"state '{state}' is terminal in the new table, and a migration cannot end a run"
        )
    # The reducer's own reference when the run comes to its table (the hot path's check).
    ref = r._ref if new is r.table else to
    # The run stays where it stands, since when it came there: the new table says whether
    # (and when) it times out there.
    return _set_migrated(
        record, version=event.sequence, updated_at=event.occurred_at, table=ref,
        migrated_from=current, migrated_at=event.sequence,
        timeout=timeout_of(new.timeout(state), record.entered_at),
    )  # fmt: skip


def _check_run_table(r: Reducer, record: RunRecord, *, after_append: bool = False) -> None:
    """Refuse a whole run that is not under `r`'s table (see `Reducer.check_run_table`)."""
    under = record.table
    if under is None or under is r._ref or under.digest == r._digest:
        return
    if record.migrated_at is None:
        raise TableMismatchError(
            run_id=record.run_id, sequence=1, started_under=_named(under),
            folded_with=_named(r._ref),
        )  # fmt: skip
    left = record.migrated_from
    if after_append and left is not None and left.digest == r._digest:
        # Appended through a store of the old version: the batch ends with the migration
        # (anything after it would have been refused), which is the old version's to record.
        return
    raise TableMismatchError(
        run_id=record.run_id, sequence=record.migrated_at, state=record.status,
        event="run.migrated", started_under=_named(under), folded_with=_named(r._ref),
        reason=f"moved the run to table {_named(under)}: fold the run with that table, not "
        f"{_named(r._ref)} {_HOW}",
    )  # fmt: skip


#: The reducer of the default agent-run table.
DEFAULT_REDUCER = Reducer()


def reduce(record: RunRecord, event: Event) -> RunRecord:
    """Fold one event into a record under the default table (see `Reducer.reduce`)."""
    return DEFAULT_REDUCER.reduce(record, event)


def replay(events: Iterable[Event], snapshot: Snapshot | None = None) -> RunRecord:
    """Fold a run's events (after `snapshot`, if given) under the default table."""
    return DEFAULT_REDUCER.replay(events, snapshot)
