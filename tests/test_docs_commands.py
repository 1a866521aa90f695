"""Every `agentfsm COMMAND` the README and docs/ name is a command the CLI has (the testing
page sent readers to an `agentfsm logs` that does not exist)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from agentfsm.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: `agentfsm NAME` in inline code or at the start of a console line (`$ agentfsm NAME`).
NAMED = re.compile(r"(?:`|^\$ )agentfsm ([a-z][a-z-]*)", re.MULTILINE)


def _commands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_a_page_names_exists(page: Path) -> None:
    """No page names a command the CLI lacks."""
    named = set(NAMED.findall(page.read_text(encoding="utf-8")))
    assert sorted(named - _commands()) == []


def test_the_pages_name_commands_at_all() -> None:
    """The pattern finds the commands the pages use (so the test above can fail)."""
    named = {n for page in PAGES for n in NAMED.findall(page.read_text(encoding="utf-8"))}
    assert {"validate", "check-table", "diagram", "migrate"} <= named
