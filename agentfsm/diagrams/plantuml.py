"""PlantUML state-diagram text from a diagram model, optionally with a run's path on top.

PlantUML reads creole markup (`**bold**`, `__underline__`, `[[links]]`) and tags (`<b>`) in
every label, so text is escaped before it goes in: `~` before a doubled marker, `<U+003C>`
for `<`, `<U+0022>` for a quote, `\\\\` for a backslash. Terminal states get the `terminal`
stereotype and an arrow to `[*]`; moves that stay in their state are listed inside its box,
under the state's description (in italics: `//...//`, which escaped text cannot spell) and,
for a state that waits for a person or is paused, its kind in bold (and the `waiting` or
`paused` stereotype's colours). A `legend` names the notations the picture uses.
"""

from __future__ import annotations

import re

from agentfsm.diagrams._model import (
    ANY_ACTIVE,
    DEFAULT_OPTIONS,
    KIND_COLOURS,
    KIND_WORDS,
    DiagramModel,
    DiagramOptions,
    EdgeLabel,
    marks_legend,
)
from agentfsm.diagrams._text import IdAllocator
from agentfsm.diagrams._trajectory import Overlay, Trajectory, sequenced
from agentfsm.names import StateKind

__all__ = ["render_plantuml"]

_RESERVED = (
    "as",
    "bottom",
    "end",
    "endif",
    "footer",
    "header",
    "hide",
    "left",
    "legend",
    "note",
    "of",
    "over",
    "right",
    "scale",
    "show",
    "skinparam",
    "state",
    "title",
    "top",
)

_MARKUP = re.compile(r"(\*\*|//|--|__|~~|\^\^|==|\"\"|\[\[)")
_PATH = "#c0392b"
_NEWLINE = "\\n"  # PlantUML's line break inside a label: a backslash and an n

_SKIN = (
    "skinparam shadowing false",
    "skinparam state {",
    "  BackgroundColor #e3edf7",
    "  BorderColor #3d5a80",
    "  FontColor #2f3e4e",
    "  ArrowColor #6b7785",
    "  ArrowFontColor #2f3e4e",
    "  BackgroundColor<<terminal>> #eeeeee",
    "  BorderColor<<terminal>> #4a4a4a",
    "  BackgroundColor<<anyActive>> #ffffff",
    "  BorderColor<<anyActive>> #6b7785",
    "  FontColor<<anyActive>> #6b7785",
)
# The stereotype of each marked kind (its colours: `KIND_COLOURS`).
_KINDS = {StateKind.WAITING: "waiting", StateKind.PAUSED: "paused"}
_KIND_SKIN = tuple(
    f"  {part}Color<<{_KINDS[kind]}>> {colour}"
    for kind, (_, fill, line) in KIND_COLOURS.items()
    for part, colour in (("Background", fill), ("Border", line))
)
_PATH_SKIN = (
    "  BackgroundColor<<visited>> #fbe3e0",
    f"  BorderColor<<visited>> {_PATH}",
    "  BackgroundColor<<final>> #fbe3e0",
    f"  BorderColor<<final>> {_PATH}",
    "  BackgroundColor<<unvisited>> #ffffff",
    "  BorderColor<<unvisited>> #b9c0c8",
    "  FontColor<<unvisited>> #9aa3ad",
    "  BackgroundColor<<refused>> #ffffff",
    f"  BorderColor<<refused>> {_PATH}",
    f"  FontColor<<refused>> {_PATH}",
)


def _text(text: str) -> str:
    """Text as PlantUML shows it verbatim."""
    text = text.replace("\\", "\\\\").replace("\n", " ").replace("\r", " ")
    text = text.replace("<", "<U+003C>").replace('"', "<U+0022>")
    return _MARKUP.sub(lambda m: "~" + m.group(0), text)


