"""Exact output of every text format, for a small table: the whole text is pinned."""

from __future__ import annotations

import pytest

from agentfsm.diagrams import (
    diagram_model,
    render_diagram,
    render_dot,
    render_markdown,
    render_mermaid,
    render_plantuml,
)
from tests._diagram_tables import TINY

TINY_MERMAID = """\
---
title: "tiny"
---
stateDiagram-v2
  direction LR
  classDef terminal fill:#eeeeee,stroke:#4a4a4a,stroke-width:3px
  classDef anyActive fill:#ffffff,stroke:#6b7785,stroke-dasharray:4 3,color:#6b7785
  state "busy" as busy
  state "any active state" as any_active
  [*] --> idle
  idle --> busy : job.start {budget}
  busy : job.tick
  busy --> done : job.end [all good]
  busy --> broken : job.end
  any_active --> broken : job.crash
  done --> [*]
  broken --> [*]
  class done, broken terminal
  class any_active anyActive
"""

TINY_PLANTUML = """\
@startuml
title tiny
hide empty description
left to right direction
skinparam shadowing false
skinparam state {
  BackgroundColor #e3edf7
  BorderColor #3d5a80
  FontColor #2f3e4e
  ArrowColor #6b7785
  ArrowFontColor #2f3e4e
  BackgroundColor<<terminal>> #eeeeee
  BorderColor<<terminal>> #4a4a4a
  BackgroundColor<<anyActive>> #ffffff
  BorderColor<<anyActive>> #6b7785
  FontColor<<anyActive>> #6b7785
}
state idle
state busy
state done <<terminal>>
state broken <<terminal>>
state "any active state" as any_active <<anyActive>>
[*] --> idle
idle --> busy : job.start {budget}
busy : job.tick
busy --> done : job.end [all good]
busy --> broken : job.end
any_active -[dashed]-> broken : job.crash
done --> [*]
broken --> [*]
@enduml
"""

TINY_MARKDOWN = """\
# `tiny`: states and transitions

Generated from the table by `agentfsm diagram --format markdown`; do not edit by hand.

| state | kind | description |
| --- | --- | --- |
| `idle` | initial | nothing to do |
| `busy` |  |  |
| `done` | terminal |  |
| `broken` | terminal |  |

| from | event | condition | to | limit guards |
| --- | --- | --- | --- | --- |
| `idle` | `job.start` |  | `busy` | `budget` |
| `busy` | `job.tick` |  | `busy` |  |
| `busy` | `job.end` | all good | `done` |  |
| `busy` | `job.end` |  | `broken` |  |
| *any active state* | `job.crash` |  | `broken` |  |

*any active state* stands for every non-terminal state: `idle`, `busy`.
"""

TINY_DOT = """\
digraph "tiny" {
  graph [label=<<FONT POINT-SIZE="18"><B>tiny</B></FONT><BR/><FONT POINT-SIZE="10" COLOR="#6b7785">event [condition that picks the target]   ·   {limit guards checked} in amber   ·   inside a box: moves that stay in that state   ·   double border: terminal   ·   any active state: every non-terminal state</FONT>>, labelloc=t, fontname="Helvetica", fontcolor="#2f3e4e", rankdir=LR, nodesep=0.45, ranksep=0.9, pad=0.3, bgcolor="white"];
  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=13, color="#3d5a80", fillcolor="#e3edf7", fontcolor="#2f3e4e", penwidth=1.3, margin="0.20,0.08"];
  edge [fontname="Helvetica", fontsize=10, color="#6b7785", fontcolor="#2f3e4e", arrowsize=0.75, penwidth=1.1];
  "__start__" [shape=circle, style=filled, label="", width=0.2, fixedsize=true, color="#2f3e4e", fillcolor="#2f3e4e", tooltip="start"];
  subgraph "cluster_active" {
    graph [label="active", labeljust=l, style="rounded,dashed", color="#9fb3c8", fontcolor="#6b7785", fontsize=12];
    "idle" [label=<idle<BR/><FONT POINT-SIZE="9" COLOR="#6b7785">nothing to do</FONT>>, tooltip="nothing to do"];
    "busy" [label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2"><TR><TD>busy</TD></TR><HR/><TR><TD ALIGN="LEFT" BALIGN="LEFT"><FONT POINT-SIZE="11">job.tick</FONT></TD></TR></TABLE>>];
    "__any_active__" [label="any active state", style="rounded,dashed", fillcolor="white", color="#6b7785", fontcolor="#6b7785", fontsize=11, tooltip="stands for every non-terminal state"];
  }
  subgraph "cluster_terminal" {
    graph [label="terminal", labeljust=l, style="rounded,dashed", color="#b5b5b5", fontcolor="#6b7785", fontsize=12];
    "done" [peripheries=2, fillcolor="#eeeeee", color="#4a4a4a"];
    "broken" [peripheries=2, fillcolor="#eeeeee", color="#4a4a4a"];
    {rank=same; "done" "broken"}
  }
  "__start__" -> "idle";
  "idle" -> "busy" [label=<job.start<BR/><FONT POINT-SIZE="9" COLOR="#a15c00">{budget}</FONT>>];
  "busy" -> "done" [label=<job.end <I>[all good]</I>>];
  "busy" -> "broken" [label=<job.end>];
  "__any_active__" -> "broken" [label=<job.crash>, style="dashed"];
}
"""


class TestPinnedOutput:
    def test_mermaid(self) -> None:
        """Mermaid: start marker, loop inside the box, any-active pseudo-state, end markers."""
        assert render_mermaid(diagram_model(TINY)) == TINY_MERMAID

    def test_plantuml(self) -> None:
        """PlantUML: the same structure, terminal stereotypes, dashed any-active arrows."""
        assert render_plantuml(diagram_model(TINY)) == TINY_PLANTUML

    def test_markdown(self) -> None:
        """Markdown: a states table, a transitions table, and what any-active stands for."""
        assert render_markdown(diagram_model(TINY)) == TINY_MARKDOWN

    def test_dot(self) -> None:
        """DOT: clusters, a legend of the notations used, loops inside the box."""
        assert render_dot(diagram_model(TINY)) == TINY_DOT

    def test_render_diagram_dispatches_by_name(self) -> None:
        """`render_diagram(table, name)` gives the same text as the renderer itself."""
        assert render_diagram(TINY, "plantuml") == TINY_PLANTUML

    def test_an_unknown_format_names_the_known_ones(self) -> None:
        """A wrong format name is a ValueError listing the formats (and where PNG is)."""
        with pytest.raises(ValueError, match=r"^unknown diagram format") as info:
            render_diagram(TINY, "png")
        assert str(info.value) == (
            "unknown diagram format 'png'; expected one of 'mermaid', 'dot', 'svg', 'plantuml',"
            " 'markdown' (PNG is bytes: use render_diagram_png)"
        )
