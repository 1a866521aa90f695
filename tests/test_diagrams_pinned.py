"""Exact output of every text format, for three small tables: the whole text is pinned.

`TINY` has a state and event with two alternatives, numbered in the order they are tried
(`1. [all good]`, `2. else`); `KINDS` a state that waits for a person and a paused one, each
marked, with a legend; `TIMED` timeouts (`after 7 d`), with a legend.
"""

from __future__ import annotations

import re

import pytest

from agentfsm.diagrams import (
    diagram_model,
    render_diagram,
    render_dot,
    render_markdown,
    render_mermaid,
    render_plantuml,
)
from tests._diagram_tables import KINDS, TIMED, TINY, require_dot
from tests.fixtures.loan import LOAN_TABLE

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
  busy --> done : job.end 1. [all good]
  busy --> broken : job.end 2. else
  any_active --> broken : job.crash
  done --> [*]
  broken --> [*]
  note left of idle
    1. 2. …: the order a state's alternatives are tried (else: last)
  end note
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
  BackgroundColor<<waiting>> #fff4d6
  BorderColor<<waiting>> #b7791f
  BackgroundColor<<paused>> #efe7f7
  BorderColor<<paused>> #6b4f9c
}
state idle
idle : //nothing to do//
state busy
state done <<terminal>>
state broken <<terminal>>
state "any active state" as any_active <<anyActive>>
[*] --> idle
idle --> busy : job.start {budget}
busy : job.tick
busy --> done : job.end 1. [all good]
busy --> broken : job.end 2. else
any_active -[dashed]-> broken : job.crash
done --> [*]
broken --> [*]
legend right
1. 2. …: the order a state's alternatives are tried (else: last)
endlegend
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
| `busy` | `job.end` | 1. all good | `done` |  |
| `busy` | `job.end` | 2. *else* | `broken` |  |
| *any active state* | `job.crash` |  | `broken` |  |

A numbered condition is one of several for its state and event, tried in that order; *else* is the one without a condition, tried last.

*any active state* stands for every non-terminal state: `idle`, `busy`.
"""

TINY_DOT = """\
digraph "tiny" {
  graph [label=<<FONT POINT-SIZE="18"><B>tiny</B></FONT><BR/><FONT POINT-SIZE="10" COLOR="#6b7785">event [condition that picks the target]   ·   1. 2. …: the order a state&#x27;s alternatives are tried (else: last)   ·   {limit guards checked} in amber   ·   inside a box: moves that stay in that state   ·   double border: terminal   ·   any active state: every non-terminal state</FONT>>, labelloc=t, fontname="Helvetica", fontcolor="#2f3e4e", rankdir=LR, nodesep=0.45, ranksep=0.9, pad=0.3, bgcolor="white"];
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
  "busy" -> "done" [label=<job.end 1. <I>[all good]</I>>];
  "busy" -> "broken" [label=<job.end 2. <I>else</I>>];
  "__any_active__" -> "broken" [label=<job.crash>, style="dashed"];
}
"""


KINDS_MERMAID = """\
---
title: "kinds"
---
stateDiagram-v2
  direction LR
  classDef terminal fill:#eeeeee,stroke:#4a4a4a,stroke-width:3px
  classDef anyActive fill:#ffffff,stroke:#6b7785,stroke-dasharray:4 3,color:#6b7785
  classDef waitingKind fill:#fff4d6,stroke:#b7791f,stroke-width:2px
  classDef pausedKind fill:#efe7f7,stroke:#6b4f9c,stroke-width:2px
  state "queued<br>waits for a person" as queued
  state "on_hold<br>waits to be resumed" as on_hold
  [*] --> queued
  queued --> working : job.taken
  working --> on_hold : job.held
  working --> done : run.completed
  on_hold --> working : run.resumed
  done --> [*]
  note left of queued
    amber: waits for a person
    lilac: waits to be resumed
  end note
  class queued waitingKind
  class on_hold pausedKind
  class done terminal
"""

KINDS_PLANTUML = """\
@startuml
title kinds
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
  BackgroundColor<<waiting>> #fff4d6
  BorderColor<<waiting>> #b7791f
  BackgroundColor<<paused>> #efe7f7
  BorderColor<<paused>> #6b4f9c
}
state queued <<waiting>>
queued : //a person takes the job//
queued : **waits for a person**
state working
state on_hold <<paused>>
on_hold : **waits to be resumed**
state done <<terminal>>
[*] --> queued
queued --> working : job.taken
working --> on_hold : job.held
working --> done : run.completed
on_hold --> working : run.resumed
done --> [*]
legend right
amber: waits for a person
lilac: waits to be resumed
endlegend
@enduml
"""

KINDS_MARKDOWN = """\
# `kinds`: states and transitions

