"""Readers of the diagram texts, for the property test: text back to states and moves.

They read only what the renderers write (a line-oriented subset of each language), so they
are small; the real engines are exercised by test_diagrams_render.py. Each returns the
states, the terminal states, the initial state, the set of moves
`(source, event, target, condition, guards, rank)` (`rank`: the alternative's number, None
for the only one), with `any active state` expanded to every non-terminal state, and the
states marked by kind, `(state, words)`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

import attrs

from agentfsm.diagrams import ANY_ACTIVE
from agentfsm.diagrams._model import KIND_WORDS

_MARKED = frozenset(KIND_WORDS.values())

Move = tuple[str, str, str, str | None, tuple[str, ...], int | None]

_LABEL = re.compile(
    r"(?P<events>.+?)(?: (?P<rank>\d+)\.)?"
    r"(?: \[(?P<cond>[^\]]*)\]| (?P<otherwise>else)| (?P<after>after \d[^{]*?))?"
    r"(?: \{(?P<guards>[^}]*)\})?"
)


@attrs.frozen
class Parsed:
    """What a diagram text says about a table."""

    states: frozenset[str]
    terminal: frozenset[str]
    initial: str
    moves: frozenset[Move]
    kinds: frozenset[tuple[str, str]] = frozenset()


def _label_moves(source: str, target: str, text: str) -> list[Move]:
    m = _LABEL.fullmatch(text)
    assert m is not None, text
    assert (m["rank"] is None) <= (m["otherwise"] is None), text  # `else` only numbered
    guards = tuple(g for g in (m["guards"] or "").split(", ") if g)
    rank = int(m["rank"]) if m["rank"] else None
    # A timeout says its wait where a condition goes, without brackets: its condition's name.
    cond = m["cond"] if m["after"] is None else m["after"]
    return [(source, e, target, cond, guards, rank) for e in m["events"].split(" / ")]


def _expand(
    raw: Iterable[tuple[str | None, str, str]],
    states: set[str],
    terminal: set[str],
    initial: str,
    kinds: Iterable[tuple[str, str]] = (),
) -> Parsed:
    """`raw` holds (source or None for any-active, target, label text)."""
    active = sorted(states - terminal)
    moves: set[Move] = set()
    for source, target, text in raw:
        for src in active if source is None else [source]:
            moves.update(_label_moves(src, target, text))
    return Parsed(
        frozenset(states), frozenset(terminal), initial, frozenset(moves), frozenset(kinds)
    )


# -- Mermaid ------------------------------------------------------------------------------


def _mermaid_text(text: str) -> str:
    return re.sub(r"#(\d+);", lambda m: chr(int(m[1])), text)


def parse_mermaid(text: str) -> Parsed:
    """Read `render_mermaid` output."""
    names: dict[str, str] = {}
    kinds: set[tuple[str, str]] = set()
    any_id = None
    for alias, ident in re.findall(r'^  state "(.*)" as (\S+)$', text, re.M):
        if alias == ANY_ACTIVE:
            any_id = ident
        else:
            name, _, words = alias.partition("<br>")
            names[ident] = _mermaid_text(name)
            if words:
                kinds.add((names[ident], words))

    def name(ident: str) -> str:
        return names.get(ident, ident)

    states: set[str] = set(names.values())
    terminal: set[str] = set()
    initial = ""
    raw: list[tuple[str | None, str, str]] = []
    notes = False
    for line in text.splitlines():
        if re.fullmatch(r"  note (left|right) of \S+", line) or line == "  end note":
            notes = not notes
        elif notes:
            continue  # the legend, or a run's outcome
        elif m := re.fullmatch(r"  \[\*\] --> (\S+)", line):
            initial = name(m[1])
        elif m := re.fullmatch(r"  (\S+) --> \[\*\]", line):
            terminal.add(name(m[1]))
        elif m := re.fullmatch(r"  (\S+) --> (\S+) : (.*)", line):
            source = None if m[1] == any_id else name(m[1])
            for label in m[3].split("<br>"):
                raw.append((source, name(m[2]), _mermaid_text(label)))
        elif (m := re.fullmatch(r"  (\S+) : (.*)", line)) and m[1] not in ("title",):
            raw.append((name(m[1]), name(m[1]), _mermaid_text(m[2])))
    for source, target, _ in raw:
        states.update(s for s in (source, target) if s is not None)
    states.add(initial)
    return _expand(raw, states, terminal, initial, kinds)


# -- PlantUML -----------------------------------------------------------------------------


def _plantuml_text(text: str) -> str:
    text = re.sub(r"<U\+([0-9A-F]{4})>", lambda m: chr(int(m[1], 16)), text)
    return text.replace("~", "").replace("\\\\", "\\")


def parse_plantuml(text: str) -> Parsed:
    """Read `render_plantuml` output."""
    names: dict[str, str] = {}
    terminal: set[str] = set()
    any_id = None
    for line in text.splitlines():
        m = re.fullmatch(r'state (?:"(.*)" as )?(\S+)(?: <<(\w+)>>)?', line)
        if m is None:
            continue
        if m[1] == ANY_ACTIVE:
            any_id = m[2]
            continue
        names[m[2]] = _plantuml_text(m[1]) if m[1] is not None else m[2]
        if m[3] == "terminal":
            terminal.add(names[m[2]])
    initial = ""
    raw: list[tuple[str | None, str, str]] = []
    kinds: set[tuple[str, str]] = set()
    legend = False
    for line in text.splitlines():
        if line in ("legend right", "endlegend"):
            legend = not legend
        elif legend:
            continue
        elif m := re.fullmatch(r"(\S+) : //.*//", line):
            continue  # the state's description
        elif m := re.fullmatch(r"(\S+) : \*\*(.*)\*\*", line):
            kinds.add((names[m[1]], m[2]))
        elif m := re.fullmatch(r"\[\*\] --> (\S+)", line):
            initial = names[m[1]]
        elif re.fullmatch(r"(\S+) --> \[\*\]", line):
            continue
        elif m := re.fullmatch(r"(\S+) -(?:-|\[dashed\]-)> (\S+) : (.*)", line):
            source = None if m[1] == any_id else names[m[1]]
            for label in m[3].split("\\n"):
                raw.append((source, names[m[2]], _plantuml_text(label)))
        elif m := re.fullmatch(r"(\S+) : (.*)", line):
            raw.append((names[m[1]], names[m[1]], _plantuml_text(m[2])))
    return _expand(raw, set(names.values()), terminal, initial, kinds)


# -- DOT ----------------------------------------------------------------------------------


def _html_lines(label: str) -> list[str]:
    """An HTML-like label's text lines; a `{guards}` line joins the line before it."""
    lines: list[str] = []
    for part in label.split("<BR/>"):
        line = html.unescape(re.sub(r"<[^>]*>", "", part))
        if line.startswith("{") and lines:
            lines[-1] += " " + line
        else:
            lines.append(line)
    return lines


