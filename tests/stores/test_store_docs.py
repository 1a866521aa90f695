"""The examples in docs/stores.md run and print what the page says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).parents[2] / "docs" / "stores.md"


def _prints_its_output(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.search(r"```python\n(.*?)```", text, re.S)
    output = re.search(r"```text\n(.*?)```", text, re.S)
    assert code is not None
    assert output is not None
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(code.group(1), str(DOC), "exec"), namespace)
    store = namespace["store"]
    store.close()  # type: ignore[attr-defined]
    assert printed.getvalue() == output.group(1)


def test_the_first_example_prints_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick-start block, run in a fresh directory, prints the text block after it."""
    _prints_its_output(DOC.read_text(), tmp_path, monkeypatch)


def test_the_listing_example_prints_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing section's block: newest first, paged by key, and a bounded count."""
    text = DOC.read_text().split("## Listing and counting", 1)[1]
    _prints_its_output(text, tmp_path, monkeypatch)


def test_the_attachments_example_prints_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attachments section's block, run in a fresh directory, prints the text after it."""
    _prints_its_output(DOC.read_text().split("## Attachments", 1)[1], tmp_path, monkeypatch)


def test_the_leases_example_prints_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leases section's block: a second driver is refused, naming the first."""
    text = DOC.read_text().split("## Leases", 1)[1]
    _prints_its_output(text, tmp_path, monkeypatch)


def test_the_keys_and_anchors_example_prints_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threat model's block (a keyless handle refused, a cut log caught by its anchor),
    run in a fresh directory, prints the text after it."""
    _prints_its_output(DOC.read_text().split("## Tamper evidence", 1)[1], tmp_path, monkeypatch)
