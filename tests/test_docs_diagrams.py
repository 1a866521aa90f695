"""The Python examples of docs/diagrams.md run and print exactly what the page shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGE = (REPO / "docs" / "diagrams.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", PAGE, re.S)


def test_the_page_has_examples() -> None:
    """The page holds the two examples the test below runs."""
    assert len(EXAMPLES) == 2


@pytest.mark.parametrize(("code", "shown"), EXAMPLES)
def test_example_prints_what_the_page_shows(
    code: str, shown: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example, run from the repository root, prints its output block."""
    monkeypatch.chdir(REPO)
    exec(compile(code, "docs/diagrams.md", "exec"), {})
    assert capsys.readouterr().out == shown