def _dot_id(quoted: str) -> str:
    return quoted.replace('\\"', '"').replace("\\\\", "\\")


def parse_dot(text: str) -> Parsed:
    """Read `render_dot` output (without a run on it)."""
    states: set[str] = set()
    terminal: set[str] = set()
    start = any_id = None
    cluster = ""
    raw: list[tuple[str | None, str, str]] = []
    kinds: set[tuple[str, str]] = set()
    node = re.compile(r'    "((?:[^"\\]|\\.)*)"(?: \[(.*)\])?;')
    edge = re.compile(r'  "((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)"(?: \[(.*)\])?;')
    for line in text.splitlines():
        if m := re.fullmatch(r'  subgraph "(cluster_\w+)" \{', line):
            cluster = m[1]
        elif m := node.fullmatch(line):
            ident, attrs_text = _dot_id(m[1]), m[2] or ""
            if f'label="{ANY_ACTIVE}"' in attrs_text:
                any_id = ident
                continue
            states.add(ident)
            if cluster == "cluster_terminal":
                terminal.add(ident)
            if kind := re.search(
                r'<FONT POINT-SIZE="10" COLOR="[^"]*"><I>(.*?)</I></FONT>', attrs_text
            ):
                kinds.add((ident, kind[1]))
            if loop := re.search(r"<HR/>(.*)</TABLE>", attrs_text):
                for row in re.findall(r"<TR><TD[^>]*>(.*?)</TD></TR>", loop[1]):
                    raw.extend((ident, ident, t) for t in _html_lines(row))
        elif m := re.fullmatch(r'  "((?:[^"\\]|\\.)*)" \[shape=circle.*', line):
            start = _dot_id(m[1])
        elif m := edge.fullmatch(line):
            source, target, attrs_text = _dot_id(m[1]), _dot_id(m[2]), m[3] or ""
            if source == start:
                initial = target
                continue
            label = re.fullmatch(r"label=<(.*)>(?:, style=\"dashed\")?", attrs_text)
            assert label is not None, line
            tail = None if source == any_id else source
            raw.extend((tail, target, t) for t in _html_lines(label[1]))
    return _expand(raw, states, terminal, initial, kinds)


# -- Markdown -----------------------------------------------------------------------------


def _md_cell(cell: str) -> str:
    cell = cell.strip()
    if cell.startswith("`"):
        return cell.strip("`").strip().replace("\\|", "|")
    return re.sub(r"\\(.)", r"\1", cell)


def parse_markdown(text: str) -> Parsed:
    """Read `render_markdown` output (without a run on it)."""
    states: set[str] = set()
    terminal: set[str] = set()
    initial = ""
    raw: list[tuple[str | None, str, str]] = []
    kinds: set[tuple[str, str]] = set()
    section = ""
    for line in text.splitlines():
        if line.startswith("| state |"):
            section = "states"
        elif line.startswith("| from |"):
            section = "moves"
        elif line.startswith("| ---") or not line.startswith("| "):
            continue
        elif section == "states":
            name, kind, _ = (_md_cell(c) for c in line[2:-2].split(" | "))
            states.add(name)
            words = [w for w in kind.split(", ") if w]
            if "terminal" in words:
                terminal.add(name)
            if "initial" in words:
                initial = name
            kinds.update((name, w) for w in words if w in _MARKED)
        else:
            source, events, condition, target, guards = line[2:-2].split(" | ")
            label = " / ".join(_md_cell(e) for e in events.split(" / "))
            if m := re.fullmatch(r"(\d+)\. \*else\*", condition.strip()):
                label += f" {m[1]}. else"
            elif m := re.fullmatch(r"(\d+)\. (.*)", condition.strip()):
                label += f" {m[1]}. [{_md_cell(m[2])}]"
            elif condition.strip():
                label += f" [{_md_cell(condition)}]"
            if guards.strip():
                label += " {" + ", ".join(_md_cell(g) for g in guards.split(", ")) + "}"
            tail = None if source == f"*{ANY_ACTIVE}*" else _md_cell(source)
            raw.append((tail, _md_cell(target), label))
    return _expand(raw, states, terminal, initial, kinds)
