"""The examples of docs/lifecycles.md run, in order, and print exactly what the page shows.

They build on each other (the table of one is used by the next), as a reader follows them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

REPO = Path(__file__).resolve().parent.parent
PAGE = (REPO / "docs" / "lifecycles.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", PAGE, re.S)


def test_the_page_has_its_examples() -> None:
    """Kinds, event types, a log folded under the new table, the agent causing the table's
    own events (a tool's, a refused decision), a timeout, a log across a migration, and the
    loan from its declaration to a new version: declared, drawn, tested with the kit, run
    by its own agent, compared with its next version."""
    assert len(EXAMPLES) == 12


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


#: The loan's walk-through, whose command-line blocks run here too.
LOAN = PAGE.split("### From a blank table to a tested, agent-driven lifecycle", 1)[1]
COMMANDS = re.findall(r"```console\n\$ (.*?)\n(.*?)```", LOAN, re.S)


def _loan_waiting_for_documents(path: Path) -> None:
    """A store whose run `L-1` waits in `documents_requested`, by its agent's own tool."""
    from agentfsm import Runner
    from agentfsm.reducers import Reducer
    from agentfsm.stores import SQLiteEventStore, StoreOptions
    from examples.lifecycles.loan import LOAN_TABLE, loan_agent

    options = StoreOptions(reducer=Reducer(LOAN_TABLE))
    with SQLiteEventStore(path, options=options) as store, capture_logs():
        assert Runner(store, loan_agent()).run("L-1", "decide").status == "documents_requested"


def test_the_loan_commands_print_what_the_page_shows(tmp_path: Path) -> None:
    """`check-table` on the loan table, and the applicant's answer appended from the command
    line to a run its agent made wait (in a store of the page's name, in a fresh directory)."""
    assert [shlex.split(command)[1] for command, _ in COMMANDS] == ["check-table", "append"]
    _loan_waiting_for_documents(tmp_path / "loans.db")
    for command, shown in COMMANDS:
        program, *args = shlex.split(command)
        assert program == "agentfsm"
        out = subprocess.run(
            [sys.executable, "-m", "agentfsm", *args],
            capture_output=True, text=True, check=False, cwd=tmp_path,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert (out.stdout + out.stderr) == shown
        assert out.returncode == 0
