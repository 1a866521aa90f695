"""The diagram model: a plain, ordered graph extracted once from a transition table.

Every renderer reads this model and nothing else, so the formats cannot disagree about what
the table says. Four readability choices are made here, once, for all formats:

* edges between the same two states are merged into one edge with several labels;
* on such an edge, events that share a condition and limit guards share one label
  (`tool.completed / tool.failed [batch resolved]`);
* where one state and event have several alternatives, each label says its place in the
  order they are tried (`1. [batch resolved]`, `2. [calls left]`, and `else` for the one
  without a condition, tried last), so a reviewer reads which outcome wins whatever the
  layout puts first;
* a timeout (an edge declared with `after=`) says its wait where a condition would be, with no
  brackets: `loan.documents_expired after 7 d` (it is taken by time, not chosen);
* an event that leaves *every* active (non-terminal) state for the same target, with the same
  condition and guards, is drawn once from a pseudo-state `any active state` instead of once
  per state (the default table has three such families: cancel, fail, terminate; drawn one
  by one they are 18 crossing arrows). `collapse=False` turns this off.

Order is the table's declaration order (states; edges by source, then by their first
transition; labels by their first transition), so the same table always gives byte-identical
diagrams, and the order a table's author chose (which decides which condition is tried
first) is the reading order.

Each state's kind is in the model (`StateNode.kind`); `KIND_WORDS` is how every format says
the kinds a reader must see: a state that waits for a person, one that is paused.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from agentfsm.fsm.table import Transition, TransitionTable
from agentfsm.names import StateKind

__all__ = [
    "ANY_ACTIVE",
    "DEFAULT_OPTIONS",
    "ELSE",
    "KIND_COLOURS",
    "KIND_WORDS",
    "ORDER_LEGEND",
    "TIMEOUT_LEGEND",
    "DiagramModel",
    "DiagramOptions",
    "Edge",
    "EdgeLabel",
    "StateNode",
    "diagram_model",
    "marks_legend",
]

#: What diagrams call the pseudo-state that stands for "every non-terminal state".
ANY_ACTIVE = "any active state"
#: What a label says of the last alternative, the one without a condition.
ELSE = "else"
#: How every format marks a state of each kind a reader must notice (the others are plain:
#: `active` and `in_flight` are the runtime's own work, `terminal` has its own look).
KIND_WORDS: dict[StateKind, str] = {
    StateKind.WAITING: "waits for a person",
    StateKind.PAUSED: "waits to be resumed",
}
#: The colour of each marked kind in the pictures: its name (for legends), fill and line.
KIND_COLOURS: dict[StateKind, tuple[str, str, str]] = {
    StateKind.WAITING: ("amber", "#fff4d6", "#b7791f"),
    StateKind.PAUSED: ("lilac", "#efe7f7", "#6b4f9c"),
}
#: What the numbers on labels mean, for legends.
ORDER_LEGEND = f"1. 2. …: the order a state's alternatives are tried ({ELSE}: last)"
#: What a timeout's label means, for legends.
TIMEOUT_LEGEND = "after …: a timeout, taken once a run has stood in its state that long"


def _check_direction(_: object, __: object, value: str) -> None:
    if value not in ("LR", "TB"):
        raise ValueError(
            f"direction must be 'LR' (left to right) or 'TB' (top to bottom), got {value!r}"
        )


def _check_dpi(_: object, __: object, value: int | None) -> None:
    if value is not None and not 24 <= value <= 600:
        raise ValueError(f"dpi must be between 24 and 600, got {value}")


@attrs.frozen
class DiagramOptions:
    """How a picture is laid out, for the page it goes on.

    Attributes:
        direction: `"LR"` (left to right, wide: screens) or `"TB"` (top to bottom, tall:
            slides and documents).
        descriptions: write each state's description under its name (Graphviz pictures);
            otherwise it is only a tooltip.
        dpi: the resolution Graphviz draws PNG at (its default is 96); a smaller one makes
            a smaller picture.
    """

    direction: str = attrs.field(default="LR", validator=_check_direction)
    descriptions: bool = True
    dpi: int | None = attrs.field(default=None, validator=_check_dpi)


#: The layout of committed diagrams and of every renderer called without options.
DEFAULT_OPTIONS = DiagramOptions()


@attrs.frozen
class StateNode:
    """A state as diagrams show it.

    Attributes:
        name: the state's name.
        initial: whether runs start here.
        terminal: whether it is terminal (absorbing).
        description: the table's one-sentence description, possibly empty.
        kind: what a run in it is doing (`StateKind`).
    """

    name: str
    initial: bool
    terminal: bool
    description: str
    kind: StateKind = StateKind.ACTIVE


@attrs.frozen
class EdgeLabel:
    """One line of an edge's label: events sharing a condition, limit guards and place.

    Attributes:
        events: the event types, in declaration order.
        condition: the condition's name, or None for an unconditional move.
        guards: the names of the limit guards checked on this move.
        rank: where its state and events have several alternatives, its place (1-based) in
            the order they are tried; None for the only one.
        order: the table's index of its first transition (evaluation order across labels).
        timed: the move is a timeout: `condition` is its wait (`after 7 d`), said without
            brackets.
    """

    events: tuple[str, ...]
    condition: str | None
    guards: tuple[str, ...]
    rank: int | None = None
    order: int = 0
    timed: bool = False

    @property
    def condition_text(self) -> str | None:
        """The condition as labels show it: `[batch resolved]`, `after 7 d` for a timeout,
        or None."""
        if self.condition is None:
            return None
        return self.condition if self.timed else f"[{self.condition}]"

    @property
    def choice(self) -> str:
        """Which alternative it is: `[batch resolved]`, `2. [calls left]`, `3. else`,
        `after 7 d`, or "" for an unconditional move that is the only one."""
        condition = self.condition_text
        if self.rank is None:
            return condition or ""
        return f"{self.rank}. {condition or ELSE}"

    @property
    def text(self) -> str:
        """The label as plain text: `tool.completed / tool.failed 1. [batch resolved]
        {deadline}`."""
        out = " / ".join(self.events)
        if self.choice:
            out += f" {self.choice}"
        if self.guards:
            out += " {" + ", ".join(self.guards) + "}"
        return out


@attrs.frozen
class Edge:
    """All moves from one state (or from every active state) to one target.

    Attributes:
        source: the source state's name; None when the edge leaves every active state.
        target: the target state's name.
        labels: one line per group of events, in declaration order.
    """

    source: str | None
    target: str
    labels: tuple[EdgeLabel, ...]

    @property
    def from_any_active(self) -> bool:
        """Whether the edge stands for the same move out of every active state."""
        return self.source is None

    def moves(self) -> Iterator[tuple[str | None, str, str, str | None]]:
        """Each (source, event, target, condition) the edge stands for."""
        for label in self.labels:
            for event in label.events:
                yield (self.source, event, self.target, label.condition)


@attrs.frozen
class DiagramModel:
    """A table's states and edges, ordered and merged for drawing.

    Attributes:
        name: the table's name (used as the diagram title and file stem).
        initial: the initial state's name.
        states: every state, in declaration order.
        edges: state-to-state edges first (by source, then by their first transition), then
            the edges from `any active state` (by their first transition).
    """

    name: str
    initial: str
    states: tuple[StateNode, ...]
    edges: tuple[Edge, ...]

    @property
    def active_states(self) -> tuple[StateNode, ...]:
        """The non-terminal states, in order."""
        return tuple(s for s in self.states if not s.terminal)

    @property
    def terminal_states(self) -> tuple[StateNode, ...]:
        """The terminal states, in order."""
        return tuple(s for s in self.states if s.terminal)

    @property
    def has_any_active(self) -> bool:
        """Whether some edge leaves `any active state` (so the pseudo-state is drawn)."""
        return any(e.source is None for e in self.edges)

    def state(self, name: str) -> StateNode:
        """The state called `name` (KeyError if there is none)."""
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(f"diagram '{self.name}' has no state '{name}'")


# (event, target, condition, guards, rank): what must match for moves from several states to
# be one family.
_FamilyKey = tuple[str, str, str | None, tuple[str, ...], int | None]


def diagram_model(table: TransitionTable, *, collapse: bool = True) -> DiagramModel:
    """Extract the diagram model of `table`.

    Args:
        table: any valid transition table.
        collapse: draw a move that leaves every active state once, from `any active state`.
    """
    order = {name: i for i, name in enumerate(table.state_names)}
    active = [s.name for s in table.states if not s.terminal]
    ranks = _ranks(table.transitions)
    collapsed = _families(table.transitions, active, ranks) if collapse else set()

    by_pair: dict[tuple[str | None, str], list[tuple[int, Transition]]] = {}
    for i, t in enumerate(table.transitions):
        key = _family_key(t, ranks[i])
        source: str | None = None if key in collapsed else t.source
        members = by_pair.setdefault((source, t.target), [])
        # A collapsed family is one move; keep a single representative of it.
        if source is None and any(_family_key(m, ranks[j]) == key for j, m in members):
            continue
        members.append((i, t))

    def edge_order(pair: tuple[str | None, str]) -> tuple[bool, int, int]:
        # By source, then by the edge's first transition: where a state and event have
        # several alternatives, their edges come in the order they are tried.
        source, _ = pair
        return (source is None, -1 if source is None else order[source], by_pair[pair][0][0])

    edges = tuple(
        Edge(source=pair[0], target=pair[1], labels=_labels(by_pair[pair], ranks))
        for pair in sorted(by_pair, key=edge_order)
    )
    states = tuple(
        StateNode(s.name, s.name == table.initial, s.terminal, s.description, s.kind)
        for s in table.states
    )
    return DiagramModel(name=table.name, initial=table.initial, states=states, edges=edges)


def _ranks(transitions: tuple[Transition, ...]) -> list[int | None]:
    """Each transition's place (1-based) among the alternatives of its (source, event), in
    the order the table tries them; None where it is the only one."""
    counts: dict[tuple[str, str], int] = {}
    place = []
    for t in transitions:
        counts[(t.source, t.event)] = counts.get((t.source, t.event), 0) + 1
        place.append(counts[(t.source, t.event)])
    return [
        None if counts[(t.source, t.event)] == 1 else n
        for t, n in zip(transitions, place, strict=True)
    ]


def _family_key(t: Transition, rank: int | None) -> _FamilyKey:
    return (t.event, t.target, t.condition.name if t.condition else None, t.guards, rank)


def _families(
    transitions: tuple[Transition, ...], active: list[str], ranks: list[int | None]
) -> set[_FamilyKey]:
    """The moves that leave every active state alike (only worth it with 2+ active states)."""
    if len(active) < 2:
        return set()
    sources: dict[_FamilyKey, set[str]] = {}
    for t, rank in zip(transitions, ranks, strict=True):
        sources.setdefault(_family_key(t, rank), set()).add(t.source)
    wanted = set(active)
    return {key for key, found in sources.items() if found == wanted}


def _labels(
    transitions: list[tuple[int, Transition]], ranks: list[int | None]
) -> tuple[EdgeLabel, ...]:
    """Group an edge's transitions by (condition, guards, place), in first-appearance order."""
    groups: dict[tuple[str | None, tuple[str, ...], int | None, bool], tuple[int, list[str]]] = {}
    for i, t in transitions:
        key = (t.condition.name if t.condition else None, t.guards, ranks[i], t.after is not None)
        _, events = groups.setdefault(key, (i, []))
        if t.event not in events:
            events.append(t.event)
    return tuple(
        EdgeLabel(tuple(events), condition, guards, rank, first, timed)
        for (condition, guards, rank, timed), (first, events) in groups.items()
    )


def marks_legend(model: DiagramModel) -> list[str]:
    """The legend lines for the marks this model's picture uses: numbered alternatives,
    timeouts, then each marked kind by its colour (none when it uses none)."""
    lines = []
    labels = [label for edge in model.edges for label in edge.labels]
    if any(label.rank is not None for label in labels):
        lines.append(ORDER_LEGEND)
    if any(label.timed for label in labels):
        lines.append(TIMEOUT_LEGEND)
    lines += [
        f"{colour}: {KIND_WORDS[kind]}"
        for kind, (colour, _, _) in KIND_COLOURS.items()
        if any(s.kind == kind for s in model.states)
    ]
    return lines
