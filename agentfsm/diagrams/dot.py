"""Graphviz DOT from a diagram model, optionally with a run's path drawn on top.

Layout choices, made for a picture people review:

* left to right, active states in one cluster and terminal states (double border) in a
  column of their own at the right, a black dot for the start;
* a move that keeps the run in its state is listed *inside* the state's box, under a rule
  (UML's internal transitions), not drawn as a loop: Graphviz lays loop labels over each
  other, and the default table has four busy loops;
* labels are HTML-like text: events, the alternative's place and condition in italics
  (`2. [calls left]`, `3. else`), limit guards on a small grey line; the title carries a
  one-line legend;
* a state that waits for a person is amber, a paused one lilac, each saying so under its
  name.

Identifiers are the quoted state names, so any name is safe; pseudo-nodes get ids no state
uses.
"""

from __future__ import annotations

import re
import textwrap
from html import escape

from agentfsm.diagrams._model import (
    ANY_ACTIVE,
    DEFAULT_OPTIONS,
    ELSE,
    KIND_COLOURS,
    KIND_WORDS,
    DiagramModel,
    DiagramOptions,
    EdgeLabel,
    StateNode,
    marks_legend,
)
from agentfsm.diagrams._text import IdAllocator
from agentfsm.diagrams._trajectory import Overlay, Trajectory, format_sequences

__all__ = ["render_dot"]

_FONT = "Helvetica"
# Colours: blue-grey for the table, red for a run's path, grey for what the run did not use.
_INK = "#2f3e4e"
_ACTIVE_FILL = "#e3edf7"
_ACTIVE_LINE = "#3d5a80"
_TERMINAL_FILL = "#eeeeee"
_TERMINAL_LINE = "#4a4a4a"
_MUTED = "#6b7785"
_PATH = "#c0392b"
_PATH_FILL = "#fbe3e0"
_FADED = "#b9c0c8"
_GUARD = "#a15c00"


_PLAIN = re.compile(r"[A-Za-z0-9_. -]*\Z")


def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(attrs: list[str]) -> str:
    """An attribute list, or nothing when there are no attributes."""
    return f" [{', '.join(attrs)}]" if attrs else ""


def _h(text: str) -> str:
    """Text for an HTML-like label."""
    return escape(text, quote=True)


def render_dot(
    model: DiagramModel,
    trajectory: Trajectory | None = None,
    *,
    options: DiagramOptions = DEFAULT_OPTIONS,
) -> str:
    """The model as a Graphviz `digraph`, with `trajectory`'s path highlighted if given.

    Args:
        model: the diagram model (see `diagram_model`).
        trajectory: a recorded run's path (see `trajectory_from_events`), drawn in red on top.
        options: direction, state descriptions in the boxes, and resolution.
    """
    overlay = Overlay.build(model, trajectory) if trajectory is not None else None
    ids = IdAllocator(taken=[s.name for s in model.states])
    start = ids.fresh("__start__")
    any_active = ids.fresh("__any_active__")
    loops: dict[str, list[str]] = {}
    for i, edge in enumerate(model.edges):
        if edge.source is not None and edge.source == edge.target:
            loops[edge.source] = _label_lines(i, edge.labels, overlay, inside=True)

    out = [
        f"digraph {_q(model.name)} {{",
        f"  graph [label=<{_title(model, trajectory)}>, labelloc=t, fontname={_q(_FONT)},"
        f" fontcolor={_q(_INK)}, rankdir={options.direction}, nodesep=0.45, ranksep=0.9,"
        f" pad=0.3, bgcolor={_q('white')}{_dpi(options)}];",
        f"  node [shape=box, style={_q('rounded,filled')}, fontname={_q(_FONT)}, fontsize=13,"
        f" color={_q(_ACTIVE_LINE)}, fillcolor={_q(_ACTIVE_FILL)}, fontcolor={_q(_INK)},"
        f" penwidth=1.3, margin={_q('0.20,0.08')}];",
        f"  edge [fontname={_q(_FONT)}, fontsize=10, color={_q(_MUTED)},"
        f" fontcolor={_q(_INK)}, arrowsize=0.75, penwidth=1.1];",
        f"  {_q(start)} [shape=circle, style=filled, label={_q('')}, width=0.2, fixedsize=true,"
        f" color={_q(_INK)}, fillcolor={_q(_INK)}, tooltip={_q('start')}];",
        f"  subgraph {_q('cluster_active')} {{",
        f"    graph [label={_q('active')}, labeljust=l, style={_q('rounded,dashed')},"
        f" color={_q('#9fb3c8')}, fontcolor={_q(_MUTED)}, fontsize=12];",
    ]
    for state in model.active_states:
        node = _attrs(_node_attrs(state, loops.get(state.name), overlay, options))
        out.append(f"    {_q(state.name)}{node};")
    if model.has_any_active:
        ink = _FADED if overlay is not None and not overlay.extra else _MUTED
        out.append(
            f"    {_q(any_active)} [label={_q(ANY_ACTIVE)}, style={_q('rounded,dashed')},"
            f" fillcolor={_q('white')}, color={_q(ink)}, fontcolor={_q(ink)},"
            f" fontsize=11, tooltip={_q('stands for every non-terminal state')}];"
        )
    out += [
        "  }",
        f"  subgraph {_q('cluster_terminal')} {{",
        f"    graph [label={_q('terminal')}, labeljust=l, style={_q('rounded,dashed')},"
        f" color={_q('#b5b5b5')}, fontcolor={_q(_MUTED)}, fontsize=12];",
    ]
    terminal = model.terminal_states
    for state in terminal:
        out.append(f"    {_q(state.name)}{_attrs(_node_attrs(state, None, overlay, options))};")
    if len(terminal) > 1:
        # One column: the ends of a run read as one group at the right-hand side.
        out.append("    {rank=same; " + " ".join(_q(s.name) for s in terminal) + "}")
    out.append("  }")

    began = overlay is not None and bool(overlay.trajectory.steps)
    out.append(f"  {_q(start)} -> {_q(model.initial)}{_attrs(_edge_style(began, overlay))};")
    for i, edge in enumerate(model.edges):
        if edge.source is not None and edge.source == edge.target:
            continue  # drawn inside the state's box
        tail = any_active if edge.source is None else edge.source
        lines = _label_lines(i, edge.labels, overlay)
        taken = overlay is not None and overlay.edge_taken(i)
        attrs = [f"label=<{'<BR/>'.join(lines)}>", *_edge_style(taken, overlay)]
        if edge.source is None:
            attrs.append(f"style={_q('dashed')}")
        out.append(f"  {_q(tail)} -> {_q(edge.target)} [{', '.join(attrs)}];")
    if overlay is not None:
        out += _overlay_extras(overlay, ids)
    out.append("}")
    return "\n".join(out) + "\n"


