"""The examples in docs/guards.md run and print what the page says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from structlog.testing import capture_logs

DOC = Path(__file__).resolve().parent.parent / "docs" / "guards.md"
EXAMPLES = re.findall(
    r"```python\n(.*?)```\n\n```text\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S
)


def test_the_page_has_its_examples() -> None:
    """Guards stopping a run, and a decision over the cap refused."""
    assert len(EXAMPLES) == 2


@pytest.mark.parametrize(("code", "output"), EXAMPLES)
def test_an_example_prints_its_output(code: str, output: str) -> None:
    """A Python block, executed with logs captured, prints exactly the text block after it."""
    printed = io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    assert printed.getvalue() == output
