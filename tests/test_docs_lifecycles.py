"""The examples of docs/lifecycles.md run, in order, and print exactly what the page shows.

They build on each other (the table of one is used by the next), as a reader follows them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

REPO = Path(__file__).resolve().parent.parent
PAGE = (REPO / "docs" / "lifecycles.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", PAGE, re.S)


def test_the_page_has_its_examples() -> None:
    """Kinds, event types, a log folded under the new table, the agent causing the table's
    own events (a tool's, a refused decision), a timeout, and a log across a migration."""
    assert len(EXAMPLES) == 7


def test_each_example_prints_what_the_page_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from the repository root in one namespace, each prints its output block (with
    the Runner's transition logs captured, as another test's structlog setup may print them)."""
    monkeypatch.chdir(REPO)
    namespace: dict[str, Any] = {"__name__": "lifecycles_page"}
    for code, shown in EXAMPLES:
        # dont_inherit: this module's `from __future__ import annotations` would turn the page's
        # annotations into strings pydantic cannot resolve outside a real module.
        with capture_logs():
            exec(compile(code, "docs/lifecycles.md", "exec", dont_inherit=True), namespace)
        assert capsys.readouterr().out == shown
