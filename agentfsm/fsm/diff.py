"""What changed between two versions of a table, move by move, and which states it touches.

A changed table is another version (another digest), and a run keeps the version it started
with. Before a new version replaces the old one for new runs, `diff_tables` says what the
change does: the moves removed, added and changed per (state, event), the states added,
removed or of another kind, the event types added, removed or with other fields. Each change
is a sentence; the order is stable (removals first, then changes, then additions; names
sorted within each), so a review or a test can pin the whole text.

`TableDiff.affects(state)` says why a run standing in `state` under the old table would
move differently under the new one; `breaks(state)` the part of it that takes away what
such a run relies on, `adds(state)` the moves it only gains: what `agentfsm check-table NEW
--against OLD --store` reports for the runs in flight (affected, exit 1; extended, exit 0).
`TableDiff.cannot_migrate(state)` says why such a run cannot be moved to the new version
(`agentfsm migrate`): its state is gone or of another kind, or the run can come to a state
where the new version takes away a move a Runner makes there (`TableDiff.stranded`, by
`agentfsm.fsm.needs`): the run would be stuck there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Literal

import attrs

from agentfsm.events.models import TableRef
from agentfsm.fsm._timeouts import duration_words, seconds
from agentfsm.fsm.needs import runner_needs
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import StateKind

__all__ = ["Edge", "KindChange", "MoveChange", "Stranded", "TableDiff", "diff_tables"]


@attrs.frozen
class Edge:
    """One alternative of a move, as a diff compares it.

    Attributes:
        target: the state it enters.
        condition: the name of its condition (None: it always applies).
        guards: the names of the guards checked on it.
        after: how long a run waits before it is taken, for a timeout (`after 7 d` is then
            its condition); None for any other edge.
    """

    target: str
    condition: str | None = None
    guards: tuple[str, ...] = ()
    after: timedelta | None = None

    @property
    def identity(self) -> str | tuple[str] | None:
        """What names this alternative across versions: its condition, or for a timeout
        the pair's one timeout (whose wait may change)."""
        return ("after",) if self.after is not None else self.condition

    def when(self) -> str:
        """` when 'batch resolved'`, ` after 7 d`, or "" (it always applies)."""
        if self.after is not None:
            return f" after {duration_words(self.after)}"
        return f" when '{self.condition}'" if self.condition is not None else ""

    def text(self) -> str:
        """`to 'running' when 'batch resolved' (guards 'max_turns')`, for sentences."""
        guards = f" (guards {_quoted(self.guards)})" if self.guards else ""
        return f"to '{self.target}'{self.when()}{guards}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (with `after`, in seconds, for a timeout only)."""
        out: dict[str, Any] = {
            "target": self.target,
            "condition": self.condition,
            "guards": list(self.guards),
        }
        if self.after is not None:
            out["after"] = seconds(self.after)
        return out


@attrs.frozen
class MoveChange:
    """How one (state, event) pair moves differently.

    Attributes:
        source: the state the move leaves.
        event: the event type that triggers it.
        change: `removed` (legal before, refused now), `added` (refused before, legal now)
            or `changed` (legal in both, with other alternatives, targets, guards or order).
        old: its alternatives in the old table, in the order they are tried.
        new: its alternatives in the new table.
        details: one sentence per difference.
    """

    source: str
    event: str
    change: Literal["removed", "changed", "added"]
    old: tuple[Edge, ...]
    new: tuple[Edge, ...]
    details: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "source": self.source,
            "event": self.event,
            "change": self.change,
            "old": [e.to_json() for e in self.old],
            "new": [e.to_json() for e in self.new],
            "details": list(self.details),
        }


@attrs.frozen
class KindChange:
    """A state declared in both tables with another kind.

    Attributes:
        state: its name.
        old: its kind in the old table.
        new: its kind in the new table.
    """

    state: str
    old: StateKind
    new: StateKind


@attrs.frozen
class Stranded:
    """A state of both tables where the new one takes away a move a Runner makes there.

    Attributes:
        state: its name.
        moves: what a Runner appends there (`agentfsm.fsm.needs.runner_needs`) that the old
            table allowed and the new one does not.
        where: why a Runner makes those moves there (`in every 'paused' state`).
        reached_from: the states of the new table a run can come to it from, itself
            included, in declaration order: a run in any of them must not move there.
    """

    state: str
    moves: tuple[str, ...]
    where: str
    reached_from: tuple[str, ...]

    def text(self) -> str:
        """`state 'paused' has no 'run.resumed' in the new table (a Runner needs it ...)`."""
        return f"state '{self.state}' has no {self._loss()}"

    def reason(self, state: str) -> str:
        """Why a run in `state` cannot be migrated: it is here, or can come here."""
        if state == self.state:
            return self.text()
        return f"the run can come to state '{self.state}', which has no {self._loss()}"

    def _loss(self) -> str:
        it = "it" if len(self.moves) == 1 else "them"
        return f"{_quoted(self.moves)} in the new table (a Runner needs {it} {self.where})"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "state": self.state,
            "moves": list(self.moves),
            "where": self.where,
            "reached_from": list(self.reached_from),
        }


