"""A run under more than one version of its table: `run.migrated`, and folding across it.

A run is under the table its `run.started` names until a `run.migrated` moves it to another
(`RunRecord.table`). Every event is folded under the rules of the table the run is under at
that point. So a `Reducer` of the new version folds the part of a run before its migration
with the old version, which it finds among the tables it was given (`Reducer(tables=...)`)
or in the registry (`agentfsm.fsm.registry`); and a `Reducer` of the old version folds up
to the migration and refuses what follows, naming the new version.

Whether a whole run belongs to a reducer is known only at its end (a log folded with v2 may
still migrate to v2 later on), so whoever folds a whole run asks `check_table` there:
`Reducer.replay`, the stores' `load` and `append`, `verify`, validation.

The reducer's hot path pays one identity check for this: a run under the reducer's own
table carries the reducer's own `TableRef` object (`Reducer._ref`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from agentfsm.errors import (
    IllegalTransitionError,
    MigrationError,
    OverrunError,
    TableMismatchError,
)
from agentfsm.events import models as m
from agentfsm.events.models import TableRef
from agentfsm.fsm.registry import UnknownTableError, lookup
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord, Timeout
from agentfsm.reducers import _handlers
from agentfsm.reducers._changes import timeout_of
from agentfsm.reducers._evolve import evolves
from agentfsm.reducers._handlers import HANDLERS, Move

if TYPE_CHECKING:
    from agentfsm.guards.base import Guard, GuardContext


class Reducer(Protocol):
    """What this module reads of a `agentfsm.reducers.reduce.Reducer` (a protocol, so this
    module does not import the one that imports it)."""

    table: TransitionTable
    _ref: TableRef
    _digest: str
    _versions: Versions

    def reduce(
        self, record: RunRecord, event: Any, ctx: GuardContext | None = None
    ) -> RunRecord: ...

    def overrun(
        self, before: RunRecord, event: Any, after: RunRecord, ctx: GuardContext | None = None
    ) -> OverrunError | None: ...


#: Makes a reducer of another version: `(table, guards, run_limits=...)`; the class itself.
MakeReducer = Callable[..., Reducer]

__all__ = ["Versions", "check_table", "migrate", "route", "run_started"]

_HOW = "(`--table`, or the registry of `agentfsm.fsm.registry`)"


def named(ref: TableRef) -> str:
    """How errors name a table: `'name' (digest)`."""
    return f"'{ref.name}' ({ref.digest})"


# The stubs' bodies are never run (`evolves` replaces them).
@evolves(RunRecord)
def _set_table(r: RunRecord, /, *, table: TableRef | None) -> RunRecord: ...  # type: ignore[empty-body]


@evolves(RunRecord)
def _set_migrated(  # type: ignore[empty-body]
    r: RunRecord, /, *, version: int, updated_at: str | None, table: TableRef | None,
    migrated_from: TableRef | None, migrated_at: int | None, timeout: Timeout | None,
) -> RunRecord: ...  # fmt: skip


_started = HANDLERS["run.started"]


def run_started(r: _handlers.Reducer, rec: RunRecord, ev: m.RunStarted, move: Move) -> RunRecord:
    """`run.started` (see `_handlers`), and the table the run is under from now on."""
    record = _started(r, rec, ev, move)
    # The handler refused any other table than the reducer's: this one is the reducer's
    # own, and the record carries the reducer's own reference (the hot path's check).
    return record if ev.table is None else _set_table(record, table=cast(Reducer, r)._ref)


class Versions:
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
        make: MakeReducer,
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


def route(r: Reducer, record: RunRecord, event: Any) -> Reducer | None:
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
            event=event.type, started_under=named(under), folded_with=named(r._ref),
            reason=f"follows the run's migration to table {named(under)} at sequence "
            f"{record.migrated_at}: fold the run with that table, not {named(r._ref)} {_HOW}",
        )  # fmt: skip
    other = r._versions.reducer(under)
    if other is None:  # only a snapshot taken elsewhere can name a table never resolved here
        raise TableMismatchError(
            run_id=record.run_id, sequence=event.sequence, state=record.status,
            event=event.type, started_under=named(under), folded_with=named(r._ref),
            reason=f"comes while the run is under table {named(under)}, which is not known: "
            f"fold the run with that table, not {named(r._ref)} {_HOW}",
        )  # fmt: skip
    return other


def _unknown_start(r: Reducer, record: RunRecord, event: m.RunStarted) -> TableMismatchError:
    started = named(event.table) if event.table is not None else "?"
    return TableMismatchError(
        run_id=record.run_id, sequence=event.sequence, started_under=started,
        folded_with=named(r._ref),
        reason=f"was started under table {started}, not {named(r._ref)}: fold it with the "
        f"table it started with {_HOW}; if it was migrated to {named(r._ref)} since, the "
        "table it started with must be known too (`register()` it, or pass it in "
        "`Reducer(tables=...)`)",
    )  # fmt: skip


def migrate(r: Reducer, record: RunRecord, event: m.RunMigrated, under: Reducer) -> RunRecord:
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
            from_table=named(event.from_table), to_table=named(to), problems=[problem],
        )  # fmt: skip

    if current is None:
        # Such a run is folded with whichever table folds it: it has no version to leave.
        raise refused("its run.started names no table, so any table folds it already")
    if event.from_table.digest != current.digest:
        raise refused(f"the run is under table {named(current)}")
    if to.digest == current.digest:
        raise refused("the run is under that table already")
    new = r.table if to.digest == r._digest else r._versions.table(to)
    if new is None:
        raise TableMismatchError(
            run_id=record.run_id, sequence=event.sequence, state=state, event=event.type,
            started_under=named(to), folded_with=named(r._ref),
            reason=f"moves the run to table {named(to)}, which is not known: fold the run with "
            f"that table, not {named(r._ref)} {_HOW}",
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


def check_table(r: Reducer, record: RunRecord, *, after_append: bool = False) -> None:
    """Refuse a whole run that is not under `r`'s table (see `Reducer.check_table`)."""
    under = record.table
    if under is None or under is r._ref or under.digest == r._digest:
        return
    if record.migrated_at is None:
        raise TableMismatchError(
            run_id=record.run_id, sequence=1, started_under=named(under),
            folded_with=named(r._ref),
        )  # fmt: skip
    left = record.migrated_from
    if after_append and left is not None and left.digest == r._digest:
        # Appended through a store of the old version: the batch ends with the migration
        # (anything after it would have been refused), which is the old version's to record.
        return
    raise TableMismatchError(
        run_id=record.run_id, sequence=record.migrated_at, state=record.status,
        event="run.migrated", started_under=named(under), folded_with=named(r._ref),
        reason=f"moved the run to table {named(under)}: fold the run with that table, not "
        f"{named(r._ref)} {_HOW}",
    )  # fmt: skip
