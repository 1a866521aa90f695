"""Every Python block of README.md and docs/*.md is executed by a test, or says why not.

Each page's examples are run by the tests next to its subject (tests/test_readme.py,
tests/test_docs_*.py, tests/*/test_docs.py, ...). This file holds the ledger of which test
runs which blocks, taken from those tests' own lists where they keep one, and fails on a
block nobody runs: a new example must get a test, or a reviewed marker on the line before
its fence, `<!-- not executed: the reason -->`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!-- not executed: (?P<reason>[^>]*\S)\s*-->\n*$")
#: The pair the page tests read: a Python block and the text block it prints.
PAIR = re.compile(r"```python\n(.*?)```\n\n```text\n(.*?)```", re.DOTALL)


def _text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def _first_block_after(page: str, heading: str | None) -> list[str]:
    text = _text(page)
    if heading is not None:
        text = text[text.index(heading) :]
    found = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    return [found.group(1)] if found else []


def _readme() -> list[str]:
    from tests.test_readme import examples

    return [code for code, _ in examples()]


def _pairs_of(module: str) -> Callable[[], list[str]]:
    def codes() -> list[str]:
        examples = __import__(module, fromlist=["EXAMPLES"]).EXAMPLES
        return [code for code, _ in examples]

    return codes


def _runtime() -> list[str]:
    # tests/runtime/test_docs.py runs the page's first block with its output; the time-travel
    # section's block is run by tests/test_fork.py::test_the_runtime_pages_fork_example_...;
    # the tenants section's by tests/runtime/test_procrastinate_tenants.py.
    first = PAIR.search(_text("docs/runtime.md"))
    assert first is not None
    return [
        first.group(1),
        *_first_block_after("docs/runtime.md", "## Time travel"),
        *_first_block_after("docs/runtime.md", "### Tenants: queues and priorities"),
    ]


def _stores() -> list[str]:
    # tests/stores/test_store_docs.py: the first block of the page and of these sections;
    # tests/stores/test_memory_cap.py: the memory store's cap.
    sections = (
        None,
        "## Listing and counting",
        "## Attachments",
        "## Leases",
        "## Tamper evidence",
    )
    found = [code for heading in sections for code in _first_block_after("docs/stores.md", heading)]
    page = _text("docs/stores.md")
    capped = [
        c
        for c in re.findall(r"```python\n(.*?)```", page, re.S)
        if "MemoryStorage(max_runs=1)" in c
    ]
    return [*found, *capped]


def _testing() -> list[str]:
    from tests.test_testing_kit import _blocks

    return [code for code, _ in _blocks()]


#: Page -> the blocks its tests execute (the code as it stands on the page).
EXECUTED: dict[str, Callable[[], list[str]]] = {
    "README.md": _readme,
    "docs/adapters.md": _pairs_of("tests.adapters.test_docs"),
    "docs/diagrams.md": _pairs_of("tests.test_docs_diagrams"),
    "docs/guards.md": _pairs_of("tests.test_guards_docs"),
    "docs/lifecycles.md": _pairs_of("tests.test_docs_lifecycles"),
    "docs/runtime.md": _runtime,
    "docs/stores.md": _stores,
    "docs/testing.md": _testing,
}


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, the marker's reason or None) for each Python block of `page`."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        marker = MARKER.search(before[-400:])
        found.append((before.count("\n") + 1, match["code"], marker["reason"] if marker else None))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_python_block_is_executed_or_says_why_not(page: Path) -> None:
    name = str(page.relative_to(ROOT))
    executed = set(EXECUTED[name]()) if name in EXECUTED else set()
    unexecuted = [
        f"{name}:{line}"
        for line, code, reason in blocks(page)
        if reason is None and code not in executed
    ]
    assert unexecuted == [], (
        "Python blocks no test executes: run them from the page's test (and list them in "
        "tests/test_docs_blocks.py's EXECUTED), or put `<!-- not executed: why -->` right "
        "above the fence"
    )


@pytest.mark.parametrize("page", sorted(EXECUTED))
def test_a_marked_block_is_not_also_executed(page: str) -> None:
    """A marker on a block a test runs would be a stale claim: the ledger stays truthful."""
    executed = set(EXECUTED[page]())
    marked = [line for line, code, reason in blocks(ROOT / page) if reason and code in executed]
    assert marked == []


def test_the_ledger_sees_blocks_and_markers() -> None:
    """The parser finds the pages' blocks and the reviewed markers (else the test above
    would pass on nothing)."""
    found = [block for page in PAGES for block in blocks(page)]
    assert len(found) >= 45
    assert sum(reason is not None for _, _, reason in found) == 5


def test_an_unmarked_new_block_is_caught(tmp_path: Path) -> None:
    """A page with one marked and one bare block: only the marked one carries a reason."""
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n<!-- not executed: a template -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
    )
    assert blocks(page) == [(4, "x = 1\n", "a template"), (8, "y = 2\n", None)]
