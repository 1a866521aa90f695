"""Diagrams for pages: Graphviz's SVG, cleaned to inert markup and marked for the page.

The SVG is drawn by `agentfsm.diagrams` (the same DOT every other picture comes from) and
then parsed and rebuilt from an allow-list before it is placed inline: only drawing
elements and attributes survive, so no element can run script or fetch anything, whatever a
log's run id or a table's description held (Graphviz escapes text, and this makes sure).
Each state's node gets `data-state="NAME"`, a tab stop and a name for assistive technology, so
a page can find it (click it or reach it by keyboard, mark the state a step-through is at);
each edge between two states gets `data-from`/`data-to`. A step's state is marked here with
the class `current`, the run's state now with `final`, and the move just taken with `step`.

`path_model` is the "path only" view: the states a run visited and the moves it took, so a
long table's picture shrinks to what a reviewer of this run reads.
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET

import attrs
from markupsafe import Markup

from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.model import DiagramModel, Edge, diagram_model
from agentfsm.diagrams.svg import GRAPHVIZ_INSTALL, graphviz_available, render_svg
from agentfsm.diagrams.trajectory import Overlay, Trajectory
from agentfsm.errors import DiagramError
from agentfsm.fsm.table import TransitionTable

__all__ = ["Diagram", "diagram_svg", "mark_current", "mark_states", "path_model"]

_SVG = "http://www.w3.org/2000/svg"
_XLINK = "http://www.w3.org/1999/xlink"
ET.register_namespace("", _SVG)
ET.register_namespace("xlink", _XLINK)

#: Drawing elements Graphviz writes; anything else (script, foreignObject, image, use,
#: animate...) is dropped with its content.
_ELEMENTS = frozenset(
    {"svg", "g", "title", "path", "polygon", "polyline", "ellipse", "circle", "rect", "line",
     "text", "tspan", "a", "defs", "linearGradient", "radialGradient", "stop"}
)  # fmt: skip
#: Presentation attributes; no event handler, no href, no style (CSS can fetch).
_ATTRIBUTES = frozenset(
    {"id", "class", "width", "height", "viewBox", "transform", "fill", "stroke",
     "stroke-width", "stroke-dasharray", "stroke-opacity", "fill-opacity", "points", "d",
     "cx", "cy", "rx", "ry", "r", "x", "y", "x1", "y1", "x2", "y2", "text-anchor",
     "font-family", "font-size", "font-weight", "font-style", "text-decoration",
     "offset", "stop-color", "stop-opacity", "gradientUnits", "data-state",
     "{%s}title" % _XLINK}  # noqa: UP031 - a namespaced name, built once
)  # fmt: skip
_ID = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*\Z")


class Diagram:
    """A sanitized inline SVG, or the reason there is none (Graphviz missing or failing)."""

    def __init__(
        self, svg: str | None, problem: str | None = None, *, shown: int = 0, hidden: int = 0
    ) -> None:
        self.svg = svg
        self.problem = problem
        #: States drawn, and states of the table left out (the "path only" view).
        self.shown = shown
        self.hidden = hidden

    def markup(
        self,
        current: str | None = None,
        *,
        final: str | None = None,
        step: tuple[str, str] | None = None,
        also: frozenset[str] = frozenset(),
    ) -> Markup:
        """The SVG for a page: the node of state `current` (a step's) marked `current`, the
        node of `final` (where the run is now) marked `final`, the edge of the move
        `step` = (source, target) marked `step`, and the nodes of the states `also` marked
        `also` (another run's path on the same picture)."""
        if self.svg is None:
            return Markup("")
        text = self.svg
        if current is not None:
            text = mark_current(text, current)
        if final is not None:
            text = _mark_node(text, final, "final")
        if step is not None and step[0] != step[1]:  # a move within a state is in its box
            quoted = f'data-from="{_attr(step[0])}" data-to="{_attr(step[1])}"'
            text = text.replace(f'class="edge" {quoted}', f'class="edge step" {quoted}', 1)
        if also:
            text = mark_states(text, also, "also")
        return Markup(text)  # noqa: S704 - rebuilt from the allow-list above


def diagram_svg(
    table: TransitionTable, trajectory: Trajectory | None = None, *, path_only: bool = False
) -> Diagram:
    """The table's diagram (with a run's path on it), as a cleaned inline SVG; `path_only`
    draws only the states the run visited and the moves it took (see `path_model`)."""
    if not graphviz_available():
        return Diagram(None, f"Graphviz `dot` is not installed ({GRAPHVIZ_INSTALL})")
    if trajectory is None:
        return _table_svg(table)
    model = diagram_model(table)
    if not path_only:
        return _draw(model, trajectory)
    small = path_model(model, trajectory)
    drawn = _draw(small, trajectory)
    drawn.hidden = len(model.states) - len(small.states)
    return drawn


def path_model(model: DiagramModel, trajectory: Trajectory) -> DiagramModel:
    """`model` cut to what `trajectory` used: the states it visited (and the initial one),
    and of each edge between them only the labels of moves it took. A move the model draws
    from `any active state` is then drawn from its real source (the overlay's extra edges),
    so the path stays one line."""
    overlay = Overlay.build(model, trajectory)
    visited = set(trajectory.visited) | {model.initial}
    edges = []
    for i, edge in enumerate(model.edges):
        if edge.source is None or edge.source not in visited or edge.target not in visited:
            continue
        labels = tuple(
            label for j, label in enumerate(edge.labels) if (i, j) in overlay.label_sequences
        )
        if labels:
            edges.append(Edge(edge.source, edge.target, labels))
    states = tuple(s for s in model.states if s.name in visited)
    return attrs.evolve(model, states=states, edges=tuple(edges))


@functools.lru_cache(maxsize=32)
def _table_svg(table: TransitionTable) -> Diagram:
    return _draw(diagram_model(table), None)


def _draw(model: DiagramModel, trajectory: Trajectory | None) -> Diagram:
    try:
        raw = render_svg(render_dot(model, trajectory))
    except DiagramError as exc:
        return Diagram(None, str(exc))
    return Diagram(clean(raw, {s.name for s in model.states}), shown=len(model.states))


def clean(raw: str, states: set[str]) -> str:
    """Graphviz SVG rebuilt from the allow-list, each state's node tagged `data-state`."""
    root = ET.fromstring(raw[raw.index("<svg") :])  # noqa: S314 - Graphviz's output, no DTD
    _prune(root)
    for group in root.iter(f"{{{_SVG}}}g"):
        title = group.find(f"{{{_SVG}}}title")
        if title is None or title.text is None:
            continue
        if group.get("class") == "node" and title.text in states:
            # Set after pruning, in this order (`mark_current` edits the text by it): a
            # state is a control a keyboard reaches, named for a screen reader.
            group.set("data-state", title.text)
            group.set("tabindex", "0")
            group.set("role", "button")
            group.set("aria-label", f"state {title.text}")
        elif group.get("class") == "edge":
            ends = _ends(title.text, states)
            if ends is not None:
                group.set("data-from", ends[0])
                group.set("data-to", ends[1])
    root.set("class", "diagram")
    # A group, not an image: its states are controls, and an image holds none.
    graph = root.find(f"{{{_SVG}}}g/{{{_SVG}}}title")
    root.set("role", "group")
    root.set("aria-label", f"state diagram {graph.text}" if graph is not None else "state diagram")
    return ET.tostring(root, encoding="unicode")


def _prune(element: ET.Element) -> None:
    for name in list(element.attrib):
        if name not in _ATTRIBUTES and name != "role":
            del element.attrib[name]
    ident = element.get("id")
    if ident is not None and not _ID.match(ident):
        del element.attrib["id"]
    for child in list(element):
        tag = child.tag.rpartition("}")[2] if isinstance(child.tag, str) else ""
        if not child.tag.startswith(f"{{{_SVG}}}") or tag not in _ELEMENTS:
            element.remove(child)
            continue
        _prune(child)


def _ends(title: str, states: set[str]) -> tuple[str, str] | None:
    """The (source, target) states of an edge whose Graphviz title is `source->target`
    (split where both sides are states: a name may itself hold `->`)."""
    at = title.find("->")
    while at != -1:
        source, target = title[:at], title[at + 2 :]
        if source in states and target in states:
            return source, target
        at = title.find("->", at + 1)
    return None


def mark_current(svg: str, state: str) -> str:
    """`svg` with the node of `state` given the class `current` (a string edit: the SVG was
    written by `clean`, whose attribute order is fixed)."""
    return _mark_node(svg, state, "current")


def _mark_node(svg: str, state: str, mark: str) -> str:
    found = re.search(f'class="node( [a-z ]+)?" data-state="{re.escape(_attr(state))}"', svg)
    if found is None:
        return svg
    classes = f'class="node{found.group(1) or ""} {mark}"'
    return svg[: found.start()] + classes + svg[found.start() + found.group(0).index(" data-") :]


def mark_states(svg: str, states: frozenset[str], name: str) -> str:
    """`svg` with the nodes of `states` given the class `name` as well."""
    for state in sorted(states):
        svg = _mark_node(svg, state, name)
    return svg


def _attr(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
