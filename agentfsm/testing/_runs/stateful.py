"""A Hypothesis state machine generated from a transition table.

`run_machine(table)` returns a `RuleBasedStateMachine` subclass with one rule per event type
of the table (`event_tool_completed` for `tool.completed`). A rule's precondition is that
the table allows its event type in the run's state *and* some well-formed event of that type
is accepted (a `tool.completed` needs an action in flight); the rule then draws such an
event, with its free fields (results, usage, reasons), and folds it. A `refuse` rule throws
in an event the table or the ledger forbids and checks it changes nothing. Invariants hold
after every step: terminal states are absorbing, the ledger is consistent, and the version
is the last sequence.

Bind your own system under test by subclassing and overriding the hooks::

    class TestMyService(run_machine(DEFAULT_TABLE)):
        def __init__(self) -> None:
            super().__init__()
            self.service = MyService()

        def on_event(self, event, before, after):
            self.service.handle(event)
            assert self.service.status(event.run_id) == after.status

    TestMyService = TestMyService.TestCase

Rules that end a run (`run.failed`, `run.terminated`) or its useful part
(`run.cancel_requested`) are possible in almost every state, and Hypothesis picks among
possible rules uniformly, so runs would end after a step or two. The machine therefore draws
a `patience` first (up to 30 events) and lets those rules fire only once the run has that
many events; detours and `refuse` go ahead once in a few tries (`RunMachine.odds`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from agentfsm.errors import LifecycleError
from agentfsm.events.codec import dump_event
from agentfsm.events.models import EVENT_CLASSES, Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import ActionStatus
from agentfsm.record import RunRecord
from agentfsm.reducers._changes import timeout_of
from agentfsm.reducers.reduce import Reducer
from agentfsm.testing._runs.candidates import EVENT_ORDER, Clock, Next, accepted, try_next
from agentfsm.testing._runs.illegal import refused_events
from agentfsm.testing._runs.tools import ToolsLike
from agentfsm.testing._runs.values import Calls, free_fields
from agentfsm.testing._runs.walk import widen_calls, with_table_ref
from agentfsm.testing._runs.walkspec import TableLike, Walk, make_walk

__all__ = ["RunMachine", "record_problems", "run_machine"]

_UNSETTLED = frozenset(
    {
        ActionStatus.PROPOSED,
        ActionStatus.APPROVAL_PENDING,
        ActionStatus.APPROVED,
        ActionStatus.REQUESTED,
        ActionStatus.STARTED,
    }
)


def record_problems(record: RunRecord, table: TransitionTable = DEFAULT_TABLE) -> list[str]:
    """What is inconsistent in a run record, one sentence each (none for a sound record).

    Checks the status is a state of `table`, the ledger is keyed by its own action ids, the
    batch names known actions once each, attempts fit statuses, an ended run has nothing
    unsettled and no open model call, the usage totals are not negative, and the run's
    timeout is the one `table` gives its state (counted from when it entered it).
    """
    problems: list[str] = []
    if record.status not in table.state_names:
        problems.append(f"status '{record.status}' is not a state of table '{table.name}'")
    else:
        due = timeout_of(table.timeout(record.status), record.entered_at)
        if record.timeout != due:
            problems.append(
                f"the run's timeout is {record.timeout}, but in '{record.status}' (entered at "
                f"{record.entered_at}) the table gives {due}"
            )
    for key, action in record.actions.items():
        if action.action_id != key:
            problems.append(f"ledger key '{key}' holds action '{action.action_id}'")
        if action.status not in ActionStatus.__members__.values():
            problems.append(f"action '{key}' has unknown status '{action.status}'")
        if action.attempts < 0:
            problems.append(f"action '{key}' has {action.attempts} attempts")
        if action.status == ActionStatus.STARTED and action.attempts < 1:
            problems.append(f"action '{key}' is started but has no attempt")
    if len(set(record.batch)) != len(record.batch):
        problems.append(f"the batch repeats an action: {list(record.batch)}")
    for aid in record.batch:
        if aid not in record.actions:
            problems.append(f"the batch names unknown action '{aid}'")
    if table.is_terminal(record.status):
        unsettled = [a.action_id for a in record.actions.values() if a.status in _UNSETTLED]
        if unsettled:
            problems.append(f"the run ended with unsettled actions {unsettled}")
        if record.model_call_open:
            problems.append("the run ended with a model call open")
    usage = record.usage
    if min(usage.input_tokens, usage.output_tokens, usage.cost) < 0:
        problems.append(f"usage is negative: {usage.to_json()}")
    return problems


class RunMachine(RuleBasedStateMachine):
    """Drives one run through a table; `run_machine(table)` adds one rule per event type.

    Attributes:
        record: the run record so far.
        events: the events applied so far, in order.
    """

    walk: ClassVar[Walk] = make_walk(DEFAULT_TABLE, None, 3)
    run_id: ClassVar[str] = "run_1"
    #: Event types that end a run or its useful part: their rules wait until the run has
    #: `patience` events (see the module doc).
    ending: ClassVar[frozenset[str]] = frozenset(
        {"run.failed", "run.terminated", "run.cancel_requested"}
    )
    #: Rules that go ahead only once in so many tries: detours come up half as often as the
    #: main path, and `refuse` a third as often.
    odds: ClassVar[Mapping[str, int]] = {"refuse": 3, "run.paused": 2, "handoff": 2}

    def __init__(self) -> None:
        super().__init__()
        self.record: RunRecord = self.walk.reducer.initial(self.run_id)
        self.events: list[Event] = []
        self._clock = Clock()
        self._calls: Calls = {}
        self._options: tuple[int, dict[str, list[Next]]] = (-1, {})
        self._ended: RunRecord | None = None
        self.patience = 0

    @initialize(eagerness=st.integers(0, 30))
    def wait_before_ending(self, eagerness: int) -> None:
        """Draw how many events the run has before a rule may end it.

        Hypothesis draws small numbers more often, so the patience is 30 minus the draw:
        most runs get going before they may end.
        """
        self.patience = 30 - eagerness

    # -- hooks for a system under test -----------------------------------------------------

    def on_event(self, event: Event, before: RunRecord, after: RunRecord) -> None:
        """Called after the reducer accepted `event`; feed your system and compare here."""

    def on_refused(self, event: Event, record: RunRecord, error: LifecycleError) -> None:
        """Called after the reducer refused `event` in `record`; check that yours does too."""

    # -- machinery --------------------------------------------------------------------------

    @property
    def table(self) -> TransitionTable:
        """The machine's transition table."""
        return self.walk.table

    @property
    def reducer(self) -> Reducer:
        """The reducer that judges every event."""
        return self.walk.reducer

    @property
    def features(self) -> frozenset[str]:
        """Which optional behaviours events may show (see `FEATURES`)."""
        return self.walk.features

    def options(self, event_type: str) -> list[Next]:
        """Accepted candidate events of `event_type` in the current state (cached per step)."""
        version, cache = self._options
        if version != self.record.version:
            cache = {}
            self._options = (self.record.version, cache)
        if event_type not in cache:
            at = self._clock.next(self.record)
            cache[event_type] = accepted(
                self.reducer, self.record, at, self.walk.features, (event_type,), self.walk.tools
            )
        return cache[event_type]

    def fire(self, data: st.DataObject, event_type: str) -> None:
        """Draw an accepted event of `event_type`, fold it, and call `on_event`."""
        if self._not_now(data, event_type):
            return
        group = self.options(event_type)
        chosen = group[data.draw(st.integers(0, len(group) - 1), label="candidate")]
        calls = data.draw(st.integers(1, self.walk.max_calls), label="calls")
        chosen = widen_calls(self.walk, self.record, chosen, calls)
        event = self._dress(data, chosen)
        before = self.record
        self.record = self.reducer.reduce(before, event)
        self.events.append(event)
        # A failing example then shows the run's log itself, one JSON line per event, among
        # Hypothesis's steps (whose own "Draw 1 (candidate): 0" says nothing).
        # Its `run.started` names the table, so `agentfsm validate` checks it against that one.
        note(dump_event(with_table_ref([event], self.table)[0]))
        self.on_event(event, before, self.record)

    def _cancel_requested(self) -> bool:
        return any(e.type == "run.cancel_requested" for e in self.events)

    def _dress(self, data: st.DataObject, chosen: Next) -> Event:
        cand = chosen.candidate
        # Drawn straight from `data` (no strategy built per event: that cost more than the
        # rest of a step).
        fields = free_fields(data.draw, cand.type, cand.fields, self._calls)
        event = cand.event(
            self.record, chosen.event.occurred_at, fields, events=self.table.event_types
        )
        if isinstance(try_next(self.reducer, self.record, event), RunRecord):
            return event
        return chosen.event  # a condition read a free field; the plain event was accepted

    def _not_now(self, data: st.DataObject, rule: str) -> bool:
        odds = self.odds.get(rule, 1)
        if odds == 1:
            return False
        # "Not now" is 0, the simplest choice: Hypothesis draws it often early on, and
        # the shrinker drops a step that did nothing anyway.
        return data.draw(st.integers(0, odds - 1), label="go ahead") != 1

    @rule(data=st.data())
    def refuse(self, data: st.DataObject) -> None:
        """Throw in an event the table or the ledger forbids; nothing may change.

        It goes ahead once in `odds["refuse"]` tries, so runs progress.
        """
        if self._not_now(data, "refuse"):
            return
        at = self._clock.next(self.record)
        options = refused_events(self.reducer, self.record, at, frozenset({"table", "rule"}))
        event, _ = options[data.draw(st.integers(0, len(options) - 1), label="illegal")]
        before = self.record
        result = try_next(self.reducer, before, event)
        assert isinstance(result, LifecycleError), f"{event!r} was accepted"
        assert self.record is before
        self.on_refused(event, before, result)

    @invariant()
    def terminal_states_are_absorbing(self) -> None:
        """Once a run ends, the table allows nothing and the record never changes again."""
        if not self.table.is_terminal(self.record.status):
            assert self._ended is None, "the run left a terminal state"
            return
        assert self.table.allowed(self.record.status) == ()
        if self._ended is None:
            self._ended = self.record
        assert self.record is self._ended

    @invariant()
    def ledger_is_consistent(self) -> None:
        """The record has no inconsistency `record_problems` can find."""
        assert record_problems(self.record, self.table) == []

    @invariant()
    def version_is_last_sequence(self) -> None:
        """The record's version is the sequence of the last applied event."""
        assert self.record.version == (self.events[-1].sequence if self.events else 0)
        assert self.record.version == len(self.events)


