"""A griffe extension: an attribute's `#:` comment lines are its docstring.

agentfsm documents its constants and type aliases the way Sphinx autodoc reads them, with
`#:` lines right above the assignment (a string under an assignment reads like dead code).
Griffe reads only that string, so without this every constant of the API reference would
show, and be counted, as undocumented.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

from griffe import Attribute, Docstring, Extension


@cache
def _lines(path: Path) -> tuple[str, ...]:
    return tuple(path.read_text(encoding="utf-8").splitlines())


def comment_above(path: Path, lineno: int) -> str | None:
    """The `#:` comment block that ends right above line `lineno` (1-based), unprefixed."""
    lines = _lines(path)
    found: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        found.append(lines[index].lstrip()[2:].strip())
        index -= 1
    return "\n".join(reversed(found)) or None


class CommentDocstrings(Extension):
    """Give each attribute without a docstring the `#:` comment above its assignment."""

    def on_attribute_instance(self, *, node: ast.AST | Any, attr: Attribute, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None:
            return
        filepath = attr.filepath
        if isinstance(filepath, list):  # a namespace package: no one file to read
            return
        text = comment_above(filepath, attr.lineno)
        if text:
            attr.docstring = Docstring(text, lineno=attr.lineno - 1, parent=attr)
