"""The transition table: states and legal moves as one immutable, self-validating object.

A table is *declaration only*. It holds no current state; `step` is a pure lookup from
(state, event) to the next state. The lookups are precomputed when the table is built, so a
step is two dict lookups for an unconditional edge.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from agentfsm.errors import IllegalTransitionError, InvalidTableError
from agentfsm.events._canonical import digest
from agentfsm.events.models import CustomEvent, TableRef
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes
from agentfsm.fsm._timeouts import Elapsed, due_at, duration_words, seconds, timeout_problems
from agentfsm.names import StateKind

__all__ = [
    "Condition",
    "State",
    "Transition",
    "TransitionTable",
]

#: A condition looks at the context (for the reducer: the run record before the event)
#: and the event, and says whether its edge applies.
Predicate = Callable[[Any, Any], bool]


def _names(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(i) for i in items)


def _states(items: Iterable[State]) -> tuple[State, ...]:
    return tuple(items)


def _transitions(items: Iterable[Transition]) -> tuple[Transition, ...]:
    return tuple(items)


def _default_kind(state: State) -> StateKind:
    return StateKind.TERMINAL if state.terminal else StateKind.ACTIVE


def _check_kind(state: State, _: object, kind: StateKind) -> None:
    if (kind == StateKind.TERMINAL) != state.terminal:
        raise ValueError(
            f"state '{state.name}': kind '{kind}' with terminal={state.terminal}; a state is "
            "terminal exactly when its kind is 'terminal'"
        )


@attrs.frozen
class State:
    """A declared state.

    Attributes:
        name: the state's name, as it appears in records and diagrams.
        terminal: no event leaves a terminal state.
        description: one sentence for docs and diagrams.
        kind: what a run in it is doing (`StateKind`): the runtime and tools decide by
            kind, never by name. `terminal` when `terminal` is set, else `active` unless
            given (`waiting` for a person, `paused`, `in_flight`).
    """

    name: str = attrs.field(converter=str)
    terminal: bool = False
    description: str = ""
    kind: StateKind = attrs.field(
        default=attrs.Factory(_default_kind, takes_self=True),
        converter=StateKind,
        validator=_check_kind,
    )


@attrs.frozen
class Condition:
    """A named predicate that chooses between edges sharing a (state, event).

    Attributes:
        name: the label diagrams and errors show, e.g. `batch resolved`.
        predicate: `(context, event) -> bool`; must be pure.
        description: one sentence on what it checks.
    """

    name: str
    predicate: Predicate = attrs.field(eq=False, repr=False)
    description: str = ""

    def __call__(self, context: Any, event: Any) -> bool:
        return self.predicate(context, event)

    @property
    def after(self) -> timedelta | None:
        """How long a run stands in its state before this condition holds, for the
        condition of an edge declared with `after=`; None for any other."""
        predicate = self.predicate
        return predicate.after if isinstance(predicate, Elapsed) else None


@functools.lru_cache(maxsize=256)
def timeout_condition(after: timedelta) -> Condition:
    """The condition of every edge declared with `after=`: `after 7 d` (one per duration)."""
    words = duration_words(after)
    return Condition(
        f"after {words}",
        Elapsed(after),
        f"the run has stood in its state for {words}: the runtime appends the event then",
    )


def _check_after(edge: Transition, _: object, after: timedelta | None) -> None:
    if after is None:
        return
    where = f"edge {edge.source} --{edge.event}--> {edge.target}"
    if not isinstance(after, timedelta):
        raise TypeError(f"{where}: after must be a timedelta, got {after!r}")
    if after <= timedelta(0):
        raise ValueError(f"{where}: after must be a positive duration, got {after}")


@attrs.frozen
class Transition:
    """An edge: on `event` in `source`, go to `target` when `condition` holds (or always).

    An edge declared with `after=` is a timeout (see `agentfsm.fsm._timeouts`): its condition
    is the time the run has stood in `source` (`after 7 d`), and the runtime appends `event`
    by itself when it falls due.

    Attributes:
        source: the state the edge leaves.
        event: the event type that triggers it.
        target: the state it enters.
        condition: chooses between edges of one (source, event); tried in declared order.
            Set by `after` for a timed edge, which takes no other.
        guards: names of the limit guards that are checked on this edge (for diagrams and docs).
        after: how long a run stands in `source` before the edge is taken (counted from the
            event that entered it), or None for an edge any time.
    """

    source: str = attrs.field(converter=str)
    event: str = attrs.field(converter=str)
    target: str = attrs.field(converter=str)
    condition: Condition | None = None
    guards: tuple[str, ...] = attrs.field(default=(), converter=_names)
    after: timedelta | None = attrs.field(default=None, validator=_check_after, kw_only=True)

    def __attrs_post_init__(self) -> None:
        given = self.condition
        timed = given.after if given is not None else None
        if self.after is None:
            if timed is not None:
                raise ValueError(
                    f"edge {self.source} --{self.event}--> {self.target}: condition "
                    f"'{given.name if given else ''}' is a timeout's; declare the edge with "
                    "after= (and no condition) instead"
                )
            return
        if given is not None and timed is None:
            raise ValueError(
                f"edge {self.source} --{self.event}--> {self.target} waits "
                f"{duration_words(self.after)} and has condition '{given.name}': an edge "
                "declared with after= is taken by time alone (the runtime appends its event "
                "with nothing else to go by); put the condition on another edge"
            )
        if timed != self.after:
            object.__setattr__(self, "condition", timeout_condition(self.after))

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        """What identifies an edge when deriving tables: source, event, target, condition."""
        return (
            self.source,
            self.event,
            self.target,
            self.condition.name if self.condition else None,
        )


#: The reducer applies `run.migrated` itself, in every state that has not ended.
_MIGRATED = "run.migrated"
#: The event types on no table's edges: the reducer applies them in every state that has
#: not ended, and the run stays where it is (`run.migrated`, `emit.refused`, `run.forked`,
#: `usage.reported`, what an SDK reported spending for a stretch of the run, and
#: `model.failed`, which ends an attempt of the open model call wherever a table lets a
#: model call start: so no table, and no table's digest, changed when they came).
ON_NO_EDGE = frozenset({_MIGRATED, "emit.refused", "run.forked", "model.failed", "usage.reported"})
#: Those of them that leave the run's table as it is: applied in place by their handler.
IN_PLACE = ON_NO_EDGE - {_MIGRATED}


#: What each of them is, for the error that refuses one on an edge.
_ON_NO_EDGE_WHY = {
    _MIGRATED: "a migration",
    "emit.refused": "a refused emit",
    "run.forked": "a fork's mark",
    "model.failed": "a model call's failed attempt",
}


def _own_schema(cls: type[Any]) -> dict[str, Any]:
    """An event type's JSON Schema without `emitted_by`: envelope the runtime stamps, added
    after tables had digests, so the runs stored under them keep their table's digest."""
    schema: dict[str, Any] = cls.model_json_schema()
    schema.get("properties", {}).pop("emitted_by", None)
    defs = schema.get("$defs", {})
    defs.pop("EmittedBy", None)
    if "$defs" in schema and not defs:
        del schema["$defs"]
    return schema


