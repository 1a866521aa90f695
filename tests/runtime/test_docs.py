"""The example in docs/runtime.md runs and prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from structlog.testing import capture_logs

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"


def test_the_runtime_page_example_prints_its_output() -> None:
    """The first Python block, executed with logs captured, prints the text block after it."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)```\n\n```text\n(.*?)```", text, re.S)
    assert found is not None
    code, output = found.groups()
    printed = io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    assert printed.getvalue() == output
