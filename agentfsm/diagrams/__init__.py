"""Diagrams generated from a transition table, and a recorded run's path drawn on top.

Extract a plain model from any table (`diagram_model`), then render it with a pure function
per format (`render_mermaid`, `render_dot`, `render_plantuml`, `render_markdown`) or by name
(`render_diagram(table, "mermaid")`). SVG and PNG are drawn by the real Graphviz `dot`.
`check_diagrams` / `write_diagrams` keep a directory of committed diagrams fresh.
"""

from agentfsm.diagrams._model import (
    ANY_ACTIVE,
    DEFAULT_OPTIONS,
    DiagramModel,
    DiagramOptions,
    Edge,
    EdgeLabel,
    StateNode,
    diagram_model,
)
from agentfsm.diagrams._trajectory import (
    Overlay,
    Refusal,
    Step,
    Trajectory,
    format_sequences,
    trajectory_from_events,
    trajectory_from_jsonl,
)
from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.files import (
    DIAGRAM_SUFFIXES,
    StaleFile,
    check_diagrams,
    diagram_stem,
    dot_digest,
    picture_digest,
    write_diagrams,
)
from agentfsm.diagrams.markdown import render_markdown
from agentfsm.diagrams.mermaid import render_mermaid
from agentfsm.diagrams.plantuml import render_plantuml
from agentfsm.diagrams.render import DiagramFormat, render_diagram, render_diagram_png
from agentfsm.diagrams.svg import GRAPHVIZ_INSTALL, graphviz_available, render_png, render_svg
from agentfsm.errors import DiagramError, RenderError, RunNotInLogError, ToolMissingError

__all__ = [
    "ANY_ACTIVE",
    "DEFAULT_OPTIONS",
    "DIAGRAM_SUFFIXES",
    "GRAPHVIZ_INSTALL",
    "DiagramError",
    "DiagramFormat",
    "DiagramModel",
    "DiagramOptions",
    "Edge",
    "EdgeLabel",
    "Overlay",
    "Refusal",
    "RenderError",
    "RunNotInLogError",
    "StaleFile",
    "StateNode",
    "Step",
    "ToolMissingError",
    "Trajectory",
    "check_diagrams",
    "diagram_model",
    "diagram_stem",
    "dot_digest",
    "format_sequences",
    "graphviz_available",
    "picture_digest",
    "render_diagram",
    "render_diagram_png",
    "render_dot",
    "render_markdown",
    "render_mermaid",
    "render_plantuml",
    "render_png",
    "render_svg",
    "trajectory_from_events",
    "trajectory_from_jsonl",
    "write_diagrams",
]