def render_plantuml(
    model: DiagramModel,
    trajectory: Trajectory | None = None,
    *,
    options: DiagramOptions = DEFAULT_OPTIONS,
) -> str:
    """The model as a PlantUML state diagram, with `trajectory`'s path if given.

    Args:
        model: the diagram model (see `diagram_model`).
        trajectory: a recorded run's path (see `trajectory_from_events`), drawn in red on top.
        options: the direction (`TB` is PlantUML's own default).
    """
    overlay = Overlay.build(model, trajectory) if trajectory is not None else None
    ids = IdAllocator(reserved=_RESERVED)
    for state in model.states:
        ids(state.name)
    any_active = ids.fresh("any_active")

    title = model.name if trajectory is None else f"{model.name}: run '{trajectory.run_id}'"
    out = ["@startuml", f"title {_text(title)}", "hide empty description"]
    if options.direction == "LR":
        out.append("left to right direction")
    out += _SKIN
    out += _KIND_SKIN
    if overlay is not None:
        out += _PATH_SKIN
    out.append("}")
    for state in model.states:
        stereotype = _stereotype(state.name, state.terminal, state.kind, overlay)
        name = "" if ids.is_plain(state.name) else f'"{_text(state.name)}" as '
        out.append(f"state {name}{ids(state.name)}{stereotype}")
        # What the state is, before the moves its box lists.
        if options.descriptions and state.description:
            out.append(f"{ids(state.name)} : //{_text(state.description)}//")
        if state.kind in KIND_WORDS:
            out.append(f"{ids(state.name)} : **{KIND_WORDS[state.kind]}**")
    if model.has_any_active:
        used = overlay is None or bool(overlay.extra)
        kind = "anyActive" if used else "unvisited"
        out.append(f'state "{ANY_ACTIVE}" as {any_active} <<{kind}>>')

    started = overlay is not None and bool(overlay.trajectory.steps)
    out.append(f"[*] {_arrow(started, overlay)} {ids(model.initial)}")
    for i, edge in enumerate(model.edges):
        lines = [
            _label(label, overlay.label_sequences.get((i, j), ()) if overlay else ())
            for j, label in enumerate(edge.labels)
        ]
        if edge.source is not None and edge.source == edge.target:
            out += [f"{ids(edge.source)} : {line}" for line in lines]
            continue
        source = any_active if edge.source is None else ids(edge.source)
        taken = overlay is not None and overlay.edge_taken(i)
        arrow = _arrow(taken, overlay, dashed=edge.source is None)
        out.append(f"{source} {arrow} {ids(edge.target)} : {_NEWLINE.join(lines)}")
    if overlay is not None:
        for src, label, target, sequences in overlay.extra:
            arrow = _arrow(True, overlay)
            out.append(f"{ids(src)} {arrow} {ids(target)} : {_label(label, sequences)}")
    for state in model.terminal_states:
        out.append(f"{ids(state.name)} --> [*]")
    if overlay is not None:
        out += _overlay_notes(overlay, ids)
    out += _legend(model)
    out.append("@enduml")
    return "\n".join(out) + "\n"


def _legend(model: DiagramModel) -> list[str]:
    """The marks this picture uses, in a `legend` block (none: no block)."""
    entries = marks_legend(model)
    return ["legend right", *entries, "endlegend"] if entries else []


def _stereotype(name: str, terminal: bool, kind: StateKind, overlay: Overlay | None) -> str:
    if overlay is None:
        if terminal:
            return " <<terminal>>"
        return f" <<{_KINDS[kind]}>>" if kind in _KINDS else ""
    if overlay.trajectory.final_state == name:
        return " <<final>>"
    return " <<visited>>" if overlay.state_visited(name) else " <<unvisited>>"


def _arrow(taken: bool, overlay: Overlay | None, *, dashed: bool = False) -> str:
    if overlay is not None and taken:
        return f"-[{_PATH},bold]->"
    if overlay is not None:
        return "-[#b9c0c8,dashed]->" if dashed else "-[#b9c0c8]->"
    return "-[dashed]->" if dashed else "-->"


def _label(label: EdgeLabel, sequences: tuple[int, ...]) -> str:
    return _text(sequenced(label.text, sequences))


def _overlay_notes(overlay: Overlay, ids: IdAllocator) -> list[str]:
    traj = overlay.trajectory
    out = [f"note right of {ids(traj.final_state)}"]
    out += [f"  {_text(line)}" for line in traj.summary()]
    out.append("end note")
    if traj.refusal is not None:
        refused = ids.fresh("refused")
        out.append(f'state "{_text(traj.refusal.title)}" as {refused} <<refused>>')
        out.append(f"{ids(traj.refusal.state)} -[{_PATH},dashed]-> {refused}")
    return out
