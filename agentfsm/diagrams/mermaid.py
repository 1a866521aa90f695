"""Mermaid `stateDiagram-v2` from a diagram model, optionally with a run's path on top.

Mermaid reads a state id as a bare word and a label as the rest of its line, so: states whose
names are not plain identifiers get an id and a display name (`state "needs review" as
needs_review`); text is entity-encoded where Mermaid would otherwise read it as syntax
(`;` ends a statement, `#` starts an entity, `%%` a comment, `<` HTML, `**` Markdown).
Terminal states get
the `terminal` class *and* an arrow to `[*]`, the end marker every Mermaid reader knows. A
state that waits for a person, or is paused, says so under its name and has a class of its
own (`waitingKind`, `pausedKind`); a note by the initial state is the legend.

Mermaid cannot style a single transition of a state diagram, so a run's path is shown by
state classes (visited, not visited, final) and by the event sequences written on the labels
of the moves the run took.
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

__all__ = ["render_mermaid"]

# Words Mermaid's state-diagram grammar claims for itself; a state with such a name gets
# another id (and its name as display text).
_RESERVED = (
    "as",
    "class",
    "classDef",
    "click",
    "default",
    "direction",
    "end",
    "hide",
    "left",
    "note",
    "of",
    "right",
    "scale",
    "state",
    "style",
    "accTitle",
    "accDescr",
)

_ENTITIES = {
    "#": "#35;",
    ";": "#59;",
    "%": "#37;",
    "<": "#60;",
    ">": "#62;",
    '"': "#34;",
    "&": "#38;",
    "\\": "#92;",
    # Mermaid 11 reads Markdown in labels: `**bold**`, `` `code` ``, `~~strike~~`.
    "*": "#42;",
    "`": "#96;",
    "~": "#126;",
    "\n": " ",
    "\r": " ",
}
# `_` emphasises only at a word's edge; inside a word (`waiting_tool`) it stays readable.
_SYNTAX = re.compile("|".join(re.escape(c) for c in _ENTITIES) + r"|(?<!\w)_|_(?!\w)")

_CLASSES = (
    "classDef terminal fill:#eeeeee,stroke:#4a4a4a,stroke-width:3px",
    "classDef anyActive fill:#ffffff,stroke:#6b7785,stroke-dasharray:4 3,color:#6b7785",
)
# The class of each marked kind (its colours: `KIND_COLOURS`).
_KIND_CLASSES = {StateKind.WAITING: "waitingKind", StateKind.PAUSED: "pausedKind"}
_PATH_CLASSES = (
    "classDef visited fill:#fbe3e0,stroke:#c0392b,stroke-width:2px",
    "classDef final fill:#fbe3e0,stroke:#c0392b,stroke-width:4px,font-weight:bold",
    "classDef unvisited fill:#ffffff,stroke:#b9c0c8,color:#9aa3ad",
    "classDef refused fill:#ffffff,stroke:#c0392b,stroke-width:2px,color:#c0392b",
)


def _text(text: str) -> str:
    """Text as Mermaid shows it verbatim (entity-encoded where it would be syntax)."""
    return _SYNTAX.sub(lambda m: _ENTITIES.get(m.group(0), "#95;"), text)


def render_mermaid(
    model: DiagramModel,
    trajectory: Trajectory | None = None,
    *,
    options: DiagramOptions = DEFAULT_OPTIONS,
) -> str:
    """The model as Mermaid `stateDiagram-v2` text, with `trajectory`'s path if given.

    Args:
        model: the diagram model (see `diagram_model`).
        trajectory: a recorded run's path (see `trajectory_from_events`).
        options: the direction (Mermaid lays states out itself and has no resolution).
    """
    overlay = Overlay.build(model, trajectory) if trajectory is not None else None
    ids = IdAllocator(reserved=_RESERVED)
    for state in model.states:
        ids(state.name)
    any_active = ids.fresh("any_active")

    title = model.name if trajectory is None else f"{model.name}: run '{trajectory.run_id}'"
    out = [
        "---",
        f"title: {_yaml(title)}",
        "---",
        "stateDiagram-v2",
        f"  direction {options.direction}",
    ]
    out += [f"  {c}" for c in _CLASSES]
    out += [
        f"  classDef {_KIND_CLASSES[kind]} fill:{fill},stroke:{line},stroke-width:2px"
        for kind, (_, fill, line) in KIND_COLOURS.items()
        if any(s.kind == kind for s in model.states)
    ]
    if overlay is not None:
        out += [f"  {c}" for c in _PATH_CLASSES]
    looping = {e.source for e in model.edges if e.source is not None and e.source == e.target}
    for state in model.states:
        # Mermaid titles a state that has descriptions with its first description, so a
        # state that lists moves inside its box declares its name as that first line; one
        # whose kind a reader must see says it on a line under its name.
        marked = KIND_WORDS.get(state.kind)
        if marked is not None:
            out.append(f'  state "{_text(state.name)}<br>{marked}" as {ids(state.name)}')
        elif not ids.is_plain(state.name) or state.name in looping:
            out.append(f'  state "{_text(state.name)}" as {ids(state.name)}')
    if model.has_any_active:
        out.append(f'  state "{ANY_ACTIVE}" as {any_active}')

    out.append(f"  [*] --> {ids(model.initial)}")
    for i, edge in enumerate(model.edges):
        source = any_active if edge.source is None else ids(edge.source)
        lines = [
            _label(label, overlay.label_sequences.get((i, j), ()) if overlay else ())
            for j, label in enumerate(edge.labels)
        ]
        if edge.source == edge.target:
            # A move that stays put is listed inside the state's box (UML's internal
            # transitions): dagre piles loop labels onto the neighbouring edges.
            out += [f"  {source} : {line}" for line in lines]
        else:
            out.append(f"  {source} --> {ids(edge.target)} : {'<br>'.join(lines)}")
    if overlay is not None:
        for src, label, target, sequences in overlay.extra:
            out.append(f"  {ids(src)} --> {ids(target)} : {_label(label, sequences)}")
    for state in model.terminal_states:
        out.append(f"  {ids(state.name)} --> [*]")

    out += _legend(model, ids)
    if overlay is not None:
        out += _overlay_notes(overlay, ids)
    out += _class_lines(model, overlay, ids, any_active)
    return "\n".join(out) + "\n"


def _legend(model: DiagramModel, ids: IdAllocator) -> list[str]:
    """A note by the initial state naming the marks this picture uses (none: no note)."""
    entries = marks_legend(model)
    if not entries:
        return []
    return [f"  note left of {ids(model.initial)}", *(f"    {e}" for e in entries), "  end note"]


def _yaml(text: str) -> str:
    # A double-quoted YAML scalar: the title may hold ':' or quotes.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(label: EdgeLabel, sequences: tuple[int, ...]) -> str:
    return _text(sequenced(label.text, sequences))


def _overlay_notes(overlay: Overlay, ids: IdAllocator) -> list[str]:
    traj = overlay.trajectory
    out = [f"  note right of {ids(traj.final_state)}"]
    out += [f"    {_text(line)}" for line in traj.summary()]
    out.append("  end note")
    if traj.refusal is not None:
        refused = ids.fresh("refused")
        out.append(f'  state "{_text(traj.refusal.title)}" as {refused}')
        out.append(f"  {ids(traj.refusal.state)} --> {refused} : {_text('✖')}")
        out.append(f"  class {refused} refused")
    return out


def _class_lines(
    model: DiagramModel, overlay: Overlay | None, ids: IdAllocator, any_active: str
) -> list[str]:
    classes: dict[str, list[str]] = {}
    for state in model.states:
        if overlay is None:
            if state.terminal:
                classes.setdefault("terminal", []).append(ids(state.name))
            elif state.kind in _KIND_CLASSES:
                classes.setdefault(_KIND_CLASSES[state.kind], []).append(ids(state.name))
            continue
        if overlay.trajectory.final_state == state.name:
            name = "final"
        elif overlay.state_visited(state.name):
            name = "visited"
        else:
            name = "unvisited"
        classes.setdefault(name, []).append(ids(state.name))
    if model.has_any_active:
        used = overlay is None or bool(overlay.extra)
        classes.setdefault("anyActive" if used else "unvisited", []).append(any_active)
    return [f"  class {', '.join(members)} {name}" for name, members in classes.items()]