_ORDER = {"removed": 0, "changed": 1, "added": 2}


@attrs.frozen
class TableDiff:
    """Everything that differs between two tables (`diff_tables`).

    Attributes:
        old: the old table's reference (name and digest).
        new: the new table's reference.
        states_removed: declared in the old table only, in its declaration order.
        states_added: declared in the new table only, in its declaration order.
        kinds_changed: states of both with another kind.
        descriptions_changed: states of both whose description differs.
        initial: `(old, new)` initial states when they differ.
        events_removed: own or built-in event types the new table no longer declares, sorted.
        events_added: event types only the new table declares, sorted.
        events_changed: own event types of both whose fields (JSON Schema) differ, sorted.
        moves: the (state, event) pairs that move differently: removed, then changed, then
            added, each sorted by state and event.
        stranded: states of both where the new table takes away a move a Runner makes
            there, in the old table's declaration order.
        reordered: the digests differ only because edges are declared in another order
            (every move is the same).
    """

    old: TableRef
    new: TableRef
    states_removed: tuple[str, ...] = ()
    states_added: tuple[str, ...] = ()
    kinds_changed: tuple[KindChange, ...] = ()
    descriptions_changed: tuple[str, ...] = ()
    initial: tuple[str, str] | None = None
    events_removed: tuple[str, ...] = ()
    events_added: tuple[str, ...] = ()
    events_changed: tuple[str, ...] = ()
    moves: tuple[MoveChange, ...] = ()
    stranded: tuple[Stranded, ...] = ()
    reordered: bool = False

    @property
    def identical(self) -> bool:
        """The same version: equal digests."""
        return self.old.digest == self.new.digest

    def moves_of(self, change: Literal["removed", "changed", "added"]) -> tuple[MoveChange, ...]:
        """The move changes of one kind."""
        return tuple(m for m in self.moves if m.change == change)

    @property
    def takes_away(self) -> bool:
        """Whether the change removes or alters anything a run of the old table may rely on:
        a move removed or changed, a state removed or of another kind, an event type removed
        or with other fields, another initial state, a move a Runner makes taken away. False
        when it only adds (or only renames, redescribes or reorders)."""
        return bool(
            self.states_removed
            or self.kinds_changed
            or self.stranded
            or self.initial
            or self.events_removed
            or self.events_changed
            or any(m.change != "added" for m in self.moves)
        )

    def affects(self, state: str) -> tuple[str, ...]:
        """Why a run in `state` under the old table would go on differently under the new
        one, one sentence each; empty when it would not."""
        return self._reasons(state, lambda _: True)

    def breaks(self, state: str) -> tuple[str, ...]:
        """What a run in `state` under the old table relies on that the new one takes away,
        one sentence each: its state removed or of another kind, a move there removed or
        changed, a state it can come to stranded. Empty when the change only adds to it
        (`adds`) or leaves it alone: deploying the new version breaks no such run."""
        return self._reasons(state, lambda m: m.change != "added")

    def adds(self, state: str) -> tuple[str, ...]:
        """The moves a run in `state` gains under the new table (nothing it relies on),
        as one sentence; empty when it gains none."""
        gained = [m for m in self.moves if m.source == state and m.change == "added"]
        if state in self.states_removed or not gained:
            return ()
        moves = ", ".join(f"'{m.event}'{_timed(m.new)}" for m in gained)
        return (f"it gains moves: {moves}",)

    def cannot_migrate(self, state: str) -> tuple[str, ...]:
        """Why a run in `state` under the old table cannot be migrated to the new one: its
        state is not in the new table, or is of another kind there (the run would be doing
        something else, or be ended, without an event saying so), or the run can come to a
        state where a Runner could not go on (`stranded`). Empty when it can; moves that
        changed otherwise (`affects`) are what a migration is for."""
        return self._reasons(state, None)

    def _reasons(self, state: str, moves: Callable[[MoveChange], bool] | None) -> tuple[str, ...]:
        """Why a run in `state` under the old table is touched, one sentence each: its
        state removed (that alone), or of another kind; the moves out of it that `moves`
        picks (none without it); the states it can come to that leave it stranded."""
        if state in self.states_removed:
            return (f"state '{state}' is not in the new table",)
        reasons = [
            f"state '{k.state}' is '{k.new}' in the new table, was '{k.old}'"
            for k in self.kinds_changed
            if k.state == state
        ]
        if moves is not None:
            changed = ", ".join(
                f"'{m.event}' {m.change}" for m in self.moves if m.source == state and moves(m)
            )
            if changed:
                reasons.append(f"its moves changed: {changed}")
        stranded = (s.reason(state) for s in self.stranded if state in s.reached_from)
        return (*reasons, *stranded)

    def sentences(self) -> tuple[str, ...]:
        """Every change, one sentence each, in the diff's stable order."""
        out: list[str] = []
        if self.old.name != self.new.name:
            out.append(f"the table is named '{self.new.name}', was '{self.old.name}'")
        out += [f"state '{s}' was removed" for s in self.states_removed]
        out += [f"event type '{e}' was removed" for e in self.events_removed]
        if self.initial is not None:
            out.append(f"the initial state is '{self.initial[1]}', was '{self.initial[0]}'")
        out += [f"state '{k.state}' is '{k.new}', was '{k.old}'" for k in self.kinds_changed]
        out += [s.text() for s in self.stranded]
        out += [f"event type '{e}' has other fields" for e in self.events_changed]
        out += [f"state '{s}' has another description" for s in self.descriptions_changed]
        for move in self.moves:
            out += move.details
        out += [f"state '{s}' was added" for s in self.states_added]
        out += [f"event type '{e}' was added" for e in self.events_added]
        if self.reordered:
            out.append("edges are declared in another order; every move is the same")
        return tuple(out)

    def summary(self) -> str:
        """One line: how many moves were removed, changed and added."""
        counts = ", ".join(f"{len(self.moves_of(c))} {c}" for c in ("removed", "changed", "added"))
        return f"moves: {counts}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: the structured changes and their sentences."""
        return {
            "old": self.old.model_dump(),
            "new": self.new.model_dump(),
            "identical": self.identical,
            "takes_away": self.takes_away,
            "states": {
                "removed": list(self.states_removed),
                "added": list(self.states_added),
                "kind_changed": [
                    {"state": k.state, "old": k.old.value, "new": k.new.value}
                    for k in self.kinds_changed
                ],
                "description_changed": list(self.descriptions_changed),
            },
            "initial": (
                None if self.initial is None else {"old": self.initial[0], "new": self.initial[1]}
            ),
            "event_types": {
                "removed": list(self.events_removed),
                "added": list(self.events_added),
                "changed": list(self.events_changed),
            },
            "moves": [m.to_json() for m in self.moves],
            "stranded": [s.to_json() for s in self.stranded],
            "reordered": self.reordered,
            "sentences": list(self.sentences()),
        }


