"""Tables and helpers shared by the diagram tests (not collected: no `test_` prefix)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from datetime import timedelta

import pytest

from agentfsm.events.vocabulary import BUILTIN_EVENTS
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, State, Transition, TransitionTable


def _always(context: object, event: object) -> bool:
    return True


#: A small table whose every diagram is pinned exactly in the tests.
TINY = TransitionTable(
    name="tiny",
    event_types=BUILTIN_EVENTS.extend("job.start", "job.tick", "job.end", "job.crash"),
    states=[
        State("idle", description="nothing to do"),
        State("busy"),
        State("done", terminal=True),
        State("broken", terminal=True),
    ],
    initial="idle",
    transitions=[
        Transition("idle", "job.start", "busy", guards=("budget",)),
        Transition("busy", "job.tick", "busy"),
        Transition("busy", "job.end", "done", Condition("all good", _always)),
        Transition("busy", "job.end", "broken"),
        Transition("idle", "job.crash", "broken"),
        Transition("busy", "job.crash", "broken"),
    ],
)

#: A table with a state of each kind a diagram marks: one waiting for a person, one paused.
KINDS = TransitionTable(
    name="kinds",
    event_types=BUILTIN_EVENTS.extend("job.taken", "job.held"),
    states=[
        State("queued", kind="waiting", description="a person takes the job"),
        State("working"),
        State("on_hold", kind="paused"),
        State("done", terminal=True),
    ],
    initial="queued",
    transitions=[
        Transition("queued", "job.taken", "working"),
        Transition("working", "job.held", "on_hold"),
        Transition("on_hold", "run.resumed", "working"),
        Transition("working", "run.completed", "done"),
    ],
)

#: A table whose applicant has 7 days to send documents (a timeout), a reminder after a day
#: and a half (a second one, sooner: it falls due first), and a way on before either.
TIMED = TransitionTable(
    name="timed",
    event_types=BUILTIN_EVENTS.extend("docs.sent", "docs.reminded", "docs.expired"),
    states=[
        State("started"),
        State("asked", kind="waiting", description="the applicant sends documents"),
        State("reminded", kind="waiting"),
        State("done", terminal=True),
        State("expired", terminal=True),
    ],
    initial="started",
    transitions=[
        Transition("started", "run.completed", "asked"),
        Transition("asked", "docs.sent", "done"),
        Transition("asked", "docs.expired", "expired", after=timedelta(days=7)),
        Transition("asked", "docs.reminded", "reminded", after=timedelta(hours=36)),
        Transition("reminded", "docs.sent", "done"),
        Transition("reminded", "docs.expired", "expired", after=timedelta(days=5, minutes=30)),
    ],
)

_QUOTED = 'say "hi" <b>&amp;</b>'
_MARKUP = "__under__ --strike--"
_ACTIVE = ["start here", "end", "note", "x;y#z%%", _QUOTED, _MARKUP]

#: A table whose names are syntax in some format: keywords, `;`, `#`, `%%`, quotes, HTML,
#: creole markup, `|`. Every format must show them verbatim.
NASTY = TransitionTable(
    name="nasty table",
    event_types=BUILTIN_EVENTS.extend(
        "go;now #1", "ev.x", "ev.y", "e|v", "**bold** //it//", "stay\\n here", "fin", "kill"
    ),
    states=[
        *(State(n) for n in _ACTIVE),
        State("done", terminal=True),
        State("stop | now", terminal=True),
    ],
    initial="start here",
    transitions=[
        Transition("start here", "go;now #1", "end", guards=("g<1>",)),
        Transition("end", "ev.x", "note", Condition("c: 50% & <ok>", _always)),
        Transition("end", "ev.x", "x;y#z%%"),
        Transition("x;y#z%%", "ev.y", "done"),
        Transition("note", "e|v", _QUOTED),
        Transition(_QUOTED, "**bold** //it//", _MARKUP),
        Transition(_MARKUP, "stay\\n here", _MARKUP),
        Transition(_MARKUP, "fin", "done"),
        *(Transition(n, "kill", "stop | now") for n in _ACTIVE),
    ],
)

NASTY_NAMES = (
    *(s.name for s in NASTY.states),
    *NASTY.events,
    "c: 50% & <ok>",
    "g<1>",
)

DEFAULT = DEFAULT_TABLE


def require(available: bool, what: str, install: str) -> None:
    """Skip when a render tool is missing, except under `CI=true`, where it must be there."""
    if available:
        return
    message = f"{what} is not installed; install it with `{install}`"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: the render checks must run, not skip)")
    pytest.skip(message)


def require_dot() -> str:
    """The path of Graphviz `dot`, or skip/fail (see `require`)."""
    path = shutil.which("dot")
    require(path is not None, "Graphviz `dot`", "apt-get install graphviz")
    assert path is not None
    return path


def require_plantuml() -> str:
    """The path of `plantuml`, or skip/fail (see `require`)."""
    path = shutil.which("plantuml")
    require(path is not None, "PlantUML", "apt-get install plantuml")
    assert path is not None
    return path


def require_mermaidx() -> None:
    """Skip/fail unless the `mermaidx` Mermaid engine is importable (see `require`)."""
    found = importlib.util.find_spec("mermaidx") is not None
    require(
        found, "the Mermaid engine `mermaidx`", "pip install -e '.[dev]' (or pip install mermaidx)"
    )
