"""A Markdown description of a table: its states, and one row per group of moves.

Rows go state by state in the order the table tries them (each group of moves by its first
transition), so the alternatives of one state and event read top down as they are tried,
numbered (`1. batch resolved`, `2. calls left`, `3. else`); moves from `any active state`
close the table. The states table says each state's kind in words (`waits for a person`).
With a run's trajectory, a third section lists the run's path step by step.
"""

from __future__ import annotations

import re

from agentfsm.diagrams._model import ANY_ACTIVE, ELSE, KIND_WORDS, DiagramModel, EdgeLabel
from agentfsm.diagrams._trajectory import Trajectory
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
    **KIND_WORDS,
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
    rows = [(edge.source, label, edge.target) for edge in model.edges for label in edge.labels]
    # State by state, each group of moves where the table declares it first: the edges of a
    # state and event come in the order they are tried (the sort keeps the model's order of
    # states, and `any active state` last).
    where = {name: i for i, name in enumerate(dict.fromkeys(s for s, _, _ in rows))}
    rows.sort(key=lambda row: (where[row[0]], row[1].order))
    for source, label, target in rows:
        shown = f"*{ANY_ACTIVE}*" if source is None else _code(source)
        events = " / ".join(_code(e) for e in label.events)
        guards = ", ".join(_code(g) for g in label.guards)
        out.append(f"| {shown} | {events} | {_choice(label)} | {_code(target)} | {guards} |")
    if any(label.rank is not None for _, label, _ in rows):
        out += [
            "",
            f"A numbered condition is one of several for its state and event, tried in that "
            f"order; *{ELSE}* is the one without a condition, tried last.",
        ]
    if any(label.timed for _, label, _ in rows):
        out += [
            "",
            "A condition *after …* is a timeout: the move is taken once a run has stood in "
            "its state that long.",
        ]
    if model.has_any_active:
        names = ", ".join(_code(s.name) for s in model.active_states)
        out += ["", f"*{ANY_ACTIVE}* stands for every non-terminal state: {names}."]
    if trajectory is not None:
        out += _path(trajectory)
    return "\n".join(out) + "\n"


def _choice(label: EdgeLabel) -> str:
    """The condition cell: `retry`, `2. calls left`, `3. *else*`, `after 7 d`, or empty."""
    condition = _prose(label.condition) if label.condition is not None else None
    if label.rank is None:
        return condition or ""
    return f"{label.rank}. {condition or f'*{ELSE}*'}"


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