def diff_tables(old: TransitionTable, new: TransitionTable) -> TableDiff:
    """What differs between `old` and `new`: states, event types and moves.

    Conditions are compared by name, as the digest compares them: keep a name for one
    predicate, or the diff (like the digest) cannot see that its meaning changed.
    """
    old_states = {s.name: s for s in old.states}
    new_states = {s.name: s for s in new.states}
    both = [s for s in old.state_names if s in new_states]
    old_events, new_events = set(old.event_types.names), set(new.event_types.names)
    moves = _moves(old, new)
    diff = TableDiff(
        old=old.ref,
        new=new.ref,
        states_removed=tuple(s for s in old.state_names if s not in new_states),
        states_added=tuple(s for s in new.state_names if s not in old_states),
        kinds_changed=tuple(
            KindChange(s, old_states[s].kind, new_states[s].kind)
            for s in both
            if old_states[s].kind != new_states[s].kind
        ),
        descriptions_changed=tuple(
            s for s in both if old_states[s].description != new_states[s].description
        ),
        initial=(old.initial, new.initial) if old.initial != new.initial else None,
        events_removed=tuple(sorted(old_events - new_events)),
        events_added=tuple(sorted(new_events - old_events)),
        events_changed=tuple(
            e for e in sorted(old_events & new_events) if _schema(old, e) != _schema(new, e)
        ),
        moves=moves,
        stranded=_stranded(old, new, both),
    )
    # Anything else the digest sees is the declaration order of edges of different pairs:
    # say so, rather than print an empty diff between two versions.
    if not diff.identical and not diff.sentences():
        diff = attrs.evolve(diff, reordered=True)
    return diff