def _rule_name(event_type: str) -> str:
    return "event_" + event_type.replace(".", "_")


def _make_rule(event_type: str) -> Any:
    def fire(self: RunMachine, data: st.DataObject) -> None:
        self.fire(data, event_type)

    def possible(self: RunMachine) -> bool:
        if event_type in self.ending and len(self.events) < self.patience:
            return False
        if event_type == "run.cancel_requested" and self._cancel_requested():
            return False  # asking again is legal but adds nothing; one request per run
        return event_type in self.table.allowed(self.record.status) and bool(
            self.options(event_type)
        )

    fire.__name__ = fire.__qualname__ = _rule_name(event_type)
    fire.__doc__ = f"Apply a legal `{event_type}` event, when the state has one."
    return precondition(possible)(rule(data=st.data())(fire))


def run_machine(
    table: TableLike = DEFAULT_TABLE,
    *,
    features: Iterable[str] | None = None,
    max_calls: int = 3,
    run_id: str = "run_1",
    name: str | None = None,
    tools: ToolsLike | None = None,
) -> type[RunMachine]:
    """A `RunMachine` subclass for `table`: one rule per event type of its edges, a `refuse`
    rule, and invariants checked after every step.

    Rules are named after their event types (`event_tool_completed`). Subclass the result and
    override `on_event` / `on_refused` to test your own system.

    Args:
        table: the transition table, or a `Reducer` (to use its table and its checks).
        features: which of `FEATURES` the rules may show (default: all).
        max_calls: the most tool calls in one model decision.
        run_id: the run id of every event.
        name: the class name (default: from the table's name, e.g. `AgentRunMachine`).
        tools: the agent's tools (an `Agent`, `Tool`s or names; see `legal_runs`).
    """
    walk = make_walk(table, features, max_calls, tools=tools)
    # `emit.refused` is on no edge: it settles a call's proposal the table does not take,
    # so it has a rule where a tool may propose an event.
    on_edges = set(walk.table.events)
    if walk.tools.any_emits and "emits" in walk.features:
        on_edges.add("emit.refused")
    types = [t for t in EVENT_ORDER if t in on_edges and t in EVENT_CLASSES]
    # The table's own event types get rules too, after the built-in ones.
    types += [t for t in walk.table.event_types.custom if t in on_edges]
    namespace: dict[str, Any] = {
        "walk": walk,
        "run_id": run_id,
        "__doc__": f"Runs of table '{walk.table.name}', one rule per event type.",
    }
    for event_type in types:
        namespace[_rule_name(event_type)] = _make_rule(event_type)
    cls_name = name or "".join(p.capitalize() for p in walk.table.name.split("_")) + "Machine"
    return type(cls_name, (RunMachine,), namespace)
