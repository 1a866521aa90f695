"""One entry point for every format: `render_diagram(table, "mermaid")`."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.markdown import render_markdown
from agentfsm.diagrams.mermaid import render_mermaid
from agentfsm.diagrams.model import DiagramModel, diagram_model
from agentfsm.diagrams.plantuml import render_plantuml
from agentfsm.diagrams.svg import render_png, render_svg
from agentfsm.diagrams.trajectory import Trajectory
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = ["DiagramFormat", "render_diagram", "render_diagram_png"]


class DiagramFormat(StrEnum):
    """The formats `render_diagram` produces (PNG: `render_diagram_png`)."""

    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"
    PLANTUML = "plantuml"
    MARKDOWN = "markdown"


_Renderer = Callable[[DiagramModel, Trajectory | None], str]


def _svg(model: DiagramModel, trajectory: Trajectory | None) -> str:
    return render_svg(render_dot(model, trajectory))


_RENDERERS: dict[DiagramFormat, _Renderer] = {
    DiagramFormat.MERMAID: render_mermaid,
    DiagramFormat.DOT: render_dot,
    DiagramFormat.SVG: _svg,
    DiagramFormat.PLANTUML: render_plantuml,
    DiagramFormat.MARKDOWN: render_markdown,
}


def render_diagram(
    table: TransitionTable = DEFAULT_TABLE,
    format: DiagramFormat | str = DiagramFormat.MERMAID,
    *,
    trajectory: Trajectory | None = None,
    collapse: bool = True,
) -> str:
    """The diagram of `table` in `format`, with `trajectory`'s path drawn on top if given.

    Args:
        table: the table to draw.
        format: one of `DiagramFormat` (or its value, e.g. `"dot"`).
        trajectory: a recorded run's path (see `trajectory_from_events`).
        collapse: draw moves that leave every active state once, from `any active state`.

    Raises:
        ValueError: an unknown format.
        ToolMissingError: `svg` was asked for and Graphviz `dot` is not installed.
    """
    try:
        fmt = DiagramFormat(format)
    except ValueError:
        known = ", ".join(f"'{f}'" for f in DiagramFormat)
        hint = " (PNG is bytes: use render_diagram_png)" if format == "png" else ""
        raise ValueError(
            f"unknown diagram format '{format}'; expected one of {known}{hint}"
        ) from None
    return _RENDERERS[fmt](diagram_model(table, collapse=collapse), trajectory)


def render_diagram_png(
    table: TransitionTable = DEFAULT_TABLE,
    *,
    trajectory: Trajectory | None = None,
    collapse: bool = True,
) -> bytes:
    """The diagram of `table` as a PNG drawn by Graphviz (see `render_diagram`).

    Raises:
        ToolMissingError: Graphviz `dot` is not installed.
    """
    return render_png(render_dot(diagram_model(table, collapse=collapse), trajectory))
