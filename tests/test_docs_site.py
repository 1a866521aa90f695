"""The documentation site's API reference: every public name has a docstring, and each
public namespace of the package has its page (`make docs` builds the site in strict mode;
CI runs it after `make test`)."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import agentfsm
from docsite import reference
from docsite.comment_docstrings import comment_above

pytestmark = pytest.mark.docs


@pytest.fixture(scope="module")
def package() -> object:
    return reference.load()


def test_every_public_name_has_a_docstring(package: object) -> None:
    """What `make docs` refuses to build without: the list of names the site would show
    empty (a `#:` comment above a constant counts, as in Sphinx)."""
    assert reference.undocumented(package) == []  # type: ignore[arg-type]


def test_the_reference_covers_every_public_top_level_namespace() -> None:
    """A new public subpackage of agentfsm gets a reference page, or this names it (the
    command line is documented by its --help and docs/, not by an API page)."""
    public = {
        f"agentfsm.{info.name}"
        for info in pkgutil.iter_modules(agentfsm.__path__)
        if not info.name.startswith("_") and info.name not in {"cli", "adapters"}
    }
    internal = {"agentfsm.ledger", "agentfsm.record"}  # no __all__: used through the others
    assert public - internal <= set(reference.NAMESPACES)


def test_the_top_level_page_lists_every_exported_name(package: object) -> None:
    """The `agentfsm` page's members are `agentfsm.__all__`, each once."""
    text = reference.page(package, "agentfsm")  # type: ignore[arg-type]
    listed = [line.strip().removeprefix("- ") for line in text.splitlines() if "        - " in line]
    assert listed == list(agentfsm.__all__)


def test_a_comment_block_above_an_assignment_is_its_docstring(tmp_path: Path) -> None:
    """`#:` lines right above the assignment, joined; a plain comment or a gap is not one."""
    source = tmp_path / "m.py"
    source.write_text("#: First line,\n#: second line.\nA = 1\n# plain\nB = 2\n\n#: gap\n\nC = 3\n")
    assert [comment_above(source, line) for line in (3, 5, 9)] == [
        "First line,\nsecond line.",
        None,
        None,
    ]
