"""The command line against hostile and careless input (issue 13, item 7).

Whatever arrives, `agentfsm` answers with an exit status and at most one line on stderr:
2 for anything that is not a valid event or valid usage, 1 only for a lifecycle refusal,
never a traceback. Text from a log is printed escaped, JSON output is RFC 8259 JSON.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest

from tests._cli_helpers import run_main
from tests.conftest import EXAMPLES

ORDER = EXAMPLES / "order_ticket.jsonl"


class TestExitStatus:
    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--version` prints the installed package's version and exits 0."""
        assert run_main(capsys, "--version") == (0, f"agentfsm {version('agentfsm')}\n", "")

    def test_unexpected_errors_are_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Code the CLI runs (here a user's table condition) failing is exit 2, one line."""
        assert run_main(
            capsys, "validate", str(ORDER), "--table", "tests._cli_helpers:RAISING"
        ) == (2, "", "agentfsm validate: unexpected RuntimeError: the condition broke\n")

    def test_a_table_factory_that_raises(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`check-table --table` calls a factory; its failure is reported, not raised."""
        assert run_main(capsys, "check-table", "--table", "tests._cli_helpers:broken_builder") == (
            2, "", "agentfsm check-table: building 'tests._cli_helpers:broken_builder' raised "
            "RuntimeError: no table today\n",
        )  # fmt: skip
