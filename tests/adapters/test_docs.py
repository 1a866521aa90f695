"""Every example in docs/adapters.md runs as written and prints what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentfsm.cli import main as cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
EXAMPLES = re.findall(
    r"```python\n(.*?)```\n\n```text\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S
)


def test_the_page_has_its_examples() -> None:
    """A tool causing an event of your lifecycle, structlog, OpenAI Agents SDK (two),
    LangGraph (three: the approval node too), pydantic-ai, the Claude Agent SDK (two: its
    cost at a pause and at the end too) and OpenTelemetry."""
    assert len(EXAMPLES) == 11


@pytest.mark.parametrize(("code", "output"), EXAMPLES)
def test_an_example_prints_its_output(
    code: str, output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python block, run in an empty directory with logs captured, prints the text block."""
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    assert printed.getvalue() == output
    exported = tmp_path / "run-1.jsonl"
    if exported.exists():  # the page says the exported log validates and can be drawn
        assert cli(["validate", "--quiet", str(exported)]) == 0
        assert cli(["diagram", "--run", str(exported), "-o", str(tmp_path / "run.mmd")]) == 0
        assert "run.completed [final output recorded, nothing unresolved] (seq 9)" in (
            tmp_path / "run.mmd"
        ).read_text(encoding="utf-8")