_STOPS = frozenset({StateKind.TERMINAL, StateKind.WAITING, StateKind.PAUSED})

# A compiled move is either the target itself (no condition: the common case, one lookup)
# or the ordered alternatives to try.
_Move = str | tuple[tuple[Condition | None, str], ...]


@attrs.frozen(eq=False)
class TransitionTable:
    """An immutable state machine declaration that validates itself when built.

    Build it with states, an initial state name and transitions; every problem is reported
    at once in one `InvalidTableError`. Derive variants with `derive`.

    Attributes:
        name: a short identifier used in errors and diagram titles.
        states: the declared states, in declaration order.
        initial: the name of the initial state.
        transitions: the edges, in declaration order (order decides between conditions).
        event_types: the event types the table's runs are made of: the built-in ones
            unless given (`BUILTIN_EVENTS.extend(YourEvent, "your.other_event")`); an edge on
            a type it does not declare is an error when the table is built.
    """

    name: str
    states: tuple[State, ...] = attrs.field(converter=_states)
    initial: str = attrs.field(converter=str)
    transitions: tuple[Transition, ...] = attrs.field(converter=_transitions)
    event_types: EventTypes = BUILTIN_EVENTS
    _moves: dict[str, dict[str, _Move]] = attrs.field(init=False, repr=False)
    _allowed: dict[str, tuple[str, ...]] = attrs.field(init=False, repr=False)
    _terminal: frozenset[str] = attrs.field(init=False, repr=False)
    _kinds: dict[str, StateKind] = attrs.field(init=False, repr=False)
    _timeouts: dict[str, tuple[Transition, ...]] = attrs.field(init=False, repr=False)
    #: Per state with timed edges, the one that falls due first (the reducer's lookup).
    _first_timeout: dict[str, Transition] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        problems = table_problems(self.states, self.initial, self.transitions, self.event_types)
        if problems:
            raise InvalidTableError(self.name, problems)
        moves: dict[str, dict[str, list[tuple[Condition | None, str]]]] = {
            s.name: {} for s in self.states
        }
        for t in self.transitions:
            moves[t.source].setdefault(t.event, []).append((t.condition, t.target))
        compiled: dict[str, dict[str, _Move]] = {
            state: {
                event: alts[0][1] if alts[0][0] is None else tuple(alts)
                for event, alts in by_event.items()
            }
            for state, by_event in moves.items()
        }
        object.__setattr__(self, "_moves", compiled)
        object.__setattr__(self, "_allowed", {s: tuple(sorted(evs)) for s, evs in compiled.items()})
        object.__setattr__(self, "_terminal", frozenset(s.name for s in self.states if s.terminal))
        object.__setattr__(self, "_kinds", {s.name: s.kind for s in self.states})
        timeouts: dict[str, list[Transition]] = {}
        for t in self.transitions:
            if t.after is not None:
                timeouts.setdefault(t.source, []).append(t)
        object.__setattr__(self, "_timeouts", {s: tuple(ts) for s, ts in timeouts.items()})
        # The shortest wait falls due first (all of a state's count from one entry); on a
        # tie, the one declared first.
        first = {s: min(ts, key=lambda t: t.after or timedelta(0)) for s, ts in timeouts.items()}
        object.__setattr__(self, "_first_timeout", first)

    @functools.cached_property
    def digest(self) -> str:
        """`sha256:` of the table's canonical description: states with their kinds, edges with
        their conditions' and guards' names, and its own event types (their JSON Schemas).

        Two tables with the same digest fold every log alike (conditions are compared by
        name: keep a name for one predicate).
        """
        described = dict(self.describe())
        described["event_types"] = {
            name: _own_schema(self.event_types.classes[name]) for name in self.event_types.custom
        }
        return digest(described)

    @functools.cached_property
    def ref(self) -> TableRef:
        """The reference a run records on `run.started`: this table's name and digest.

        One object per table (it is immutable): every reducer of the table then knows a run
        under it by identity, without comparing digests.
        """
        return TableRef(name=self.name, digest=self.digest)

    def __repr__(self) -> str:
        # The full declaration runs to thousands of characters and buries every signature
        # that takes a table as a default (`help(render_diagram)`); `describe()` has it all.
        return (
            f"<TransitionTable {self.name!r}: {len(self.states)} states, "
            f"{len(self.transitions)} transitions>"
        )

    # -- queries -----------------------------------------------------------------------

    @functools.cached_property  # the table is immutable; every runs list and row asks
    def state_names(self) -> tuple[str, ...]:
        """State names in declaration order."""
        return tuple(s.name for s in self.states)

    @property
    def terminal_states(self) -> frozenset[str]:
        """Names of the terminal states."""
        return self._terminal

    @property
    def events(self) -> tuple[str, ...]:
        """Every event type that appears on some edge, sorted."""
        return tuple(sorted({t.event for t in self.transitions}))

    def state(self, name: str) -> State:
        """The declared state called `name` (KeyError if there is none)."""
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(f"table '{self.name}' declares no state '{name}'")

    def is_terminal(self, state: str) -> bool:
        """Whether `state` is terminal."""
        return state in self._terminal

    def kind(self, state: str) -> StateKind:
        """What a run in `state` is doing (KeyError naming the table for an unknown state)."""
        try:
            return self._kinds[state]
        except KeyError:
            raise KeyError(f"table '{self.name}' declares no state '{state}'") from None

    @functools.cached_property
    def runnable_states(self) -> frozenset[str]:
        """States in which a run has work its driver can do without a person: the `active`
        and `in_flight` kinds (what workers claim and a Runner drives)."""
        return frozenset(self.states_of(StateKind.ACTIVE, StateKind.IN_FLIGHT))

    def stops_driving(self, state: str) -> bool:
        """Whether a Runner returns at `state`: it is terminal, waits for a person, or is
        paused (a table's own states included, by their declared kind)."""
        return self._kinds[state] in _STOPS

    def settles_cancel(self, state: str) -> bool:
        """Whether `state` is where a cancellation settles: `run.cancelled` leaves it."""
        return "run.cancelled" in self._allowed.get(state, ())

    def states_of(self, *kinds: StateKind | str) -> tuple[str, ...]:
        """The names of the states of any of `kinds`, in declaration order."""
        wanted = {StateKind(k) for k in kinds}
        return tuple(s.name for s in self.states if s.kind in wanted)

    def allowed(self, state: str) -> tuple[str, ...]:
        """The event types with at least one edge leaving `state`, sorted."""
        return self._allowed.get(state, ())

    def edges(self, state: str, event: str) -> tuple[Transition, ...]:
        """The edges for (state, event) in the order they are tried."""
        return tuple(t for t in self.transitions if t.source == state and t.event == event)

    def timeouts(self, state: str) -> tuple[Transition, ...]:
        """The edges leaving `state` declared with `after=`, in declaration order."""
        return self._timeouts.get(state, ())

    def timeout(self, state: str) -> Transition | None:
        """The timed edge of `state` that falls due first (the shortest wait; the first
        declared on a tie), or None: what the runtime appends when a run stands there."""
        return self._first_timeout.get(state)

    @property
    def timed_states(self) -> tuple[str, ...]:
        """The states with a timed edge, in declaration order."""
        return tuple(s for s in self.state_names if s in self._timeouts)

    # -- stepping ----------------------------------------------------------------------

    def step(
        self,
        state: str,
        event: str,
        context: Any = None,
        payload: Any = None,
        *,
        run_id: str = "?",
        sequence: int = 0,
    ) -> str:
        """The state after `event` in `state`, or `IllegalTransitionError`.

        Args:
            state: the current state.
            event: the event type.
            context: passed to conditions (the reducer passes the run record before the event).
            payload: passed to conditions (the reducer passes the event).
            run_id: named in the error, when known.
            sequence: named in the error, when known.
        """
        try:
            move = self._moves[state][event]
        except KeyError:
            raise self._illegal(state, event, (), run_id, sequence) from None
        if move.__class__ is str:  # the common case; cheaper than isinstance
            return move
        return self.choose(move, state, event, context, payload, run_id, sequence)  # type: ignore[arg-type]

    def choose(
        self,
        alternatives: tuple[tuple[Condition | None, str], ...],
        state: str,
        event: str,
        context: Any,
        payload: Any,
        run_id: str,
        sequence: int,
    ) -> str:
        """The target of the first alternative whose condition holds, else the error."""
        for condition, target in alternatives:
            if condition is None or condition.predicate(context, payload):
                return target
        failed = tuple(c.name for c, _ in alternatives if c is not None)
        error = self._illegal(state, event, failed, run_id, sequence)
        # An event on a timed edge that came too early: say when it falls due.
        entered = getattr(context, "entered_at", None)
        waits = [c.after for c, _ in alternatives if c is not None and c.after is not None]
        if waits and entered is not None:
            error.due_at = due_at(entered, waits[0])
        raise error

    def _illegal(
        self, state: str, event: str, failed: tuple[str, ...], run_id: str, sequence: int
    ) -> IllegalTransitionError:
        return IllegalTransitionError.quick(
            run_id, sequence, state, event,
            self._allowed.get(state, ()), state in self._terminal, failed,
        )  # fmt: skip

    # -- deriving ----------------------------------------------------------------------

    def derive(
        self,
        *,
        name: str | None = None,
        add_states: Iterable[State] = (),
        remove_states: Iterable[str] = (),
        add: Iterable[Transition] = (),
        remove: Iterable[tuple[str, str, str] | Transition] = (),
        initial: str | None = None,
        add_events: Iterable[type[CustomEvent] | str] = (),
    ) -> TransitionTable:
        """A new table with states, edges and event types added or removed, validated like
        any table.

        Edges to remove are given as `(source, event, target)` or as `Transition`s; removing
        an edge that does not exist is an error, so a typo cannot pass silently. Removing a
        state also removes every edge touching it. New edges for an existing (state, event)
        are tried after the existing ones. `add_events` declares the new edges' own event
        types (`CustomEvent` models, or names of types that carry no fields).
        """
        dropped_states = set(remove_states)
        unknown_states = sorted(dropped_states - set(self.state_names))
        wanted = [r if isinstance(r, tuple) else (r.source, r.event, r.target) for r in remove]
        present = {(t.source, t.event, t.target) for t in self.transitions}
        missing = [w for w in wanted if w not in present]
        if unknown_states or missing:
            problems = [f"cannot remove undeclared state '{s}'" for s in unknown_states]
            problems += [
                f"cannot remove edge {s} --{e}--> {t}: it does not exist" for s, e, t in missing
            ]
            raise InvalidTableError(name or self.name, problems)
        drop = set(wanted)
        kept = [
            t
            for t in self.transitions
            if (t.source, t.event, t.target) not in drop
            and t.source not in dropped_states
            and t.target not in dropped_states
        ]
        return TransitionTable(
            name=name or self.name,
            states=[s for s in self.states if s.name not in dropped_states] + list(add_states),
            initial=initial or self.initial,
            transitions=kept + list(add),
            event_types=self.event_types.extend(*add_events) if add_events else self.event_types,
        )

    def describe(self) -> Mapping[str, Any]:
        """A plain, JSON-able description of the table (for docs, diagrams, schema exports)."""
        return {
            "name": self.name,
            "initial": self.initial,
            "event_types": list(self.event_types.custom),
            "states": [
                {
                    "name": s.name,
                    "terminal": s.terminal,
                    "kind": s.kind.value,
                    "description": s.description,
                }
                for s in self.states
            ],
            "transitions": [_describe(t) for t in self.transitions],
        }