def _title(model: DiagramModel, trajectory: Trajectory | None) -> str:
    title = model.name if trajectory is None else f"{model.name}: run '{trajectory.run_id}'"
    labels = [label for edge in model.edges for label in edge.labels]
    legend = []
    # Only the notations this picture uses: a legend that explains absent things is noise.
    if any(label.condition is not None and not label.timed for label in labels):
        legend.append("event [condition that picks the target]")
    legend += marks_legend(model)
    if any(label.guards for label in labels):
        legend.append("{limit guards checked} in amber")
    if any(edge.source is not None and edge.source == edge.target for edge in model.edges):
        legend.append("inside a box: moves that stay in that state")
    legend.append("double border: terminal")
    if model.has_any_active:
        legend.append(f"{ANY_ACTIVE}: every non-terminal state")
    if trajectory is not None:
        legend.append("red: the run's path (seq n: the event's sequence number)")
    return (
        f'<FONT POINT-SIZE="18"><B>{_h(title)}</B></FONT><BR/>'
        f'<FONT POINT-SIZE="10" COLOR="{_MUTED}">{_h("   ·   ".join(legend))}</FONT>'
    )


def _dpi(options: DiagramOptions) -> str:
    return f", dpi={options.dpi}" if options.dpi is not None else ""


def _node_attrs(
    state: StateNode, loop: list[str] | None, overlay: Overlay | None, options: DiagramOptions
) -> list[str]:
    attrs = []
    if state.terminal:
        attrs += [
            "peripheries=2",
            f"fillcolor={_q(_TERMINAL_FILL)}",
            f"color={_q(_TERMINAL_LINE)}",
        ]
    kind = KIND_COLOURS.get(state.kind)
    if kind is not None:
        attrs += [f"fillcolor={_q(kind[1])}", f"color={_q(kind[2])}"]
    final = overlay is not None and overlay.trajectory.final_state == state.name
    name = f"<B>{_h(state.name)}</B>" if final else _h(state.name)
    if kind is not None:
        # Under the name, in the kind's own ink: a reviewer sees who the run waits for.
        name += (
            f'<BR/><FONT POINT-SIZE="10" COLOR="{kind[2]}"><I>{KIND_WORDS[state.kind]}</I></FONT>'
        )

    if options.descriptions and state.description:
        # Under the name, small: reviewers read what a state means without hovering.
        lines = "<BR/>".join(_h(line) for line in textwrap.wrap(state.description, width=30))
        name += f'<BR/><FONT POINT-SIZE="9" COLOR="{_MUTED}">{lines}</FONT>'
    if loop:
        rows = "".join(f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{line}</TD></TR>' for line in loop)
        attrs.append(
            f'label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2">'
            f"<TR><TD>{name}</TD></TR><HR/>{rows}</TABLE>>"
        )
    elif (
        final
        or kind is not None
        or not _PLAIN.match(state.name)
        or (options.descriptions and state.description)
    ):
        # An HTML-like label shows any name verbatim; a plain one would read `&amp;` as `&`.
        attrs.append(f"label=<{name}>")
    if state.description:
        attrs.append(f"tooltip={_q(state.description)}")
    if overlay is not None:
        if overlay.state_visited(state.name):
            width = "3" if final else "2"
            attrs += [f"color={_q(_PATH)}", f"fillcolor={_q(_PATH_FILL)}", f"penwidth={width}"]
        else:
            attrs += [
                f"color={_q(_FADED)}",
                f"fontcolor={_q(_FADED)}",
                f"fillcolor={_q('white')}",
            ]
    return attrs


def _edge_style(taken: bool, overlay: Overlay | None) -> list[str]:
    if overlay is None:
        return []
    if taken:
        return [f"color={_q(_PATH)}", "penwidth=2.4", "arrowsize=0.9"]
    return [f"color={_q(_FADED)}", f"fontcolor={_q(_FADED)}"]


def _label_lines(
    index: int, labels: tuple[EdgeLabel, ...], overlay: Overlay | None, *, inside: bool = False
) -> list[str]:
    return [
        _label_html(label, overlay.label_sequences.get((index, j), ()) if overlay else None, inside)
        for j, label in enumerate(labels)
    ]


def _label_html(label: EdgeLabel, sequences: tuple[int, ...] | None, inside: bool) -> str:
    text = _h(" / ".join(label.events))
    if label.choice:
        place = f"{label.rank}. " if label.rank is not None else ""
        which = _h(label.condition_text) if label.condition_text is not None else ELSE
        text += f" {place}<I>{which}</I>"
    if sequences:
        seqs = _h(format_sequences(sequences))
        text = f'<FONT COLOR="{_PATH}"><B>{text}  {seqs}</B></FONT>'
    elif sequences is not None:  # drawing a run, which never took this move
        text = f'<FONT COLOR="{_FADED}">{text}</FONT>'
    if inside:
        text = f'<FONT POINT-SIZE="11">{text}</FONT>'
    if label.guards:
        # Amber, apart from the condition's italics: a limit that may stop the run, not a
        # choice between targets.
        guards = "{" + ", ".join(label.guards) + "}"
        text += f'<BR/><FONT POINT-SIZE="9" COLOR="{_GUARD}">{_h(guards)}</FONT>'
    return text


def _overlay_extras(overlay: Overlay, ids: IdAllocator) -> list[str]:
    out: list[str] = []
    for source, label, target, sequences in overlay.extra:
        label_attr = f"label=<{_label_html(label, sequences, False)}>"
        style = _attrs([label_attr, *_edge_style(True, overlay)])
        out.append(f"  {_q(source)} -> {_q(target)}{style};")
    traj = overlay.trajectory
    note = ids.fresh("__outcome__")
    lines = "".join(f'{_h(line)}<BR ALIGN="LEFT"/>' for line in _wrapped(traj.summary()))
    out.append(
        f"  {_q(note)} [shape=note, style=filled, fillcolor={_q('#fff8e1')}, color={_q(_PATH)},"
        f" fontcolor={_q(_INK)}, fontsize=11, label=<{lines}>];"
    )
    out.append(
        f"  {_q(traj.final_state)} -> {_q(note)} [style=dotted, arrowhead=none, color={_q(_PATH)}];"
    )
    refusal = traj.refusal
    if refusal is not None:
        refused = ids.fresh("__refused__")
        out.append(
            f"  {_q(refused)} [shape=octagon, style=filled, fillcolor={_q('white')},"
            f" color={_q(_PATH)}, fontcolor={_q(_PATH)}, penwidth=2,"
            f" label=<<B>{_h(refusal.title)}</B>>];"
        )
        out.append(
            f"  {_q(refusal.state)} -> {_q(refused)} [style=dashed, color={_q(_PATH)}, penwidth=2];"
        )
    return out


def _wrapped(lines: tuple[str, ...]) -> list[str]:
    # Long error messages would stretch the note across the picture; 60 columns keep it a note.
    out: list[str] = []
    for line in lines:
        out += textwrap.wrap(line, width=60, subsequent_indent="  ") or [""]
    return out
