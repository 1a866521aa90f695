"""The example in docs/stores.md runs and prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).parents[2] / "docs" / "stores.md"


def test_the_first_example_prints_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick-start block, run in a fresh directory, prints the text block after it."""
    text = DOC.read_text()
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
