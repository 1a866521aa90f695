"""A Markdown description of a table: its states, and one row per group of moves.

Rows follow the diagram model (edges by source and target, then labels), so the table reads
in the same order as the pictures; moves from `any active state` close the table. With a
run's trajectory, a third section lists the run's path step by step.
"""

from __future__ import annotations

import re

from agentfsm.diagrams.model import ANY_ACTIVE, DiagramModel
from agentfsm.diagrams.trajectory import Trajectory
from agentfsm.names import StateKind

__all__ = ["render_markdown"]

_BACKTICKS = re.compile(r"`+")
_PROSE = re.compile(r"([\\`*\[\]<>|]|(?<!\w)_|_(?!\w))")


def _code(text: str) -> str:
    """An inline code span of `text`, safe inside a table cell."""
    text = text.replace("\n", " ")
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    # GitHub splits table cells on `|` even inside code spans unless it is escaped.
    text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def _prose(text: str) -> str:
    """Plain text with Markdown's active characters escaped (`_` only at word edges)."""
    return _PROSE.sub(r"\\\1", text.replace("\n", " "))


# What a reader of the states table needs to know of a kind; `active` is the plain case.
_KIND_WORDS = {
    StateKind.ACTIVE: "",
    StateKind.IN_FLIGHT: "in flight",
    StateKind.WAITING: "waits for a person",
    StateKind.PAUSED: "paused",
    StateKind.TERMINAL: "terminal",
}


def render_markdown(model: DiagramModel, trajectory: Trajectory | None = None) -> str:
    """The model as Markdown: a states table, a transitions table, and the run's path if given.

    Args:
        model: the diagram model (see `diagram_model`).
        trajectory: a recorded run's path (see `trajectory_from_events`).
    """
    out = [
        f"# {_code(model.name)}: states and transitions",
        "",
        "Generated from the table by `agentfsm diagram --format markdown`; do not edit by hand.",
        "",
        "| state | kind | description |",
        "| --- | --- | --- |",
    ]
    for state in model.states:
        kind = ", ".join(
            k for k in ("initial" if state.initial else "", _KIND_WORDS[state.kind]) if k
        )
        out.append(f"| {_code(state.name)} | {kind} | {_prose(state.description)} |")
    out += [
        "",
        "| from | event | condition | to | limit guards |",
        "| --- | --- | --- | --- | --- |",
    ]
    for edge in model.edges:
        source = f"*{ANY_ACTIVE}*" if edge.source is None else _code(edge.source)
        for label in edge.labels:
            events = " / ".join(_code(e) for e in label.events)
            condition = "" if label.condition is None else _prose(label.condition)
            guards = ", ".join(_code(g) for g in label.guards)
            out.append(f"| {source} | {events} | {condition} | {_code(edge.target)} | {guards} |")
    if model.has_any_active:
        names = ", ".join(_code(s.name) for s in model.active_states)
        out += ["", f"*{ANY_ACTIVE}* stands for every non-terminal state: {names}."]
    if trajectory is not None:
        out += _path(trajectory)
    return "\n".join(out) + "\n"


def _path(trajectory: Trajectory) -> list[str]:
    out = [
        "",
        f"## The path of run {_code(trajectory.run_id)}",
        "",
        "| seq | event | from | condition | to |",
        "| --- | --- | --- | --- | --- |",
    ]
    for step in trajectory.steps:
        condition = "" if step.condition is None else _prose(step.condition)
        out.append(
            f"| {step.sequence} | {_code(step.event)} | {_code(step.source)} | {condition} |"
            f" {_code(step.target)} |"
        )
    out.append("")
    out += [f"- {_prose(line)}" for line in trajectory.summary()]
    return out