Generated from the table by `agentfsm diagram --format markdown`; do not edit by hand.

| state | kind | description |
| --- | --- | --- |
| `queued` | initial, waits for a person | a person takes the job |
| `working` |  |  |
| `on_hold` | waits to be resumed |  |
| `done` | terminal |  |

| from | event | condition | to | limit guards |
| --- | --- | --- | --- | --- |
| `queued` | `job.taken` |  | `working` |  |
| `working` | `job.held` |  | `on_hold` |  |
| `working` | `run.completed` |  | `done` |  |
| `on_hold` | `run.resumed` |  | `working` |  |
"""

KINDS_DOT = """\
digraph "kinds" {
  graph [label=<<FONT POINT-SIZE="18"><B>kinds</B></FONT><BR/><FONT POINT-SIZE="10" COLOR="#6b7785">amber: waits for a person   ·   lilac: waits to be resumed   ·   double border: terminal</FONT>>, labelloc=t, fontname="Helvetica", fontcolor="#2f3e4e", rankdir=LR, nodesep=0.45, ranksep=0.9, pad=0.3, bgcolor="white"];
  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=13, color="#3d5a80", fillcolor="#e3edf7", fontcolor="#2f3e4e", penwidth=1.3, margin="0.20,0.08"];
  edge [fontname="Helvetica", fontsize=10, color="#6b7785", fontcolor="#2f3e4e", arrowsize=0.75, penwidth=1.1];
  "__start__" [shape=circle, style=filled, label="", width=0.2, fixedsize=true, color="#2f3e4e", fillcolor="#2f3e4e", tooltip="start"];
  subgraph "cluster_active" {
    graph [label="active", labeljust=l, style="rounded,dashed", color="#9fb3c8", fontcolor="#6b7785", fontsize=12];
    "queued" [fillcolor="#fff4d6", color="#b7791f", label=<queued<BR/><FONT POINT-SIZE="10" COLOR="#b7791f"><I>waits for a person</I></FONT><BR/><FONT POINT-SIZE="9" COLOR="#6b7785">a person takes the job</FONT>>, tooltip="a person takes the job"];
    "working";
    "on_hold" [fillcolor="#efe7f7", color="#6b4f9c", label=<on_hold<BR/><FONT POINT-SIZE="10" COLOR="#6b4f9c"><I>waits to be resumed</I></FONT>>];
  }
  subgraph "cluster_terminal" {
    graph [label="terminal", labeljust=l, style="rounded,dashed", color="#b5b5b5", fontcolor="#6b7785", fontsize=12];
    "done" [peripheries=2, fillcolor="#eeeeee", color="#4a4a4a"];
  }
  "__start__" -> "queued";
  "queued" -> "working" [label=<job.taken>];
  "working" -> "on_hold" [label=<job.held>];
  "working" -> "done" [label=<run.completed>];
  "on_hold" -> "working" [label=<run.resumed>];
}
"""


TIMED_MERMAID = """\
---
title: "timed"
---
stateDiagram-v2
  direction LR
  classDef terminal fill:#eeeeee,stroke:#4a4a4a,stroke-width:3px
  classDef anyActive fill:#ffffff,stroke:#6b7785,stroke-dasharray:4 3,color:#6b7785
  classDef waitingKind fill:#fff4d6,stroke:#b7791f,stroke-width:2px
  state "asked<br>waits for a person" as asked
  state "reminded<br>waits for a person" as reminded
  [*] --> started
  started --> asked : run.completed
  asked --> done : docs.sent
  asked --> expired : docs.expired after 7 d
  asked --> reminded : docs.reminded after 1 d 12 h
  reminded --> done : docs.sent
  reminded --> expired : docs.expired after 5 d 30 min
  done --> [*]
  expired --> [*]
  note left of started
    after …: a timeout, taken once a run has stood in its state that long
    amber: waits for a person
  end note
  class asked, reminded waitingKind
  class done, expired terminal
