"""Checking a table statically: the full report, warnings included, and the move matrix.

Building a `TransitionTable` already refuses the hard errors (undeclared states,
nondeterminism, edges out of terminal states, unreachable states, traps). `check_table` reports
those as data — also for a declaration that cannot be built — and one more kind of error: a
state no Runner can drive a run in (`agentfsm.fsm.needs.runner_problems`: a state declared
without a kind, so `active`, that only a person moves on). It adds what is legal but worth a
look: event types no edge uses, states or events whose only ways out are conditional, and
conditions that leave an event without a fallback. It also lists the limit guards the table's
edges check, and on which events, and the timeouts (edges declared with `after=`), so a review
sees every limit and every clock at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from agentfsm.errors import InvalidTableError
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes
from agentfsm.fsm._timeouts import duration_words, seconds
from agentfsm.fsm.needs import runner_problems
from agentfsm.fsm.table import ON_NO_EDGE, Condition, State, Transition, TransitionTable

__all__ = ["TableReport", "check_parts", "check_table", "table_from_spec", "transition_matrix"]

#: One cell of the matrix: `(condition name or None, target)` in the order they are tried.
Cell = tuple[tuple[str | None, str], ...]


@attrs.frozen
class TableReport:
    """What `check_table` found.

    Attributes:
        name: the table's name.
        errors: problems that make the table unusable: the declaration's own (a built table
            has none of those), then the states no Runner can drive a run in.
        warnings: legal but suspicious: never-firing events, condition-only exits.
        notes: by design but worth knowing: events refused whenever their only condition
            does not hold.
        states: how many states; terminal ones are counted in `terminal`.
        terminal: how many terminal states.
        edges: how many transitions.
        legal_pairs: how many (state, event) pairs have at least one edge.
        built: False when only the builder's errors are known (it raised before counting).
        guards: each limit guard an edge lists, by name, with the event types it is
            checked on (`max_calls_per_decision` on `model.completed`, ...).
        timeouts: each timed edge, in declaration order: `state`, `event`, `target` and
            `after` (seconds).
    """

    name: str
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    states: int
    terminal: int
    edges: int
    legal_pairs: int
    built: bool = True
    guards: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    timeouts: tuple[Mapping[str, Any], ...] = ()

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not self.errors

    def render(self) -> str:
        """The report as text, as `agentfsm check-table` prints it."""
        head = (
            f"table '{self.name}': {self.states} states ({self.terminal} terminal), "
            f"{self.edges} edges, {self.legal_pairs} legal (state, event) pairs"
        )
        lines = [head if self.built else f"table '{self.name}' could not be built"]
        lines += [
            f"guard: '{name}' on {', '.join(repr(e) for e in events)}"
            for name, events in self.guards.items()
        ]
        lines += [
            f"timeout: '{t['state']}' after {duration_words(timedelta(seconds=t['after']))}: "
            f"'{t['event']}' to '{t['target']}'"
            for t in self.timeouts
        ]
        lines += [f"error: {e}" for e in self.errors]
        lines += [f"warning: {w}" for w in self.warnings]
        lines += [f"note: {n}" for n in self.notes]
        verdict = "invalid" if self.errors else "ok"
        lines.append(f"{verdict}: {len(self.errors)} error(s), {len(self.warnings)} warning(s)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {"ok": self.ok, **attrs.asdict(self)}


def transition_matrix(table: TransitionTable) -> dict[tuple[str, str], Cell]:
    """Every (state, event type) pair of the table's vocabulary, with its moves (or none).

    The event types on no edge (`ON_NO_EDGE`: `run.migrated`, `emit.refused`, `run.forked`,
    `model.failed`) are left out: no table moves on them (the reducer applies them in every
    state that has not ended, and the state stays).
    """
    events = sorted((set(table.events) | set(table.event_types.names)) - ON_NO_EDGE)
    return {
        (state, event): tuple(
            (t.condition.name if t.condition else None, t.target) for t in table.edges(state, event)
        )
        for state in table.state_names
        for event in events
    }


def check_table(table: TransitionTable) -> TableReport:
    """The full report for a built table (its errors are states no Runner can drive a run
    in, `agentfsm.fsm.needs.runner_problems`)."""
    return check_parts(
        table.name, table.states, table.initial, table.transitions, table.event_types, table
    )


def check_parts(
    name: str,
    states: Sequence[State],
    initial: str,
    transitions: Sequence[Transition],
    event_types: EventTypes = BUILTIN_EVENTS,
    built: TransitionTable | None = None,
) -> TableReport:
    """The report for a declaration, whether or not it could be built (`built`: the table
    these parts are, when the caller has it already)."""
    errors: list[str] = []
    if built is None:
        try:  # the builder lists the declaration's problems (`table_problems`) when it fails
            built = TransitionTable(name, states, initial, transitions, event_types)
        except InvalidTableError as exc:
            errors = list(exc.problems)
    if built is not None:
        errors += runner_problems(built)
    terminal = {s.name for s in states if s.terminal}
    # The `ON_NO_EDGE` types are on no edge by design: the reducer applies them in every live
    # state.
    used = {t.event for t in transitions} | ON_NO_EDGE
    warnings = [
        f"event '{e}' can never fire: no edge uses it"
        for e in sorted(set(event_types.names) - used)
    ]
    by_pair: dict[tuple[str, str], list[Transition]] = {}
    # Whether each state's ways out are all conditional, from one pass over the edges (a
    # scan of every edge per state made a large spec cost states x edges).
    only_conditional: dict[str, bool] = {}
    for t in transitions:
        by_pair.setdefault((t.source, t.event), []).append(t)
        if t.target != t.source:
            only_conditional[t.source] = (
                only_conditional.get(t.source, True) and t.condition is not None
            )
    for s in states:
        if not s.terminal and only_conditional.get(s.name, False):
            warnings.append(f"state '{s.name}' can only be left through conditional edges")
    notes = []
    for (source, event), edges in sorted(by_pair.items()):
        if source not in terminal and len(edges) == 1 and edges[0].condition is not None:
            after = edges[0].after
            notes.append(
                f"'{source}' on '{event}' is refused before its time (after "
                f"{duration_words(after)})"
                if after is not None
                else f"'{source}' on '{event}' is refused whenever condition "
                f"'{edges[0].condition.name}' does not hold"
            )
    guarded: dict[str, set[str]] = {}
    for t in transitions:
        for guard in t.guards:
            guarded.setdefault(guard, set()).add(t.event)
    return TableReport(
        name=name,
        errors=tuple(errors),
        warnings=tuple(warnings),
        notes=tuple(notes),
        states=len(states),
        terminal=len(terminal),
        edges=len(transitions),
        legal_pairs=len(by_pair),
        guards={g: tuple(sorted(guarded[g])) for g in sorted(guarded)},
        timeouts=tuple(
            {"state": t.source, "event": t.event, "target": t.target, "after": seconds(t.after)}
            for t in transitions
            if t.after is not None
        ),
    )


def table_from_spec(
    spec: Mapping[str, Any],
) -> tuple[str, list[State], str, list[Transition], EventTypes]:
    """The parts of a table from its JSON description (`TransitionTable.describe()`'s shape).

    Conditions in a spec are names only; for checking structure they are labels whose
    predicate always holds.

    Raises:
        ValueError: the spec is not shaped like a table description.
    """
    try:
        states = [
            State(
                s["name"],
                bool(s.get("terminal", False)),
                s.get("description", ""),
                **({"kind": s["kind"]} if "kind" in s else {}),
            )
            for s in spec["states"]
        ]
        transitions = [_spec_edge(t) for t in spec["transitions"]]
        # A spec names its own event types; their fields are not part of a structure check.
        event_types = BUILTIN_EVENTS.extend(*spec.get("event_types", ()))
        name = str(spec.get("name", "spec"))
        return name, states, str(spec["initial"]), transitions, event_types
    except (KeyError, TypeError) as exc:
        raise ValueError(
            "a table spec is a JSON object with 'initial', 'states' [{name, terminal, kind?}] and "
            "'transitions' [{source, event, target, condition?, after? (seconds)}]: "
            f"{exc!r} is missing or wrong"
        ) from None


def _spec_edge(t: Mapping[str, Any]) -> Transition:
    after = t.get("after")
    if after is not None:
        if isinstance(after, bool) or not isinstance(after, int | float):
            raise TypeError(f"'after' of edge {t['source']} --{t['event']}--> {t['target']}")
        # A timed edge's condition is its time: the name in the spec is the one it makes.
        return Transition(
            t["source"], t["event"], t["target"], None, tuple(t.get("guards", ())),
            after=timedelta(seconds=after),
        )  # fmt: skip
    condition = t.get("condition")
    return Transition(
        t["source"],
        t["event"],
        t["target"],
        Condition(condition, _always) if condition else None,
        tuple(t.get("guards", ())),
    )


def _always(_record: Any, _event: Any) -> bool:
    return True
