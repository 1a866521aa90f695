"""Diagrams for pages: Graphviz's SVG, cleaned to inert markup and marked for the page.

The SVG is drawn by `agentfsm.diagrams` (the same DOT every other picture comes from) and
then parsed and rebuilt from an allow-list before it is placed inline: only drawing
elements and attributes survive, so no element can run script or fetch anything, whatever a
log's run id or a table's description held (Graphviz escapes text, and this makes sure).
Each state's node gets `data-state="NAME"` so a page can find it (click it, mark the state a
step-through is at), and a step's state is marked here with the class `current`.
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET

from markupsafe import Markup

from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.errors import DiagramError
from agentfsm.diagrams.model import DiagramModel, diagram_model
from agentfsm.diagrams.svg import GRAPHVIZ_INSTALL, graphviz_available, render_svg
from agentfsm.diagrams.trajectory import Trajectory
from agentfsm.fsm.table import TransitionTable

__all__ = ["Diagram", "diagram_svg", "mark_current", "mark_states"]

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

    def __init__(self, svg: str | None, problem: str | None = None) -> None:
        self.svg = svg
        self.problem = problem

    def markup(self, current: str | None = None, also: frozenset[str] = frozenset()) -> Markup:
        """The SVG for a page, with the node of state `current` marked, and those of the
        states `also` given the class `also` (another run's path on the same picture)."""
        if self.svg is None:
            return Markup("")
        text = self.svg if current is None else mark_current(self.svg, current)
        if also:
            text = mark_states(text, also, "also")
        return Markup(text)  # noqa: S704 - rebuilt from the allow-list above


def diagram_svg(table: TransitionTable, trajectory: Trajectory | None = None) -> Diagram:
    """The table's diagram (with a run's path on it), as a cleaned inline SVG."""
    if not graphviz_available():
        return Diagram(None, f"Graphviz `dot` is not installed ({GRAPHVIZ_INSTALL})")
    if trajectory is None:
        return _table_svg(table)
    return _draw(diagram_model(table), trajectory)


@functools.lru_cache(maxsize=32)
def _table_svg(table: TransitionTable) -> Diagram:
    return _draw(diagram_model(table), None)


def _draw(model: DiagramModel, trajectory: Trajectory | None) -> Diagram:
    try:
        raw = render_svg(render_dot(model, trajectory))
    except DiagramError as exc:
        return Diagram(None, str(exc))
    return Diagram(clean(raw, {s.name for s in model.states}))


def clean(raw: str, states: set[str]) -> str:
    """Graphviz SVG rebuilt from the allow-list, each state's node tagged `data-state`."""
    root = ET.fromstring(raw[raw.index("<svg") :])  # noqa: S314 - Graphviz's output, no DTD
    _prune(root)
    for group in root.iter(f"{{{_SVG}}}g"):
        if group.get("class") != "node":
            continue
        title = group.find(f"{{{_SVG}}}title")
        if title is not None and title.text in states:
            group.set("data-state", title.text)
    root.set("class", "diagram")
    root.set("role", "img")
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


def mark_current(svg: str, state: str) -> str:
    """`svg` with the node of `state` given the class `current` (a string edit: the SVG was
    written by `clean`, whose attribute order is fixed)."""
    quoted = _attr(state)
    return svg.replace(
        f'class="node" data-state="{quoted}"', f'class="node current" data-state="{quoted}"', 1
    )


def mark_states(svg: str, states: frozenset[str], name: str) -> str:
    """`svg` with the nodes of `states` given the class `name` as well (each one's
    `class="node..."` attribute, as `clean` wrote it, edited in place)."""
    for state in sorted(states):
        quoted = _attr(state)
        for before in ("node", "node current"):
            old = f'class="{before}" data-state="{quoted}"'
            if old in svg:
                svg = svg.replace(old, f'class="{before} {name}" data-state="{quoted}"', 1)
                break
    return svg


def _attr(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
