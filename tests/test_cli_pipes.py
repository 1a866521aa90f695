"""`agentfsm ... | head`: a reader that stops early ends the command quietly.

Like `cat` or `grep`, a command whose output pipe closes exits with the status a shell
reports for SIGPIPE (141) and says nothing: no traceback, and no "Exception ignored" from
the interpreter flushing standard output on its way out.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests._cli_helpers import AGENTFSM, waiting_store
from tests.conftest import EXAMPLES

ORDER = EXAMPLES / "order_ticket.jsonl"
SIGPIPE_STATUS = 141


def _into_closed_pipe(*argv: str) -> tuple[int, bytes]:
    """Run with standard output a pipe nobody reads: the first write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [str(AGENTFSM), *argv], stdout=write_end, stderr=subprocess.PIPE, check=False
        )
    finally:
        os.close(write_end)
    return result.returncode, result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", str(ORDER)],
        ["validate", str(ORDER), "--format", "json"],
        ["replay", str(ORDER)],
        ["inspect", str(ORDER)],
        ["schema"],
        ["diagram"],
        ["check-table"],
    ],
)
def test_a_closed_pipe_is_a_quiet_exit(argv: list[str]) -> None:
    """Nothing on stderr, the shell's SIGPIPE status."""
    assert _into_closed_pipe(*argv) == (SIGPIPE_STATUS, b"")


@pytest.mark.parametrize("command", ["runs", "export", "cancel"])
def test_store_commands_into_a_closed_pipe(tmp_path: Path, command: str) -> None:
    """The store commands too (`cancel` still appends: the pipe fails after the request)."""
    store = waiting_store(tmp_path / "runs.db")
    extra = ["r1"] if command == "cancel" else []
    assert _into_closed_pipe(command, *extra, "--store", str(store)) == (SIGPIPE_STATUS, b"")


def test_export_into_head(tmp_path: Path) -> None:
    """`agentfsm export | head -1`: the reader leaves mid-stream, well past the pipe buffer."""
    store = waiting_store(tmp_path / "runs.db", *(f"run-{i:04d}" for i in range(300)))
    with subprocess.Popen(
        [str(AGENTFSM), "export", "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read()
        status = process.wait()
    assert first.startswith(b'{"run_id":"run-0000","sequence":1,')
    assert (status, stderr) == (SIGPIPE_STATUS, b"")
