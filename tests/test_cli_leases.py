"""The steering commands while a driver holds the run: refused naming it, or `--wait`.

Through the real console script, on a real SQLite store whose run `r1` this test process
holds the lease of (as a Runner inside a tool would), its heartbeat going on.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm import DEFAULT_TABLE, SQLiteEventStore
from agentfsm.runtime import submit
from agentfsm.stores import Lease
from tests.test_cli_control import run

V2 = DEFAULT_TABLE.derive(name="agent-run-v2")


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, Lease]]:
    """A store whose run `r1` is running, its lease held by 'w1' (renewed every 0.1 s)."""
    path = tmp_path / "runs.db"
    store = SQLiteEventStore(path)
    submit(store, "r1")
    lease = store.hold("r1", ttl=0.3, holder="w1")
    with lease.kept():
        yield path, lease
    lease.release()
    store.close()


def _refusal(command: str) -> str:
    return (
        f"agentfsm {command}: refused: run 'r1' is being driven by 'w1' (pid {os.getpid()} on "
        f"{socket.gethostname()}, heartbeat 0 s ago); wait for it or stop it\n"
    )


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("pause", ["--reason", "lunch"]),
        ("append", ["run.paused", "reason=lunch"]),
        ("migrate", ["--to", "tests.test_cli_leases:V2", "--by", "ann", "--reason", "v2"]),
    ],
)
def test_a_command_that_would_change_the_run_under_its_driver_is_refused(
    held: tuple[Path, Lease], command: str, args: list[str]
) -> None:
    """Exit 1, one line naming the driver and its heartbeat; nothing written."""
    path, _ = held
    result = run(command, "r1", *args, "--store", str(path))
    assert (result.returncode, result.stderr, result.stdout) == (1, _refusal(command), "")
    with SQLiteEventStore(path) as store:
        assert store.load("r1").version == 1


def test_with_wait_it_goes_in_once_the_driver_lets_go(held: tuple[Path, Lease]) -> None:
    """`--wait 20`: the pause is appended when the lease is released, half a second in."""
    path, lease = held
    threading.Timer(0.5, lease.release).start()
    result = run("pause", "r1", "--reason", "lunch", "--wait", "20", "--store", str(path))
    assert (result.returncode, result.stdout) == (0, "run r1: paused (version 2)\n")


def test_cancel_and_resume_go_in_while_the_run_is_held(held: tuple[Path, Lease]) -> None:
    """A cancel is what a driven run expects: it goes in, and the driver settles it."""
    path, _ = held
    result = run("cancel", "r1", "--reason", "stop", "--store", str(path))
    assert (result.returncode, result.stdout) == (0, "run r1: cancel_requested (version 2)\n")


@pytest.mark.parametrize("wait", ["-1", "nan", "1e9", "soon"])
def test_a_wait_that_is_not_a_time_is_a_usage_error(held: tuple[Path, Lease], wait: str) -> None:
    """Exit 2, the argument named, before the store is opened."""
    path, _ = held
    result = run("pause", "r1", "--reason", "x", "--wait", wait, "--store", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"agentfsm pause: argument --wait: want seconds from 0 to 86400, got '{wait}' "
        "(see `agentfsm pause --help`)"
    )
