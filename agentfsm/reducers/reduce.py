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

Then the event's effect is folded in. The per-event work is a handful of dict lookups and
one record construction: no validation, no hashing, no `attrs.evolve`. (Steps 3 and 4 run
inside each event's handler together with the fold, in `_handlers.py`; the guards see the
record *before* the event and the target state, and on a verdict the folded record is simply
dropped.)
"""

from __future__ import annotations

from collections.abc import Iterable

from agentfsm.errors import (
    IllegalTransitionError,
    OverrunError,
    RunMismatchError,
    SequenceError,
)
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.guards.base import Guard, GuardContext
from agentfsm.guards.guardset import GuardSet
from agentfsm.record import RunRecord
from agentfsm.reducers._handlers import HANDLERS, Handler, custom_event
from agentfsm.reducers.snapshot import Snapshot

__all__ = ["DEFAULT_REDUCER", "Reducer", "reduce", "replay"]


class Reducer:
    """Folds events into run records under one table, checking its guards.

    Args:
        table: the transition table (the default agent-run table unless given).
        guards: Python guard objects (`MaxTurns(3)`, `LoopDetector()`, your own), each run
            on the table edges that list its name.
        run_limits: check each run's own `run.started.limits` too (the stricter limit wins).

    Raises:
        InvalidTableError: a guard no edge lists, or a guard listed on `run.terminated`.
    """

    __slots__ = (
        "_allowed", "_always", "_guarded", "_handlers", "_moves", "_terminal", "guards", "table",
    )  # fmt: skip

    def __init__(
        self,
        table: TransitionTable = DEFAULT_TABLE,
        guards: Iterable[Guard] = (),
        *,
        run_limits: bool = True,
    ) -> None:
        self.table = table
        self._moves = table._moves  # the precomputed (state -> event -> move) map
        self._allowed = table._allowed
        self._terminal = table.terminal_states
        self._handlers: dict[str, Handler] = dict(HANDLERS)
        for name in table.event_types.custom:
            self._handlers[name] = custom_event
        #: The guards bound to the table's edges (see `agentfsm.guards.guardset`).
        self.guards = GuardSet(table, guards, run_limits=run_limits)
        self._guarded = self.guards.events
        self._always = self.guards.always

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
        move = self._moves[record.status].get(event.type)
        if move is None:
            state = record.status  # the refusal path is hot too: validators probe with it
            raise IllegalTransitionError.quick(
                record.run_id, event.sequence, state, event.type,
                self._allowed.get(state, ()), state in self._terminal, (),
            )  # fmt: skip
        new = self._handlers[event.type](self, record, event, move)
        if event.type in self._guarded and (
            self._always or record.limits is not None or ctx is not None
        ):
            verdict = self.guards.check(record, event, new.status, ctx)
            if verdict is not None:
                raise verdict.error(record, event)
        return new

    def overrun(
        self, before: RunRecord, event: Event, after: RunRecord, ctx: GuardContext | None = None
    ) -> OverrunError | None:
        """The `OverrunError` when `event`, accepted (`before` -> `after`), overran a budget.

        `reduce` accepts such an event: the usage it records is a fact. This says whether it
        took the run past a limit (see `GuardSet.overrun`), for those who must then stop
        the run (the runtime, the adapters) or report it (audits, validation).
        """
        verdict = self.guards.overrun(after, event, ctx)
        return verdict.overrun(before, event) if verdict is not None else None

    def replay(self, events: Iterable[Event], snapshot: Snapshot | None = None) -> RunRecord:
        """Fold `events` from the start of the run, or after `snapshot`.

        Raises:
            ValueError: no events and no snapshot (there is no run to speak of).
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
        return record


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
