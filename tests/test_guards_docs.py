"""The example in docs/guards.md runs and prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "guards.md"


def test_the_guards_page_example_prints_its_output() -> None:
    """The page's Python block, executed, prints exactly the text block after it."""
    text = DOC.read_text(encoding="utf-8")
    code, output = re.search(r"```python\n(.*?)```\n\n```text\n(.*?)```", text, re.S).groups()  # type: ignore[union-attr]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    assert printed.getvalue() == output
