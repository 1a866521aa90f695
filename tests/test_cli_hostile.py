"""The command line against hostile and careless input (issue 13, item 7).

Whatever arrives, `agentfsm` answers with an exit status and at most one line on stderr:
2 for anything that is not a valid event or valid usage, 1 only for a lifecycle refusal,
never a traceback. Text from a log is printed escaped, JSON output is RFC 8259 JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from tests._cli_helpers import AGENTFSM, run_main, run_script, waiting_log, waiting_store, write_log
from tests.conftest import EXAMPLES

ORDER = EXAMPLES / "order_ticket.jsonl"
DEEP = "[" * 1000 + "]" * 1000


def _with_nan(token: str, lines: list[str]) -> list[str]:
    return [line.replace('"order_id":123', f'"order_id":{token}') for line in lines]


class TestHostileLogs:
    def test_deep_nesting_is_a_line_that_is_not_an_event(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A thousand nested arrays (a RecursionError before): exit 2 naming the line, in
        each command's own way of reporting a line that is not an event."""
        log = write_log(tmp_path / "deep.jsonl", [waiting_log()[0], DEEP])
        why = "line 2: not a valid event: not JSON (recursion limit exceeded at line 1 column 202)"
        code, out, err = run_main(capsys, "validate", str(log))
        lines = out.splitlines()
        assert (code, err, len(lines)) == (2, "", 4)
        assert lines[:2] == ["r1  running  version 1", f"error (format): {why}"]
        assert lines[2].startswith("  line 2: [[[")
        assert lines[2].endswith("…")
        assert lines[3] == "1 error(s): 1 events in 1 run(s), 2 lines"
        assert run_main(capsys, "replay", str(log)) == (
            2, "", f"agentfsm replay: cannot fold the log: {why}\n"
        )  # fmt: skip
        assert run_main(capsys, "inspect", str(log)) == (
            2,
            "run r1\n     1  run.started            created -> running\n  ends in running\n"
            f"  refused at line 2: {why}\n",
            "",
        )

    def test_deep_nesting_under_a_diagram(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`diagram --run` draws the events of a log and passes over lines that are not
        events, as it does for any junk line: no traceback, exit 0."""
        log = write_log(tmp_path / "deep.jsonl", [waiting_log()[0], DEEP])
        code, out, err = run_main(capsys, "diagram", "--run", str(log))
        assert (code, err, "run.started" in out) == (0, "", True)

    def test_nan_in_an_approved_call_is_not_an_event(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """NaN in a proposed call's arguments: the line is not JSON, exit 2, naming the line
        and the token (it used to pass, then break the digest of the call)."""
        log = write_log(tmp_path / "nan.jsonl", _with_nan("NaN", waiting_log()))
        why = "line 3: not a valid event: not JSON (NaN at line 1 column 198: JSON has no NaN or Infinity)"
        code, out, err = run_main(capsys, "validate", str(log))
        assert (code, err) == (2, "")
        assert out.splitlines()[1] == f"error (format): {why}"
        assert run_main(capsys, "replay", str(log)) == (
            2, "", f"agentfsm replay: cannot fold the log: {why}\n"
        )  # fmt: skip
        code, out, err = run_main(capsys, "inspect", str(log))
        assert (code, err, out.splitlines()[-1]) == (2, "", f"  refused at line 3: {why}")

    def test_infinity_never_reaches_json_output(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`replay --format json` of a log with Infinity: refused where it is read, exit 2,
        one line, and nothing half-written on stdout."""
        log = write_log(tmp_path / "inf.jsonl", _with_nan("Infinity", waiting_log()[:3]))
        assert run_main(capsys, "replay", str(log), "--format", "json") == (
            2,
            "",
            "agentfsm replay: cannot fold the log: line 3: not a valid event: not JSON "
            "(Infinity at line 1 column 198: JSON has no NaN or Infinity)\n",
        )

    def test_a_lone_surrogate_run_id_is_printed_escaped(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A run id `"\\ud800"` is not an event, and its report still prints as UTF-8."""
        line = waiting_log()[0].replace('"r1"', '"\\ud800"')
        log = write_log(tmp_path / "surrogate.jsonl", [line])
        code, out, err = run_main(capsys, "validate", str(log))
        assert (code, err) == (2, "")
        assert out.splitlines() == [
            "error (format): line 1: not a valid event: not JSON (unexpected end of hex "
            "escape at line 1 column 18)",
            f"  line 1: {line}",
            "1 error(s): 0 events in 0 run(s), 1 lines",
        ]

    def test_a_lone_surrogate_in_json_output_is_an_escape(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`--format json` spells the surrogate `\\ud800`: valid JSON that reads back."""
        line = waiting_log()[0].replace('"r1"', '"\\ud800"')
        log = write_log(tmp_path / "surrogate.jsonl", [line])
        code, out, err = run_main(capsys, "validate", str(log), "--format", "json")
        assert (code, err, out.isascii()) == (2, "", True)
        assert json.loads(out)["error"]["message"] == (
            "line 1: not a valid event: not JSON (unexpected end of hex escape at line 1 column 18)"
        )

    def test_bytes_that_are_not_utf8_name_their_line(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Undecodable input is a usage error naming the line and byte, not a traceback."""
        log = tmp_path / "latin1.jsonl"
        log.write_bytes(waiting_log()[0].encode() + b'\n{"run_id": "caf\xe9"}\n')
        assert run_main(capsys, "validate", str(log)) == (
            2, "", f"agentfsm validate: '{log}': line 2: not a valid event: not UTF-8 text "
            "(byte 16: invalid continuation byte)\n",
        )  # fmt: skip

    def test_standard_input_that_is_not_utf8(self) -> None:
        """Standard input is decoded strictly too, whatever the locale."""
        result = run_script("validate", "-", stdin=b"\xff\n", env={"LC_ALL": "C"})
        assert (result.returncode, result.stderr) == (
            2, "agentfsm validate: standard input: line 1: not a valid event: not UTF-8 text "
            "(byte 1: invalid start byte)\n",
        )  # fmt: skip

    def test_a_json_string_with_a_line_separator_stays_on_its_line(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """U+2028 is legal inside a JSON string: `diagram --run` must not split there."""
        lines = waiting_log()
        lines[0] = lines[0].replace('"cancel"', '"can\u2028cel"')
        log = write_log(tmp_path / "sep.jsonl", lines)
        code, out, _ = run_main(capsys, "diagram", "--run", str(log), "--format", "markdown")
        assert (code, out.endswith("- run 'r1' stopped in 'waiting_approval'\n")) == (0, True)


class TestEscapedText:
    RUN = "r\\n1\\u001b[31mX"  # JSON escapes: a newline and an ANSI escape in the run id
    TOOL = "c\\u001b[31mo\\u202e"

    @pytest.fixture
    def log(self, tmp_path: Path) -> Path:
        lines = [
            line.replace('"r1"', f'"{self.RUN}"').replace("cancel_order", self.TOOL)
            for line in waiting_log()
        ]
        return write_log(tmp_path / "spoof.jsonl", lines)

    def test_validate_escapes_run_ids(self, capsys: pytest.CaptureFixture[str], log: Path) -> None:
        """A run id cannot start a line of its own, nor colour the output."""
        assert run_main(capsys, "validate", str(log)) == (
            0, "r\\n1\\x1b[31mX  waiting_approval  version 4\nok: 4 events in 1 run(s), 4 lines\n", ""
        )  # fmt: skip

    def test_replay_escapes_run_ids_and_tools(
        self, capsys: pytest.CaptureFixture[str], log: Path
    ) -> None:
        """Tool names are escaped too, bidirectional overrides included; columns still align."""
        code, out, _ = run_main(capsys, "replay", str(log))
        assert (code, out.splitlines()) == (
            0,
            [
                "run r\\n1\\x1b[31mX: waiting_approval (version 4, 1 turn)",
                "  usage: 0 input + 0 output tokens, cost 0",
                "  waiting for approval: a1",
                "  actions:",
                "    a1  c\\x1b[31mo\\u202e  approval_pending 0 attempts",
            ],
        )

    def test_inspect_escapes_run_ids(self, capsys: pytest.CaptureFixture[str], log: Path) -> None:
        """The header names the run escaped."""
        code, out, _ = run_main(capsys, "inspect", str(log))
        assert (code, out.splitlines()[0]) == (0, "run r\\n1\\x1b[31mX")

    def test_json_output_keeps_the_exact_value(
        self, capsys: pytest.CaptureFixture[str], log: Path
    ) -> None:
        """JSON escapes what a terminal would act on, and reads back to the same string."""
        code, out, _ = run_main(capsys, "replay", str(log), "--format", "json")
        assert (code, "\x1b" in out, "\u202e" in out) == (0, False, False)
        assert json.loads(out)[0]["actions"]["a1"]["tool"] == "c\x1b[31mo\u202e"

    def test_store_commands_escape_run_ids(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`runs` lists, and `cancel` answers with, the run id escaped."""
        store = str(waiting_store(tmp_path / "runs.db", "r\n1\x1b[31m"))
        code, out, _ = run_main(capsys, "runs", "--store", store)
        assert (code, out.split("  ")[0]) == (0, "r\\n1\\x1b[31m")
        assert run_main(capsys, "cancel", "r\n1\x1b[31m", "--store", store) == (
            0,
            "run r\\n1\\x1b[31m: cancel_requested (version 5), waiting for approval: a1\n",
            "",
        )

    def test_error_lines_escape_what_they_quote(
        self, capsys: pytest.CaptureFixture[str], log: Path
    ) -> None:
        """A refusal quoting a run id on stderr stays one line."""
        assert run_main(capsys, "replay", str(log), "--run-id", "r\n2") == (
            2, "", "agentfsm replay: the log has no run 'r\\n2'\n"
        )  # fmt: skip


class TestArguments:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (
                ["approve", "\ud800", "t1", "--store", "runs.db"],
                "agentfsm approve: argument RUN_ID: an id must be UTF-8 text (it holds a lone "
                "surrogate): '\\ud800' (see `agentfsm approve --help`)",
            ),
            (
                ["approve", "r1", "", "--store", "runs.db"],
                "agentfsm approve: argument ACTION_ID: an id must not be empty: '' "
                "(see `agentfsm approve --help`)",
            ),
            (
                ["approve", "r1", "t1", "--approver", "", "--store", "runs.db"],
                "agentfsm approve: argument --approver: a name must not be empty: '' "
                "(see `agentfsm approve --help`)",
            ),
            (
                ["cancel", "r1", "--requested-by", "  ", "--store", "runs.db"],
                "agentfsm cancel: argument --requested-by: a name must not be empty: '  ' "
                "(see `agentfsm cancel --help`)",
            ),
            (
                ["reject", "r1", "t1", "--reason", "no\x00", "--store", "runs.db"],
                "agentfsm reject: argument --reason: the text must not contain NUL: 'no\\x00' "
                "(see `agentfsm reject --help`)",
            ),
            (
                ["validate", "a\x00b"],
                "agentfsm validate: argument FILE: a path must not contain NUL: 'a\\x00b' "
                "(see `agentfsm validate --help`)",
            ),
            (
                ["replay", str(ORDER), "--run-id", ""],
                "agentfsm replay: argument --run-id: an id must not be empty: '' "
                "(see `agentfsm replay --help`)",
            ),
            (
                ["approve", "r1", "t1", "--digest", "sha256:abc", "--store", "runs.db"],
                "agentfsm approve: argument --digest: a digest is 'sha256:' and 64 lower-case "
                "hex digits, got 'sha256:abc' (see `agentfsm approve --help`)",
            ),
        ],
    )
    def test_a_bad_argument_is_a_usage_error(
        self, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
    ) -> None:
        """Checked before any store is opened: exit 2, one line naming the argument."""
        assert run_main(capsys, *argv) == (2, "", message + "\n")

    def test_a_nul_run_id_is_refused_before_sqlite(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """The SQLite store is never asked about `a\\x00b`."""
        store = waiting_store(tmp_path / "runs.db")
        assert run_main(capsys, "approve", "--store", str(store), "a\x00b", "t1") == (
            2, "", "agentfsm approve: argument RUN_ID: an id must not contain NUL: 'a\\x00b' "
            "(see `agentfsm approve --help`)\n",
        )  # fmt: skip

    def test_a_nul_run_id_is_refused_before_postgresql(
        self, capsys: pytest.CaptureFixture[str], postgres_dsn: str
    ) -> None:
        """PostgreSQL text cannot hold NUL; psycopg's DataError never surfaces."""
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(postgres_dsn)
        url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
        assert run_main(capsys, "cancel", "--store", url, "a\x00b") == (
            2, "", "agentfsm cancel: argument RUN_ID: an id must not contain NUL: 'a\\x00b' "
            "(see `agentfsm cancel --help`)\n",
        )  # fmt: skip


class TestExitStatus:
    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--version` prints the installed package's version and exits 0."""
        assert run_main(capsys, "--version") == (0, f"agentfsm {version('agentfsm')}\n", "")

    @pytest.mark.parametrize("content", ["", "\n  \n\n"])
    def test_an_empty_log_is_not_a_pass(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str
    ) -> None:
        """No events at all is more likely a wrong file than a legal log."""
        log = tmp_path / "empty.jsonl"
        log.write_text(content, encoding="utf-8")
        assert run_main(capsys, "validate", str(log)) == (
            2, "", "agentfsm validate: the input held no events (--allow-empty accepts that)\n"
        )  # fmt: skip

    def test_allow_empty_accepts_an_empty_log(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`--allow-empty` is for pipelines where nothing to check is fine."""
        log = tmp_path / "empty.jsonl"
        log.write_text("\n", encoding="utf-8")
        assert run_main(capsys, "validate", str(log), "--allow-empty") == (
            0, "ok: 0 events in 0 run(s), 1 lines\n", ""
        )  # fmt: skip

    def test_replay_of_an_empty_log_is_not_a_pass(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`replay` printed nothing and exited 0; now it says why there is nothing."""
        log = tmp_path / "empty.jsonl"
        log.write_text("", encoding="utf-8")
        assert run_main(capsys, "replay", str(log)) == (
            2, "", "agentfsm replay: the input held no events (--allow-empty accepts that)\n"
        )  # fmt: skip

    def test_validate_of_a_run_the_log_lacks(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--run-id` with a typo checked nothing; it must not say ok."""
        assert run_main(capsys, "validate", str(ORDER), "--run-id", "nope") == (
            2, "", "agentfsm validate: the log has no run 'nope'\n"
        )  # fmt: skip

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

    def test_an_unreachable_postgresql_store(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A driver error is a line naming the store's trouble, not psycopg's traceback."""
        assert run_main(capsys, "runs", "--store", "postgresql://127.0.0.1:1/x") == (
            2, "", 'agentfsm runs: error: the store failed: connection failed: connection to '
            'server at "127.0.0.1", port 1 failed: Connection refused Is the server running on '
            "that host and accepting TCP/IP connections?\n",
        )  # fmt: skip


class TestRealProcess:
    """What the reported cases look like from a shell: no traceback anywhere."""

    @pytest.mark.parametrize(
        ("argv", "stdin", "stderr"),
        [
            (["validate", "-"], DEEP + "\n", ""),  # the report is on stdout
            (
                ["inspect", "-"], DEEP + "\n",
                "agentfsm inspect: error: line 1: not a valid event: not JSON (recursion "
                "limit exceeded at line 1 column 202)",
            ),
            (
                ["replay", "-", "--format", "json"],
                "\n".join(_with_nan("Infinity", waiting_log()[:3])),
                "agentfsm replay: cannot fold the log: line 3: not a valid event: not JSON "
                "(Infinity at line 1 column 198: JSON has no NaN or Infinity)",
            ),
            (
                ["approve", "r1", "t1", "--approver", "", "--store", "x.db"], None,
                "agentfsm approve: argument --approver: a name must not be empty: '' "
                "(see `agentfsm approve --help`)",
            ),
            (
                ["validate", "-"], "",
                "agentfsm validate: the input held no events (--allow-empty accepts that)",
            ),
        ],
    )  # fmt: skip
    def test_no_traceback(self, argv: list[str], stdin: str | None, stderr: str) -> None:
        """Exit 2 and at most one line on stderr."""
        result = run_script(*argv, stdin=stdin)
        assert (result.returncode, result.stderr) == (2, stderr + "\n" if stderr else "")

    def test_a_surrogate_run_id_from_argv(self) -> None:
        """Bytes that are not UTF-8 on the command line arrive as lone surrogates."""
        result = run_script("cancel", "r\udcff", "--store", "x.db")
        assert (result.returncode, result.stderr) == (
            2, "agentfsm cancel: argument RUN_ID: an id must be UTF-8 text (it holds a lone "
            "surrogate): 'r\\udcff' (see `agentfsm cancel --help`)\n",
        )  # fmt: skip

    @pytest.mark.parametrize(
        ("redirect", "status", "stdout", "stderr"),
        [
            ("<&-", 2, "", "agentfsm validate: standard input is closed\n"),
            (">&-", 2, "", "agentfsm: standard output is closed\n"),
            ("2>&-", 0, "r1  waiting_approval  version 4\nok: 4 events in 1 run(s), 4 lines\n", ""),
        ],
    )
    def test_closed_standard_streams(
        self, tmp_path: Path, redirect: str, status: int, stdout: str, stderr: str
    ) -> None:
        """A shell may start us with a stream closed; a closed stderr only loses messages."""
        log = write_log(tmp_path / "log.jsonl", waiting_log())
        argv = "-" if redirect == "<&-" else str(log)
        result = subprocess.run(
            ["sh", "-c", f'"$0" validate "$1" {redirect}', str(AGENTFSM), argv],
            capture_output=True, text=True, check=False, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
        assert (result.returncode, result.stdout, result.stderr) == (status, stdout, stderr)

    def test_an_output_encoding_that_cannot_show_the_text(self, tmp_path: Path) -> None:
        """Standard output set to ASCII is told how to fix it, not a UnicodeEncodeError."""
        lines = [line.replace('"r1"', '"r\\u00e9"') for line in waiting_log()]
        log = write_log(tmp_path / "accent.jsonl", lines)
        result = run_script("validate", str(log), env={"PYTHONIOENCODING": "ascii"})
        assert (result.returncode, result.stderr) == (
            2, "agentfsm validate: cannot write to ascii output; set PYTHONIOENCODING=utf-8\n"
        )  # fmt: skip
