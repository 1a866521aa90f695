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
import hashlib
import html
import re
import sys
import xml.etree.ElementTree as ET

import attrs
from markupsafe import Markup

from agentfsm.diagrams._model import DiagramModel, Edge, diagram_model
from agentfsm.diagrams._trajectory import Overlay, Trajectory
from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.svg import GRAPHVIZ_INSTALL, graphviz_available, render_svg
from agentfsm.errors import DiagramError
from agentfsm.fsm.table import TransitionTable
from agentfsm.ui._pool import SizedCache

__all__ = [
    "RUN_DIAGRAMS",
    "Diagram",
    "diagram_bytes",
    "diagram_svg",
    "mark_current",
    "mark_states",
    "path_model",
    "run_diagram",
]

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


def diagram_bytes(diagram: Diagram) -> int:
    """What a drawn diagram holds in memory (its SVG text, as Python keeps it)."""
    return 256 + sys.getsizeof(diagram.svg or diagram.problem or "")


#: Run diagrams drawn, by (table digest, view, digest of the DOT source): Graphviz takes
#: ~30-40 ms a picture, and the runs people open often share a path (every run of a batch
#: that went the same way), so a path is drawn once whichever run it is (see `run_diagram`).
#: Bounded by the bytes of their SVG (~20-40 KiB each) as well as by count.
RUN_DIAGRAMS: SizedCache[tuple[str, bool, str], Diagram] = SizedCache(
    512, 16 * 2**20, diagram_bytes
)


def run_diagram(
    table: TransitionTable, trajectory: Trajectory, *, path_only: bool,
    drawn: SizedCache[tuple[str, bool, str], Diagram] = RUN_DIAGRAMS,
) -> tuple[Diagram, tuple[str, bool, str] | None]:  # fmt: skip
    """A run's picture for its page, as `diagram_svg` draws it but with the run called "this
    run" (its page's heading names it), and drawn once per (table, view, path), with the key
    it is kept under in `drawn` (None: no Graphviz). The picture is a function of its DOT
    source, so two runs that went the same way share one drawing, and a run that moved on
    (a new step, a new note) has a new source and a new drawing."""
    if not graphviz_available():
        return Diagram(None, f"Graphviz `dot` is not installed ({GRAPHVIZ_INSTALL})"), None
    model = _model(table)
    small = path_model(model, trajectory) if path_only else model
    dot = _this_run(render_dot(small, trajectory), model.name, trajectory.run_id)
    key = (table.digest, path_only, hashlib.sha256(dot.encode()).hexdigest())
    found = drawn.get(key)
    if found is None:
        found = _draw_dot(dot, {s.name for s in small.states})
        found.hidden = len(model.states) - len(small.states)
        drawn.put(key, found)
    return found, key


def _this_run(dot: str, table_name: str, run_id: str) -> str:
    """`dot` with the run's own id out of the picture's title and outcome note (the two
    places `render_dot` writes it): "this run". A run id the note wraps (a very long one) is
    left where it is: that picture is then drawn for that run alone, which is still right."""
    named = html.escape(f"run '{run_id}'", quote=True)
    table = html.escape(f"{table_name}: ", quote=True)
    dot = dot.replace(f"<B>{table}{named}</B>", f"<B>{table}this run</B>", 1)
    return dot.replace(f"label=<{named} ", "label=<this run ", 1)


@functools.lru_cache(maxsize=32)
def _model(table: TransitionTable) -> DiagramModel:
    return diagram_model(table)


@functools.lru_cache(maxsize=32)
def _table_svg(table: TransitionTable) -> Diagram:
    return _draw(diagram_model(table), None)


def _draw(model: DiagramModel, trajectory: Trajectory | None) -> Diagram:
    return _draw_dot(render_dot(model, trajectory), {s.name for s in model.states})


def _draw_dot(dot: str, states: set[str]) -> Diagram:
    try:
        raw = render_svg(dot)
    except DiagramError as exc:
        return Diagram(None, str(exc))
    return Diagram(clean(raw, states), shown=len(states))


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
