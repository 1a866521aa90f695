"""Helpers for the command-line tests (not collected: no `test_` prefix).

Runs `agentfsm` in-process (`main` with capsys) for exact output, or as a real process for
what only a process shows: tracebacks, exit statuses, broken pipes. Builds small logs and
stores, hostile ones included, and tables whose code fails, for `--table`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Event, LogBuilder, SQLiteEventStore, dump_event
from agentfsm.cli import main
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import Condition, Transition, TransitionTable

AGENTFSM = Path(sys.executable).parent / "agentfsm"
CALL: dict[str, Any] = {"action_id": "a1", "tool": "cancel_order", "arguments": {"order_id": 123}}


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`agentfsm ARGV` in this process: (exit status, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_script(
    *argv: str, stdin: str | bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`agentfsm ARGV` as a user runs it; colour off so output is stable."""
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    result = subprocess.run(
        [str(AGENTFSM), *argv], input=data, capture_output=True, check=False,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )  # fmt: skip
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode("utf-8", "backslashreplace"),
        result.stderr.decode("utf-8", "backslashreplace"),
    )


def waiting_events(
    run_id: str = "r1", call: Mapping[str, Any] = CALL, expires_at: str | None = None
) -> list[Event]:
    """A run waiting for approval of `call` (valid until `expires_at`, if given)."""
    log = LogBuilder(run_id)
    log.add("run.started", objective="cancel")
    log.add("model.started")
    log.add("model.completed", decision="tool_calls", tool_calls=[dict(call)])
    extra = {"expires_at": expires_at} if expires_at else {}
    log.add("approval.requested", **call, **extra)
    return log.events


def waiting_log(run_id: str = "r1", call: Mapping[str, Any] = CALL) -> list[str]:
    """The four JSON lines of `waiting_events`."""
    return [dump_event(e) for e in waiting_events(run_id, call)]


def write_log(path: Path, lines: list[str]) -> Path:
    """`lines` as a JSON Lines file at `path`."""
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def waiting_store(path: Path, *run_ids: str, expires_at: str | None = None) -> Path:
    """A SQLite store with each run (`r1` if none given) waiting for approval of `CALL`."""
    with SQLiteEventStore(path) as store:
        for run_id in run_ids or ("r1",):
            store.append(run_id, waiting_events(run_id, expires_at=expires_at), 0)
    return path


def _broken_condition(context: object, event: object) -> bool:
    raise RuntimeError("the condition broke")


#: The default table whose start of a run asks a condition that raises: user code failing
#: in a way the command line cannot foresee.
RAISING = DEFAULT_TABLE.derive(
    name="raising",
    remove=[("created", "run.started", "running")],
    add=[Transition("created", "run.started", "running", Condition("breaks", _broken_condition))],
)


def broken_builder() -> TransitionTable:
    """A table factory that fails with something other than `InvalidTableError`."""
    raise RuntimeError("no table today")