"""

TIMED_PLANTUML = """\
@startuml
title timed
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
  BackgroundColor<<waiting>> #fff4d6
  BorderColor<<waiting>> #b7791f
  BackgroundColor<<paused>> #efe7f7
  BorderColor<<paused>> #6b4f9c
}
state started
state asked <<waiting>>
asked : //the applicant sends documents//
asked : **waits for a person**
state reminded <<waiting>>
reminded : **waits for a person**
state done <<terminal>>
state expired <<terminal>>
[*] --> started
started --> asked : run.completed
asked --> done : docs.sent
asked --> expired : docs.expired after 7 d
asked --> reminded : docs.reminded after 1 d 12 h
reminded --> done : docs.sent
reminded --> expired : docs.expired after 5 d 30 min
done --> [*]
expired --> [*]
legend right
after …: a timeout, taken once a run has stood in its state that long
amber: waits for a person
endlegend
@enduml
"""

TIMED_MARKDOWN = """\
# `timed`: states and transitions

Generated from the table by `agentfsm diagram --format markdown`; do not edit by hand.

| state | kind | description |
| --- | --- | --- |
| `started` | initial |  |
| `asked` | waits for a person | the applicant sends documents |
| `reminded` | waits for a person |  |
| `done` | terminal |  |
| `expired` | terminal |  |

| from | event | condition | to | limit guards |
| --- | --- | --- | --- | --- |
| `started` | `run.completed` |  | `asked` |  |
| `asked` | `docs.sent` |  | `done` |  |
| `asked` | `docs.expired` | after 7 d | `expired` |  |
| `asked` | `docs.reminded` | after 1 d 12 h | `reminded` |  |
| `reminded` | `docs.sent` |  | `done` |  |
| `reminded` | `docs.expired` | after 5 d 30 min | `expired` |  |