def _stranded(old: TransitionTable, new: TransitionTable, both: list[str]) -> tuple[Stranded, ...]:
    """The states of both tables where `new` takes away a move a Runner makes there (one
    `old` allowed: a need it never met is not the new version's doing)."""
    found: list[Stranded] = []
    before: dict[str, set[str]] = {}  # the new table's edges backwards, built on first need
    for state in both:
        needs = runner_needs(old, state)
        kept, had = new.allowed(state), old.allowed(state)
        lost = tuple(e for e in needs.moves if e in had and e not in kept)
        if not lost:
            continue
        if not before:
            for t in new.transitions:
                before.setdefault(t.target, set()).add(t.source)
        found.append(Stranded(state, lost, needs.where, _coming_to(new, state, before)))
    return tuple(found)


def _coming_to(table: TransitionTable, state: str, before: dict[str, set[str]]) -> tuple[str, ...]:
    """The states of `table` a run can come to `state` from (itself included)."""
    seen = {state}
    todo = [state]
    while todo:
        for source in before.get(todo.pop(), ()):
            if source not in seen:
                seen.add(source)
                todo.append(source)
    return tuple(s for s in table.state_names if s in seen)


def _schema(table: TransitionTable, event: str) -> dict[str, Any] | None:
    # Built-in types are the same in every table; only a table's own types can differ.
    if event not in table.event_types.custom:
        return None
    return table.event_types.classes[event].model_json_schema()


def _pairs(table: TransitionTable) -> dict[tuple[str, str], tuple[Edge, ...]]:
    pairs: dict[tuple[str, str], list[Edge]] = {}
    for t in table.transitions:
        edge = Edge(t.target, t.condition.name if t.condition else None, t.guards, t.after)
        pairs.setdefault((t.source, t.event), []).append(edge)
    return {pair: tuple(edges) for pair, edges in pairs.items()}


def _moves(old: TransitionTable, new: TransitionTable) -> tuple[MoveChange, ...]:
    before, after = _pairs(old), _pairs(new)
    changes: list[MoveChange] = []
    for pair in sorted(before.keys() | after.keys()):
        was, now = before.get(pair, ()), after.get(pair, ())
        if was == now:
            continue
        source, event = pair
        head = f"'{source}' on '{event}'"
        if not now:
            change = MoveChange(
                source, event, "removed", was, now,
                (f"{head} is no longer allowed (it went {_alternatives(was)})",),
            )  # fmt: skip
        elif not was:
            change = MoveChange(
                source, event, "added", was, now,
                (f"{head} is now allowed: {_alternatives(now)}",),
            )  # fmt: skip
        else:
            details = tuple(f"{head}: {d}" for d in _edge_changes(was, now))
            change = MoveChange(source, event, "changed", was, now, details)
        changes.append(change)
    changes.sort(key=lambda m: _ORDER[m.change])  # stable: sorted by pair within each kind
    return tuple(changes)


def _edge_changes(was: tuple[Edge, ...], now: tuple[Edge, ...]) -> list[str]:
    # A pair's conditions are unique (the table refuses two edges with one condition, and
    # two without), and so is its timeout: an alternative is known across versions by them.
    old_by = {e.identity: e for e in was}
    new_by = {e.identity: e for e in now}
    out = [f"the edge {e.text()} was removed" for e in was if e.identity not in new_by]
    for e in was:
        n = new_by.get(e.identity)
        if n is None:
            continue
        if n.after != e.after and n.after is not None and e.after is not None:
            out.append(
                f"the timeout to '{e.target}' waits {duration_words(n.after)}, "
                f"was {duration_words(e.after)}"
            )
        when = n.when()
        if n.target != e.target:
            out.append(f"the edge{when} goes to '{n.target}', was '{e.target}'")
        if n.guards != e.guards:
            out.append(
                f"the edge{when} checks {_quoted(n.guards) or 'no guards'}, "
                f"was {_quoted(e.guards) or 'no guards'}"
            )
    kept_old = [e for e in was if e.identity in new_by]
    kept_new = [e for e in now if e.identity in old_by]
    if [e.identity for e in kept_old] != [e.identity for e in kept_new]:
        out.append(
            f"conditions are tried in the order {_conditions(e.condition for e in kept_new)}, "
            f"was {_conditions(e.condition for e in kept_old)}"
        )
    out += [f"the edge {e.text()} was added" for e in now if e.identity not in old_by]
    return out


def _timed(edges: Iterable[Edge]) -> str:
    """` (a timeout after 7 d)` when one of `edges` is a timeout, else ""."""
    waits = [e.after for e in edges if e.after is not None]
    return f" (a timeout after {duration_words(waits[0])})" if waits else ""


def _alternatives(edges: Iterable[Edge]) -> str:
    return ", else ".join(e.text() for e in edges)


def _conditions(names: Iterable[str | None]) -> str:
    return ", ".join("(none)" if n is None else f"'{n}'" for n in names)


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)
