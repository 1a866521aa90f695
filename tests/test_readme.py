"""The README's examples run as written and print what the README says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<out>.*?)```)?", re.DOTALL)


def examples() -> list[tuple[str, str | None]]:
    return [(m["code"], m["out"]) for m in BLOCK.finditer(README.read_text(encoding="utf-8"))]


def test_the_readme_has_examples() -> None:
    """A README without runnable examples would make the tests below vacuous."""
    assert len(examples()) >= 2


@pytest.mark.parametrize(("code", "expected"), examples())
def test_readme_example(code: str, expected: str | None) -> None:
    """Each python block runs, and its output equals the text block right after it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    if expected is not None:
        assert out.getvalue() == expected
