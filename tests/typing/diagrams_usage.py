"""Typed usage of the diagram API: mypy strict must accept this file as written."""

from __future__ import annotations

from pathlib import Path

from agentfsm import DEFAULT_TABLE
from agentfsm.cli import main
from agentfsm.diagrams import (
    DiagramFormat,
    DiagramModel,
    Edge,
    StaleFile,
    Step,
    Trajectory,
    check_diagrams,
    diagram_model,
    render_diagram,
    render_dot,
    render_mermaid,
    trajectory_from_jsonl,
)

model: DiagramModel = diagram_model(DEFAULT_TABLE, collapse=False)
edges: tuple[Edge, ...] = model.edges
mermaid: str = render_mermaid(model)
path: Trajectory = trajectory_from_jsonl(['{"run_id": "r", "sequence": 1}'])
steps: tuple[Step, ...] = path.steps
dot: str = render_dot(model, path)
markdown: str = render_diagram(DEFAULT_TABLE, DiagramFormat.MARKDOWN, trajectory=path)
stale: list[StaleFile] = check_diagrams(Path("diagrams"))
status: int = main(["diagram", "--check"])