A condition *after …* is a timeout: the move is taken once a run has stood in its state that long.
"""

TIMED_DOT = """\
digraph "timed" {
  graph [label=<<FONT POINT-SIZE="18"><B>timed</B></FONT><BR/><FONT POINT-SIZE="10" COLOR="#6b7785">after …: a timeout, taken once a run has stood in its state that long   ·   amber: waits for a person   ·   double border: terminal</FONT>>, labelloc=t, fontname="Helvetica", fontcolor="#2f3e4e", rankdir=LR, nodesep=0.45, ranksep=0.9, pad=0.3, bgcolor="white"];
  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=13, color="#3d5a80", fillcolor="#e3edf7", fontcolor="#2f3e4e", penwidth=1.3, margin="0.20,0.08"];
  edge [fontname="Helvetica", fontsize=10, color="#6b7785", fontcolor="#2f3e4e", arrowsize=0.75, penwidth=1.1];
  "__start__" [shape=circle, style=filled, label="", width=0.2, fixedsize=true, color="#2f3e4e", fillcolor="#2f3e4e", tooltip="start"];
  subgraph "cluster_active" {
    graph [label="active", labeljust=l, style="rounded,dashed", color="#9fb3c8", fontcolor="#6b7785", fontsize=12];
    "started";
    "asked" [fillcolor="#fff4d6", color="#b7791f", label=<asked<BR/><FONT POINT-SIZE="10" COLOR="#b7791f"><I>waits for a person</I></FONT><BR/><FONT POINT-SIZE="9" COLOR="#6b7785">the applicant sends documents</FONT>>, tooltip="the applicant sends documents"];
    "reminded" [fillcolor="#fff4d6", color="#b7791f", label=<reminded<BR/><FONT POINT-SIZE="10" COLOR="#b7791f"><I>waits for a person</I></FONT>>];
  }
  subgraph "cluster_terminal" {
    graph [label="terminal", labeljust=l, style="rounded,dashed", color="#b5b5b5", fontcolor="#6b7785", fontsize=12];
    "done" [peripheries=2, fillcolor="#eeeeee", color="#4a4a4a"];
    "expired" [peripheries=2, fillcolor="#eeeeee", color="#4a4a4a"];
    {rank=same; "done" "expired"}
  }
  "__start__" -> "started";
  "started" -> "asked" [label=<run.completed>];
  "asked" -> "done" [label=<docs.sent>];
  "asked" -> "expired" [label=<docs.expired <I>after 7 d</I>>];
  "asked" -> "reminded" [label=<docs.reminded <I>after 1 d 12 h</I>>];
  "reminded" -> "done" [label=<docs.sent>];
  "reminded" -> "expired" [label=<docs.expired <I>after 5 d 30 min</I>>];
}
"""


class TestPinnedOutput:
    def test_mermaid(self) -> None:
        """Mermaid: start marker, loop inside the box, any-active pseudo-state, end markers,
        alternatives numbered, a legend note."""
        assert render_mermaid(diagram_model(TINY)) == TINY_MERMAID

    def test_plantuml(self) -> None:
        """PlantUML: the same structure, terminal stereotypes, dashed any-active arrows,
        the state's description in its box, a legend."""
        assert render_plantuml(diagram_model(TINY)) == TINY_PLANTUML

    def test_markdown(self) -> None:
        """Markdown: a states table, a transitions table in the order moves are tried, what
        the numbers mean and what any-active stands for."""
        assert render_markdown(diagram_model(TINY)) == TINY_MARKDOWN

    def test_dot(self) -> None:
        """DOT: clusters, a legend of the notations used, loops inside the box."""
        assert render_dot(diagram_model(TINY)) == TINY_DOT

    @pytest.mark.parametrize(
        ("render", "expected"),
        [
            (render_mermaid, KINDS_MERMAID),
            (render_plantuml, KINDS_PLANTUML),
            (render_markdown, KINDS_MARKDOWN),
            (render_dot, KINDS_DOT),
        ],
        ids=["mermaid", "plantuml", "markdown", "dot"],
    )
    def test_the_kinds_a_reader_must_see(self, render: object, expected: str) -> None:
        """Each format marks the waiting and the paused state, in words and colour, and
        says so in its legend (Markdown: in the kind column)."""
        assert render(diagram_model(KINDS)) == expected  # type: ignore[operator]

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


class TestTimeouts:
    """Every format says a timeout's wait where a condition would be, without brackets
    (`docs.expired after 7 d`), and what it means in its legend (issue 26, item 3)."""

    @pytest.mark.parametrize(
        ("render", "expected"),
        [
            (render_mermaid, TIMED_MERMAID),
            (render_plantuml, TIMED_PLANTUML),
            (render_markdown, TIMED_MARKDOWN),
            (render_dot, TIMED_DOT),
        ],
        ids=["mermaid", "plantuml", "markdown", "dot"],
    )
    def test_each_format(self, render: object, expected: str) -> None:
        """The whole text, pinned."""
        assert render(diagram_model(TIMED)) == expected  # type: ignore[operator]

    def test_the_svg_says_it(self) -> None:
        """The picture Graphviz draws writes the wait on the edge."""
        require_dot()
        svg = render_diagram(TIMED, "svg")
        assert "docs.expired after 7 d" in " ".join(
            re.sub(r"<[^>]+>", " ", svg).split()
        )

    @pytest.mark.parametrize(
        ("name", "line"),
        [
            ("mermaid", "  documents_requested --> declined : loan.documents_expired after 7 d"),
            ("plantuml", "documents_requested --> declined : loan.documents_expired after 7 d"),
            (
                "markdown",
                "| `documents_requested` | `loan.documents_expired` | after 7 d | `declined` |  |",
            ),
            (
                "dot",
                '  "documents_requested" -> "declined" '
                "[label=<loan.documents_expired <I>after 7 d</I>>];",
            ),
        ],
    )
    def test_the_loan_table(self, name: str, line: str) -> None:
        """The loan's documents expire after 7 d, on every format."""
        assert line in render_diagram(LOAN_TABLE, name).splitlines()
