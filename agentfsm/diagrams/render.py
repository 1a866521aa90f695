"""One entry point for every format: `render_diagram(table, "mermaid")`."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from agentfsm.diagrams._model import DEFAULT_OPTIONS, DiagramModel, DiagramOptions, diagram_model
from agentfsm.diagrams._trajectory import Trajectory
from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.markdown import render_markdown
from agentfsm.diagrams.mermaid import render_mermaid
from agentfsm.diagrams.plantuml import render_plantuml
from agentfsm.diagrams.svg import render_png, render_svg
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


_Renderer = Callable[[DiagramModel, Trajectory | None, DiagramOptions], str]


def _svg(model: DiagramModel, trajectory: Trajectory | None, options: DiagramOptions) -> str:
    return render_svg(render_dot(model, trajectory, options=options))


def _mermaid(model: DiagramModel, trajectory: Trajectory | None, options: DiagramOptions) -> str:
    return render_mermaid(model, trajectory, options=options)


def _dot(model: DiagramModel, trajectory: Trajectory | None, options: DiagramOptions) -> str:
    return render_dot(model, trajectory, options=options)


def _plantuml(model: DiagramModel, trajectory: Trajectory | None, options: DiagramOptions) -> str:
    return render_plantuml(model, trajectory, options=options)


def _markdown(model: DiagramModel, trajectory: Trajectory | None, options: DiagramOptions) -> str:
    return render_markdown(model, trajectory)  # a table has no layout to choose


_RENDERERS: dict[DiagramFormat, _Renderer] = {
    DiagramFormat.MERMAID: _mermaid,
    DiagramFormat.DOT: _dot,
    DiagramFormat.SVG: _svg,
    DiagramFormat.PLANTUML: _plantuml,
    DiagramFormat.MARKDOWN: _markdown,
}


def render_diagram(
    table: TransitionTable = DEFAULT_TABLE,
    format: DiagramFormat | str = DiagramFormat.MERMAID,
    *,
    trajectory: Trajectory | None = None,
    collapse: bool = True,
    options: DiagramOptions = DEFAULT_OPTIONS,
) -> str:
    """The diagram of `table` in `format`, with `trajectory`'s path drawn on top if given.

    Args:
        table: the table to draw.
        format: one of `DiagramFormat` (or its value, e.g. `"dot"`).
        trajectory: a recorded run's path (see `trajectory_from_events`).
        collapse: draw moves that leave every active state once, from `any active state`.
        options: direction, state descriptions and resolution (`DiagramOptions`).

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
    return _RENDERERS[fmt](diagram_model(table, collapse=collapse), trajectory, options)


def render_diagram_png(
    table: TransitionTable = DEFAULT_TABLE,
    *,
    trajectory: Trajectory | None = None,
    collapse: bool = True,
    options: DiagramOptions = DEFAULT_OPTIONS,
) -> bytes:
    """The diagram of `table` as a PNG drawn by Graphviz (see `render_diagram`).

    Raises:
        ToolMissingError: Graphviz `dot` is not installed.
    """
    model = diagram_model(table, collapse=collapse)
    return render_png(render_dot(model, trajectory, options=options))
