"""For random tables derived from the default one, every format shows exactly the table."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentfsm.diagrams import (
    DiagramModel,
    diagram_model,
    render_dot,
    render_markdown,
    render_mermaid,
    render_plantuml,
)
from agentfsm.diagrams._model import KIND_WORDS
from agentfsm.errors import InvalidTableError
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, State, Transition, TransitionTable
from agentfsm.names import StateKind
from tests._diagram_parsers import Parsed, parse_dot, parse_markdown, parse_mermaid, parse_plantuml

_state_names = st.from_regex(r"[a-z][a-z0-9_ -]{0,8}[a-z0-9]", fullmatch=True).filter(
    lambda n: n not in DEFAULT_TABLE.state_names
)
_events = st.from_regex(r"x\.[a-z][a-z0-9_.]{0,8}", fullmatch=True)
_kinds = st.sampled_from(
    [StateKind.ACTIVE, StateKind.IN_FLIGHT, StateKind.WAITING, StateKind.PAUSED]
)
_conditions = st.from_regex(r"[a-z][a-z ]{0,10}[a-z]", fullmatch=True)
_guards = st.lists(st.from_regex(r"[a-z][a-z_]{0,7}", fullmatch=True), max_size=2, unique=True)
_FAMILIES = (
    ("run.cancel_requested", "cancel_requested"),
    ("run.failed", "failed"),
    ("run.terminated", "terminated"),
)


def _yes(context: object, event: object) -> bool:
    return True


@st.composite
def derived_tables(draw: st.DrawFn) -> TransitionTable:
    """The default table with 0-3 new states, new edges (some conditional, maybe a timeout),
    some removed."""
    new = draw(st.lists(_state_names, max_size=3, unique=True))
    terminal = {n for n in new if draw(st.booleans())}
    active = [s.name for s in DEFAULT_TABLE.states if not s.terminal]
    ends = [s.name for s in DEFAULT_TABLE.states if s.terminal]
    add: list[Transition] = []
    for name in new:
        source = draw(st.sampled_from(active))
        add.append(Transition(source, draw(_events), name, guards=draw(_guards)))
        if name not in terminal:
            add.append(Transition(name, draw(_events), draw(st.sampled_from(ends))))
            if draw(st.booleans()):  # joins the any-active families, or breaks them
                add += [Transition(name, e, t) for e, t in _FAMILIES]
            active.append(name)
    for _ in range(draw(st.integers(0, 3))):
        source = draw(st.sampled_from(active))
        event = draw(_events)
        targets = draw(st.lists(st.sampled_from(DEFAULT_TABLE.state_names), min_size=1, max_size=2))
        names = draw(
            st.lists(_conditions, min_size=len(targets), max_size=len(targets), unique=True)
        )
        for target, cond in zip(targets[:-1], names, strict=False):
            add.append(Transition(source, event, target, Condition(cond, _yes)))
        last = names[-1] if draw(st.booleans()) else None
        add.append(Transition(source, event, targets[-1], Condition(last, _yes) if last else None))
    if draw(st.booleans()):  # a timeout out of a state a run stands in
        source = draw(st.sampled_from(["waiting_approval", "paused"]))
        after = timedelta(seconds=draw(st.integers(1, 10**7)))
        add.append(Transition(source, draw(_events), draw(st.sampled_from(ends)), after=after))
    remove = draw(st.lists(st.sampled_from(DEFAULT_TABLE.transitions), max_size=2, unique=True))
    try:
        return DEFAULT_TABLE.derive(
            name="derived",
            add_states=[
                State(n, terminal=True) if n in terminal else State(n, kind=draw(_kinds))
                for n in new
            ],
            add=add,
            remove=remove,
            add_events=sorted({t.event for t in add} - set(DEFAULT_TABLE.event_types.names)),
        )
    except InvalidTableError:
        assume(False)
        raise  # unreachable: assume(False) rejects the example


def _expected(table: TransitionTable) -> Parsed:
    """What every format must say: each move with its place among the alternatives of its
    state and event, in the order the table tries them, and each state marked by kind."""

    def rank(t: Transition) -> int | None:
        tried = table.edges(t.source, t.event)
        return tried.index(t) + 1 if len(tried) > 1 else None

    return Parsed(
        states=frozenset(table.state_names),
        terminal=frozenset(table.terminal_states),
        initial=table.initial,
        moves=frozenset(
            (
                t.source,
                t.event,
                t.target,
                t.condition.name if t.condition else None,
                t.guards,
                rank(t),
            )
            for t in table.transitions
        ),
        kinds=frozenset((s.name, KIND_WORDS[s.kind]) for s in table.states if s.kind in KIND_WORDS),
    )


_FORMATS: list[tuple[Callable[[DiagramModel], str], Callable[[str], Parsed]]] = [
    (render_mermaid, parse_mermaid),
    (render_plantuml, parse_plantuml),
    (render_dot, parse_dot),
    (render_markdown, parse_markdown),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=derived_tables(), collapse=st.booleans())
def test_every_format_shows_the_table_and_nothing_else(
    table: TransitionTable, collapse: bool
) -> None:
    """Each format, read back, has exactly the table's states, terminal states, initial
    state and moves (with their conditions, guards and place in the order they are tried),
    and marks exactly the states that wait for a person or are paused."""
    model = diagram_model(table, collapse=collapse)
    expected = _expected(table)
    for render, parse in _FORMATS:
        assert (render.__name__, parse(render(model))) == (render.__name__, expected)


@settings(max_examples=30, deadline=None)
@given(table=derived_tables())
def test_output_is_deterministic(table: TransitionTable) -> None:
    """The same table renders byte-identically, even rebuilt from its own parts."""
    rebuilt = TransitionTable(
        name=table.name,
        states=table.states,
        initial=table.initial,
        transitions=table.transitions,
        event_types=table.event_types,
    )
    for render, _ in _FORMATS:
        assert render(diagram_model(table)) == render(diagram_model(rebuilt))


def test_the_readers_see_the_default_table() -> None:
    """The readers themselves work: the default table reads back as itself in every format."""
    model = diagram_model(DEFAULT_TABLE)
    for render, parse in _FORMATS:
        assert (render.__name__, parse(render(model))) == (
            render.__name__,
            _expected(DEFAULT_TABLE),
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=derived_tables(), collapse=st.booleans())
def test_markdown_lists_alternatives_in_the_order_they_are_tried(
    table: TransitionTable, collapse: bool
) -> None:
    """Read top down, the Markdown rows of one state and event number its alternatives
    1, 2, ... (a table's own alternatives were listed by target, not as tried)."""
    model = diagram_model(table, collapse=collapse)
    numbered: dict[tuple[str, str], list[int]] = {}
    for line in render_markdown(model).splitlines():
        cells = line[2:-2].split(" | ") if line.startswith("| `") else []
        if len(cells) == 5 and (m := re.match(r"(\d+)\. ", cells[2])):
            for event in cells[1].split(" / "):
                numbered.setdefault((cells[0].strip("`"), event.strip("`")), []).append(int(m[1]))
    assert all(ranks == list(range(1, len(ranks) + 1)) for ranks in numbered.values())
    drawn = {
        (edge.source, event)
        for edge in model.edges
        if edge.source is not None
        for label in edge.labels
        if label.rank is not None
        for event in label.events
    }
    assert set(numbered) == drawn