def _describe(t: Transition) -> dict[str, Any]:
    described: dict[str, Any] = {
        "source": t.source,
        "event": t.event,
        "target": t.target,
        "condition": t.condition.name if t.condition else None,
        "guards": list(t.guards),
    }
    # Only a timed edge says `after`: every other table's description, and so its digest,
    # is the one it had before timeouts existed.
    if t.after is not None:
        described["after"] = seconds(t.after)
    return described


def table_problems(
    states: Sequence[State],
    initial: str,
    transitions: Sequence[Transition],
    events: EventTypes | None = None,
) -> list[str]:
    """Every reason a table of these parts cannot be built, one sentence each, stable order.

    `TransitionTable` raises them as one `InvalidTableError`; `check_table` reports them without
    building anything, so a broken declaration can be checked as data.
    """
    problems: list[str] = []
    names = [s.name for s in states]
    declared = set(names)
    seen: set[str] = set()
    for n in names:
        if n in seen:
            problems.append(f"state '{n}' is declared twice")
        seen.add(n)
    if not any(s.terminal for s in states):
        problems.append("no state is terminal: a run could never end")
    if initial not in declared:
        problems.append(f"initial state '{initial}' is not declared")
    terminal = {s.name for s in states if s.terminal}
    if initial in terminal:
        problems.append(f"initial state '{initial}' is terminal")

    by_pair: dict[tuple[str, str], list[Transition]] = {}
    undeclared: dict[str, list[str]] = {}
    for t in transitions:
        for end, role in ((t.source, "source"), (t.target, "target")):
            if end not in declared:
                problems.append(
                    f"edge {t.source} --{t.event}--> {t.target}: {role} '{end}' is not declared"
                )
        if t.source in terminal:
            problems.append(
                f"edge {t.source} --{t.event}--> {t.target} leaves terminal state '{t.source}'"
            )
        if t.event in ON_NO_EDGE:
            why = _ON_NO_EDGE_WHY.get(t.event, "it")
            problems.append(
                f"edge {t.source} --{t.event}--> {t.target}: '{t.event}' cannot be on an edge "
                f"({why} keeps the run's state, in any state that has not ended)"
            )
        elif events is not None and t.event not in events:
            undeclared.setdefault(t.event, []).append(f"{t.source} --> {t.target}")
        by_pair.setdefault((t.source, t.event), []).append(t)

    for event, where in undeclared.items():
        problems.append(
            f"event type '{event}' is not declared (edges {', '.join(where)}): add it with "
            "event_types=BUILTIN_EVENTS.extend(...) or derive(add_events=[...])"
        )
    for (source, event), edges in by_pair.items():
        unconditional = [e for e in edges if e.condition is None]
        if len(unconditional) > 1:
            targets = ", ".join(f"'{e.target}'" for e in unconditional)
            problems.append(
                f"'{source}' on '{event}' is nondeterministic: {len(unconditional)} edges "
                f"without a condition (to {targets})"
            )
        elif unconditional and edges[-1].condition is not None:
            problems.append(
                f"'{source}' on '{event}': the edge without a condition (to "
                f"'{unconditional[0].target}') must come last, or the edges after it never fire"
            )
        cond_names = [e.condition.name for e in edges if e.condition is not None]
        for dup in sorted({c for c in cond_names if cond_names.count(c) > 1}):
            problems.append(f"'{source}' on '{event}': condition '{dup}' is used on two edges")
    problems += timeout_problems(initial, transitions, events)

    if initial in declared:
        succ: dict[str, set[str]] = {n: set() for n in declared}
        pred: dict[str, set[str]] = {n: set() for n in declared}
        for t in transitions:
            if t.source in declared and t.target in declared:
                succ[t.source].add(t.target)
                pred[t.target].add(t.source)
        reachable = _closure({initial}, succ)
        for n in names:
            if n not in reachable:
                problems.append(f"state '{n}' is unreachable from the initial state '{initial}'")
        can_end = _closure(terminal, pred)
        for n in names:
            if n not in terminal and n not in can_end:
                problems.append(f"state '{n}' cannot reach any terminal state (a trap)")
    return problems


def _closure(start: set[str], graph: Mapping[str, set[str]]) -> set[str]:
    seen = set(start)
    queue = deque(start)
    while queue:
        for nxt in graph.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen
