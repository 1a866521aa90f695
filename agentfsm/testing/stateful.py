"""A Hypothesis stateful test generated from a table: one rule per event type.

`run_machine(table)` returns a `RuleBasedStateMachine` class. Each rule is an event type;
its precondition is the table (the type has an edge from the current state); it draws one
of the well-formed events of that type the reducer accepts and folds it. A `refuse` rule
throws in events the table or the ledger forbids and checks they change nothing. Invariants
hold after every step: the version is the last sequence, the ledger is consistent, and a
terminal state accepts nothing.

Bind your own system by subclassing and overriding `on_event` / `on_refused`::

    class MyServiceMachine(run_machine(MY_TABLE)):
        def on_event(self, event, before, after):
            assert my_service.apply(event).status == after.status

    TestMyService = MyServiceMachine.TestCase
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentfsm.events.models import EVENT_CLASSES, Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.errors import LifecycleError
from agentfsm.fsm.names import ActionStatus
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._candidates import FEATURES, Clock, accepted, plausible, rule_breaking

__all__ = ["RunMachine", "run_machine"]

_IN_FLIGHT = frozenset({ActionStatus.REQUESTED, ActionStatus.STARTED})


class RunMachine(RuleBasedStateMachine):
    """The base of generated machines: the run's record, its log, and the hooks to override.

    Attributes:
        reducer: the reducer of the table the machine was generated from.
        features: which optional behaviours events may show (see `FEATURES`).
        record: the run's record after the events so far.
        events: the events applied so far.
    """

    reducer: Reducer = Reducer(DEFAULT_TABLE)
    features: frozenset[str] = FEATURES
    run_id: str = "run_1"

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.record: RunRecord = self.reducer.initial(self.run_id)
        self.events: list[Event] = []

    # -- hooks for the system under test --------------------------------------------------

    def on_event(self, event: Event, before: RunRecord, after: RunRecord) -> None:
        """Called after each accepted event; check your system did the same. No-op here."""

    def on_refused(self, event: Event, record: RunRecord, error: LifecycleError) -> None:
        """Called after each refused event; check your system refused it too. No-op here."""

    # -- machinery ------------------------------------------------------------------------

    def _take(self, data: st.DataObject, event_type: str) -> None:
        options = accepted(
            self.reducer, self.record, self.clock.at(self.record.version + 1), self.features,
            types=[event_type],
        )  # fmt: skip
        if not options:
            return  # the table has the edge, but no condition holds right now
        chosen = data.draw(st.sampled_from(options), label=event_type)
        before = self.record
        self.record = chosen.record
        self.events.append(chosen.event)
        self.on_event(chosen.event, before, chosen.record)

    @rule(data=st.data())
    def refuse(self, data: st.DataObject) -> None:
        """Throw in an event the table or the ledger forbids; nothing may change."""
        at = self.clock.at(self.record.version + 1)
        allowed = set(self.reducer.table.allowed(self.record.status))
        offers: list[Event] = []
        for event_type in sorted(EVENT_CLASSES):
            cands = (
                rule_breaking(self.record, event_type)
                if event_type in allowed
                else plausible(self.record, event_type)
            )
            offers.extend(c.event(self.record, at) for c in cands)
        refused = [e for e in offers if self._refusal(e) is not None]
        if not refused:
            return
        event = data.draw(st.sampled_from(refused), label="refused")
        before = self.record.dumps()
        error = self._refusal(event)
        assert error is not None
        assert self.record.dumps() == before
        self.on_refused(event, self.record, error)

    def _refusal(self, event: Event) -> LifecycleError | None:
        try:
            self.reducer.reduce(self.record, event)
        except LifecycleError as exc:
            return exc
        return None

    @invariant()
    def version_is_the_last_sequence(self) -> None:
        """The record's version is the number of events applied."""
        assert self.record.version == len(self.events)

    @invariant()
    def ledger_is_consistent(self) -> None:
        """The batch names known actions; pending approvals are pending; an ended run has
        nothing in flight."""
        actions = self.record.actions
        assert all(aid in actions for aid in self.record.batch)
        assert all(
            actions[a].status == ActionStatus.APPROVAL_PENDING
            for a in self.record.pending_approvals
        )
        if self.reducer.table.is_terminal(self.record.status):
            assert not any(a.status in _IN_FLIGHT for a in actions.values())

    @invariant()
    def terminal_states_absorb(self) -> None:
        """In a terminal state, no event of any type is accepted."""
        if self.reducer.table.is_terminal(self.record.status):
            at = self.clock.at(self.record.version + 1)
            assert accepted(self.reducer, self.record, at, self.features) == []


def run_machine(
    table: TransitionTable = DEFAULT_TABLE,
    *,
    features: Iterable[str] | None = None,
    run_id: str = "run_1",
    name: str | None = None,
) -> type[RunMachine]:
    """A `RunMachine` subclass for `table`, with one rule per event type of its edges.

    Args:
        table: the table (default: the agent-run table).
        features: the optional behaviours to exercise (default: all of `FEATURES`).
        run_id: the run id of the generated events.
        name: the class name (default derived from the table's name).
    """
    namespace: dict[str, Any] = {
        "reducer": Reducer(table),
        "features": frozenset(FEATURES if features is None else features),
        "run_id": run_id,
    }
    for event_type in table.events:
        namespace["event_" + event_type.replace(".", "_")] = _rule_for(event_type)
    cls_name = name or "".join(p.title() for p in table.name.split("_")) + "Machine"
    return type(cls_name, (RunMachine,), namespace)


def _rule_for(event_type: str) -> Any:
    def precondition_holds(self: RunMachine) -> bool:
        return event_type in self.reducer.table.allowed(self.record.status)

    @precondition(precondition_holds)
    @rule(data=st.data())
    def take(self: RunMachine, data: st.DataObject) -> None:
        self._take(data, event_type)

    take.__name__ = "event_" + event_type.replace(".", "_")
    take.__doc__ = f"Apply a legal `{event_type}` event, when the table allows one."
    return take
