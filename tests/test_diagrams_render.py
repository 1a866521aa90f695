"""The generated text is valid for the real engines: Graphviz, PlantUML and Mermaid render it.

These tests run the real programs. Without them they skip with a message saying what to
install, except under `CI=true`, where a missing tool fails the test.
"""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import pytest

from agentfsm.diagrams import (
    diagram_model,
    render_dot,
    render_mermaid,
    render_plantuml,
    render_svg,
    trajectory_from_jsonl,
)
from agentfsm.fsm.table import TransitionTable
from tests._diagram_tables import (
    DEFAULT,
    NASTY,
    NASTY_NAMES,
    TINY,
    require_dot,
    require_mermaidx,
    require_plantuml,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _texts(svg: str) -> str:
    """The visible text of an SVG, tags stripped and entities decoded, one space apart."""
    return " ".join(html.unescape(t) for t in re.findall(r">([^<>]+)<", svg))


def _runs() -> list[tuple[str, TransitionTable, object]]:
    ticket = trajectory_from_jsonl((EXAMPLES / "order_ticket.jsonl").read_text().splitlines())
    lines = (EXAMPLES / "order_ticket.jsonl").read_text().splitlines()[:6]
    lines.append(
        '{"run_id": "run_order_O-1001", "sequence": 7, "type": "tool.completed",'
        ' "occurred_at": "2026-09-01T10:00:14+08:00", "action_id": "act_0001"}'
    )
    refused = trajectory_from_jsonl(lines)
    return [
        ("default", DEFAULT, None),
        ("tiny", TINY, None),
        ("nasty", NASTY, None),
        ("ticket", DEFAULT, ticket),
        ("refused", DEFAULT, refused),
    ]


class TestGraphviz:
    def test_every_dot_renders_without_a_warning(self) -> None:
        """`dot -Tsvg` accepts each generated DOT (plain and with a run) and prints nothing."""
        dot = require_dot()
        for name, table, path in _runs():
            source = render_dot(diagram_model(table), path)  # type: ignore[arg-type]
            done = subprocess.run(
                [dot, "-Tsvg"], input=source.encode(), capture_output=True, check=False
            )
            assert (name, done.returncode, done.stderr.decode()) == (name, 0, "")

    def test_svg_shows_every_state_and_event(self) -> None:
        """The SVG of the default table names every state and every event."""
        require_dot()
        text = _texts(render_svg(render_dot(diagram_model(DEFAULT))))
        missing = [n for n in (*DEFAULT.state_names, *DEFAULT.events) if n not in text]
        assert missing == []

    def test_svg_shows_awkward_names_verbatim(self) -> None:
        """Quotes, HTML, `;`, `#`, `|` and markup in names reach the picture unchanged."""
        require_dot()
        text = _texts(render_svg(render_dot(diagram_model(NASTY))))
        assert [n for n in NASTY_NAMES if n not in text] == []


class TestPlantUML:
    def test_every_diagram_renders(self, tmp_path: Path) -> None:
        """PlantUML draws each generated diagram (one JVM for all) and names every state."""
        plantuml = require_plantuml()
        sources = {}
        for name, table, path in _runs():
            text = render_plantuml(diagram_model(table), path)  # type: ignore[arg-type]
            (tmp_path / f"{name}.puml").write_text(text, encoding="utf-8")
            sources[name] = table
        done = subprocess.run(
            [plantuml, "-tsvg", "-failfast2", *sorted(str(p) for p in tmp_path.glob("*.puml"))],
            capture_output=True,
            check=False,
            timeout=300,
        )
        assert (done.returncode, done.stderr.decode()) == (0, "")
        for name, table in sources.items():
            text = _texts((tmp_path / f"{name}.svg").read_text(encoding="utf-8"))
            assert (name, [s for s in table.state_names if s not in text]) == (name, [])

    def test_a_syntax_error_is_caught(self, tmp_path: Path) -> None:
        """The check above can fail: PlantUML exits non-zero on broken state syntax."""
        plantuml = require_plantuml()
        broken = tmp_path / "broken.puml"
        broken.write_text('@startuml\nstate "x as\na -> -> b\n@enduml\n', encoding="utf-8")
        done = subprocess.run(
            [plantuml, "-tsvg", "-failfast2", str(broken)],
            capture_output=True,
            check=False,
            timeout=300,
        )
        assert done.returncode != 0

    def test_awkward_names_come_out_verbatim(self, tmp_path: Path) -> None:
        """Creole markup, `<U+...>`-escaped quotes and tags, backslashes: shown as written."""
        plantuml = require_plantuml()
        source = tmp_path / "nasty.puml"
        source.write_text(render_plantuml(diagram_model(NASTY)), encoding="utf-8")
        done = subprocess.run(
            [plantuml, "-tsvg", str(source)], capture_output=True, check=False, timeout=300
        )
        assert done.returncode == 0
        text = _texts((tmp_path / "nasty.svg").read_text(encoding="utf-8"))
        assert [n for n in NASTY_NAMES if n not in text] == []


class TestMermaid:
    def test_every_diagram_parses_and_renders(self) -> None:
        """The Mermaid engine renders each generated diagram; a parse error would raise."""
        require_mermaidx()
        import mermaidx

        for name, table, path in _runs():
            source = render_mermaid(diagram_model(table), path)  # type: ignore[arg-type]
            text = _texts(mermaidx.render(source).svg())
            assert (name, [s for s in table.state_names if s not in text]) == (name, [])

    def test_a_parse_error_is_caught(self) -> None:
        """The check above can fail: the engine raises on text Mermaid cannot parse."""
        require_mermaidx()
        import mermaidx

        with pytest.raises(RuntimeError, match="Parse error"):
            mermaidx.render("stateDiagram-v2\n  created --> : x\n").svg()

    def test_awkward_names_come_out_verbatim(self) -> None:
        """Entity-encoded `;`, `#`, `%`, quotes and tags are shown as written, none split."""
        require_mermaidx()
        import mermaidx

        svg = mermaidx.render(render_mermaid(diagram_model(NASTY))).svg()
        text = _texts(svg)
        assert [n for n in NASTY_NAMES if n not in text] == []
        # `;` ends a Mermaid statement: an unescaped one would have made a stray state.
        assert re.findall(r'id="[^"]*-state-([^"]*)-\d+"', svg).count("z%%") == 0
